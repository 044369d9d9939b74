package kvmodel_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/kv/kvmodel"
	"github.com/groupd/groupd/internal/cluster/kv/kvtest"
	"github.com/groupd/groupd/internal/coordinator/clocktest"
)

var start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newModel(opts kvmodel.Options) (*kvmodel.Model, *clocktest.Clock) {
	clk := clocktest.New(start)
	return kvmodel.New(clk, opts), clk
}

func TestConformance(t *testing.T) {
	for _, cut := range []kvmodel.Fault{kvmodel.FailCalls, kvmodel.HangCalls} {
		t.Run("cut="+cut.String(), func(t *testing.T) {
			kvtest.Run(t, func(t *testing.T) *kvtest.Env {
				m, clk := newModel(kvmodel.Options{})
				return &kvtest.Env{
					A:       m.Client("a"),
					B:       m.Client("b"),
					Prefix:  "/groupd/test/",
					Clock:   clk,
					Virtual: true,
					Wait:    clk.Advance,
					Compact: m.Compact,
					CutA:    func() { m.SetFault("a", cut) },
					HealA:   func() { m.SetFault("a", kvmodel.Healthy) },
					TTL:     9 * time.Second,
					Timeout: time.Minute,
				}
			})
		})
	}
}

func mustTxn(t *testing.T, c kv.KV, ops ...kv.Op) int64 {
	t.Helper()
	ok, rev, err := c.Txn(context.Background(), nil, ops)
	if err != nil || !ok {
		t.Fatalf("txn: ok=%v err=%v", ok, err)
	}
	return rev
}

func isDone(l kv.Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

// A lease the holder cannot keep alive expires exactly at the holder's
// deadline, in virtual time: the model's keep-alives have no latency, so
// the conservative deadline is also the exact one.
func TestLeaseExpiresAtDeadline(t *testing.T) {
	m, clk := newModel(kvmodel.Options{})
	a, b := m.Client("a"), m.Client("b")
	ctx := context.Background()
	l, err := a.Grant(ctx, 9*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mustTxn(t, a, kv.Put("/n/a", nil, l.ID()))
	w := b.Watch(ctx, "/n/", 0)
	clk.Advance(4 * time.Second) // keep-alive at +3s
	m.SetFault("a", kvmodel.FailCalls)
	dl := l.Deadline()
	exp, ok := m.LeaseExpiry(l.ID())
	if !ok || !exp.Equal(dl) || !dl.Equal(start.Add(12*time.Second)) {
		t.Fatalf("deadline %v, model expiry %v (%v), want both %v", dl, exp, ok, start.Add(12*time.Second))
	}
	clk.Advance(dl.Sub(clk.Now()) - time.Nanosecond)
	if isDone(l) {
		t.Fatal("lost before its deadline")
	}
	if _, found, _ := b.Get(ctx, "/n/a"); !found {
		t.Fatal("expired before its expiry")
	}
	clk.Advance(time.Nanosecond)
	if !isDone(l) || !errors.Is(l.Err(), kv.ErrLeaseExpired) {
		t.Fatalf("not lost at its deadline: %v", l.Err())
	}
	select {
	case ev := <-w:
		if len(ev.Changes) != 1 || ev.Changes[0].Type != kv.ChangeDelete {
			t.Fatalf("event %+v", ev)
		}
	default:
		t.Fatal("expiry's delete not in the watch channel when Advance returned")
	}
}

// With answers lost, the model extends the lease but the holder does not
// hear it: the holder gives up first, which is the safe side.
func TestDroppedKeepAliveAnswers(t *testing.T) {
	m, clk := newModel(kvmodel.Options{})
	a := m.Client("a")
	l, err := a.Grant(context.Background(), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m.SetFault("a", kvmodel.DropReplies)
	for i := 0; i < 40 && !isDone(l); i++ {
		clk.Advance(100 * time.Millisecond)
		if exp, ok := m.LeaseExpiry(l.ID()); ok && exp.Before(l.Deadline()) {
			t.Fatalf("model expires at %v, before the holder's deadline %v", exp, l.Deadline())
		}
	}
	if !isDone(l) || !clk.Now().Equal(start.Add(3*time.Second)) {
		t.Fatalf("done=%v at %v, want lost at the first deadline", isDone(l), clk.Now())
	}
	if _, ok := m.LeaseExpiry(l.ID()); !ok {
		t.Fatal("the model lost a lease whose keep-alives it received")
	}
}

// A lease revoked behind the holder's back is lost at its next keep-alive.
func TestLeaseRevokedByOperator(t *testing.T) {
	m, clk := newModel(kvmodel.Options{})
	l, err := m.Client("a").Grant(context.Background(), 9*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !m.RevokeLease(l.ID()) {
		t.Fatal("lease unknown")
	}
	clk.Advance(3 * time.Second)
	if !isDone(l) || !errors.Is(l.Err(), kv.ErrLeaseExpired) {
		t.Fatalf("done=%v err=%v after a keep-alive of a revoked lease", isDone(l), l.Err())
	}
	if clk.Pending() != 0 {
		t.Fatalf("%d timers left behind", clk.Pending())
	}
}

// The minimum TTL, and TTLs in whole seconds.
func TestGrantTTL(t *testing.T) {
	m, _ := newModel(kvmodel.Options{})
	for _, c := range []struct{ ask, want time.Duration }{
		{time.Millisecond, 2 * time.Second},
		{2500 * time.Millisecond, 3 * time.Second},
		{9 * time.Second, 9 * time.Second},
	} {
		l, err := m.Client("a").Grant(context.Background(), c.ask)
		if err != nil {
			t.Fatal(err)
		}
		if l.TTL() != c.want {
			t.Errorf("asked %v, granted %v, want %v", c.ask, l.TTL(), c.want)
		}
	}
}

// A hung call returns when its context ends, or fails when the fault
// changes; it never reaches the model.
func TestHangCalls(t *testing.T) {
	m, _ := newModel(kvmodel.Options{})
	a := m.Client("a")
	m.SetFault("a", kvmodel.HangCalls)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, _, err := a.Get(ctx, "/k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung get: %v", err)
	}
	errc := make(chan error)
	go func() {
		_, _, err := a.Txn(context.Background(), nil, []kv.Op{kv.Put("/k", nil, 0)})
		errc <- err
	}()
	// The call may not have entered the model yet when the fault changes:
	// then it fails at once, the same way.
	m.SetFault("a", kvmodel.FailCalls)
	if err := <-errc; !errors.Is(err, kv.ErrUnavailable) {
		t.Fatalf("cut-off txn: %v", err)
	}
	if m.Revision() != 0 {
		t.Fatal("a hung txn was applied")
	}
	m.SetFault("a", kvmodel.DropReplies)
	if _, _, err := a.Txn(context.Background(), nil, []kv.Op{kv.Put("/k", nil, 0)}); !errors.Is(err, kv.ErrUnavailable) {
		t.Fatalf("dropped reply: %v", err)
	}
	if m.Revision() != 1 {
		t.Fatal("a txn whose answer was dropped was not applied")
	}
}

// A watch whose delivery is paused holds its events; compaction past them
// breaks it, and the error arrives when delivery resumes.
func TestPausedWatchCompacted(t *testing.T) {
	m, _ := newModel(kvmodel.Options{})
	a, b := m.Client("a"), m.Client("b")
	w := b.Watch(context.Background(), "/", 0)
	r1 := mustTxn(t, a, kv.Put("/k", []byte("1"), 0))
	m.PauseWatches("b")
	mustTxn(t, a, kv.Put("/k", []byte("2"), 0))
	r3 := mustTxn(t, a, kv.Put("/k", []byte("3"), 0))
	if ev := <-w; ev.Revision != r1 {
		t.Fatalf("first event %+v", ev)
	}
	select {
	case ev := <-w:
		t.Fatalf("paused watch delivered %+v", ev)
	default:
	}
	if err := m.Compact(r3); err != nil {
		t.Fatal(err)
	}
	m.ResumeWatches("b")
	if ev, ok := <-w; !ok || !errors.Is(ev.Err, kv.ErrCompacted) {
		t.Fatalf("after resume: %+v %v, want ErrCompacted", ev, ok)
	}
	if _, ok := <-w; ok {
		t.Fatal("channel open after the error")
	}
	// A cut-off client's watch resumes where it was once the fault ends.
	w2 := b.Watch(context.Background(), "/", 0)
	m.SetFault("b", kvmodel.FailCalls)
	r4 := mustTxn(t, a, kv.Put("/k", []byte("4"), 0))
	m.SetFault("b", kvmodel.Healthy)
	if ev := <-w2; ev.Revision != r4 {
		t.Fatalf("after the fault: %+v", ev)
	}
	m.BreakWatches("b")
	if ev := <-w2; !errors.Is(ev.Err, kv.ErrWatchBroken) {
		t.Fatalf("broken watch: %+v", ev)
	}
}

// A reader slower than the channel's buffer gets every event, in order.
func TestWatchOverflow(t *testing.T) {
	m, _ := newModel(kvmodel.Options{WatchBuffer: 2})
	a := m.Client("a")
	w := m.Client("b").Watch(context.Background(), "/", 0)
	for i := 1; i <= 50; i++ {
		mustTxn(t, a, kv.Put("/k", []byte(fmt.Sprint(i)), 0))
	}
	for i := 1; i <= 50; i++ {
		ev := <-w
		if ev.Revision != int64(i) || string(ev.Changes[0].Value.Data) != fmt.Sprint(i) {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
}

// run drives a model with a seeded random workload of every kind of call
// and fault, and returns a transcript of everything it answered.
func run(seed int64) string {
	m, clk := newModel(kvmodel.Options{})
	rng := rand.New(rand.NewSource(seed))
	var out strings.Builder
	ctx := context.Background()
	names := []string{"a", "b", "c"}
	var leases []kv.Lease
	watchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var watches []<-chan kv.WatchEvent
	for i := 0; i < 400; i++ {
		c := m.Client(names[rng.Intn(len(names))])
		key := fmt.Sprintf("/k/%d", rng.Intn(8))
		switch op := rng.Intn(10); op {
		case 0, 1, 2:
			var lease kv.LeaseID
			if len(leases) > 0 && rng.Intn(2) == 0 {
				lease = leases[rng.Intn(len(leases))].ID()
			}
			conds := []kv.Cond{kv.ModRevisionIs(key, int64(rng.Intn(int(m.Revision())+1)))}
			if rng.Intn(2) == 0 {
				conds = nil
			}
			ok, rev, err := c.Txn(ctx, conds, []kv.Op{kv.Put(key, []byte(fmt.Sprint(i)), lease)})
			fmt.Fprintf(&out, "txn %s %v %d %v\n", key, ok, rev, err)
		case 3:
			ok, rev, err := c.Txn(ctx, nil, []kv.Op{kv.DeletePrefix(key)})
			fmt.Fprintf(&out, "del %s %v %d %v\n", key, ok, rev, err)
		case 4:
			vs, rev, err := c.List(ctx, "/k/")
			fmt.Fprintf(&out, "list %v %d %v\n", vs, rev, err)
		case 5:
			l, err := c.Grant(ctx, time.Duration(rng.Intn(5))*time.Second)
			if err == nil {
				leases = append(leases, l)
				fmt.Fprintf(&out, "grant %x %v\n", int64(l.ID()), l.Deadline())
			}
		case 6:
			// No hanging: nothing here would end it.
			faults := []kvmodel.Fault{kvmodel.Healthy, kvmodel.Healthy, kvmodel.FailCalls, kvmodel.DropReplies}
			m.SetFault(c.Name(), faults[rng.Intn(len(faults))])
		case 7:
			clk.Advance(time.Duration(rng.Intn(3000)) * time.Millisecond)
		case 8:
			watches = append(watches, c.Watch(watchCtx, "/k/", int64(rng.Intn(int(m.Revision())+2))))
		case 9:
			if rev := m.Revision(); rng.Intn(4) == 0 && rev > 0 {
				fmt.Fprintf(&out, "compact %v\n", m.Compact(rev-int64(rng.Intn(3))))
			}
		}
		for _, l := range leases {
			fmt.Fprintf(&out, " lease %x done=%v deadline=%v\n", int64(l.ID()), isDone(l), l.Deadline())
		}
		for j, w := range watches {
			for more := true; more; {
				select {
				case ev, ok := <-w:
					if !ok {
						watches[j] = nil
						more = false
						break
					}
					fmt.Fprintf(&out, " watch %d: %+v\n", j, ev)
				default:
					more = false
				}
			}
		}
		watches = compact(watches)
	}
	vs, rev := m.Dump("")
	fmt.Fprintf(&out, "end %v %d\n", vs, rev)
	return out.String()
}

func compact(ws []<-chan kv.WatchEvent) []<-chan kv.WatchEvent {
	out := ws[:0]
	for _, w := range ws {
		if w != nil {
			out = append(out, w)
		}
	}
	return out
}

// Same calls, same answers: the transcript of a seeded run does not
// change between runs.
func TestDeterministic(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		if a, b := run(seed), run(seed); a != b {
			t.Fatalf("seed %d: two runs differ", seed)
		}
	}
}
