package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/store"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// gate blocks the first Apply of a store.Memory until opened, so a test can
// hold a batch in flight.
type gate struct {
	entered  chan struct{}
	open     chan struct{}
	calls    atomic.Int32
	openOnce sync.Once
}

// holdFirstApply gates the next Apply of st. The gate opens at the end of
// the test at the latest, so that a failing test does not hang in Close.
func holdFirstApply(t *testing.T, st *store.Memory) *gate {
	g := &gate{entered: make(chan struct{}), open: make(chan struct{})}
	st.OnApply(func([]group.Record) {
		if g.calls.Add(1) != 1 {
			return
		}
		close(g.entered)
		<-g.open
	})
	t.Cleanup(g.release)
	return g
}

func (g *gate) release() { g.openOnce.Do(func() { close(g.open) }) }

func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(hangGuard):
		t.Fatal("Apply never started (hang guard)")
	}
}

// waitStepped waits until the shard owning groupID has stepped n events.
func waitStepped(t *testing.T, e *env, groupID string, n uint64) {
	t.Helper()
	s := e.c.shardOf(groupID)
	deadline := time.Now().Add(hangGuard)
	for s.stepped.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d events stepped, want %d", s.stepped.Load(), n)
		}
		runtime.Gosched()
	}
}

func notYet(t *testing.T, what string, ch <-chan result) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s answered before its batch was durable: %+v", what, r.resp)
	default:
	}
}

func commitCode(r kmsg.Response) int16 {
	return r.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
}

// While a batch is being written, the shard goes on stepping later events
// into the next batch, and holds their replies (even those that write
// nothing) until everything before them is durable.
func TestPipelineHoldsRepliesUntilDurable(t *testing.T) {
	st := store.NewMemoryShards(testShards)
	e := newEnv(t, st)
	g := holdFirstApply(t, st)
	other := sameShard("g")
	base := e.c.shardOf("g").stepped.Load()

	first := e.start(commitReq("g", 1))
	g.waitEntered(t)
	second := e.start(commitReq(other, 2))
	waitStepped(t, e, "g", base+2)
	fetch := e.start(fetchReq(other)) // writes nothing, but reads the second commit
	waitStepped(t, e, "g", base+3)

	// Stepped, and the machine has the second offset in memory, but
	// nothing after the first commit is answered.
	runtime.Gosched()
	notYet(t, "first commit", first)
	notYet(t, "second commit", second)
	notYet(t, "fetch", fetch)
	if calls := g.calls.Load(); calls != 1 {
		t.Fatalf("%d Apply calls while the first is in flight, want 1", calls)
	}

	g.release()
	code(t, "first commit", commitCode(e.wait(first)), 0)
	code(t, "second commit", commitCode(e.wait(second)), 0)
	f := e.wait(fetch).(*kmsg.OffsetFetchResponse)
	if got := f.Topics[0].Partitions[0].Offset; got != 2 {
		t.Fatalf("fetched offset %d, want 2", got)
	}
	if calls := g.calls.Load(); calls != 2 {
		t.Fatalf("%d Apply calls, want 2: the commit stepped during the write is one batch", calls)
	}
}

// parkedJoin has a new member join groupID, its JoinGroup parked for the
// initial rebalance delay as the only request parked; it returns the
// member id and the join's reply to come.
func parkedJoin(e *env, groupID string) (string, <-chan result) {
	e.t.Helper()
	first := e.do(joinReq(groupID, "")).(*kmsg.JoinGroupResponse)
	joined := e.start(joinReq(groupID, first.MemberID))
	e.waitParked(1)
	return first.MemberID, joined
}

// A failed write fails the replies of its batch and of every event stepped
// after it, even those whose own batch was never written, and the shard
// comes back with what the store has.
func TestPipelineFailedWriteFailsLaterReplies(t *testing.T) {
	st := store.NewMemoryShards(testShards)
	e := newEnv(t, st)
	other := sameShard("g")
	code(t, "durable commit", commitCode(e.do(commitReq("g", 1))), 0)
	_, joined := parkedJoin(e, other)

	g := holdFirstApply(t, st)
	base := e.c.shardOf("g").stepped.Load()
	failing := e.start(commitReq("g", 2))
	g.waitEntered(t)
	later := e.start(commitReq("g", 3))
	// A heartbeat that fences its member waits like any reply (see
	// TestPipelineHeartbeatsNotHeld for those that do not).
	hb := e.start(heartbeatReq(other, "gone", 0))
	waitStepped(t, e, "g", base+3)
	notYet(t, "later commit", later)
	notYet(t, "heartbeat", hb)

	st.FailNext(errors.New("disk full"))
	g.release()
	code(t, "failed commit", commitCode(e.wait(failing)), kerr.CoordinatorNotAvailable.Code)
	code(t, "later commit", commitCode(e.wait(later)), kerr.CoordinatorNotAvailable.Code)
	code(t, "heartbeat", e.wait(hb).(*kmsg.HeartbeatResponse).ErrorCode, kerr.CoordinatorNotAvailable.Code)
	code(t, "parked join", e.wait(joined).(*kmsg.JoinGroupResponse).ErrorCode, kerr.CoordinatorNotAvailable.Code)
	if calls := g.calls.Load(); calls != 1 {
		t.Fatalf("%d Apply calls: the later commit's batch must not be written", calls)
	}

	// Offsets 2 and 3 were in memory only; the rebuilt machine has 1.
	f := e.do(fetchReq("g")).(*kmsg.OffsetFetchResponse)
	if got := f.Topics[0].Partitions[0].Offset; got != 1 {
		t.Fatalf("offset after the failed write = %d, want 1", got)
	}
	code(t, "retry", commitCode(e.do(commitReq("g", 3))), 0)
	if got := e.do(fetchReq("g")).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset; got != 3 {
		t.Fatalf("offset after retry = %d, want 3", got)
	}
}

// A heartbeat whose answer acknowledges no change (no error, or
// REBALANCE_IN_PROGRESS) is not held behind another request's write, even
// one that then fails; one that fences its member is.
func TestPipelineHeartbeatsNotHeld(t *testing.T) {
	st := store.NewMemoryShards(testShards)
	e := newEnv(t, st)
	stable := sameShard("g")
	member, gen := stableGroup(e, stable)
	joining := sameShard(stable)
	newcomer, joined := parkedJoin(e, joining)

	g := holdFirstApply(t, st)
	base := e.c.shardOf("g").stepped.Load()
	failing := e.start(commitReq("g", 1))
	g.waitEntered(t)
	good := e.start(heartbeatReq(stable, member, gen))
	rejoin := e.start(heartbeatReq(joining, newcomer, 0))
	fenced := e.start(heartbeatReq(stable, member, gen+1))
	waitStepped(t, e, "g", base+4)

	code(t, "heartbeat in good standing", e.wait(good).(*kmsg.HeartbeatResponse).ErrorCode, 0)
	code(t, "heartbeat during a rebalance", e.wait(rejoin).(*kmsg.HeartbeatResponse).ErrorCode, kerr.RebalanceInProgress.Code)
	notYet(t, "fencing heartbeat", fenced)
	notYet(t, "commit", failing)

	st.FailNext(errors.New("disk full"))
	g.release()
	code(t, "failed commit", commitCode(e.wait(failing)), kerr.CoordinatorNotAvailable.Code)
	code(t, "fencing heartbeat", e.wait(fenced).(*kmsg.HeartbeatResponse).ErrorCode, kerr.CoordinatorNotAvailable.Code)
	code(t, "parked join", e.wait(joined).(*kmsg.JoinGroupResponse).ErrorCode, kerr.CoordinatorNotAvailable.Code)
	code(t, "heartbeat after the reload", e.do(heartbeatReq(stable, member, gen)).(*kmsg.HeartbeatResponse).ErrorCode, 0)
}

// Heartbeats answered at once leave nothing in the batch; more of them
// than a batch holds must not wedge the loop, which counts a batch's
// events to bound it.
func TestManyHeartbeatsAnsweredAtOnce(t *testing.T) {
	e := newEnv(t, store.NewMemoryShards(testShards))
	member, gen := stableGroup(e, "g")
	ctx := context.Background()
	waits := make([]Wait, 0, 3*maxBatch)
	for range cap(waits) {
		waits = append(waits, e.c.Submit(ctx, "client", "/127.0.0.1", heartbeatReq("g", member, gen)))
	}
	for i, w := range waits {
		resp, err := w(ctx)
		if err != nil {
			t.Fatal(err)
		}
		code(t, fmt.Sprintf("heartbeat %d", i), resp.(*kmsg.HeartbeatResponse).ErrorCode, 0)
	}
	code(t, "commit after them", commitCode(e.do(commitReqAs("g", member, gen, 1))), 0)
}

// Close waits for the batch in flight and writes what was stepped after
// it before answering the rest with NOT_COORDINATOR.
func TestPipelineCloseWritesSteppedBatches(t *testing.T) {
	st := store.NewMemoryShards(testShards)
	e := newEnv(t, st)
	g := holdFirstApply(t, st)
	base := e.c.shardOf("g").stepped.Load()
	first := e.start(commitReq("g", 1))
	g.waitEntered(t)
	second := e.start(commitReq(sameShard("g"), 2))
	waitStepped(t, e, "g", base+2)
	done := make(chan struct{})
	go func() { e.c.Close(); close(done) }()
	g.release()
	code(t, "first commit", commitCode(e.wait(first)), 0)
	code(t, "second commit", commitCode(e.wait(second)), 0)
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatal("Close hangs")
	}
	if calls := g.calls.Load(); calls != 2 {
		t.Fatalf("%d Apply calls, want 2", calls)
	}
}

// Deadlines share one clock callback; moving one later does not re-arm
// it, and a deadline that moved later still fires at its new time.
func TestTimerQueueOrder(t *testing.T) {
	q := newTimerQueue()
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	key := func(m string) group.TimerKey {
		return group.TimerKey{Group: "g", Kind: group.TimerHeartbeat, Member: m}
	}
	q.set(key("a"), at(10))
	q.set(key("b"), at(20))
	q.set(key("c"), at(20))
	q.set(key("d"), at(5))
	q.remove(key("d"))
	q.set(key("a"), at(30)) // later: stays in place
	if next, _ := q.next(); !next.Equal(at(10)) {
		t.Fatalf("next %v, want the old place of a", next)
	}
	var got []string
	for {
		k, ok := q.popDue(at(25))
		if !ok {
			break
		}
		got = append(got, k.Member)
	}
	if len(got) != 2 || got[0] != "b" || got[1] != "c" {
		t.Fatalf("due at 25: %v, want [b c]", got)
	}
	if next, _ := q.next(); !next.Equal(at(30)) {
		t.Fatalf("next %v, want 30", next)
	}
	q.set(key("a"), at(1)) // earlier: moves up
	if k, ok := q.popDue(at(1)); !ok || k.Member != "a" || q.Len() != 0 {
		t.Fatalf("popDue = %v %v, len %d", k, ok, q.Len())
	}
}

// TestTimerQueueRandom checks the queue against a plain map under random
// sets and removals: every key pops once, in (deadline, key) order, at the
// deadline it was last given.
func TestTimerQueueRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 50; round++ {
		q := newTimerQueue()
		want := map[group.TimerKey]time.Time{}
		for i := 0; i < 300; i++ {
			k := group.TimerKey{Group: "g", Kind: group.TimerHeartbeat, Member: fmt.Sprint(rng.IntN(40))}
			if rng.IntN(4) == 0 {
				q.remove(k)
				delete(want, k)
				continue
			}
			d := epoch.Add(time.Duration(rng.IntN(100)) * time.Millisecond)
			q.set(k, d)
			want[k] = d
		}
		var prev time.Time
		var prevKey group.TimerKey
		for n := 0; ; n++ {
			k, ok := q.popDue(epoch.Add(time.Second))
			if !ok {
				if len(want) != 0 {
					t.Fatalf("round %d: %d keys never popped", round, len(want))
				}
				break
			}
			d, found := want[k]
			if !found {
				t.Fatalf("round %d: popped %v, not scheduled", round, k)
			}
			if n > 0 && (d.Before(prev) || d.Equal(prev) && compareTimerKeys(k, prevKey) < 0) {
				t.Fatalf("round %d: %v at %v popped after %v at %v", round, k, d, prevKey, prev)
			}
			delete(want, k)
			prev, prevKey = d, k
		}
	}
}

// TestSubmitKeepsOrder submits commits to one partition one after another
// without waiting, as a connection's pipelined requests are: they must
// apply in submission order, so the last one wins.
func TestSubmitKeepsOrder(t *testing.T) {
	e := newEnv(t, store.NewMemoryShards(testShards))
	ctx := context.Background()
	var waits []Wait
	for off := int64(1); off <= 50; off++ {
		waits = append(waits, e.c.Submit(ctx, "client", "/127.0.0.1", commitReq("g", off)))
	}
	for i, w := range waits {
		resp, err := w(ctx)
		if err != nil {
			t.Fatal(err)
		}
		code(t, fmt.Sprintf("commit %d", i+1), commitCode(resp), 0)
	}
	if got := e.do(fetchReq("g")).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset; got != 50 {
		t.Fatalf("committed offset %d after submitting 1..50 in order, want 50", got)
	}
}

// goid is the calling goroutine's id, read from its stack trace's header
// ("goroutine 7 [running]:").
func goid() int64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	var id int64
	fmt.Sscanf(string(buf[:n]), "goroutine %d ", &id)
	return id
}

// A request that finds its shard's loop waiting, with nothing queued or in
// flight, is stepped on the caller's goroutine, and a heartbeat's reply is
// ready when Start returns: no hand-off to the loop and back.
func TestIdleShardStepsOnCaller(t *testing.T) {
	var steppedOn atomic.Int64
	e := newEnv(t, store.NewMemoryShards(testShards), func(c *Config) {
		c.Hooks.Stepping = func(_ int, _ *group.Machine, ev group.Event) {
			if _, ok := ev.(group.Request); ok {
				steppedOn.Store(goid())
			}
		}
	})
	member, gen := stableGroup(e, "g")
	s := e.c.shardOf("g")
	me := goid()
	ctx := context.Background()
	// The loop may still be on its way to wait, or woken by a wake-up
	// that came late; each try first waits until it holds nothing.
	for try := 0; ; try++ {
		if try == 100 {
			t.Fatal("no heartbeat was stepped on its caller's goroutine in 100 tries")
		}
		deadline := time.Now().Add(hangGuard)
		for !s.own.TryLock() {
			if time.Now().After(deadline) {
				t.Fatal("the shard's loop never waited (hang guard)")
			}
			runtime.Gosched()
		}
		s.own.Unlock()
		var p Pending
		e.c.Start(ctx, "c", "/127.0.0.1", heartbeatReq("g", member, gen), &p)
		inline := steppedOn.Load() == me
		if inline && p.OnDone(func() {}) {
			t.Fatal("a heartbeat stepped on its caller's goroutine was not answered when Start returned")
		}
		resp, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		code(t, "heartbeat", resp.(*kmsg.HeartbeatResponse).ErrorCode, 0)
		if inline {
			break
		}
	}
	// A commit after it still goes through the writer, and the loop,
	// which takes the written batch back, goes on serving the shard.
	code(t, "commit", commitCode(e.do(commitReqAs("g", member, gen, 9))), 0)
	if got := e.do(fetchReq("g")).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset; got != 9 {
		t.Fatalf("committed offset %d, want 9", got)
	}
}

// Goroutines submitting to one shard at once, some stepping their requests
// themselves and some through the loop, keep each goroutine's order: the
// last of each group's commits is the one that stands.
func TestConcurrentSubmittersKeepOrder(t *testing.T) {
	e := newEnv(t, store.NewMemoryShards(testShards))
	const submitters, commits, ahead = 8, 200, 4
	groups := []string{"g"}
	for len(groups) < submitters {
		groups = append(groups, sameShard(groups[len(groups)-1]))
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, submitters)
	for i, g := range groups {
		wg.Go(func() {
			// Submitter i keeps i%ahead+1 commits in flight, so both the
			// lone request and a queue of several occur.
			var waits []Wait
			for off := int64(1); off <= commits; off++ {
				waits = append(waits, e.c.Submit(ctx, "client", "/127.0.0.1", commitReq(g, off)))
				if len(waits) <= i%ahead && off < commits {
					continue
				}
				for _, w := range waits {
					resp, err := w(ctx)
					if err == nil && commitCode(resp) != 0 {
						err = kerr.ErrorForCode(commitCode(resp))
					}
					if err != nil {
						errs <- fmt.Errorf("%s: %w", g, err)
						return
					}
				}
				waits = waits[:0]
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, g := range groups {
		if got := e.do(fetchReq(g)).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset; got != commits {
			t.Fatalf("%s: committed offset %d, want %d", g, got, commits)
		}
	}
}
