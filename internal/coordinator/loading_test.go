package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/coordinator/clocktest"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/store"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// badRecordStore reports an undecodable record when it loads shard bad,
// from its loadFrom'th Load of that shard on, and counts the Loads.
type badRecordStore struct {
	*store.Memory
	bad      int
	loadFrom int
	failNext bool // fail the next Apply

	mu    sync.Mutex
	loads map[int]int
}

func newBadRecordStore(bad, loadFrom int) *badRecordStore {
	return &badRecordStore{Memory: store.NewMemoryShards(testShards), bad: bad, loadFrom: loadFrom, loads: map[int]int{}}
}

func (b *badRecordStore) Load(shard int, fn func(group.Record) error) error {
	b.mu.Lock()
	b.loads[shard]++
	n := b.loads[shard]
	b.mu.Unlock()
	if shard == b.bad && n >= b.loadFrom {
		return fmt.Errorf("wrapped: %w", &store.UndecodableError{Shard: shard, Key: []byte{0, byte(shard), 0xbe, 0xef}, Err: errors.New("unknown record type 9")})
	}
	return b.Memory.Load(shard, fn)
}

func (b *badRecordStore) Apply(recs []group.Record) error {
	b.mu.Lock()
	fail := b.failNext
	b.failNext = false
	b.mu.Unlock()
	if fail {
		return errors.New("write error")
	}
	return b.Memory.Apply(recs)
}

func (b *badRecordStore) loadsOf(shard int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.loads[shard]
}

// groupOn returns a group id owned by shard.
func groupOn(shard int) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("g%d", i); store.ShardOf(id, testShards) == shard {
			return id
		}
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hangGuard):
		t.Fatalf("%s (hang guard)", what)
	}
}

func TestUndecodableRecordStopsTheShardWithoutRetry(t *testing.T) {
	st := newBadRecordStore(2, 1)
	e := newEnvLoading(t, st)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	err := e.c.WaitLoad(ctx)
	var ue *store.UndecodableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "0002beef") {
		t.Fatalf("WaitLoad = %v, want the undecodable record's error naming its key", err)
	}
	waitClosed(t, e.c.Failed(), "Failed not closed")
	waitClosed(t, e.c.shards[2].done, "the failed shard did not stop")
	// No retry, however long we wait.
	e.clock.Advance(10 * maxRetry)
	if n := st.loadsOf(2); n != 1 {
		t.Fatalf("the shard with the bad record loaded %d times, want 1", n)
	}
	code(t, "heartbeat on the failed shard", e.do(heartbeatReq(groupOn(2), "m", 1)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.NotCoordinator.Code)
	// The other shards serve.
	code(t, "heartbeat on a loaded shard", e.do(heartbeatReq(groupOn(1), "m", 1)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.UnknownMemberID.Code)
}

func TestWaitLoadDoesNotWaitForTransientFailures(t *testing.T) {
	fs := &flakyLoadStore{Memory: store.NewMemoryShards(testShards), failed: map[int]bool{}}
	e := newEnvLoading(t, fs)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := e.c.WaitLoad(ctx); err != nil {
		t.Fatalf("WaitLoad = %v; a read error is retried, not reported", err)
	}
	select {
	case <-e.c.Failed():
		t.Fatal("Failed closed for a read error")
	default:
	}
	code(t, "heartbeat while retrying", e.do(heartbeatReq("g", "m", 1)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.CoordinatorLoadInProgress.Code)
	// A shard schedules its retry just after its first attempt ended.
	deadline := time.Now().Add(hangGuard)
	for e.clock.Pending() < testShards {
		if time.Now().After(deadline) {
			t.Fatal("shards did not schedule a retry")
		}
		runtime.Gosched()
	}
	e.clock.Advance(minRetry)
	e.waitReady()
}

// TestUndecodableRecordOnReload: a shard that reloads after a failed write
// and meets an undecodable record stops and reports it, and the replies it
// held fail.
func TestUndecodableRecordOnReload(t *testing.T) {
	st := newBadRecordStore(0, 2)
	e := newEnv(t, st)
	id := groupOn(0)
	st.mu.Lock()
	st.failNext = true
	st.mu.Unlock()
	resp := e.do(commitReq(id, 5)).(*kmsg.OffsetCommitResponse)
	code(t, "commit whose write failed", resp.Topics[0].Partitions[0].ErrorCode, kerr.CoordinatorNotAvailable.Code)
	waitClosed(t, e.c.Failed(), "Failed not closed after the reload met a bad record")
	var ue *store.UndecodableError
	if err := e.c.Err(); !errors.As(err, &ue) {
		t.Fatalf("Err = %v, want the undecodable record", err)
	}
}

// TestBusyCountsPendingWork checks the Busy hook's contract with a store
// that holds its Applies and counts them out: the count reaches zero only
// when nothing but the held write remains, and the reply is released only
// once the write is let go.
func TestBusyCountsPendingWork(t *testing.T) {
	var (
		mu      sync.Mutex
		cond    = sync.NewCond(&mu)
		n       int
		release = make(chan struct{})
		held    = make(chan struct{}, 1)
	)
	busy := func(d int) {
		mu.Lock()
		n += d
		if n < 0 {
			panic("busy count below zero")
		}
		cond.Broadcast()
		mu.Unlock()
	}
	quiet := func() {
		t.Helper()
		done := make(chan struct{})
		go func() {
			mu.Lock()
			for n != 0 {
				cond.Wait()
			}
			mu.Unlock()
			close(done)
		}()
		waitClosed(t, done, "the runtime never went quiet")
	}
	mem := store.NewMemoryShards(1)
	mem.OnApply(func([]group.Record) {
		busy(-1)
		held <- struct{}{}
		<-release
	})
	clk := clocktest.New(epoch)
	var applied, idle, steps int
	c := New(Config{Store: mem, Clock: clk, Logger: slog.New(slog.DiscardHandler), Hooks: Hooks{
		Busy:    busy,
		Applied: func(int, []group.Record) { applied++ },
		Idle:    func(int, *group.Machine, bool) { idle++ },
		Stepped: func(int, *group.Machine, group.Event, group.Output) { steps++ },
	}})
	defer c.Close()
	quiet()
	wait := c.Submit(context.Background(), "c", "h", commitReq("g", 1))
	quiet()
	<-held
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := wait(ended); err == nil {
		t.Fatal("the commit was answered while its write was held")
	}
	busy(1)
	release <- struct{}{}
	quiet()
	resp, err := wait(ended)
	if err != nil {
		t.Fatal("no reply once the runtime went quiet after the write")
	}
	code(t, "commit", resp.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, 0)
	if applied != 1 || steps != 1 || idle == 0 {
		t.Fatalf("hooks saw %d applies, %d steps, %d idles; want 1, 1 and some", applied, steps, idle)
	}
}
