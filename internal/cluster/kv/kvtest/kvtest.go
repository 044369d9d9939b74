// Package kvtest is the conformance suite of package kv: one set of tests
// that every implementation (etcd through its client, the in-memory model)
// must pass, so that what the simulator learns on the model holds on etcd.
//
// The suite sees a store through Env: two clients (A, which the tests cut
// off from the store, and B, which watches), a way to let time pass, and
// compaction. On the model, time is virtual and every check is exact; on
// etcd, the suite waits real time only where etcd's TTLs force it, and
// bounds every wait.
package kvtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/cluster/kv"
)

// Env is one test's view of a store.
type Env struct {
	// A and B are two clients of the same store, for two nodes.
	A, B kv.KV
	// Prefix is unique to the test: tests that share a store keep to it.
	Prefix string
	// Clock is the clock the clients' leases run on.
	Clock kv.Clock
	// Virtual says whether Clock is virtual: then Wait advances it, and
	// the suite checks instants exactly.
	Virtual bool
	// Wait lets d pass on Clock.
	Wait func(d time.Duration)
	// Compact compacts the store's history before rev.
	Compact func(rev int64) error
	// CutA cuts client A off the store: its calls and keep-alives fail or
	// hang from now on, as in a network partition. HealA ends the cut.
	CutA, HealA func()
	// TTL is the lease TTL the tests ask for: short on etcd (it costs real
	// time), longer in virtual time.
	TTL time.Duration
	// Timeout bounds every wait for something the store must do.
	Timeout time.Duration
}

// realTimeout bounds a real wait, in virtual time too (see await).
const realTimeout = 15 * time.Second

// Factory makes a fresh Env for one test; cleanup goes through t.Cleanup.
type Factory func(t *testing.T) *Env

// Run runs the whole suite.
func Run(t *testing.T, f Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Env)
	}{
		{"Revisions", testRevisions},
		{"StaleRevisionRefused", testStaleRevision},
		{"CreateIfAbsent", testCreateIfAbsent},
		{"RecreatedKeyFencesOldHolder", testRecreated},
		{"RefusedTransactions", testRefused},
		{"DeletePrefix", testDeletePrefix},
		{"WatchFromPast", testWatchFromPast},
		{"WatchAfterCompaction", testWatchAfterCompaction},
		{"WatchCancel", testWatchCancel},
		{"WatchResumesAfterCut", testWatchResumes},
		{"LeaseRevoke", testLeaseRevoke},
		{"PutDetachesLease", testPutDetachesLease},
		{"LeaseKeepAliveDeadline", testKeepAliveDeadline},
		{"LeaseExpiryWhenCutOff", testLeaseExpiry},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f(t)) })
	}
}

func ctxFor(t *testing.T, e *Env) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), e.Timeout)
	t.Cleanup(cancel)
	return ctx
}

func txn(t *testing.T, c kv.KV, ctx context.Context, conds []kv.Cond, ops ...kv.Op) (bool, int64) {
	t.Helper()
	ok, rev, err := c.Txn(ctx, conds, ops)
	if err != nil {
		t.Fatalf("txn: %v", err)
	}
	return ok, rev
}

func put(t *testing.T, c kv.KV, ctx context.Context, key, data string) int64 {
	t.Helper()
	ok, rev := txn(t, c, ctx, nil, kv.Put(key, []byte(data), 0))
	if !ok {
		t.Fatalf("unconditional put of %q refused", key)
	}
	return rev
}

func get(t *testing.T, c kv.KV, ctx context.Context, key string) (kv.Value, bool) {
	t.Helper()
	v, found, err := c.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return v, found
}

// await waits for a value on ch: in virtual time by advancing the clock in
// small steps up to e.Timeout, else for at most e.Timeout. (In virtual
// time, what a goroutine delivers, such as the close of a cancelled
// watch, may come after the virtual budget: the real wait after it is
// only spent when something is wrong.)
func await[T any](t *testing.T, e *Env, ch <-chan T, what string) (T, bool) {
	t.Helper()
	if e.Virtual {
		const step = 100 * time.Millisecond
		for waited := time.Duration(0); waited <= e.Timeout; waited += step {
			select {
			case v, ok := <-ch:
				return v, ok
			default:
			}
			e.Wait(step)
		}
	}
	d := e.Timeout
	if e.Virtual {
		d = realTimeout
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v, ok := <-ch:
		return v, ok
	case <-timer.C:
	}
	t.Fatalf("%s: nothing after %v", what, e.Timeout)
	var zero T
	return zero, false
}

func awaitEvent(t *testing.T, e *Env, ch <-chan kv.WatchEvent) kv.WatchEvent {
	t.Helper()
	ev, ok := await(t, e, ch, "watch event")
	if !ok {
		t.Fatalf("watch closed, want an event")
	}
	return ev
}

// change is a compact, comparable form of a kv.Change.
type change struct {
	Type        kv.ChangeType
	Key, Data   string
	Create, Mod int64
	Lease       kv.LeaseID
}

func (c change) String() string {
	return fmt.Sprintf("%v %s=%q create=%d mod=%d lease=%x", c.Type, c.Key, c.Data, c.Create, c.Mod, int64(c.Lease))
}

func changesOf(ev kv.WatchEvent) []change {
	var cs []change
	for _, c := range ev.Changes {
		cs = append(cs, change{c.Type, c.Value.Key, string(c.Value.Data), c.Value.CreateRevision, c.Value.ModRevision, c.Value.Lease})
	}
	return cs
}

func wantEvent(t *testing.T, ev kv.WatchEvent, rev int64, want ...change) {
	t.Helper()
	if ev.Err != nil {
		t.Fatalf("event at %d: err %v", rev, ev.Err)
	}
	got := changesOf(ev)
	if ev.Revision != rev || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("event:\n got revision %d %v\nwant revision %d %v", ev.Revision, got, rev, want)
	}
}

func pput(k, d string, create, mod int64) change {
	return change{Type: kv.ChangePut, Key: k, Data: d, Create: create, Mod: mod}
}

func pdel(k string, mod int64) change {
	return change{Type: kv.ChangeDelete, Key: k, Mod: mod}
}
