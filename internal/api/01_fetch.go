package api

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/server"
)

// Fetch v0–v3 answer in message formats v0/v1, which groupd does not store;
// Kafka 4 also starts at v4.
func init() { register(kmsg.Fetch, 4, 18, (*Handler).fetch) }

// maxFetchWait bounds how long one fetch may park, whatever the client asks.
const maxFetchWait = 30 * time.Second

// fetchTarget is one requested partition resolved to its log.
type fetchTarget struct {
	ti, pi int // index into the response
	log    *partition.Log
	offset int64
	max    int32
}

func (h *Handler) fetch(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.FetchRequest)
	resp := req.ResponseKind().(*kmsg.FetchResponse)

	// Fetch sessions (KIP-227, fetch_session.go) decide which partitions
	// are read, and, once they are, which of them the reply carries.
	entries, session := h.beginFetchSession(r, req, resp)
	if session == nil {
		return resp, nil // refused with a session error
	}
	defer h.finishFetchSession(session, resp)

	var (
		targets  []fetchTarget
		anyError bool // a partition already failed: answer without waiting
	)
	var (
		resolved = -1 // the request topic t and topicErr are for
		t        *broker.Topic
		internal *broker.OffsetsTopic
		topicErr *kerr.Error
	)
	targets = make([]fetchTarget, 0, len(entries))
	for _, e := range entries {
		rt, rp := &req.Topics[e.topic], e.part
		// As in Kafka, partitions are answered in the order they were
		// first named, and only consecutive partitions of one topic share
		// a topic entry.
		if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != rt.Topic || resp.Topics[n-1].TopicID != rt.TopicID {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			// Sized once: a response partition is large, and a topic may
			// have thousands.
			st.Partitions = make([]kmsg.FetchResponseTopicPartition, 0, len(rt.Partitions))
			resp.Topics = append(resp.Topics, st)
		}
		st := &resp.Topics[len(resp.Topics)-1]
		if e.topic != resolved {
			resolved = e.topic
			t, internal, topicErr = h.fetchTopic(req.Version, *rt)
		}
		sp := kmsg.NewFetchResponseTopicPartition()
		sp.Partition = rp.Partition
		sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
		sp.PreferredReadReplica = -1
		sp.RecordBatches = []byte{} // never null: librdkafka rejects a null record set
		var l *partition.Log
		switch {
		case topicErr != nil:
			sp.ErrorCode = topicErr.Code
		case rp.CurrentLeaderEpoch > 0:
			// Leader epoch is always 0 on this single node.
			sp.ErrorCode = kerr.UnknownLeaderEpoch.Code
		case internal != nil:
			// __consumer_offsets has no log here (the coordinator keeps
			// its records in its store): its partitions read as empty.
			switch {
			case rp.Partition < 0 || rp.Partition >= internal.Partitions:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case rp.FetchOffset != 0:
				sp.ErrorCode = kerr.OffsetOutOfRange.Code
			}
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = 0, 0, 0
		default:
			if l = t.Partition(rp.Partition); l == nil {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
		}
		// As in Kafka, a topic or partition the broker does not know is
		// answered without cutting the others' wait short (KafkaApis
		// leaves it out of the read): a session still holding a deleted
		// topic must not turn its consumer's long poll into a busy loop.
		// An error reading a known partition answers at once.
		anyError = anyError || (sp.ErrorCode != 0 && topicErr == nil && sp.ErrorCode != kerr.UnknownTopicOrPartition.Code)
		if l != nil {
			targets = append(targets, fetchTarget{ti: len(resp.Topics) - 1, pi: len(st.Partitions), log: l, offset: rp.FetchOffset, max: rp.PartitionMaxBytes})
		}
		st.Partitions = append(st.Partitions, sp)
	}

	wait := min(time.Duration(req.MaxWaitMillis)*time.Millisecond, maxFetchWait)
	var deadline <-chan time.Time
	var waits []<-chan struct{}
	for {
		total, hadError := h.fetchRead(req, resp, targets)
		if total >= int(req.MinBytes) || hadError || anyError || wait <= 0 || len(targets) == 0 {
			return resp, nil
		}
		if waits == nil {
			// About to wait: take the wake-up channels and read again, so
			// an append between the read and the wait is not missed. A
			// fetch answered by its first read (a consumer that is
			// behind, or one of a thousand partitions) takes none.
			waits = make([]<-chan struct{}, len(targets))
			for i, t := range targets {
				waits[i] = t.log.Wait()
			}
			continue
		}
		if deadline == nil {
			timer := time.NewTimer(wait)
			defer timer.Stop()
			deadline = timer.C
		}
		if !waitAny(ctx, deadline, waits) {
			return resp, nil
		}
		for i, t := range targets {
			waits[i] = t.log.Wait()
		}
	}
}

// fetchEntry is one partition to answer: an index into the request's
// topics and the partition's entry.
type fetchEntry struct {
	topic int
	part  *kmsg.FetchRequestTopicPartition
}

// fetchKey names a partition the way Kafka keys a fetch: by topic id and
// name (one of them is empty, depending on the version) and partition.
type fetchKey struct {
	id    [16]byte
	name  string
	index int32
}

// fetchEntries lists the partitions a fetch names, each once. Kafka reads
// a fetch into a map keyed by topic and partition, so a partition named
// twice is answered once, in the place it was first named, for the last
// entry naming it. Answering every copy would let one small request make
// the broker read the same data many times over.
func fetchEntries(req *kmsg.FetchRequest) []fetchEntry {
	n := 0
	for i := range req.Topics {
		n += len(req.Topics[i].Partitions)
	}
	entries := make([]fetchEntry, 0, n)
	if n <= 1 {
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				entries = append(entries, fetchEntry{i, &req.Topics[i].Partitions[j]})
			}
		}
		return entries
	}
	at := make(map[fetchKey]int, n) // index in entries
	for i := range req.Topics {
		rt := &req.Topics[i]
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			k := fetchKey{rt.TopicID, rt.Topic, rp.Partition}
			if e, seen := at[k]; seen {
				entries[e].part = rp
				continue
			}
			at[k] = len(entries)
			entries = append(entries, fetchEntry{i, rp})
		}
	}
	return entries
}

// fetchRead fills every target's partition in resp from its log and
// returns the bytes gathered and whether a partition answered with an
// error (Kafka answers at once then).
func (h *Handler) fetchRead(req *kmsg.FetchRequest, resp *kmsg.FetchResponse, targets []fetchTarget) (int, bool) {
	// As in Kafka, the broker's fetch.max.bytes caps what the client asks
	// for, and a first batch larger than that is still returned whole.
	remaining := min(max(req.MaxBytes, 0), h.fetchMaxBytes)
	total, hadError := 0, false
	for _, t := range targets {
		sp := &resp.Topics[t.ti].Partitions[t.pi]
		sp.ErrorCode = 0
		sp.RecordBatches = []byte{}
		hw, start := t.log.HighWatermark(), t.log.LogStartOffset()
		sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = hw, hw, start
		if t.offset < start || t.offset > hw {
			sp.ErrorCode = kerr.OffsetOutOfRange.Code
			hadError = true
			continue
		}
		limit := min(t.max, remaining)
		if limit <= 0 && total > 0 {
			continue
		}
		// KIP-74: the first non-empty partition returns at least one
		// whole batch, however large, so a consumer can always progress.
		data, err := t.log.Read(t.offset, max(limit, 0), total == 0)
		if err != nil {
			sp.ErrorCode = fetchErrCode(err)
			hadError = true
			continue
		}
		sp.RecordBatches = data
		total += len(data)
		remaining -= int32(len(data))
	}
	return total, hadError
}

func fetchErrCode(err error) int16 {
	switch {
	case errors.Is(err, partition.ErrOffsetOutOfRange):
		return kerr.OffsetOutOfRange.Code
	case errors.Is(err, partition.ErrClosed):
		return kerr.UnknownTopicOrPartition.Code
	}
	return kerr.UnknownServerError.Code
}

// fetchTopic resolves a fetched topic: a topic with logs, or the internal
// __consumer_offsets, or the error to answer.
func (h *Handler) fetchTopic(version int16, rt kmsg.FetchRequestTopic) (*broker.Topic, *broker.OffsetsTopic, *kerr.Error) {
	ot, internal := h.b.OffsetsTopic()
	if version >= 13 {
		if t, ok := h.b.TopicByID(rt.TopicID); ok {
			return t, nil, nil
		}
		if internal && rt.TopicID == ot.ID {
			return nil, &ot, nil
		}
		return nil, nil, kerr.UnknownTopicID
	}
	if t, ok := h.b.Topic(rt.Topic); ok {
		return t, nil, nil
	}
	if internal && rt.Topic == broker.OffsetsTopicName {
		return nil, &ot, nil
	}
	return nil, nil, kerr.UnknownTopicOrPartition
}

// waitAny blocks until one of waits is closed (true), or the deadline
// passes or ctx ends (false).
func waitAny(ctx context.Context, deadline <-chan time.Time, waits []<-chan struct{}) bool {
	if len(waits) == 1 {
		select {
		case <-waits[0]:
			return true
		case <-deadline:
		case <-ctx.Done():
		}
		return false
	}
	cases := make([]reflect.SelectCase, 0, len(waits)+2)
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(deadline)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
	)
	for _, w := range waits {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
	}
	chosen, _, _ := reflect.Select(cases)
	return chosen >= 2
}
