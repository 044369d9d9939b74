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
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		t, topicErr := h.fetchTopic(req.Version, rt)
		for _, rp := range rt.Partitions {
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
				targets = append(targets, fetchTarget{ti: len(resp.Topics), pi: len(st.Partitions), log: l, offset: rp.FetchOffset, max: rp.PartitionMaxBytes})
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
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

// fetchRead fills every target's partition in resp from its log and
// returns the bytes gathered and whether a partition answered with an
// error (Kafka answers at once then).
func (h *Handler) fetchRead(req *kmsg.FetchRequest, resp *kmsg.FetchResponse, targets []fetchTarget) (int, bool) {
	remaining := req.MaxBytes
	if req.Version < 3 || remaining <= 0 {
		remaining = 1<<31 - 1
	}
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
