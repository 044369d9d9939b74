package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	coord "github.com/groupd/groupd/internal/coordinator"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/store"
	"github.com/groupd/groupd/internal/store/storetest"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The runtime mode (Options.Runtime) replaces the model of the coordinator
// (coord.go) by the real one: internal/coordinator's shard, with its
// batching, pipelined writes, held replies and reload after a failed write,
// over the real pebble store on pebble's crashable in-memory filesystem,
// behind an injector that fails writes and fsyncs of the write-ahead log.
//
// The runtime has goroutines (the shard's loop and writer, pebble's own),
// and the simulation stays reproducible by never letting two of them run at
// once with the simulation, and by giving every choice to the simulation:
//
//   - After every action it takes on the runtime (a request, a timer, a
//     write let through), the simulation waits until the runtime is quiet:
//     the coordinator's Busy hook counts its pending work, and the gate in
//     front of the store counts a write it holds out. Only then does it
//     look at what came out: replies released (polled in the order the
//     requests were sent), writes waiting at the gate.
//   - Every store write waits at the gate until the simulation lets it
//     through, at a virtual time of its choosing (an fsync that takes a
//     while, during which the shard goes on stepping later requests into
//     the next batch), with a fault of its choosing: a failed WAL write or
//     fsync, injected into pebble's filesystem, or a crash before or after
//     the write is durable. Loads of the shard fail now and then too (the
//     shard retries after a backoff on the simulation's clock).
//   - The coordinator's clock is the simulation's: each timer is an event
//     in the simulation's queue, run at its deadline.
//   - The store folds its log only when the simulation says (ManualFold)
//     and pebble compacts nothing by itself; one shard holds every group.
//   - A crash takes a crash clone of the filesystem (what was fsynced, and
//     a seeded share of what was not), closes the old runtime, and starts
//     store and coordinator again on the clone.
//
// Pebble's memtable flushes still run on their own goroutine, but they
// change no data a load can see, only where it lives.
type runtimeCoord struct {
	w      *world
	up     bool
	inc    int
	disk   *vfs.MemFS
	faults storetest.WALFaults
	cur    *incarnation

	// Armed faults.
	failNext  int // 1: the next write fails before reaching the log; 2: its fsync fails
	crashNext int // 1: crash before the next write is durable; 2: after

	loadFailP float64 // chance a load of the shard fails (the shard retries)
}

// loadRetryMax is the coordinator's longest wait between two attempts to
// load a shard: what a load that failed just before the faults stopped
// adds to the time the groups need to converge.
const loadRetryMax = 10 * time.Second

// incarnation is one run of the runtime, from a start to a crash.
type incarnation struct {
	r    *runtimeCoord
	why  string
	dead atomic.Bool
	// loading is set from the start of a load (at start, and after a
	// failed write) until the shard has a machine.
	loading atomic.Bool
	hung    bool
	act     *activity
	st      *store.Pebble
	gate    *gatedStore
	co      *coord.Coordinator

	// Set by the hooks, which run on the runtime's goroutines while the
	// simulation waits for them.
	m   *group.Machine
	pre pre
	lie bool // the gate acknowledged a write that failed (Bugs.AckFailedWrite)

	from  map[kmsg.Request]*process
	calls []*rtCall // requests whose reply has not come out, in the order sent
}

type rtCall struct {
	pd   *pending
	wait coord.Wait
}

// quietLimit is how long, in real time, the simulation waits for the
// runtime to go quiet before it calls the run hung. A step takes
// microseconds; only a deadlock or a lost wake-up comes near it.
const quietLimit = 60 * time.Second

func newRuntimeCoord(w *world) *runtimeCoord {
	return &runtimeCoord{w: w, disk: vfs.NewCrashableMem()}
}

var _ backend = (*runtimeCoord)(nil)

func (r *runtimeCoord) isUp() bool             { return r.up }
func (r *runtimeCoord) incarnation() int       { return r.inc }
func (r *runtimeCoord) failNextWrite(mode int) { r.failNext = mode }
func (r *runtimeCoord) stopFaults()            { r.failNext, r.crashNext = 0, 0 }

func (r *runtimeCoord) machine(string) *group.Machine {
	if !r.up {
		return nil
	}
	return r.cur.m
}

func (r *runtimeCoord) start() {
	w := r.w
	if w.p.storeFailP > 0 && w.chance(0.5) {
		r.loadFailP = pick(w, []float64{0.1, 0.3})
		w.p.settleSlack = loadRetryMax
	}
	w.logf("runtime loadFail=%.1f", r.loadFailP)
	r.open("start")
	r.scheduleFold()
}

func (r *runtimeCoord) restart() {
	r.w.count("run.coordinator-restart")
	r.open("restart")
}

func (r *runtimeCoord) topicsChanged() {
	if r.up {
		r.cur.co.TopicsChanged()
		r.cur.settle()
	}
}

func (r *runtimeCoord) close() {
	if r.up {
		r.cur.kill()
		r.up = false
	}
}

// open starts the store and the coordinator on the current disk.
func (r *runtimeCoord) open(why string) {
	w := r.w
	in := &incarnation{r: r, why: why, act: newActivity(), from: map[kmsg.Request]*process{}}
	in.loading.Store(true)
	st, err := store.OpenPebble("coordinator", store.Options{
		Shards: 1, Sync: true, ManualFold: true, DisableCompactions: true,
		FS: errorfs.Wrap(r.disk, &r.faults),
	})
	if err != nil {
		w.fail("store", "open after "+why+": "+err.Error())
		return
	}
	in.st = st
	in.gate = &gatedStore{in: in, st: st}
	r.cur, r.up = in, true
	cfg := coord.Config{
		Shards: 1,
		Store:  in.gate,
		Clock:  simClock{in},
		Logger: slog.New(slog.DiscardHandler),
		Group: group.Config{
			InitialRebalanceDelay: w.p.initialDelay,
			NewMemberID:           memberIDs(r.inc),
		},
		Hooks: in.hooks(),
	}
	if w.opts.Mix != MixClassic {
		cfg.Group.Consumer = w.consumerConfig(r.inc)
		// Read by the shard while the simulation waits for it.
		cfg.Topics = w.brokerTopics
	}
	in.co = coord.New(cfg)
	in.settle()
}

// receive submits a request that arrived on cn.
func (r *runtimeCoord) receive(cn *conn, o *outReq) {
	if !r.up || cn.dead || cn.inc != r.inc {
		return // the connection died with a previous incarnation
	}
	in := r.cur
	if in.gate.holding() {
		// The shard steps it while a write is in flight: its reply,
		// if it has one, waits for that write and the next.
		r.w.count("run.request-during-write")
	}
	in.from[o.req] = cn.p
	wait := in.co.Submit(context.Background(), cn.p.clientID, cn.p.name, o.req)
	in.calls = append(in.calls, &rtCall{pd: &pending{conn: cn, o: o}, wait: wait})
	in.settle()
}

// crashFault crashes the runtime now, with or without a write at the gate,
// or arms a crash at the next write, before or after it is durable.
func (r *runtimeCoord) crashFault() {
	w := r.w
	if !r.up {
		return
	}
	switch {
	case r.cur.gate.holding() && w.chance(0.5):
		w.count("fault.coordinator-crash-before-durable")
		r.crash("with a write in flight")
	case w.chance(0.5):
		r.crashNext = 1 + w.intn(2)
		w.logf("coordinator: crash armed for the next write (mode %d)", r.crashNext)
	default:
		w.count("fault.coordinator-crash-idle")
		r.crash("between writes")
	}
}

// crash is kill -9 and a power loss at once: the disk keeps what was
// fsynced (and, for some seeds, a random share of what was not), the
// runtime and everything in flight are gone.
func (r *runtimeCoord) crash(why string) {
	w := r.w
	w.logf("coordinator: CRASH %s", why)
	unsynced := 0
	if w.chance(0.5) {
		unsynced = 50
	}
	rng := rand.New(rand.NewPCG(w.rng.Uint64(), w.rng.Uint64()))
	clone := r.disk.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rng})
	r.cur.kill()
	r.disk = clone
	r.up = false
	old := r.inc
	r.inc++
	r.crashNext = 0
	w.chk.onCrash()
	w.dropConnections(old)
	inc := r.inc
	w.after(w.between(0, 5*time.Second), func() {
		if !r.up && r.inc == inc {
			r.restart()
		}
	})
}

// scheduleFold folds the store's log now and then, sometimes with a WAL
// fault injected into the fold's commit.
func (r *runtimeCoord) scheduleFold() {
	w := r.w
	w.after(w.between(200*time.Millisecond, 5*time.Second), func() {
		if r.up && !r.cur.hung {
			mode := 0
			if !w.quiet && w.chance(w.p.storeFailP) {
				mode = 1 + w.intn(2)
				w.count("fault.fold-failure")
			}
			w.count("run.fold")
			r.faults.Arm(mode)
			err := r.cur.st.Fold(0)
			r.faults.Arm(0)
			switch {
			case err != nil && mode == 0:
				w.fail("store", "fold: "+err.Error())
			case err != nil:
				w.logf("coordinator: fold failed: %v", err)
			}
		}
		r.scheduleFold()
	})
}

// kill stops an incarnation: writes held at the gate fail, the coordinator
// and the store close. Its hooks and clock do nothing from now on.
func (in *incarnation) kill() {
	in.dead.Store(true)
	in.gate.crash()
	if in.hung {
		return // closing would wait for goroutines that never finish
	}
	in.co.Close()
	in.st.Close()
}

// settle waits until the runtime is quiet, hands the replies it released
// back to their clients and decides the fate of the writes it holds, and
// goes on until the runtime is quiet with nothing to decide now.
func (in *incarnation) settle() {
	w := in.r.w
	for !in.dead.Load() {
		if err := in.act.wait(); err != nil {
			in.hung = true
			w.fail("runtime", err.Error())
			return
		}
		in.collect()
		if !in.decide() {
			return
		}
	}
}

// ended is a context that has ended, for polling replies.
var ended = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// collect sends back every reply the runtime released, in the order the
// requests were sent.
func (in *incarnation) collect() {
	kept := in.calls[:0]
	for _, c := range in.calls {
		resp, err := c.wait(ended)
		if err != nil {
			kept = append(kept, c)
			continue
		}
		in.r.w.release(c.pd, resp)
	}
	clear(in.calls[len(kept):])
	in.calls = kept
}

// decide gives each write newly held at the gate its fate: let through now,
// or later (an fsync that takes a while), or a crash. It reports whether it
// let something through now, which the runtime must then be waited for.
func (in *incarnation) decide() bool {
	r := in.r
	w := r.w
	progressed := false
	for _, c := range in.gate.newlyHeld() {
		if c.durable {
			w.count("fault.coordinator-crash-after-durable")
			r.crash("after the batch was durable, before its replies")
			return false
		}
		var d time.Duration
		if w.p.groupCommit {
			d = w.between(0, w.p.flushMax)
		}
		if d == 0 {
			if !in.letThrough(c) {
				return false
			}
			progressed = true
			continue
		}
		w.after(d, func() {
			if !in.dead.Load() && in.letThrough(c) {
				in.settle()
			}
		})
	}
	return progressed
}

// letThrough lets a held write go on to the store, with the faults armed
// or drawn for it. It reports false if it crashed the runtime instead.
func (in *incarnation) letThrough(c *gatedCall) bool {
	r := in.r
	w := r.w
	if r.crashNext == 1 {
		r.crashNext = 0
		w.count("fault.coordinator-crash-before-durable")
		r.crash("before the batch was durable")
		return false
	}
	mode := r.failNext
	r.failNext = 0
	if mode == 0 && w.chance(w.p.storeFailP) {
		mode = 1 + w.intn(2)
	}
	switch mode {
	case 1:
		w.count("fault.store-fail-before-write")
	case 2:
		w.count("fault.store-fail-after-write")
	}
	w.count("run.store-write")
	v := verdict{fail: mode}
	if r.crashNext == 2 {
		r.crashNext = 0
		v.crashAfter = true
	}
	in.act.add(1)
	in.gate.release(c, v)
	return true
}

// guard runs a hook body, turning a panic into a failure of the run
// instead of a crash of the test binary. Hooks of a dead incarnation do
// nothing.
func (in *incarnation) guard(fn func()) {
	if in.dead.Load() {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			in.r.w.fail("panic", fmt.Sprintf("%v\n%s", p, debug.Stack()))
		}
	}()
	fn()
}

func (in *incarnation) sender(ev group.Event) *process {
	if req, ok := ev.(group.Request); ok {
		return in.from[req.Msg]
	}
	return nil
}

// hooks connect the runtime to the checkers, as the model calls them.
func (in *incarnation) hooks() coord.Hooks {
	w := in.r.w
	return coord.Hooks{
		Busy: in.act.add,
		Stepping: func(_ int, m *group.Machine, ev group.Event) {
			in.guard(func() {
				in.m = m
				if t, ok := ev.(group.Timer); ok {
					w.logf("coordinator: timer %s", t.Key)
				}
				in.pre = w.chk.before(ev, in.sender(ev))
			})
		},
		Stepped: func(_ int, _ *group.Machine, ev group.Event, out group.Output) {
			in.guard(func() { w.chk.after(ev, in.sender(ev), in.pre, out) })
		},
		Applied: func(_ int, recs []group.Record) {
			in.guard(func() {
				if in.lie {
					in.lie = false
					return
				}
				w.chk.onDurable(recs)
			})
		},
		Loaded: func(_ int, m *group.Machine, reload bool) {
			in.guard(func() {
				in.m = m
				why := in.why
				if reload {
					why = "reload after failed write"
				}
				if m != nil {
					in.loading.Store(false)
				}
				if m == nil {
					// The shard answers LOAD_IN_PROGRESS and
					// retries after a backoff.
					w.count("run.coordinator-load-failed")
					w.logf("coordinator %s: load failed", why)
					return
				}
				if reload {
					w.count("run.coordinator-reload")
				}
				w.logf("coordinator %s: loaded %d groups", why, len(m.Groups()))
				w.chk.onLoad(why, w.chk.ids)
			})
		},
		Idle: func(_ int, _ *group.Machine, settled bool) {
			in.guard(func() {
				if settled {
					w.chk.onSettled()
				}
			})
		},
	}
}

// simClock is the coordinator's clock: the simulation's time, and each
// timer an event in its queue after which the runtime is waited for.
type simClock struct{ in *incarnation }

type simTimer struct{ fired, stopped bool }

func (c simClock) Now() time.Time { return c.in.r.w.now }

func (c simClock) AfterFunc(d time.Duration, f func()) func() bool {
	in := c.in
	if in.dead.Load() {
		return func() bool { return false }
	}
	if d <= 0 {
		f()
		return func() bool { return false }
	}
	t := &simTimer{}
	in.r.w.after(d, func() {
		if t.stopped || in.dead.Load() {
			return
		}
		t.fired = true
		f()
		in.settle()
	})
	return func() bool {
		if t.fired || t.stopped {
			return false
		}
		t.stopped = true
		return true
	}
}

// activity counts the runtime's pending work (coordinator.Hooks.Busy).
type activity struct {
	mu     sync.Mutex
	cond   sync.Cond
	n      int
	broken string
}

func newActivity() *activity {
	a := &activity{}
	a.cond.L = &a.mu
	return a
}

func (a *activity) add(d int) {
	a.mu.Lock()
	a.n += d
	if a.n < 0 && a.broken == "" {
		a.broken = fmt.Sprintf("the runtime's pending work went negative (%d): a Busy hook is miscounted", a.n)
	}
	if a.n <= 0 {
		a.cond.Broadcast()
	}
	a.mu.Unlock()
}

// wait blocks until the runtime has nothing left to do.
func (a *activity) wait() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n > 0 {
		timedOut := false
		t := time.AfterFunc(quietLimit, func() {
			a.mu.Lock()
			timedOut = true
			a.cond.Broadcast()
			a.mu.Unlock()
		})
		defer t.Stop()
		for a.n > 0 && !timedOut {
			a.cond.Wait()
		}
		if a.n > 0 {
			return fmt.Errorf("the runtime did not go quiet within %v (%d pending): hung", quietLimit, a.n)
		}
	}
	if a.broken != "" {
		return errors.New(a.broken)
	}
	return nil
}

// gatedStore holds every store write until the simulation lets it through
// (see runtimeCoord), and plays the store bugs of Bugs.
type gatedStore struct {
	in *incarnation
	st *store.Pebble

	mu      sync.Mutex
	parked  []*gatedCall // calls waiting for their verdict, in arrival order
	seen    int          // parked[:seen] were handed out by newlyHeld
	crashed bool
}

type gatedCall struct {
	recs    []group.Record
	durable bool // written, held again for a crash after it
	proceed chan verdict
}

type verdict struct {
	fail       int // 1: fail the WAL write; 2: fail its fsync
	crashAfter bool
	abort      bool // the process crashed
}

var errCrashed = errors.New("sim: the coordinator process crashed")

var _ store.Store = (*gatedStore)(nil)

// Load fails now and then during the fault phase, as a store that cannot be
// read for a while; the shard answers COORDINATOR_LOAD_IN_PROGRESS and
// tries again after a backoff.
func (g *gatedStore) Load(shard int, fn func(group.Record) error) error {
	in := g.in
	if w := in.r.w; !in.dead.Load() && !w.quiet && w.chance(in.r.loadFailP) {
		w.count("fault.store-read-failure")
		return errInjectedRead
	}
	return g.st.Load(shard, fn)
}

var errInjectedRead = errors.New("sim: injected read failure")

func (g *gatedStore) Close() error { return nil }

func (g *gatedStore) Shards() int { return g.st.Shards() }

func (g *gatedStore) Apply(recs []group.Record) error {
	if in := g.in; in.loading.Load() {
		// A load's own write (records its replay produced) runs on
		// the shard's loop, which cannot take the wake-up of a request
		// that arrives meanwhile: held at the gate, it would keep the
		// runtime busy for ever. It goes through at once, unfaulted,
		// while the simulation waits for the load.
		if in.dead.Load() {
			return errCrashed
		}
		in.guard(func() { in.r.w.count("run.store-write-at-load") })
		return g.st.Apply(in.r.w.storeFilter(recs))
	}
	c := &gatedCall{recs: recs, proceed: make(chan verdict, 1)}
	if !g.hold(c) {
		return errCrashed
	}
	v := <-c.proceed
	if v.abort {
		return errCrashed
	}
	in := g.in
	r := in.r
	w := r.w
	apply := w.storeFilter(recs)
	r.faults.Arm(v.fail)
	err := g.st.Apply(apply)
	r.faults.Arm(0)
	if err != nil {
		in.guard(func() {
			if v.fail == 0 {
				w.fail("store", "write failed without an injected fault: "+err.Error())
				return
			}
			w.logf("coordinator: store write of %d records failed (injected mode %d)", len(recs), v.fail)
			if v.fail == 2 {
				// The write reached the log; the reopened store keeps it.
				w.chk.onDurable(recs)
			}
		})
		if w.opts.Bugs.AckFailedWrite {
			in.lie = true
			return nil
		}
		// The shard reloads after a failed write.
		in.loading.Store(true)
		return err
	}
	if v.crashAfter {
		in.guard(func() { w.chk.onDurable(recs) })
		c.durable = true
		if g.hold(c) {
			<-c.proceed
		}
		return errCrashed
	}
	return nil
}

// hold parks a call until the simulation decides; false if the process
// already crashed.
func (g *gatedStore) hold(c *gatedCall) bool {
	g.mu.Lock()
	if g.crashed {
		g.mu.Unlock()
		return false
	}
	g.parked = append(g.parked, c)
	g.mu.Unlock()
	g.in.act.add(-1)
	return true
}

// newlyHeld returns the calls held since the last call, in the order they
// arrived (one shard writes one batch at a time, so there is no race).
func (g *gatedStore) newlyHeld() []*gatedCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := slices.Clone(g.parked[g.seen:])
	g.seen = len(g.parked)
	return out
}

// release gives a held call its verdict.
func (g *gatedStore) release(c *gatedCall, v verdict) {
	g.mu.Lock()
	if i := slices.Index(g.parked, c); i >= 0 {
		g.parked = slices.Delete(g.parked, i, i+1)
		if i < g.seen {
			g.seen--
		}
	}
	g.mu.Unlock()
	c.proceed <- v
}

// holding reports whether a write waits at the gate.
func (g *gatedStore) holding() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.parked) > 0
}

// crash fails every call held and to come.
func (g *gatedStore) crash() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.crashed = true
	for _, c := range g.parked {
		c.proceed <- verdict{abort: true}
	}
	g.parked, g.seen = nil, 0
}
