package coordinator

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/store"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// panicker injects panics into a shard's steps through its hooks: the next
// step of a request naming the armed group panics, and with onReload set,
// so does every rebuild of a machine after a failure.
type panicker struct {
	group    atomic.Pointer[string]
	onReload atomic.Bool
	// on is the goroutine id of the last step that panicked; panics
	// counts them.
	on     atomic.Int64
	panics atomic.Int32
}

func (p *panicker) arm(groupID string) { p.group.Store(&groupID) }

func (p *panicker) hooks(c *Config) {
	c.Hooks.Stepping = func(_ int, _ *group.Machine, ev group.Event) {
		r, ok := ev.(group.Request)
		if !ok {
			return
		}
		g := p.group.Load()
		id, _ := GroupOf(r.Msg)
		if g == nil || id != *g || !p.group.CompareAndSwap(g, nil) {
			return
		}
		p.on.Store(goid())
		p.panics.Add(1)
		panic("injected into the step of a request for " + id)
	}
	c.Hooks.Loaded = func(_ int, m *group.Machine, reload bool) {
		if reload && m != nil && p.onReload.Load() {
			panic("injected into the rebuild of a machine")
		}
	}
}

// waitPanicked waits until n steps have panicked.
func (p *panicker) waitPanicked(t *testing.T, n int32) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for p.panics.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d steps panicked, want %d (hang guard)", p.panics.Load(), n)
		}
		runtime.Gosched()
	}
}

// holdFirstApplyOf is holdFirstApply for the next Apply of one shard's
// records only: the other shards write on.
func holdFirstApplyOf(t *testing.T, st *store.Memory, shard int) *gate {
	g := &gate{entered: make(chan struct{}), open: make(chan struct{})}
	st.OnApply(func(recs []group.Record) {
		if len(recs) == 0 || store.ShardOf(recs[0].Group, testShards) != shard || g.calls.Add(1) != 1 {
			return
		}
		close(g.entered)
		<-g.open
	})
	t.Cleanup(g.release)
	return g
}

// otherShard returns a group owned by another shard than groupID's.
func otherShard(e *env, groupID string) string {
	return groupOn((e.c.shardOf(groupID).id + 1) % testShards)
}

// keepCommitting commits to groupID, from one goroutine, until the
// returned stop is called, which fails the test if any commit was not
// answered with success: a panic in another shard must not interrupt it.
func keepCommitting(t *testing.T, e *env, groupID string) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var n atomic.Int64
	errs := make(chan error, 1)
	wg.Go(func() {
		for off := int64(1); ; off++ {
			select {
			case <-done:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			resp, err := e.c.Handle(ctx, "other", "/127.0.0.1", commitReq(groupID, off))
			cancel()
			if err == nil && commitCode(resp) != 0 {
				err = kerr.ErrorForCode(commitCode(resp))
			}
			if err != nil {
				errs <- err
				return
			}
			n.Add(1)
		}
	})
	return func() {
		t.Helper()
		close(done)
		wg.Wait()
		select {
		case err := <-errs:
			t.Fatalf("a commit to %s on another shard failed: %v", groupID, err)
		default:
		}
		if n.Load() == 0 {
			t.Fatalf("no commit to %s on another shard was answered", groupID)
		}
	}
}

func fetched(e *env, groupID string) int64 {
	e.t.Helper()
	return e.do(fetchReq(groupID)).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset
}

// A panic in a step taken on the submitter's goroutine (the shard's loop
// waiting) is contained: the request and the one parked in the machine are
// answered COORDINATOR_NOT_AVAILABLE, the process goes on, the shard is
// rebuilt from the store and serves again, and another shard is never
// interrupted.
func TestPanicSteppedInlineIsContained(t *testing.T) {
	var p panicker
	obs := &recorder{}
	e := newEnv(t, store.NewMemoryShards(testShards), p.hooks, func(c *Config) { c.Observer = obs })
	code(t, "commit before", commitCode(e.do(commitReq("g", 5))), 0)
	s := e.c.shardOf("g")
	stop := keepCommitting(t, e, otherShard(e, "g"))

	me := goid()
	ctx := context.Background()
	for try := 0; ; try++ {
		if try == 100 {
			t.Fatal("no panic happened on the submitter's goroutine in 100 tries")
		}
		nb := sameShard("g")
		_, joined := parkedJoin(e, nb)
		// Wait until the loop holds nothing, so that the request is
		// stepped here if the loop is not woken meanwhile.
		deadline := time.Now().Add(hangGuard)
		for !s.own.TryLock() {
			if time.Now().After(deadline) {
				t.Fatal("the shard's loop never waited (hang guard)")
			}
			runtime.Gosched()
		}
		s.own.Unlock()
		p.arm("g")
		resp, err := e.c.Handle(ctx, "c", "/127.0.0.1", commitReq("g", int64(100+try)))
		if err != nil {
			t.Fatal(err)
		}
		code(t, "the commit whose step panicked", commitCode(resp), kerr.CoordinatorNotAvailable.Code)
		join := e.wait(joined).(*kmsg.JoinGroupResponse)
		code(t, "the join parked in the dropped machine", join.ErrorCode, kerr.CoordinatorNotAvailable.Code)
		if got := fetched(e, "g"); got != 5 {
			t.Fatalf("after the rebuild the committed offset is %d, want 5 (what the store holds)", got)
		}
		if p.on.Load() == me {
			break
		}
	}
	// Serving again: a commit lands, and a group of the shard forms.
	code(t, "commit after", commitCode(e.do(commitReq("g", 6))), 0)
	if got := fetched(e, "g"); got != 6 {
		t.Fatalf("committed offset %d, want 6", got)
	}
	stableGroup(e, "formed-after-"+sameShard("g"))
	stop()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.panics != int(p.panics.Load()) || obs.down != 0 {
		t.Fatalf("observer told of %d panics (%d down), want %d (0 down)", obs.panics, obs.down, p.panics.Load())
	}
}

// A panic in a step taken on the shard's loop, with a batch in flight and
// another being gathered: the batch in flight, stepped before the panic,
// is durable and answered; the replies held for the batch being gathered
// and the request whose step panicked are answered COORDINATOR_NOT_AVAILABLE
// and their records dropped; what queues after the panic is stepped by the
// rebuilt machine.
func TestPanicSteppedOnLoopIsContained(t *testing.T) {
	var p panicker
	obs := &recorder{}
	st := store.NewMemoryShards(testShards)
	e := newEnv(t, st, p.hooks, func(c *Config) { c.Observer = obs })
	nb := sameShard("g")
	code(t, "commit before", commitCode(e.do(commitReq("g", 1))), 0)
	stop := keepCommitting(t, e, otherShard(e, "g"))
	base := e.c.shardOf("g").stepped.Load()

	gt := holdFirstApplyOf(t, st, e.c.shardOf("g").id)
	inFlight := e.start(commitReq("g", 2))
	gt.waitEntered(t)
	held := e.start(commitReq(nb, 3))
	waitStepped(t, e, "g", base+2)
	p.arm("g")
	boom := e.start(commitReq("g", 4))
	p.waitPanicked(t, 1)
	after := e.start(commitReq(nb, 5))
	notYet(t, "the commit in flight", inFlight)
	gt.release()

	code(t, "the commit in flight before the panic", commitCode(e.wait(inFlight)), 0)
	code(t, "the commit held for the next batch", commitCode(e.wait(held)), kerr.CoordinatorNotAvailable.Code)
	code(t, "the commit whose step panicked", commitCode(e.wait(boom)), kerr.CoordinatorNotAvailable.Code)
	code(t, "the commit queued after the panic", commitCode(e.wait(after)), 0)
	if got := fetched(e, "g"); got != 2 {
		t.Fatalf("%s: committed offset %d, want 2", "g", got)
	}
	if got := fetched(e, nb); got != 5 {
		t.Fatalf("%s: committed offset %d, want 5", nb, got)
	}
	stop()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.panics != 1 || obs.down != 0 {
		t.Fatalf("observer told of %d panics (%d down), want 1 (0 down)", obs.panics, obs.down)
	}
}

// A shard whose machine panics again while it is rebuilt stays unavailable:
// its groups are answered COORDINATOR_NOT_AVAILABLE, its views say it is
// not serving, the other shards serve on, and Close still returns.
func TestPanicAgainOnRebuildLeavesShardUnavailable(t *testing.T) {
	var p panicker
	obs := &recorder{}
	e := newEnv(t, store.NewMemoryShards(testShards), p.hooks, func(c *Config) { c.Observer = obs })
	stop := keepCommitting(t, e, otherShard(e, "g"))
	p.onReload.Store(true)
	p.arm("g")
	code(t, "the commit whose step panicked", commitCode(e.do(commitReq("g", 1))), kerr.CoordinatorNotAvailable.Code)
	deadline := time.Now().Add(hangGuard)
	for {
		obs.mu.Lock()
		down := obs.down
		obs.mu.Unlock()
		if down == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the shard was never reported unavailable")
		}
		runtime.Gosched()
	}
	for _, id := range []string{"g", sameShard("g")} {
		code(t, "a commit to the unavailable shard", commitCode(e.do(commitReq(id, 2))), kerr.CoordinatorNotAvailable.Code)
	}
	if _, _, err := e.c.Group(context.Background(), "g"); !errors.Is(err, ErrNotServing) {
		t.Fatalf("a view of the unavailable shard: %v, want ErrNotServing", err)
	}
	stop()
	closed := make(chan struct{})
	go func() { e.c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(hangGuard):
		t.Fatal("Close hangs on the unavailable shard")
	}
}

// A view whose function panics reports that it did not run; the shard is
// rebuilt and serves what the store holds.
func TestPanicInViewIsContained(t *testing.T) {
	e := newEnv(t, store.NewMemoryShards(testShards))
	code(t, "commit", commitCode(e.do(commitReq("g", 7))), 0)
	if e.c.shardOf("g").runFunc(func(*group.Machine) { panic("injected into a view") }) {
		t.Fatal("a view that panicked reported that it ran")
	}
	if got := fetched(e, "g"); got != 7 {
		t.Fatalf("committed offset %d, want 7", got)
	}
}

// panicLoadStore panics while one shard's records are read at start.
type panicLoadStore struct {
	*store.Memory
	shard int
}

func (s *panicLoadStore) Load(shard int, fn func(group.Record) error) error {
	if shard == s.shard {
		panic("injected into a load")
	}
	return s.Memory.Load(shard, fn)
}

// A panic while a shard first loads stops the start, as a record that does
// not decode does, naming the shard; the other shards load.
func TestPanicAtFirstLoadStopsTheStart(t *testing.T) {
	e := newEnvLoading(t, &panicLoadStore{Memory: store.NewMemoryShards(testShards), shard: 2})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	err := e.c.WaitLoad(ctx)
	if err == nil || !strings.Contains(err.Error(), "shard 2") || !strings.Contains(err.Error(), "injected into a load") {
		t.Fatalf("WaitLoad: %v, want the panic of shard 2", err)
	}
	code(t, "a commit to a shard that loaded", commitCode(e.do(commitReq(groupOn(0), 1))), 0)
}
