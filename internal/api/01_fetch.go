package api

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/fetchsession"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/server"
)

// Fetch v0–v3 answer in message formats v0/v1, which groupd does not store;
// Kafka 4 also starts at v4.
func init() { register(kmsg.Fetch, 4, 18, (*Handler).fetch) }

// maxFetchWait bounds how long one fetch may park, whatever the client asks.
const maxFetchWait = 30 * time.Second

// fetchTarget is one partition to read, resolved to its log.
type fetchTarget struct {
	ti, pi int // index into the response
	log    *partition.Log
	offset int64
	max    int32
}

func (h *Handler) fetch(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.FetchRequest)
	if h.cl != nil && (req.ReplicaID >= 0 || (req.Version >= 15 && req.ReplicaState.ID >= 0)) {
		return h.clusterReplicaFetch(r, req)
	}
	resp := req.ResponseKind().(*kmsg.FetchResponse)

	// Fetch sessions (KIP-227, fetch_session.go) decide which partitions
	// the fetch is about, and, once they are read, which of them the
	// reply carries.
	sc := fetchScratches.Get().(*fetchScratch)
	f := h.beginFetchSession(r, req, resp, sc)
	if f == nil {
		sc.reset()
		fetchScratches.Put(sc)
		return resp, nil // refused with a session error
	}
	plan := &sc.plan
	defer func() {
		h.finishFetchSession(f, resp, plan.answered, &sc.results)
		h.sessions.Release(f)
		sc.reset()
		fetchScratches.Put(sc)
	}()

	wait := min(time.Duration(req.MaxWaitMillis)*time.Millisecond, maxFetchWait)
	var w *fetchWaiter
	for planned := false; ; {
		// An incremental fetch plans again after each wait: a partition
		// left out because it had nothing to say may have something now.
		if !planned || f.Kind == fetchsession.Incremental {
			h.planFetch(req.Version, f, resp, sc)
			planned = true
		}
		total, hadError := h.fetchRead(req, resp, plan.targets)
		if total >= int(req.MinBytes) || hadError || plan.anyError || wait <= 0 || len(plan.watch) == 0 {
			return resp, nil
		}
		if w == nil {
			// About to wait: take the wake-up channels and read again, so
			// an append between the read and the wait is not missed. A
			// fetch answered by its first read (a consumer that is
			// behind, or one of a thousand partitions) takes none.
			timer := time.NewTimer(wait)
			defer timer.Stop()
			w = sc.waiter.start(r.Stopping, timer.C)
			w.watch(plan.watch)
			continue
		}
		if !w.watch(plan.watch).wait() {
			return resp, nil
		}
	}
}

// fetchWaiter waits for an append to any of a fetch's logs, or its
// deadline. Between waits it keeps the channels it took: only the one
// that fired is used up, and another closed meanwhile wakes the next
// wait at once, so a wake-up takes one new channel, not one per log.
type fetchWaiter struct {
	logs  []*partition.Log
	cases []reflect.SelectCase // the deadline, the server stopping, then one per log
	fired int                  // index in logs of the channel last received from, or -1
}

// start readies w, a scratch's waiter, for a fetch with this deadline.
// A fetch also stops waiting when the server begins to shut down (stopping;
// nil never fires), answering with what it has.
func (w *fetchWaiter) start(stopping <-chan struct{}, deadline <-chan time.Time) *fetchWaiter {
	w.fired = -1
	w.cases = append(w.cases[:0],
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(deadline)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(stopping)})
	return w
}

// reset drops w's channels and logs, so that a pooled waiter holds on to
// none of them.
func (w *fetchWaiter) reset() {
	clear(w.cases)
	clear(w.logs)
	w.cases, w.logs = w.cases[:0], w.logs[:0]
}

// watch makes logs the ones waited for: it takes a new channel of the
// log that fired, or of every log when they changed (a topic deleted or
// created while an incremental fetch waits).
func (w *fetchWaiter) watch(logs []*partition.Log) *fetchWaiter {
	switch {
	case !slices.Equal(w.logs, logs):
		w.logs = append(w.logs[:0], logs...)
		w.cases = w.cases[:2]
		for _, l := range logs {
			w.cases = append(w.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(l.Wait())})
		}
	case w.fired >= 0:
		w.cases[2+w.fired].Chan = reflect.ValueOf(w.logs[w.fired].Wait())
	}
	w.fired = -1
	return w
}

// wait blocks until an append to a watched log (true), or the deadline
// passes or the server stops (false).
func (w *fetchWaiter) wait() bool {
	chosen, _, _ := reflect.Select(w.cases)
	if chosen < 2 {
		return false
	}
	w.fired = chosen - 2
	return true
}

// fetchScratch is a fetch's working memory. It is kept for later fetches
// (fetchScratches): for a consumer of many partitions it is about the
// same size fetch after fetch.
type fetchScratch struct {
	parts   []fetchsession.Part // the request's
	waiter  fetchWaiter
	plan    fetchPlan
	picks   []fetchPick
	results []fetchsession.Result
}

var fetchScratches = sync.Pool{New: func() any { return new(fetchScratch) }}

// reset empties sc for the next fetch, dropping its references to logs,
// which may belong to a topic being deleted.
func (sc *fetchScratch) reset() {
	clear(sc.plan.targets)
	clear(sc.plan.watch)
	clear(sc.picks)
	sc.plan = fetchPlan{targets: sc.plan.targets[:0], answered: sc.plan.answered[:0], watch: sc.plan.watch[:0]}
	sc.picks, sc.results, sc.parts = sc.picks[:0], sc.results[:0], sc.parts[:0]
	sc.waiter.reset()
}

// fetchPick is one partition a fetch answers, as resolved by planFetch.
type fetchPick struct {
	log      *partition.Log
	code     int16
	internal bool // of __consumer_offsets
}

// fetchPlan is what a fetch reads: the partitions its reply answers, and
// the logs whose appends wake it while it waits.
type fetchPlan struct {
	targets []fetchTarget
	// answered are the indexes in the fetch's Parts of the partitions
	// the reply answers, in its order.
	answered []int
	// watch holds the log of every partition of the fetch, read or not.
	watch []*partition.Log
	// anyError is set when a partition already failed: the fetch is
	// answered without waiting.
	anyError bool
}

// planFetch lays out the reply to f in resp, one partition per part to
// answer, and lists in sc.plan the logs to read and to watch. The partitions
// of an incremental fetch that fetchsession.Fetch.Quiet excuses are
// neither read nor answered: a consumer of a thousand partitions of which
// ten move costs ten reads per fetch, not a thousand.
func (h *Handler) planFetch(version int16, f *fetchsession.Fetch, resp *kmsg.FetchResponse, sc *fetchScratch) {
	plan := &sc.plan
	plan.targets, plan.answered, plan.watch, plan.anyError = plan.targets[:0], plan.answered[:0], plan.watch[:0], false
	resp.Topics = resp.Topics[:0]
	picks := sc.picks[:0]
	defer func() { sc.picks = picks }()
	var (
		resolved *fetchsession.Key // the part t, internal and topicErr are for
		t        *broker.Topic
		internal *broker.OffsetsTopic
		topicErr *kerr.Error
	)
	for i := range f.Parts {
		p := &f.Parts[i]
		if h.cl != nil {
			var pk fetchPick
			var readable bool
			pk.log, readable, pk.code = h.clusterConsumerLog(version, p.Key, p.Params.CurrentLeaderEpoch)
			if pk.log != nil {
				plan.watch = append(plan.watch, pk.log)
				if !readable {
					// A new leader's HW below its epoch's start: the
					// partition is answered empty until it moves.
					pk.log = nil
				} else if f.Quiet(i, pk.log.HighWatermark(), pk.log.LogStartOffset()) {
					continue
				}
			}
			plan.anyError = plan.anyError || (pk.code != 0 && pk.code != kerr.UnknownTopicOrPartition.Code && pk.code != kerr.UnknownTopicID.Code)
			plan.answered = append(plan.answered, i)
			picks = append(picks, pk)
			continue
		}
		if resolved == nil || resolved.Topic != p.Key.Topic || resolved.TopicID != p.Key.TopicID {
			resolved = &p.Key
			t, internal, topicErr = h.fetchTopic(version, p.Key.Topic, p.Key.TopicID)
		}
		var pk fetchPick
		switch {
		case topicErr != nil:
			pk.code = topicErr.Code
		case p.Params.CurrentLeaderEpoch > 0:
			// Leader epoch is always 0 on this single node.
			pk.code = kerr.UnknownLeaderEpoch.Code
		case internal != nil:
			// __consumer_offsets has no log here (the coordinator keeps
			// its records in its store): its partitions read as empty.
			pk.internal = true
			switch {
			case p.Key.Partition < 0 || p.Key.Partition >= internal.Partitions:
				pk.code = kerr.UnknownTopicOrPartition.Code
			case p.Params.FetchOffset != 0:
				pk.code = kerr.OffsetOutOfRange.Code
			case f.Quiet(i, 0, 0):
				continue
			}
		default:
			if pk.log = t.Partition(p.Key.Partition); pk.log == nil {
				pk.code = kerr.UnknownTopicOrPartition.Code
				break
			}
			plan.watch = append(plan.watch, pk.log)
			if f.Quiet(i, pk.log.HighWatermark(), pk.log.LogStartOffset()) {
				continue
			}
		}
		// As in Kafka, a topic or partition the broker does not know is
		// answered without cutting the others' wait short (KafkaApis
		// leaves it out of the read): a session still holding a deleted
		// topic must not turn its consumer's long poll into a busy loop.
		// An error reading a known partition answers at once.
		plan.anyError = plan.anyError || (pk.code != 0 && topicErr == nil && pk.code != kerr.UnknownTopicOrPartition.Code)
		plan.answered = append(plan.answered, i)
		picks = append(picks, pk)
	}
	for k, pk := range picks {
		p := &f.Parts[plan.answered[k]]
		// As in Kafka, partitions are answered in the order they were
		// first named, and only consecutive partitions of one topic share
		// a topic entry.
		if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != p.Key.Topic || resp.Topics[n-1].TopicID != p.Key.TopicID {
			run := 1
			for run < len(picks)-k && f.Parts[plan.answered[k+run]].Key.Topic == p.Key.Topic && f.Parts[plan.answered[k+run]].Key.TopicID == p.Key.TopicID {
				run++
			}
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = p.Key.Topic, p.Key.TopicID
			// Sized once: a response partition is large, and a topic may
			// have thousands.
			st.Partitions = make([]kmsg.FetchResponseTopicPartition, 0, run)
			resp.Topics = append(resp.Topics, st)
		}
		st := &resp.Topics[len(resp.Topics)-1]
		sp := kmsg.NewFetchResponseTopicPartition()
		sp.Partition = p.Key.Partition
		sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
		if pk.internal {
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = 0, 0, 0
		}
		sp.PreferredReadReplica = -1
		sp.RecordBatches = []byte{} // never null: librdkafka rejects a null record set
		sp.ErrorCode = pk.code
		if pk.log != nil {
			plan.targets = append(plan.targets, fetchTarget{ti: len(resp.Topics) - 1, pi: len(st.Partitions), log: pk.log, offset: p.Params.FetchOffset, max: p.Params.MaxBytes})
		}
		st.Partitions = append(st.Partitions, sp)
	}
}

// requestParts lists the partitions a fetch names, each once, in parts
// (whose memory is reused). Kafka reads a fetch into a map keyed by topic
// and partition, so a partition named twice is answered once, in the
// place it was first named, for the last entry naming it. Answering every
// copy would let one small request make the broker read the same data
// many times over.
func requestParts(req *kmsg.FetchRequest, parts []fetchsession.Part) []fetchsession.Part {
	parts = parts[:0]
	for i := range req.Topics {
		rt := &req.Topics[i]
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			parts = append(parts, fetchsession.Part{
				Key: fetchsession.Key{TopicID: rt.TopicID, Topic: rt.Topic, Partition: rp.Partition},
				Params: fetchsession.Params{FetchOffset: rp.FetchOffset, LogStartOffset: rp.LogStartOffset, MaxBytes: rp.PartitionMaxBytes,
					CurrentLeaderEpoch: rp.CurrentLeaderEpoch, LastFetchedEpoch: rp.LastFetchedEpoch},
			})
		}
	}
	if !mayRepeat(req) {
		return parts
	}
	at := make(map[fetchsession.Key]int, len(parts)) // index in the result
	out := parts[:0]                                 // written only at or below the part read
	for _, p := range parts {
		if k, seen := at[p.Key]; seen {
			out[k].Params = p.Params
			continue
		}
		at[p.Key] = len(out)
		out = append(out, p)
	}
	return out
}

// mayRepeat reports whether a fetch may name a partition more than once.
// Clients do not, so this is the common answer, found without a map
// entry per partition: a bitmap of the partition numbers of each topic,
// and a check that no topic is named twice. True is not certain: a
// partition number outside the bitmap's range says true too.
func mayRepeat(req *kmsg.FetchRequest) bool {
	const maxMapped = 1 << 16
	if len(req.Topics) > 8 {
		topics := make(map[fetchsession.Key]struct{}, len(req.Topics))
		for i := range req.Topics {
			k := fetchsession.Key{TopicID: req.Topics[i].TopicID, Topic: req.Topics[i].Topic}
			if _, seen := topics[k]; seen {
				return true
			}
			topics[k] = struct{}{}
		}
	} else {
		for i := range req.Topics {
			for j := range i {
				if req.Topics[j].Topic == req.Topics[i].Topic && req.Topics[j].TopicID == req.Topics[i].TopicID {
					return true
				}
			}
		}
	}
	var seen []uint64
	for i := range req.Topics {
		clear(seen)
		for j := range req.Topics[i].Partitions {
			p := req.Topics[i].Partitions[j].Partition
			if p < 0 || p >= maxMapped {
				return true
			}
			w, bit := int(p/64), uint64(1)<<(p%64)
			for len(seen) <= w {
				seen = append(seen, 0)
			}
			if seen[w]&bit != 0 {
				return true
			}
			seen[w] |= bit
		}
	}
	return false
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
func (h *Handler) fetchTopic(version int16, name string, id [16]byte) (*broker.Topic, *broker.OffsetsTopic, *kerr.Error) {
	ot, internal := h.b.OffsetsTopic()
	if version >= 13 {
		if t, ok := h.b.TopicByID(id); ok {
			return t, nil, nil
		}
		if internal && id == ot.ID {
			return nil, &ot, nil
		}
		return nil, nil, kerr.UnknownTopicID
	}
	if t, ok := h.b.Topic(name); ok {
		return t, nil, nil
	}
	if internal && name == broker.OffsetsTopicName {
		return nil, &ot, nil
	}
	return nil, nil, kerr.UnknownTopicOrPartition
}
