package kvtest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/groupd/groupd/internal/cluster/kv"
)

// testRevisions: one revision per transaction that changes something, the
// same for every key it changes; create and mod revisions per key.
func testRevisions(t *testing.T, e *Env) {
	ctx, p := ctxFor(t, e), e.Prefix
	_, r0, err := e.A.List(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	r1 := put(t, e.A, ctx, p+"x", "1")
	if r1 != r0+1 {
		t.Fatalf("first put at %d, want %d", r1, r0+1)
	}
	if v, ok := get(t, e.A, ctx, p+"x"); !ok || v.CreateRevision != r1 || v.ModRevision != r1 || string(v.Data) != "1" || v.Lease != 0 {
		t.Fatalf("after put: %+v found=%v", v, ok)
	}
	r2 := put(t, e.A, ctx, p+"x", "2")
	if r2 != r1+1 {
		t.Fatalf("second put at %d, want %d", r2, r1+1)
	}
	// The other client reads it at once: reads are linearizable.
	if v, ok := get(t, e.B, ctx, p+"x"); !ok || v.CreateRevision != r1 || v.ModRevision != r2 || string(v.Data) != "2" {
		t.Fatalf("B after overwrite: %+v found=%v", v, ok)
	}
	ok, r3 := txn(t, e.A, ctx, nil, kv.Put(p+"y", []byte("y"), 0), kv.Put(p+"z", nil, 0))
	if !ok || r3 != r2+1 {
		t.Fatalf("two puts in one txn: ok=%v at %d, want %d", ok, r3, r2+1)
	}
	for _, k := range []string{"y", "z"} {
		if v, _ := get(t, e.A, ctx, p+k); v.ModRevision != r3 || v.CreateRevision != r3 {
			t.Fatalf("%s: %+v, want created and modified at %d", k, v, r3)
		}
	}
	// Deleting an absent key changes nothing, so no revision.
	if ok, r := txn(t, e.A, ctx, nil, kv.Delete(p+"absent")); !ok || r != r3 {
		t.Fatalf("delete of an absent key: ok=%v revision %d, want %d", ok, r, r3)
	}
	vs, rl, err := e.B.List(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(vs); rl != r3 || got != fmt.Sprint([]string{p + "x", p + "y", p + "z"}) {
		t.Fatalf("list: %v at %d, want x y z at %d", got, rl, r3)
	}
	ok, r4 := txn(t, e.A, ctx, nil, kv.Delete(p+"x"))
	if !ok || r4 != r3+1 {
		t.Fatalf("delete: ok=%v at %d, want %d", ok, r4, r3+1)
	}
	if _, found := get(t, e.A, ctx, p+"x"); found {
		t.Fatal("deleted key found")
	}
	if vs, rl, _ := e.A.List(ctx, p); rl != r4 || len(vs) != 2 {
		t.Fatalf("list after delete: %v at %d", keysOf(vs), rl)
	}
}

func keysOf(vs []kv.Value) string {
	var ks []string
	for _, v := range vs {
		ks = append(ks, v.Key)
	}
	return fmt.Sprint(ks)
}

// testStaleRevision: a compare-and-swap decided at an old revision is
// refused, and refuses all of its ops.
func testStaleRevision(t *testing.T, e *Env) {
	ctx, k := ctxFor(t, e), e.Prefix+"k"
	r1 := put(t, e.A, ctx, k, "a")
	r2 := put(t, e.B, ctx, k, "b")
	if ok, r := txn(t, e.A, ctx, []kv.Cond{kv.ModRevisionIs(k, r1)}, kv.Put(k, []byte("c"), 0)); ok || r != r2 {
		t.Fatalf("CAS at stale revision %d: ok=%v revision %d, want refused at %d", r1, ok, r, r2)
	}
	if v, _ := get(t, e.A, ctx, k); string(v.Data) != "b" {
		t.Fatalf("refused CAS wrote: %q", v.Data)
	}
	ok, r3 := txn(t, e.A, ctx, []kv.Cond{kv.ModRevisionIs(k, r2)}, kv.Put(k, []byte("c"), 0))
	if !ok || r3 != r2+1 {
		t.Fatalf("CAS at current revision: ok=%v at %d", ok, r3)
	}
	// One failing condition refuses everything.
	conds := []kv.Cond{kv.ModRevisionIs(k, r3), kv.ModRevisionIs(e.Prefix+"other", 12345)}
	if ok, r := txn(t, e.A, ctx, conds, kv.Put(k, []byte("d"), 0), kv.Put(e.Prefix+"other", nil, 0)); ok || r != r3 {
		t.Fatalf("half-true conditions: ok=%v at %d", ok, r)
	}
	if _, found := get(t, e.A, ctx, e.Prefix+"other"); found {
		t.Fatal("refused txn created a key")
	}
}

// testCreateIfAbsent: Absent holds only for a key that does not exist; an
// absent key has mod revision 0 too.
func testCreateIfAbsent(t *testing.T, e *Env) {
	ctx, k := ctxFor(t, e), e.Prefix+"controller"
	ok, r1 := txn(t, e.A, ctx, []kv.Cond{kv.Absent(k)}, kv.Put(k, []byte("A"), 0))
	if !ok {
		t.Fatal("create-if-absent of an absent key refused")
	}
	if ok, r := txn(t, e.B, ctx, []kv.Cond{kv.Absent(k)}, kv.Put(k, []byte("B"), 0)); ok || r != r1 {
		t.Fatalf("second create-if-absent: ok=%v at %d", ok, r)
	}
	if v, _ := get(t, e.B, ctx, k); string(v.Data) != "A" {
		t.Fatalf("holder %q, want A", v.Data)
	}
	if ok, _ := txn(t, e.A, ctx, []kv.Cond{kv.ModRevisionIs(e.Prefix+"none", 0)}, kv.Put(e.Prefix+"none", nil, 0)); !ok {
		t.Fatal("mod revision of an absent key is not 0")
	}
}

// testRecreated: a role's holder writes only while the key it was granted
// is the one that exists, not a later one of the same name.
func testRecreated(t *testing.T, e *Env) {
	ctx, k, epoch := ctxFor(t, e), e.Prefix+"controller", e.Prefix+"controller_epoch"
	r1 := put(t, e.A, ctx, k, "A")
	txn(t, e.A, ctx, nil, kv.Delete(k))
	r3 := put(t, e.B, ctx, k, "B")
	if ok, _ := txn(t, e.A, ctx, []kv.Cond{kv.CreateRevisionIs(k, r1)}, kv.Put(epoch, []byte("A"), 0)); ok {
		t.Fatal("old holder's write accepted")
	}
	if ok, _ := txn(t, e.B, ctx, []kv.Cond{kv.CreateRevisionIs(k, r3)}, kv.Put(epoch, []byte("B"), 0)); !ok {
		t.Fatal("new holder's write refused")
	}
}

// testRefused: transactions refused whole, with the same errors on every
// implementation.
func testRefused(t *testing.T, e *Env) {
	ctx, p := ctxFor(t, e), e.Prefix
	_, r0, _ := e.A.List(ctx, p)
	l, err := e.A.Grant(ctx, e.TTL)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	many := make([]kv.Op, kv.MaxTxnOps+1)
	for i := range many {
		many[i] = kv.Put(fmt.Sprintf("%smany/%d", p, i), nil, 0)
	}
	cases := []struct {
		name  string
		conds []kv.Cond
		ops   []kv.Op
		want  error
	}{
		{"put twice", nil, []kv.Op{kv.Put(p+"a", nil, 0), kv.Put(p+"a", nil, 0)}, kv.ErrDuplicateKey},
		{"put and delete", nil, []kv.Op{kv.Put(p+"a", nil, 0), kv.Delete(p + "a")}, kv.ErrDuplicateKey},
		{"put under a deleted prefix", nil, []kv.Op{kv.DeletePrefix(p + "d/"), kv.Put(p+"d/1", nil, 0)}, kv.ErrDuplicateKey},
		{"too many ops", nil, many, kv.ErrTooManyOps},
		{"empty key", nil, []kv.Op{kv.Put("", nil, 0)}, kv.ErrEmptyKey},
		{"empty prefix", nil, []kv.Op{kv.DeletePrefix("")}, kv.ErrEmptyKey},
		{"empty condition key", []kv.Cond{kv.Absent("")}, nil, kv.ErrEmptyKey},
		{"unknown lease", nil, []kv.Op{kv.Put(p+"a", nil, 0), kv.Put(p+"b", nil, l.ID())}, kv.ErrLeaseNotFound},
	}
	for _, c := range cases {
		ok, _, err := e.A.Txn(ctx, c.conds, c.ops)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: ok=%v err=%v, want %v", c.name, ok, err, c.want)
		}
	}
	if vs, r, _ := e.A.List(ctx, p); len(vs) != 0 || r != r0 {
		t.Fatalf("refused transactions left %v, revision %d -> %d", keysOf(vs), r0, r)
	}
	// Deletes may overlap each other.
	if ok, _, err := e.A.Txn(ctx, nil, []kv.Op{kv.Delete(p + "a"), kv.DeletePrefix(p)}); err != nil || !ok {
		t.Fatalf("overlapping deletes: ok=%v err=%v", ok, err)
	}
	// Leases are checked only in the branch taken.
	if ok, _, err := e.A.Txn(ctx, []kv.Cond{kv.ModRevisionIs(p+"a", 99)}, []kv.Op{kv.Put(p+"a", nil, l.ID())}); ok || err != nil {
		t.Fatalf("failed condition with an unknown lease: ok=%v err=%v, want false, nil", ok, err)
	}
}

// testDeletePrefix: one op deletes every key under a prefix, in one
// revision, in key order.
func testDeletePrefix(t *testing.T, e *Env) {
	ctx, p := ctxFor(t, e), e.Prefix
	txn(t, e.A, ctx, nil, kv.Put(p+"t/0", nil, 0), kv.Put(p+"t/1", nil, 0), kv.Put(p+"t/2", nil, 0), kv.Put(p+"u", nil, 0))
	_, r0, _ := e.A.List(ctx, p)
	w := e.B.Watch(ctxFor(t, e), p, r0+1)
	ok, r := txn(t, e.A, ctx, nil, kv.DeletePrefix(p+"t/"))
	if !ok || r != r0+1 {
		t.Fatalf("delete prefix: ok=%v at %d", ok, r)
	}
	wantEvent(t, awaitEvent(t, e, w), r, pdel(p+"t/0", r), pdel(p+"t/1", r), pdel(p+"t/2", r))
	if vs, _, _ := e.A.List(ctx, p); keysOf(vs) != fmt.Sprint([]string{p + "u"}) {
		t.Fatalf("left %v", keysOf(vs))
	}
}

// testWatchFromPast: a watch replays history from its revision, one event
// per revision, only for its prefix, then follows live changes.
func testWatchFromPast(t *testing.T, e *Env) {
	ctx, p := ctxFor(t, e), e.Prefix+"w/"
	r1 := put(t, e.A, ctx, p+"a", "1")
	r2 := put(t, e.A, ctx, p+"b", "2")
	_, r3 := txn(t, e.A, ctx, nil, kv.Delete(p+"a"))
	put(t, e.A, ctx, e.Prefix+"elsewhere", "x")
	_, r5 := txn(t, e.A, ctx, nil, kv.Put(p+"d", []byte("4"), 0), kv.Put(p+"c", []byte("3"), 0))

	w := e.B.Watch(ctxFor(t, e), p, r1)
	wantEvent(t, awaitEvent(t, e, w), r1, pput(p+"a", "1", r1, r1))
	wantEvent(t, awaitEvent(t, e, w), r2, pput(p+"b", "2", r2, r2))
	wantEvent(t, awaitEvent(t, e, w), r3, pdel(p+"a", r3))
	// Changes of one revision come together, in the order of the ops.
	wantEvent(t, awaitEvent(t, e, w), r5, pput(p+"d", "4", r5, r5), pput(p+"c", "3", r5, r5))
	r6 := put(t, e.A, ctx, p+"b", "5")
	wantEvent(t, awaitEvent(t, e, w), r6, pput(p+"b", "5", r2, r6))

	w2 := e.B.Watch(ctxFor(t, e), p, r3)
	wantEvent(t, awaitEvent(t, e, w2), r3, pdel(p+"a", r3))
	wantEvent(t, awaitEvent(t, e, w2), r5, pput(p+"d", "4", r5, r5), pput(p+"c", "3", r5, r5))
	wantEvent(t, awaitEvent(t, e, w2), r6, pput(p+"b", "5", r2, r6))

	// From 0: only what comes next. Watches start asynchronously on etcd;
	// writing until the watch sees something proves it did not replay.
	w3 := e.B.Watch(ctxFor(t, e), p, 0)
	r7 := put(t, e.A, ctx, p+"e", "6")
	ev := awaitEvent(t, e, w3)
	if ev.Revision < r7 {
		t.Fatalf("watch from 0 replayed revision %d (now %d)", ev.Revision, r7)
	}
}

// testWatchAfterCompaction: a watch from a compacted revision ends with
// ErrCompacted; one from the compaction's revision on works.
func testWatchAfterCompaction(t *testing.T, e *Env) {
	ctx, k := ctxFor(t, e), e.Prefix+"c"
	r1 := put(t, e.A, ctx, k, "1")
	put(t, e.A, ctx, k, "2")
	r3 := put(t, e.A, ctx, k, "3")
	if err := e.Compact(r3); err != nil {
		t.Fatal(err)
	}
	w := e.B.Watch(ctxFor(t, e), e.Prefix, r1)
	ev := awaitEvent(t, e, w)
	if !errors.Is(ev.Err, kv.ErrCompacted) || len(ev.Changes) != 0 {
		t.Fatalf("watch from compacted %d: %+v, want ErrCompacted", r1, ev)
	}
	if ev, ok := await(t, e, w, "close after error"); ok {
		t.Fatalf("event after the error: %+v", ev)
	}
	w2 := e.B.Watch(ctxFor(t, e), e.Prefix, r3)
	wantEvent(t, awaitEvent(t, e, w2), r3, pput(k, "3", r1, r3))
}

// testWatchCancel: ending the context closes the channel, with no error
// event.
func testWatchCancel(t *testing.T, e *Env) {
	ctx, cancel := context.WithCancel(ctxFor(t, e))
	w := e.B.Watch(ctx, e.Prefix, 0)
	cancel()
	if ev, ok := await(t, e, w, "close on cancel"); ok {
		t.Fatalf("event after cancel: %+v", ev)
	}
}

// testWatchResumes: a watch whose client was cut off for a while
// delivers, once the cut heals, what changed meanwhile, without a gap.
func testWatchResumes(t *testing.T, e *Env) {
	ctx, k := ctxFor(t, e), e.Prefix+"k"
	r1 := put(t, e.B, ctx, k, "1")
	w := e.A.Watch(ctxFor(t, e), e.Prefix, r1)
	wantEvent(t, awaitEvent(t, e, w), r1, pput(k, "1", r1, r1))
	e.CutA()
	r2 := put(t, e.B, ctx, k, "2")
	r3 := put(t, e.B, ctx, k, "3")
	e.HealA()
	wantEvent(t, awaitEvent(t, e, w), r2, pput(k, "2", r1, r2))
	wantEvent(t, awaitEvent(t, e, w), r3, pput(k, "3", r1, r3))
}

// testLeaseRevoke: revoking a lease deletes its keys in one revision, and
// only its keys; Done closes first.
func testLeaseRevoke(t *testing.T, e *Env) {
	ctx, p := ctxFor(t, e), e.Prefix+"n/"
	l, err := e.A.Grant(ctx, e.TTL)
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL() < e.TTL || l.TTL()%1e9 != 0 {
		t.Fatalf("granted TTL %v for %v: want whole seconds, at least asked", l.TTL(), e.TTL)
	}
	_, r1 := txn(t, e.A, ctx, nil, kv.Put(p+"2", []byte("b"), l.ID()), kv.Put(p+"1", []byte("a"), l.ID()))
	if v, _ := get(t, e.B, ctx, p+"1"); v.Lease != l.ID() {
		t.Fatalf("key's lease %x, want %x", int64(v.Lease), int64(l.ID()))
	}
	w := e.B.Watch(ctxFor(t, e), p, r1+1)
	r2 := put(t, e.A, ctx, p+"3", "c")
	wantEvent(t, awaitEvent(t, e, w), r2, pput(p+"3", "c", r2, r2))
	if err := l.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done open after Revoke")
	}
	if !errors.Is(l.Err(), kv.ErrLeaseRevoked) {
		t.Fatalf("Err %v, want ErrLeaseRevoked", l.Err())
	}
	wantEvent(t, awaitEvent(t, e, w), r2+1, pdel(p+"1", r2+1), pdel(p+"2", r2+1))
	if err := l.Revoke(ctx); err != nil {
		t.Fatalf("second revoke: %v", err)
	}
	if vs, _, _ := e.B.List(ctx, p); keysOf(vs) != fmt.Sprint([]string{p + "3"}) {
		t.Fatalf("left %v, want only the key without lease", keysOf(vs))
	}
}

// testPutDetachesLease: a put without a lease takes the key off the lease
// it had.
func testPutDetachesLease(t *testing.T, e *Env) {
	ctx, k := ctxFor(t, e), e.Prefix+"k"
	l, err := e.A.Grant(ctx, e.TTL)
	if err != nil {
		t.Fatal(err)
	}
	txn(t, e.A, ctx, nil, kv.Put(k, []byte("leased"), l.ID()))
	put(t, e.A, ctx, k, "free")
	if err := l.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if v, found := get(t, e.B, ctx, k); !found || v.Lease != 0 || string(v.Data) != "free" {
		t.Fatalf("after revoke: %+v found=%v", v, found)
	}
}

// testKeepAliveDeadline: the deadline starts at the grant's send time plus
// the TTL, keep-alives move it forward past the first one, and it never
// runs ahead of the clock by more than the TTL.
func testKeepAliveDeadline(t *testing.T, e *Env) {
	ctx := ctxFor(t, e)
	before := e.Clock.Now()
	l, err := e.A.Grant(ctx, e.TTL)
	if err != nil {
		t.Fatal(err)
	}
	after := e.Clock.Now()
	ttl := l.TTL()
	d0 := l.Deadline()
	if d0.Before(before.Add(ttl)) || d0.After(after.Add(ttl)) {
		t.Fatalf("first deadline %v not within [%v, %v] + %v", d0, before, after, ttl)
	}
	if e.Virtual && !d0.Equal(before.Add(ttl)) {
		t.Fatalf("first deadline %v, want grant time + TTL %v", d0, before.Add(ttl))
	}
	k := e.Prefix + "alive"
	txn(t, e.A, ctx, nil, kv.Put(k, nil, l.ID()))

	e.Wait(ttl + ttl/2)
	select {
	case <-l.Done():
		t.Fatalf("lease lost while kept alive: %v", l.Err())
	default:
	}
	d1, now := l.Deadline(), e.Clock.Now()
	if !d1.After(now) || d1.After(now.Add(ttl)) {
		t.Fatalf("deadline %v after keep-alives, now %v: want in (now, now+%v]", d1, now, ttl)
	}
	if e.Virtual {
		// Keep-alives every ttl/3 from the grant; the last answered one
		// before now was sent at 4*ttl/3.
		if want := before.Add(4*ttl/3 + ttl); !d1.Equal(want) {
			t.Fatalf("deadline %v, want last keep-alive's send time + TTL = %v", d1, want)
		}
	}
	if _, found := get(t, e.B, ctx, k); !found {
		t.Fatal("key of a kept-alive lease gone")
	}
	if err := l.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
}

// testLeaseExpiry: a holder cut off from the store loses its lease at its
// deadline; the store expires it no earlier, deleting its keys in one
// revision that watchers see.
func testLeaseExpiry(t *testing.T, e *Env) {
	ctx, p := ctxFor(t, e), e.Prefix+"nodes/"
	l, err := e.A.Grant(ctx, e.TTL)
	if err != nil {
		t.Fatal(err)
	}
	_, r := txn(t, e.A, ctx, nil, kv.Put(p+"1", []byte("a"), l.ID()), kv.Put(p+"0", []byte("b"), l.ID()))
	w := e.B.Watch(ctxFor(t, e), p, r+1)
	e.CutA()

	ev := awaitEvent(t, e, w)
	observed := e.Clock.Now()
	wantEvent(t, ev, ev.Revision, pdel(p+"0", ev.Revision), pdel(p+"1", ev.Revision))
	if _, ok := await(t, e, l.Done(), "holder's Done"); ok {
		t.Fatal("Done delivered a value")
	}
	if !errors.Is(l.Err(), kv.ErrLeaseExpired) {
		t.Fatalf("Err %v, want ErrLeaseExpired", l.Err())
	}
	if dl := l.Deadline(); dl.After(observed) {
		t.Fatalf("the store expired the lease by %v, before the holder's deadline %v", observed, dl)
	}
	if vs, _, _ := e.B.List(ctx, p); len(vs) != 0 {
		t.Fatalf("left %v", keysOf(vs))
	}
}
