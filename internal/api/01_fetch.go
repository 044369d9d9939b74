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

	// Fetch sessions (KIP-227) are not kept: session id 0 tells the client
	// to send full requests. A client naming a session gets the error a
	// broker gives for one it no longer has.
	if req.SessionID != 0 {
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return resp, nil
	}

	var (
		targets  []fetchTarget
		anyError bool // a partition already failed: answer without waiting
	)
	var (
		resolved = -1 // the request topic t and topicErr are for
		t        *broker.Topic
		topicErr error
	)
	for _, e := range fetchEntries(req) {
		rt, rp := &req.Topics[e.topic], e.part
		// As in Kafka, partitions are answered in the order they were
		// first named, and only consecutive partitions of one topic share
		// a topic entry.
		if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != rt.Topic || resp.Topics[n-1].TopicID != rt.TopicID {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			resp.Topics = append(resp.Topics, st)
		}
		st := &resp.Topics[len(resp.Topics)-1]
		if e.topic != resolved {
			resolved = e.topic
			t, topicErr = h.fetchTopic(req.Version, *rt)
		}
		sp := kmsg.NewFetchResponseTopicPartition()
		sp.Partition = rp.Partition
		sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
		sp.PreferredReadReplica = -1
		sp.RecordBatches = []byte{} // never null: librdkafka rejects a null record set
		var l *partition.Log
		switch {
		case topicErr != nil:
			sp.ErrorCode = topicErr.(*kerr.Error).Code
		case rp.CurrentLeaderEpoch > 0:
			// Leader epoch is always 0 on this single node.
			sp.ErrorCode = kerr.UnknownLeaderEpoch.Code
		default:
			if l = t.Partition(rp.Partition); l == nil {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
		}
		anyError = anyError || sp.ErrorCode != 0
		if l != nil {
			targets = append(targets, fetchTarget{ti: len(resp.Topics) - 1, pi: len(st.Partitions), log: l, offset: rp.FetchOffset, max: rp.PartitionMaxBytes})
		}
		st.Partitions = append(st.Partitions, sp)
	}

	wait := min(time.Duration(req.MaxWaitMillis)*time.Millisecond, maxFetchWait)
	var deadline <-chan time.Time
	for {
		// Take the wake-up channels before reading, so an append between
		// the read and the wait is not missed.
		var waits []<-chan struct{}
		if wait > 0 {
			waits = make([]<-chan struct{}, len(targets))
			for i, t := range targets {
				waits[i] = t.log.Wait()
			}
		}
		total, hadError := h.fetchRead(req, resp, targets)
		if total >= int(req.MinBytes) || hadError || anyError || wait <= 0 || len(targets) == 0 {
			return resp, nil
		}
		if deadline == nil {
			timer := time.NewTimer(wait)
			defer timer.Stop()
			deadline = timer.C
		}
		if !waitAny(ctx, deadline, waits) {
			return resp, nil
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

func (h *Handler) fetchTopic(version int16, rt kmsg.FetchRequestTopic) (*broker.Topic, error) {
	if version >= 13 {
		if t, ok := h.b.TopicByID(rt.TopicID); ok {
			return t, nil
		}
		return nil, kerr.UnknownTopicID
	}
	if t, ok := h.b.Topic(rt.Topic); ok {
		return t, nil
	}
	return nil, kerr.UnknownTopicOrPartition
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
