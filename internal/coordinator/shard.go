package coordinator

import (
	"log/slog"
	"sync"
	"time"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/store"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxBatch bounds how many queued events one loop iteration steps before
// making their records durable, so a flood of requests cannot hold early
// replies back indefinitely.
const maxBatch = 1024

// Load retries back off from minRetry to maxRetry.
const (
	minRetry = 100 * time.Millisecond
	maxRetry = 10 * time.Second
)

type eventKind uint8

const (
	evRequest eventKind = iota
	evTimer
	evExpire
	evFunc
	evClose
)

type event struct {
	kind eventKind
	call *call          // evRequest
	key  group.TimerKey // evTimer
	fn   func(*group.Machine)
	done chan struct{} // evFunc: closed once fn ran and earlier replies are out
}

// call is one request waiting for its reply. reply has room for the one
// reply, so the shard never blocks on a caller that stopped waiting.
type call struct {
	req        kmsg.Request
	clientID   string
	clientHost string
	reply      chan kmsg.Response
}

// held is a reply (or an evFunc completion) waiting for its batch to be
// durable.
type held struct {
	call *call
	msg  kmsg.Response
	done chan struct{}
}

// shard owns one group.Machine. Only its loop goroutine touches the fields
// below the queue; other goroutines talk to it through the queue.
type shard struct {
	id       int
	store    store.Store
	clock    Clock
	log      *slog.Logger
	gcfg     group.Config
	interval time.Duration

	mu     sync.Mutex
	queue  []event
	loaded bool // requests are accepted only when loaded
	closed bool
	wake   chan struct{} // capacity 1: a pending wake-up

	done  chan struct{} // closed when the loop has exited
	ready chan struct{} // closed when the first load completed

	// Loop-owned.
	m         *group.Machine
	timers    map[group.TimerKey]func() bool
	waiting   map[group.RequestID]*call
	nextID    group.RequestID
	retention func() bool
}

func newShard(id int, cfg *Config, gcfg group.Config) *shard {
	return &shard{
		id:       id,
		store:    cfg.Store,
		clock:    cfg.Clock,
		log:      cfg.Logger.With("shard", id),
		gcfg:     gcfg,
		interval: cfg.OffsetsRetentionCheckInterval,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		ready:    make(chan struct{}),
		timers:   map[group.TimerKey]func() bool{},
		waiting:  map[group.RequestID]*call{},
	}
}

func (s *shard) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// enqueue adds an event from a timer; it is dropped once the shard closed.
func (s *shard) enqueue(ev event) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	s.signal()
}

// submit queues a request, or answers it at once when the shard cannot take
// it: still loading (the client retries after a backoff) or closed (the
// client looks for the coordinator again).
func (s *shard) submit(cl *call) kmsg.Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrorResponse(cl.req, kerr.NotCoordinator.Code)
	case !s.loaded:
		return ErrorResponse(cl.req, kerr.CoordinatorLoadInProgress.Code)
	}
	s.queue = append(s.queue, event{kind: evRequest, call: cl})
	s.signal()
	return nil
}

// runFunc runs fn on the loop with the machine and waits until it ran and
// every reply queued before it was released. It reports false if the shard
// is not serving.
func (s *shard) runFunc(fn func(*group.Machine)) bool {
	done := make(chan struct{})
	ran := false
	s.mu.Lock()
	if s.closed || !s.loaded {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, event{kind: evFunc, done: done, fn: func(m *group.Machine) {
		ran = true
		fn(m)
	}})
	s.mu.Unlock()
	s.signal()
	<-done
	return ran
}

func (s *shard) setLoaded(v bool) {
	s.mu.Lock()
	s.loaded = v
	s.mu.Unlock()
}

// close asks the loop to stop after the events queued so far.
func (s *shard) close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.queue = append(s.queue, event{kind: evClose})
	}
	s.mu.Unlock()
	s.signal()
}

func (s *shard) run() {
	defer close(s.done)
	defer s.shutdown()
	if !s.loadWithRetry() {
		return
	}
	close(s.ready)
	s.armRetention()
	for range s.wake {
		s.mu.Lock()
		n := min(len(s.queue), maxBatch)
		evs := s.queue[:n:n]
		s.queue = s.queue[n:]
		more := len(s.queue) > 0
		s.mu.Unlock()
		if more {
			s.signal()
		}
		if !s.process(evs) {
			return
		}
	}
}

// process steps the machine through evs, makes all their records durable in
// one Apply (group commit across requests), then releases their replies.
// It reports false when the shard must stop.
func (s *shard) process(evs []event) bool {
	var recs []group.Record
	var hold []held
	collect := func(out group.Output) {
		s.applyTimers(out.Timers)
		recs = append(recs, out.Records...)
		for _, r := range out.Replies {
			cl := s.waiting[r.ID]
			if cl == nil {
				s.log.Error("reply for unknown request", "id", r.ID)
				continue
			}
			delete(s.waiting, r.ID)
			hold = append(hold, held{call: cl, msg: r.Msg})
		}
	}
	for _, ev := range evs {
		switch ev.kind {
		case evRequest:
			s.nextID++
			id := s.nextID
			s.waiting[id] = ev.call
			collect(s.m.Step(s.clock.Now(), group.Request{
				ID:         id,
				ClientID:   ev.call.clientID,
				ClientHost: ev.call.clientHost,
				Msg:        ev.call.req,
			}))
		case evTimer:
			collect(s.m.Step(s.clock.Now(), group.Timer{Key: ev.key}))
		case evExpire:
			collect(s.m.Step(s.clock.Now(), group.ExpireOffsets{}))
			s.armRetention()
		case evFunc:
			ev.fn(s.m)
			hold = append(hold, held{done: ev.done})
		case evClose:
			// Everything before the close is answered normally; the
			// rest of the queue is answered by shutdown.
			s.commit(recs, hold)
			return false
		}
	}
	return s.commit(recs, hold)
}

// commit makes recs durable and then releases hold. If the write fails,
// nothing in hold is acknowledged; see reload. It reports false if the
// shard closed while rebuilding.
func (s *shard) commit(recs []group.Record, hold []held) bool {
	if len(recs) > 0 {
		if err := s.store.Apply(recs); err != nil {
			s.log.Error("store write failed; failing replies and reloading the shard from the store",
				"records", len(recs), "replies", len(hold), "err", err)
			return s.reload(hold)
		}
	}
	for _, h := range hold {
		if h.call != nil {
			h.call.reply <- h.msg
		} else {
			close(h.done)
		}
	}
	return true
}

// reload drops the machine, whose state may be ahead of the store, and
// rebuilds it from the store. The held replies and the requests parked in
// the old machine (JoinGroups, SyncGroups) are answered with
// COORDINATOR_NOT_AVAILABLE, which clients retry; they are answered after
// the first rebuild attempt so that a retry meets the restored state.
// Requests that queue meanwhile wait for the rebuilt machine. If the store
// cannot be read either, the shard goes back to loading: queued requests
// get COORDINATOR_LOAD_IN_PROGRESS and loading is retried with backoff.
func (s *shard) reload(hold []held) bool {
	s.m = nil
	s.stopTimers()
	err := s.load()
	for _, h := range hold {
		if h.call != nil {
			h.call.reply <- ErrorResponse(h.call.req, kerr.CoordinatorNotAvailable.Code)
		} else {
			close(h.done)
		}
	}
	s.failWaiting(kerr.CoordinatorNotAvailable.Code)
	if err == nil {
		return true
	}
	s.log.Error("reloading shard failed", "err", err)
	s.setLoaded(false)
	s.mu.Lock()
	kept := s.queue[:0:0]
	for _, ev := range s.queue {
		if ev.kind == evRequest {
			ev.call.reply <- ErrorResponse(ev.call.req, kerr.CoordinatorLoadInProgress.Code)
			continue
		}
		kept = append(kept, ev)
	}
	s.queue = kept
	s.mu.Unlock()
	return s.loadWithRetry()
}

func (s *shard) failWaiting(code int16) {
	for id, cl := range s.waiting {
		cl.reply <- ErrorResponse(cl.req, code)
		delete(s.waiting, id)
	}
}

// loadWithRetry loads the shard, retrying with backoff until it succeeds
// or the shard is closed (then it reports false).
func (s *shard) loadWithRetry() bool {
	backoff := minRetry
	for {
		err := s.load()
		if err == nil {
			s.setLoaded(true)
			// Events may have queued while loading; make sure the
			// loop looks.
			s.signal()
			return true
		}
		s.log.Error("loading shard failed; retrying", "err", err, "backoff", backoff)
		retry := make(chan struct{})
		stop := s.clock.AfterFunc(backoff, func() { close(retry) })
		backoff = min(2*backoff, maxRetry)
	wait:
		for {
			select {
			case <-retry:
				break wait
			case <-s.wake:
				s.mu.Lock()
				closed := s.closed
				s.mu.Unlock()
				if closed {
					stop()
					return false
				}
			}
		}
	}
}

// load replays the shard's records into a fresh machine.
func (s *shard) load() error {
	start := time.Now()
	m := group.New(s.gcfg)
	var recs []group.Record
	if err := s.store.Load(s.id, func(r group.Record) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		return err
	}
	out := m.Replay(s.clock.Now(), recs)
	// Replay can start rebalances (an oversized group); their records
	// must be durable like any other.
	if len(out.Records) > 0 {
		if err := s.store.Apply(out.Records); err != nil {
			return err
		}
	}
	s.m = m
	s.applyTimers(out.Timers)
	s.log.Info("shard loaded", "records", len(recs), "groups", len(m.Groups()), "took", time.Since(start))
	return nil
}

// applyTimers mirrors the machine's deadlines in the clock: one callback
// per key, replaced when the key is rescheduled. A callback only queues a
// Timer event; the machine ignores firings that are stale.
func (s *shard) applyTimers(us []group.TimerUpdate) {
	for _, u := range us {
		if stop, ok := s.timers[u.Key]; ok {
			stop()
			delete(s.timers, u.Key)
		}
		if u.Cancel {
			continue
		}
		key := u.Key
		s.timers[key] = s.clock.AfterFunc(u.Deadline.Sub(s.clock.Now()), func() {
			s.enqueue(event{kind: evTimer, key: key})
		})
	}
}

func (s *shard) stopTimers() {
	for k, stop := range s.timers {
		stop()
		delete(s.timers, k)
	}
}

func (s *shard) armRetention() {
	s.retention = s.clock.AfterFunc(s.interval, func() {
		s.enqueue(event{kind: evExpire})
	})
}

// shutdown answers everything still waiting, so no Handle call hangs:
// requests parked in the machine and requests still queued get
// NOT_COORDINATOR, as when Kafka unloads a coordinator partition.
func (s *shard) shutdown() {
	s.setLoaded(false)
	if s.m != nil {
		// Unload acknowledges nothing, so its replies need no write.
		out := s.m.Step(s.clock.Now(), group.Unload{})
		for _, r := range out.Replies {
			if cl := s.waiting[r.ID]; cl != nil {
				delete(s.waiting, r.ID)
				cl.reply <- r.Msg
			}
		}
	}
	s.failWaiting(kerr.NotCoordinator.Code)
	s.stopTimers()
	if s.retention != nil {
		s.retention()
	}
	s.mu.Lock()
	s.closed = true
	rest := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, ev := range rest {
		switch ev.kind {
		case evRequest:
			ev.call.reply <- ErrorResponse(ev.call.req, kerr.NotCoordinator.Code)
		case evFunc:
			close(ev.done)
		}
	}
}
