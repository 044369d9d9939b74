package coordinator

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/inspect"
	"github.com/groupd/groupd/internal/store"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxBatch bounds how many events one batch carries. While a batch is being
// written the loop goes on stepping events into the next one until it holds
// maxBatch events, then waits for the write: a flood of requests cannot
// grow a batch, and the wait of its first replies, without bound.
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
	evTopics
	evFunc
	evClose
)

type event struct {
	kind   eventKind
	call   *call          // evRequest
	key    group.TimerKey // evTimer
	topics []group.Topic  // evTopics
	fn     func(*group.Machine)
	done   chan struct{} // evFunc: closed once fn ran and earlier replies are out
}

// batch is the records of consecutive events, to be made durable with one
// Apply, and the replies that wait for them.
type batch struct {
	recs   []group.Record
	hold   []held
	events int
	err    error // set by the writer
}

func (b *batch) empty() bool { return len(b.recs) == 0 && len(b.hold) == 0 }

// reset empties b for reuse, dropping its references.
func (b *batch) reset() {
	clear(b.recs)
	clear(b.hold)
	b.recs, b.hold, b.events, b.err = b.recs[:0], b.hold[:0], 0, nil
}

// release sends the replies of a durable batch and completes its evFuncs.
func (b *batch) release() {
	for _, h := range b.hold {
		if h.call != nil {
			h.call.deliver(h.msg)
		} else {
			close(h.done)
		}
	}
}

// call is one request waiting for its reply. reply has room for the one
// reply, so the shard never blocks on a caller that stopped waiting.
type call struct {
	req        kmsg.Request
	clientID   string
	clientHost string
	reply      chan kmsg.Response
	// notified is callWaiting, callNotify once the caller has set notify
	// (Pending.OnDone), or callDelivered once the reply is on reply
	// with no notify set.
	notified uint32
	notify   func()
}

const (
	callWaiting uint32 = iota
	callNotify
	callDelivered
)

// deliver hands the call its reply, and calls the caller's notify, if it
// set one, on this goroutine.
func (cl *call) deliver(msg kmsg.Response) {
	// Settled before the send: once the reply is taken, Pending.Wait
	// clears the call.
	if atomic.CompareAndSwapUint32(&cl.notified, callWaiting, callDelivered) {
		cl.reply <- msg
		return
	}
	notify := cl.notify
	cl.reply <- msg
	notify()
}

// held is a reply (or an evFunc completion) waiting for its batch to be
// durable.
type held struct {
	call *call
	msg  kmsg.Response
	done chan struct{}
}

// shard owns one group.Machine. The fields marked loop-owned are touched
// only by the goroutine that holds own: the loop, or a submitter stepping
// its own request while the loop waits (see submit). Other goroutines talk
// to it through the queue.
type shard struct {
	cfg      *Config
	id       int
	store    store.Store
	clock    Clock
	log      *slog.Logger
	gcfg     group.Config
	interval time.Duration
	hooks    Hooks
	failures *loadFailures

	mu     sync.Mutex
	queue  []event
	loaded bool // requests are accepted only when loaded
	closed bool
	// owned and ownGen matter only with Config.Owned: the shard serves
	// while this node owns it, and each Own is a new generation, which
	// the loaded machine must be of (loadedGen).
	owned  bool
	ownGen uint64
	// down is set when the shard's machine panicked again while being
	// rebuilt (goDown): its groups are answered COORDINATOR_NOT_AVAILABLE.
	down bool
	wake chan struct{} // capacity 1: a pending wake-up

	done      chan struct{} // closed when the loop has exited
	ready     chan struct{} // closed when the first load completed
	readyOnce sync.Once
	tried     chan struct{} // closed when the first load attempt ended, however

	// stepped counts the events the loop has stepped, for tests.
	stepped atomic.Uint64

	// The machine's deadlines, behind one clock callback armed at the
	// earliest of them. tmu is held by the loop while it updates them and
	// by the callback, which pops what is due, queues it as timer events
	// and arms the next callback before it returns: with a virtual clock,
	// every timer due within one Advance is queued by the time Advance
	// returns, as with a callback per key.
	tmu       sync.Mutex
	tq        *timerQueue
	armed     bool
	armedAt   time.Time
	armGen    uint64 // tells a callback it was replaced
	stopArmed func() bool

	// own is held by whoever steps the machine: the loop, except while
	// it waits, or a submitter that found it waiting.
	own sync.Mutex

	// Loop-owned.
	m *group.Machine
	// loadedGen is the ownership generation the shard loaded for, and
	// move the load that made this node its coordinator (Config.Owned).
	loadedGen uint64
	move      *inspect.CoordinatorMove
	// broken is set when a step panicked (contain): the machine is gone
	// and nothing is stepped until the loop has rebuilt it.
	broken  bool
	waiting map[group.RequestID]*call
	// asking is the request being stepped until its reply is collected;
	// it joins waiting if the machine parks it.
	asking    *call
	askingID  group.RequestID
	nextID    group.RequestID
	retention func() bool
	spareQ    []event // a drained queue slice for take to reuse

	// The batch being gathered, and the one the writer is making durable
	// (nil if none). The writer takes batches from toWrite and hands them
	// back on written once Apply returned; on success it has already
	// released their replies.
	cur      *batch
	inflight *batch
	spare    *batch
	toWrite  chan *batch
	written  chan *batch
}

func newShard(id int, cfg *Config, gcfg group.Config) *shard {
	return &shard{
		cfg:      cfg,
		id:       id,
		store:    cfg.Store,
		clock:    cfg.Clock,
		log:      cfg.Logger.With("shard", id),
		gcfg:     gcfg,
		interval: cfg.OffsetsRetentionCheckInterval,
		hooks:    cfg.Hooks,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		ready:    make(chan struct{}),
		tried:    make(chan struct{}),
		tq:       newTimerQueue(),
		waiting:  map[group.RequestID]*call{},
		cur:      &batch{},
		toWrite:  make(chan *batch, 1),
		written:  make(chan *batch, 1),
	}
}

func (s *shard) signal() {
	s.busy(1)
	select {
	case s.wake <- struct{}{}:
	default:
		s.busy(-1) // a wake-up is already pending
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
//
// A request that finds the queue empty is stepped on the caller's goroutine
// if the loop is waiting (see stepInline); otherwise the loop is woken.
func (s *shard) submit(cl *call) kmsg.Response {
	s.mu.Lock()
	switch {
	case s.closed, s.cfg.Owned && !s.owned:
		s.mu.Unlock()
		return ErrorResponse(cl.req, kerr.NotCoordinator.Code)
	case s.down:
		s.mu.Unlock()
		return ErrorResponse(cl.req, kerr.CoordinatorNotAvailable.Code)
	case !s.loaded:
		s.mu.Unlock()
		return ErrorResponse(cl.req, kerr.CoordinatorLoadInProgress.Code)
	}
	s.queue = append(s.queue, event{kind: evRequest, call: cl})
	alone := len(s.queue) == 1
	s.mu.Unlock()
	if !alone || !s.stepInline() {
		s.signal()
	}
	return nil
}

// stepInline steps the queued requests on the calling goroutine, if the
// loop is waiting with nothing in flight and only requests are queued, and
// reports whether it did. A request answered by its own step (a heartbeat)
// then costs no hand-off to the loop's goroutine and back: the caller finds
// its reply ready. Whatever needs a write is handed to the writer as the
// loop would, and the loop takes it back when it lands.
func (s *shard) stepInline() bool {
	if !s.own.TryLock() {
		return false
	}
	defer s.own.Unlock()
	if s.inflight != nil || !s.cur.empty() || s.broken {
		return false
	}
	evs := s.takeRequests()
	if len(evs) == 0 {
		return false
	}
	s.busy(1)
	s.processTaken(evs) // only requests: it cannot be told to stop
	s.flush()
	s.idle()
	return true
}

// takeRequests takes the whole queue if it holds only requests.
func (s *shard) takeRequests() []event {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range s.queue {
		if ev.kind != evRequest {
			return nil
		}
	}
	evs := s.queue
	s.queue, s.spareQ = s.spareQ[:0], nil
	return evs
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
		fn(m)
		ran = true // not if fn panicked (contain)
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
	s.own.Lock()
	defer s.own.Unlock()
	defer close(s.done)
	defer s.busy(-1)
	defer s.shutdown()
	go s.writer()
	// Every way out of the loop first waits for the batch in flight, so
	// the writer is idle when it is told to stop.
	defer close(s.toWrite)
	for {
		if !s.awaitOwner() {
			return
		}
		if s.loadWithRetry(false) {
			s.readyOnce.Do(func() { close(s.ready) })
			s.armRetention()
			s.serve()
		}
		if !s.lostOwnership() {
			return // closed, or stopped on a record it cannot load
		}
		s.resign()
	}
}

// serve steps the events of the loaded machine until the shard closes,
// stops, or loses its ownership.
func (s *shard) serve() {
	for {
		s.idle()
		s.own.Unlock()
		var b *batch
		select {
		case <-s.wake:
			s.gather()
		case b = <-s.written:
		}
		s.own.Lock()
		if s.lostOwnership() {
			if b != nil {
				s.inflight = nil
				s.settle(b)
			}
			return
		}
		if b != nil && !s.landed(b) {
			return
		}
		if !s.stepQueued() {
			return
		}
	}
}

// gather lets the goroutines that are ready to run go first, so that the
// requests they are about to submit join the events this wake-up steps.
// The goroutine that woke the loop has just queued its request and waits
// for the reply; without this the loop would run at once, step that one
// request, hand its reply back and wait again: one wake-up and two
// goroutine switches per request. A wake-up that came meanwhile is taken
// too: the queue it announces is stepped now.
func (s *shard) gather() {
	runtime.Gosched()
	select {
	case <-s.wake:
		s.busy(-1)
	default:
	}
}

// writer makes batches durable in order, one at a time, and releases the
// replies of each as soon as it is durable. It leaves failures to the loop.
func (s *shard) writer() {
	for b := range s.toWrite {
		start := time.Now()
		b.err = s.store.Apply(b.recs)
		s.observeWrite(start, len(b.recs), b.err)
		if b.err == nil {
			if f := s.hooks.Applied; f != nil {
				f(s.id, b.recs)
			}
			b.release()
		}
		s.busy(1)
		s.written <- b
		s.busy(-1)
	}
}

// take removes up to n events from the queue.
func (s *shard) take(n int) []event {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) <= n {
		evs := s.queue
		s.queue, s.spareQ = s.spareQ[:0], nil
		return evs
	}
	evs := s.queue[:n:n]
	s.queue = s.queue[n:]
	return evs
}

// stepQueued steps queued events into the current batch, handing batches
// to the writer whenever it is free, until the queue is empty or the batch
// is full while another is in flight. It reports false when the shard must
// stop.
func (s *shard) stepQueued() bool {
	for {
		if s.broken && !s.rebuild() {
			return false
		}
		// A write that landed meanwhile frees the writer for the batch
		// gathered so far.
		select {
		case b := <-s.written:
			s.busy(-1)
			if !s.landed(b) {
				return false
			}
		default:
		}
		room := maxBatch - s.cur.events
		if room <= 0 {
			if s.inflight != nil {
				return true // the queue is looked at again when it lands
			}
			s.flush()
			continue
		}
		evs := s.take(room)
		if len(evs) == 0 {
			s.flush()
			return true
		}
		if !s.processTaken(evs) {
			return false
		}
		s.flush()
	}
}

// flush hands the current batch to the writer if the writer is free. A
// batch without records needs no write: with nothing in flight before it,
// its replies go out at once.
func (s *shard) flush() {
	if s.inflight != nil {
		return
	}
	if s.cur.empty() {
		// Its events left nothing to write or hold (heartbeats
		// answered at once): they no longer count against maxBatch.
		s.cur.events = 0
		return
	}
	b := s.cur
	s.cur = s.newBatch()
	if len(b.recs) == 0 {
		b.release()
		s.recycle(b)
		return
	}
	s.inflight = b
	s.busy(1)
	s.toWrite <- b
}

func (s *shard) newBatch() *batch {
	if b := s.spare; b != nil {
		s.spare = nil
		return b
	}
	return &batch{}
}

func (s *shard) recycle(b *batch) {
	b.reset()
	s.spare = b
}

// landed takes back a batch from the writer. If its write failed, neither
// its replies nor those of any later event can be released as successes:
// the machine has applied events whose records are not durable. See
// reload. It reports false if the shard closed while rebuilding.
func (s *shard) landed(b *batch) bool {
	s.inflight = nil
	if b.err == nil {
		s.recycle(b)
		return true
	}
	if s.lostOwnership() {
		// Not rebuilt here: the shard resigns (run).
		s.failLanded(b)
		return false
	}
	s.log.Error("store write failed; failing replies and reloading the shard from the store",
		"records", len(b.recs), "replies", len(b.hold), "later replies", len(s.cur.hold), "err", b.err)
	hold := append(b.hold, s.cur.hold...)
	s.cur.reset()
	ok := s.reload(hold)
	s.recycle(b)
	return ok
}

// drain waits until everything stepped so far is durable and answered.
// It reports false if the shard closed while rebuilding after a failure.
func (s *shard) drain() bool {
	for s.inflight != nil || !s.cur.empty() {
		s.flush()
		if s.inflight == nil {
			continue
		}
		s.busy(-1)
		if !s.landed(<-s.written) {
			return false
		}
	}
	return true
}

// processTaken is process for events taken off the queue, whose slice it
// then hands back for the queue to reuse.
func (s *shard) processTaken(evs []event) bool {
	ok := s.process(evs)
	clear(evs)
	s.spareQ = evs[:0]
	return ok
}

// process steps the machine through evs into the current batch. It
// reports false when the shard must stop. A panic while stepping is
// contained (contain): the events after it are answered, not stepped.
func (s *shard) process(evs []event) (ok bool) {
	i := 0
	defer func() {
		if p := recover(); p != nil {
			s.contain(p, evs[i], evs[i+1:])
			ok = true
		}
	}()
	for ; i < len(evs); i++ {
		ev := evs[i]
		s.cur.events++
		switch ev.kind {
		case evRequest:
			s.nextID++
			id := s.nextID
			// Most requests are answered by their own step; only one
			// the machine parks is looked up by id later.
			s.asking, s.askingID = ev.call, id
			s.collect(s.stepRequest(group.Request{
				ID:         id,
				ClientID:   ev.call.clientID,
				ClientHost: ev.call.clientHost,
				Msg:        ev.call.req,
			}))
			if s.asking != nil {
				s.waiting[id] = s.asking
				s.asking = nil
			}
		case evTimer:
			s.collect(s.step(group.Timer{Key: ev.key}))
		case evExpire:
			s.collect(s.step(group.ExpireOffsets{}))
			s.armRetention()
		case evTopics:
			s.collect(s.step(group.TopicsChanged{Topics: ev.topics}))
		case evFunc:
			ev.fn(s.m)
			s.cur.hold = append(s.cur.hold, held{done: ev.done})
		case evClose:
			// Everything before the close is answered normally; the
			// rest of the queue is answered by shutdown.
			s.stepped.Add(1)
			s.drain()
			return false
		}
		s.stepped.Add(1)
	}
	return true
}

// collect adds one step's effects to the current batch.
func (s *shard) collect(out group.Output) {
	if len(out.Rebalances) > 0 {
		s.finishRebalances(out.Rebalances)
	}
	s.applyTimers(out.Timers)
	s.cur.recs = append(s.cur.recs, out.Records...)
	for _, r := range out.Replies {
		var cl *call
		if s.asking != nil && r.ID == s.askingID {
			cl, s.asking = s.asking, nil
		} else if cl = s.waiting[r.ID]; cl != nil {
			delete(s.waiting, r.ID)
		} else {
			s.log.Error("reply for unknown request", "id", r.ID)
			continue
		}
		if len(out.Records) == 0 && unheld(r.Msg) {
			cl.deliver(r.Msg)
			continue
		}
		s.cur.hold = append(s.cur.hold, held{call: cl, msg: r.Msg})
	}
}

// unheld reports whether a reply from a step that wrote nothing may go out
// at once, ahead of the records of the events stepped before it: a classic
// heartbeat's answer that the member is in good standing (no error) or is
// to rejoin (REBALANCE_IN_PROGRESS). Neither acknowledges a change, so
// neither waits for another request's write: if those records are lost,
// the member's next heartbeat meets the state rebuilt from the store, and
// a rejoin is always allowed. An answer that fences the member
// (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID) can tell of
// a change that is not durable yet, a member removed or a static member
// replaced, and keeps its place behind it.
func unheld(msg kmsg.Response) bool {
	hb, ok := msg.(*kmsg.HeartbeatResponse)
	return ok && (hb.ErrorCode == 0 || hb.ErrorCode == kerr.RebalanceInProgress.Code)
}

// reload drops the machine, whose state may be ahead of the store, and
// rebuilds it from the store. Nothing may be in flight. The held replies
// (of the failed batch and every later one) and the requests parked in
// the old machine (JoinGroups, SyncGroups) are answered with
// COORDINATOR_NOT_AVAILABLE, which clients retry; they are answered after
// the first rebuild attempt so that a retry meets the restored state.
// Requests that queue meanwhile wait for the rebuilt machine. If the store
// cannot be read either, the shard goes back to loading: queued requests
// get COORDINATOR_LOAD_IN_PROGRESS and loading is retried with backoff.
func (s *shard) reload(hold []held) bool {
	s.m, s.broken = nil, false
	s.stopTimers()
	err := s.load(true)
	answerHeld(hold, kerr.CoordinatorNotAvailable.Code)
	s.failWaiting(kerr.CoordinatorNotAvailable.Code)
	if err == nil {
		return true
	}
	if isStepPanic(err) {
		return s.goDown(err)
	}
	s.log.Error("reloading shard failed", "err", err)
	s.setLoaded(false)
	s.mu.Lock()
	kept := s.queue[:0:0]
	var refused []*call
	for _, ev := range s.queue {
		if ev.kind == evRequest {
			refused = append(refused, ev.call)
			continue
		}
		kept = append(kept, ev)
	}
	s.queue = kept
	s.mu.Unlock()
	// Answered outside the lock: a reply may be written as it is
	// delivered (call.deliver).
	for _, cl := range refused {
		cl.deliver(ErrorResponse(cl.req, kerr.CoordinatorLoadInProgress.Code))
	}
	return s.loadWithRetry(true)
}

func (s *shard) failWaiting(code int16) {
	for id, cl := range s.waiting {
		cl.deliver(ErrorResponse(cl.req, code))
		delete(s.waiting, id)
	}
}

// loadWithRetry loads the shard, retrying with backoff until it succeeds
// or the shard is closed (then it reports false). A store that holds a
// record that does not decode is not retried: reading it again gives the
// same bytes. The shard then stops (reporting false), and the coordinator
// reports the error (Coordinator.Failed).
func (s *shard) loadWithRetry(reload bool) bool {
	backoff := minRetry
	for {
		err := s.load(reload)
		if err == nil {
			s.setLoaded(true)
			s.attempted()
			// Events may have queued while loading; make sure the
			// loop looks.
			s.signal()
			return true
		}
		if undecodable(err) {
			s.log.Error("a stored record does not decode; the shard stops and is not retried", "err", err)
			s.failures.add(err)
			s.attempted()
			return false
		}
		if isStepPanic(err) {
			if reload {
				return s.goDown(err)
			}
			// At start the records are what the machine cannot
			// take: the start stops, naming the shard, as for a
			// record that does not decode.
			s.log.Error("the group machine panicked while loading the shard's records; the shard stops", "err", err)
			s.failures.add(fmt.Errorf("shard %d: loading its records: %w", s.id, err))
			s.attempted()
			return false
		}
		s.attempted()
		s.log.Error("loading shard failed; retrying (its groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile)", "err", err, "backoff", backoff)
		// A reload runs inside the event loop, which may already have
		// taken Close's wake-up: look before waiting, or only a load
		// that succeeds would end the wait (and Close with it).
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed || s.lostOwnership() {
			return false
		}
		retry := make(chan struct{})
		stop := s.clock.AfterFunc(backoff, func() {
			s.busy(1)
			close(retry)
		})
		backoff = min(2*backoff, maxRetry)
	wait:
		for {
			s.busy(-1)
			select {
			case <-retry:
				break wait
			case <-s.wake:
				s.mu.Lock()
				closed := s.closed
				s.mu.Unlock()
				if closed || s.lostOwnership() {
					if !stop() {
						// The retry fired or is firing; take
						// its wake-up so the count stays right.
						<-retry
						s.busy(-1)
					}
					return false
				}
			}
		}
	}
}

// load replays the shard's records into a fresh machine.
func (s *shard) load(reload bool) (err error) {
	if f := s.hooks.Loaded; f != nil {
		defer func() {
			if err != nil {
				f(s.id, nil, reload)
			}
		}()
	}
	// Runs first: a panic is the attempt's error.
	defer recoverLoad(&err)
	start := time.Now()
	m := group.New(s.gcfg)
	// The topics first, so that consumer groups come back knowing what
	// their subscriptions resolve to, and move on if a topic changed
	// while they were not loaded. A change from now on is queued as an
	// event and steps the loaded machine.
	if f := s.cfg.Topics; f != nil {
		m.Step(s.clock.Now(), group.TopicsChanged{Topics: f()})
	}
	var recs []group.Record
	if err := s.store.Load(s.id, func(r group.Record) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		return err
	}
	out, err := m.Replay(s.clock.Now(), recs)
	if err != nil {
		return err
	}
	// Replay can start rebalances (an oversized group, a consumer group
	// whose topics changed); their records must be durable like any
	// other.
	if len(out.Rebalances) > 0 {
		s.finishRebalances(out.Rebalances)
	}
	if len(out.Records) > 0 {
		if err := s.store.Apply(out.Records); err != nil {
			return err
		}
		if f := s.hooks.Applied; f != nil {
			f(s.id, out.Records)
		}
	}
	s.m = m
	if f := s.hooks.Loaded; f != nil {
		f(s.id, m, reload)
	}
	s.applyTimers(out.Timers)
	took := time.Since(start)
	if s.cfg.Owned {
		s.moved(took)
	}
	s.log.Info("shard loaded", "records", len(recs), "groups", len(m.Groups()), "took", took)
	return nil
}

// applyTimers mirrors the machine's deadlines in the timer queue. The
// callback only queues Timer events; the machine ignores firings that are
// stale.
func (s *shard) applyTimers(us []group.TimerUpdate) {
	if len(us) == 0 {
		return
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	for _, u := range us {
		if u.Cancel {
			s.tq.remove(u.Key)
		} else {
			s.tq.set(u.Key, u.Deadline)
		}
	}
	s.armLocked()
}

// armLocked makes sure a clock callback is armed no later than the
// earliest deadline. A deadline that only moved later keeps the callback
// armed for the earlier one, which then finds nothing due and re-arms.
// Deadlines already due are queued at once.
func (s *shard) armLocked() {
	for {
		at, ok := s.tq.next()
		if !ok || (s.armed && !at.Before(s.armedAt)) {
			return
		}
		if s.armed {
			s.stopArmed()
			s.armed = false
		}
		d := at.Sub(s.clock.Now())
		if d <= 0 {
			// A virtual clock would run the callback right here,
			// under tmu.
			s.queueDueLocked()
			continue
		}
		s.armGen++
		gen := s.armGen
		s.armed, s.armedAt = true, at
		s.stopArmed = s.clock.AfterFunc(d, func() { s.fire(gen) })
		return
	}
}

// fire is the clock callback: it queues the keys that are due, in deadline
// order, and arms the callback for the next deadline.
func (s *shard) fire(gen uint64) {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if gen != s.armGen || !s.armed {
		return // replaced or stopped after it started
	}
	s.armed = false
	s.queueDueLocked()
	s.armLocked()
}

func (s *shard) queueDueLocked() {
	now := s.clock.Now()
	var evs []event
	for {
		k, ok := s.tq.popDue(now)
		if !ok {
			break
		}
		evs = append(evs, event{kind: evTimer, key: k})
	}
	if len(evs) == 0 {
		return
	}
	s.mu.Lock()
	if !s.closed {
		s.queue = append(s.queue, evs...)
	}
	s.mu.Unlock()
	s.signal()
}

func (s *shard) stopTimers() {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	s.tq.clear()
	if s.armed {
		s.stopArmed()
		s.armed = false
	}
	s.armGen++
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
		s.unloadMachine()
	}
	s.failWaiting(kerr.NotCoordinator.Code)
	s.stopTimers()
	if s.retention != nil {
		s.retention()
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.answerQueued()
}
