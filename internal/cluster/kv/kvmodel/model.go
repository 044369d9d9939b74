// Package kvmodel is an in-memory, linearizable, deterministic model of
// the part of etcd that package kv exposes, for tests and for the
// simulator of cluster mode.
//
// One Model is one etcd cluster; each Client is one node's connection to
// it, with its own faults. All state sits behind one mutex, so every call
// is atomic and calls are linearized in the order they take it. Time is a
// kv.Clock the caller owns (a virtual clock in tests): leases expire on it,
// at their expiry instant, deleting their keys in one revision. The model
// starts no goroutine that acts on its own: a lease expires inside the
// clock's timer callback, and a watch event is in its channel when the
// call that caused it returns (unless the channel's buffer is full, when a
// goroutine that only carries queued events finishes the job, or the
// client's delivery is paused). Same calls in the same order, same
// results: lease ids are sequential, and anything iterated is sorted.
//
// The model follows etcd where groupd could tell the difference: a
// revision counter bumped once per transaction that changes something;
// create and mod revisions per key (0 for an absent key); a Put without a
// lease detaches the key from its lease; TTLs in whole seconds with a
// minimum; compaction that breaks watches behind it; the same refusals
// of malformed transactions (kv.CheckTxn) and of puts under unknown leases.
// It does not model etcd's lag in expiring leases (up to half a second
// after the TTL, in etcd's own loop): here a lease expires exactly at its
// TTL, the earliest etcd could.
package kvmodel

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/groupd/groupd/internal/cluster/kv"
)

// Options configure a Model. The zero value gives etcd's defaults.
type Options struct {
	// MinTTL is the least TTL the model grants: etcd's is 1.5 election
	// timeouts rounded up to whole seconds, 2s with its default
	// --election-timeout of 1s. Default 2s.
	MinTTL time.Duration
	// WatchBuffer is the capacity of each watch channel. Default 256.
	WatchBuffer int
}

// Fault is what happens to a client's calls, as if the network between the
// node and etcd failed in some way.
type Fault int

const (
	// Healthy: calls reach the model and their answers come back.
	Healthy Fault = iota
	// FailCalls: every call fails at once with kv.ErrUnavailable without
	// reaching the model (a refused connection). Keep-alives are not
	// answered; watches stop delivering until the fault ends, then resume
	// where they were (as etcd's client resumes a watch after a
	// reconnect).
	FailCalls
	// HangCalls: every call blocks until its context ends or the fault
	// changes, then fails without having reached the model (a silent
	// partition). Keep-alives are never answered while it lasts; watches
	// stop delivering as with FailCalls.
	HangCalls
	// DropReplies: every call is applied but fails with kv.ErrUnavailable,
	// as if the answer was lost: the ambiguous outcome a writer must cope
	// with. Keep-alives extend the lease in the model, but the holder does
	// not hear it, so its deadline does not move. Watches deliver.
	DropReplies
)

func (f Fault) String() string {
	switch f {
	case Healthy:
		return "healthy"
	case FailCalls:
		return "fail"
	case HangCalls:
		return "hang"
	case DropReplies:
		return "drop-replies"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Model is one etcd cluster in memory.
type Model struct {
	clock kv.Clock
	opts  Options

	mu        sync.Mutex
	rev       int64
	compacted int64 // the revision last compacted at; watches before it break
	keys      map[string]*kv.Value
	log       []revision // every revision above compacted that changed something
	leases    map[kv.LeaseID]*lease
	lastLease kv.LeaseID
	clients   map[string]*Client
	watchers  []*watcher // in creation order
	lastWatch uint64
}

// revision is one entry of the history watches replay.
type revision struct {
	rev     int64
	changes []kv.Change
}

type lease struct {
	id     kv.LeaseID
	ttl    time.Duration
	expiry time.Time
	keys   map[string]bool
	gen    uint64 // tells the current expiry timer from stale ones
	stop   func() bool
}

// New returns an empty model whose leases expire on clock.
func New(clock kv.Clock, opts Options) *Model {
	if opts.MinTTL <= 0 {
		opts.MinTTL = 2 * time.Second
	}
	if opts.WatchBuffer <= 0 {
		opts.WatchBuffer = 256
	}
	return &Model{
		clock:   clock,
		opts:    opts,
		keys:    map[string]*kv.Value{},
		leases:  map[kv.LeaseID]*lease{},
		clients: map[string]*Client{},
	}
}

// Client returns the client called name, creating it healthy on first use.
// It implements kv.KV.
func (m *Model) Client(name string) *Client {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.clients[name]
	if c == nil {
		c = &Client{m: m, name: name, healed: make(chan struct{})}
		m.clients[name] = c
	}
	return c
}

// SetFault sets what happens to the named client's calls from now on.
// Calls hanging under HangCalls, and keep-alives waiting for an answer,
// fail when the fault changes; watches resume delivery when it becomes
// Healthy or DropReplies (and delivery is not paused).
func (m *Model) SetFault(name string, f Fault) {
	c := m.Client(name)
	m.mu.Lock()
	c.fault = f
	close(c.healed)
	c.healed = make(chan struct{})
	pending := c.pendingKeepAlives
	c.pendingKeepAlives = nil
	m.flushClientLocked(c)
	m.mu.Unlock()
	for _, reply := range pending {
		reply(0, fmt.Errorf("%w: %s's call was cut off", kv.ErrUnavailable, name))
	}
}

// PauseWatches holds the events of the named client's watches in their
// queues until ResumeWatches: a slow or stalled watch stream.
func (m *Model) PauseWatches(name string) {
	c := m.Client(name)
	m.mu.Lock()
	c.paused = true
	m.mu.Unlock()
}

// ResumeWatches delivers what PauseWatches held, and what comes next.
func (m *Model) ResumeWatches(name string) {
	c := m.Client(name)
	m.mu.Lock()
	c.paused = false
	m.flushClientLocked(c)
	m.mu.Unlock()
}

// BreakWatches ends every watch of the named client with an event whose
// Err wraps kv.ErrWatchBroken (as etcd cancels a watch whose member lost
// its leader); events queued behind a paused delivery are dropped.
func (m *Model) BreakWatches(name string) {
	c := m.Client(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.watchers {
		if w.client == c {
			m.breakLocked(w, fmt.Errorf("%w: broken by the test", kv.ErrWatchBroken))
		}
	}
}

// Compact discards the history before rev, as etcd's compaction does: a
// watch from a revision below rev, and an open watch whose next event to
// deliver is below rev, end with kv.ErrCompacted. rev must be above the
// last compaction and at most the current revision.
func (m *Model) Compact(rev int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rev <= m.compacted {
		return fmt.Errorf("%w: already compacted at %d", kv.ErrCompacted, m.compacted)
	}
	if rev > m.rev {
		return fmt.Errorf("kvmodel: compact at %d beyond the current revision %d", rev, m.rev)
	}
	m.compacted = rev
	i := sort.Search(len(m.log), func(i int) bool { return m.log[i].rev >= rev })
	m.log = append([]revision(nil), m.log[i:]...)
	for _, w := range m.watchers {
		if r, ok := w.nextQueuedRevision(); ok && r < rev {
			m.breakLocked(w, fmt.Errorf("%w: watch at revision %d, compacted at %d", kv.ErrCompacted, r, rev))
		}
	}
	return nil
}

// RevokeLease revokes a lease from outside its holder (as an operator's
// `etcdctl lease revoke` would), deleting its keys in one revision; the
// holder learns it from its next keep-alive. It reports whether the lease
// existed.
func (m *Model) RevokeLease(id kv.LeaseID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[id]
	if l != nil {
		m.revokeLocked(l)
	}
	return l != nil
}

// Revision returns the current revision.
func (m *Model) Revision() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rev
}

// Dump returns every key under prefix, in key order, and the current
// revision, bypassing faults: for checkers of invariants.
func (m *Model) Dump(prefix string) ([]kv.Value, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.listLocked(prefix), m.rev
}

// LeaseExpiry returns the instant the model will expire the lease, if it
// exists: a checker compares it with the holder's Deadline, which must
// never be later.
func (m *Model) LeaseExpiry(id kv.LeaseID) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[id]
	if l == nil {
		return time.Time{}, false
	}
	return l.expiry, true
}

func (m *Model) listLocked(prefix string) []kv.Value {
	var vs []kv.Value
	for k, v := range m.keys {
		if strings.HasPrefix(k, prefix) {
			vs = append(vs, copyValue(*v))
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].Key < vs[j].Key })
	return vs
}

func copyValue(v kv.Value) kv.Value {
	if v.Data != nil {
		v.Data = append([]byte{}, v.Data...)
	}
	return v
}

// txnLocked evaluates and applies one transaction.
func (m *Model) txnLocked(conds []kv.Cond, ops []kv.Op) (bool, int64, error) {
	if err := kv.CheckTxn(conds, ops); err != nil {
		return false, 0, err
	}
	for _, c := range conds {
		var create, mod int64
		if v := m.keys[c.Key]; v != nil {
			create, mod = v.CreateRevision, v.ModRevision
		}
		got := mod
		if c.Target == kv.CreateRevision {
			got = create
		}
		if got != c.Revision {
			return false, m.rev, nil
		}
	}
	// etcd checks the leases of the branch it takes, and refuses the
	// whole transaction if one is missing.
	for _, op := range ops {
		if op.Type == kv.OpPut && op.Lease != 0 && m.leases[op.Lease] == nil {
			return false, 0, fmt.Errorf("%w: put %q under lease %x", kv.ErrLeaseNotFound, op.Key, int64(op.Lease))
		}
	}
	next := m.rev + 1
	var changes []kv.Change
	for _, op := range ops {
		switch op.Type {
		case kv.OpPut:
			v := m.keys[op.Key]
			if v == nil {
				v = &kv.Value{Key: op.Key, CreateRevision: next}
				m.keys[op.Key] = v
			}
			if v.Lease != op.Lease {
				if l := m.leases[v.Lease]; l != nil {
					delete(l.keys, op.Key)
				}
				if l := m.leases[op.Lease]; l != nil {
					l.keys[op.Key] = true
				}
			}
			v.Data = append([]byte{}, op.Data...)
			v.ModRevision = next
			v.Lease = op.Lease
			changes = append(changes, kv.Change{Type: kv.ChangePut, Value: copyValue(*v)})
		case kv.OpDelete:
			if c, ok := m.deleteLocked(op.Key, next); ok {
				changes = append(changes, c)
			}
		case kv.OpDeletePrefix:
			for _, v := range m.listLocked(op.Key) {
				if c, ok := m.deleteLocked(v.Key, next); ok {
					changes = append(changes, c)
				}
			}
		}
	}
	m.commitLocked(changes)
	return true, m.rev, nil
}

func (m *Model) deleteLocked(key string, rev int64) (kv.Change, bool) {
	v := m.keys[key]
	if v == nil {
		return kv.Change{}, false
	}
	if l := m.leases[v.Lease]; l != nil {
		delete(l.keys, key)
	}
	delete(m.keys, key)
	return kv.Change{Type: kv.ChangeDelete, Value: kv.Value{Key: key, ModRevision: rev}}, true
}

// commitLocked makes changes one revision, if there are any, and hands it
// to the watches.
func (m *Model) commitLocked(changes []kv.Change) {
	if len(changes) == 0 {
		return
	}
	m.rev++
	r := revision{rev: m.rev, changes: changes}
	m.log = append(m.log, r)
	for _, w := range m.watchers {
		if ev, ok := w.filter(r); ok {
			m.queueLocked(w, ev)
		}
	}
}

// ttlFor rounds ttl up to whole seconds, as etcd counts, and to the minimum.
func (m *Model) ttlFor(ttl time.Duration) time.Duration {
	secs := time.Duration(math.Ceil(ttl.Seconds())) * time.Second
	if secs < m.opts.MinTTL {
		secs = m.opts.MinTTL
	}
	return secs
}

func (m *Model) grantLocked(ttl time.Duration) *lease {
	m.lastLease++
	l := &lease{id: m.lastLease, ttl: m.ttlFor(ttl), keys: map[string]bool{}}
	m.leases[l.id] = l
	m.renewLocked(l)
	return l
}

// renewLocked restarts the lease's TTL from now. The clock is called with
// m.mu held; its callbacks take m.mu only after the clock released its
// own lock, and the delay is never zero, so this cannot deadlock.
func (m *Model) renewLocked(l *lease) {
	if l.stop != nil {
		l.stop()
	}
	l.gen++
	gen, id := l.gen, l.id
	l.expiry = m.clock.Now().Add(l.ttl)
	l.stop = m.clock.AfterFunc(l.ttl, func() { m.expire(id, gen) })
}

func (m *Model) expire(id kv.LeaseID, gen uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[id]
	if l == nil || l.gen != gen {
		return
	}
	m.revokeLocked(l)
}

// revokeLocked deletes the lease and its keys, in key order, in one
// revision.
func (m *Model) revokeLocked(l *lease) {
	if l.stop != nil {
		l.stop()
	}
	keys := make([]string, 0, len(l.keys))
	for k := range l.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	delete(m.leases, l.id)
	var changes []kv.Change
	for _, k := range keys {
		if c, ok := m.deleteLocked(k, m.rev+1); ok {
			changes = append(changes, c)
		}
	}
	m.commitLocked(changes)
}

// Client is one node's connection to the model. It implements kv.KV.
type Client struct {
	m    *Model
	name string

	// Guarded by m.mu.
	fault             Fault
	healed            chan struct{} // closed and replaced when the fault changes
	paused            bool
	pendingKeepAlives []func(time.Duration, error)
}

var _ kv.KV = (*Client)(nil)

// Name returns the client's name.
func (c *Client) Name() string { return c.name }

// enter lets a call reach the model: it returns with m.mu held and
// drop reporting whether the answer is to be lost, or with an error and
// m.mu not held.
func (c *Client) enter(ctx context.Context) (drop bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	c.m.mu.Lock()
	switch c.fault {
	case Healthy:
		return false, nil
	case DropReplies:
		return true, nil
	case FailCalls:
		c.m.mu.Unlock()
		return false, fmt.Errorf("%w: %s cannot reach the store", kv.ErrUnavailable, c.name)
	}
	healed := c.healed
	c.m.mu.Unlock()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-healed:
		return false, fmt.Errorf("%w: %s's call was cut off", kv.ErrUnavailable, c.name)
	}
}

func (c *Client) lost() error {
	return fmt.Errorf("%w: %s's answer was lost", kv.ErrUnavailable, c.name)
}

// Get implements kv.KV.
func (c *Client) Get(ctx context.Context, key string) (kv.Value, bool, error) {
	drop, err := c.enter(ctx)
	if err != nil {
		return kv.Value{}, false, err
	}
	defer c.m.mu.Unlock()
	if drop {
		return kv.Value{}, false, c.lost()
	}
	v := c.m.keys[key]
	if v == nil {
		return kv.Value{}, false, nil
	}
	return copyValue(*v), true, nil
}

// List implements kv.KV.
func (c *Client) List(ctx context.Context, prefix string) ([]kv.Value, int64, error) {
	drop, err := c.enter(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer c.m.mu.Unlock()
	if drop {
		return nil, 0, c.lost()
	}
	return c.m.listLocked(prefix), c.m.rev, nil
}

// Txn implements kv.KV.
func (c *Client) Txn(ctx context.Context, conds []kv.Cond, ops []kv.Op) (bool, int64, error) {
	drop, err := c.enter(ctx)
	if err != nil {
		return false, 0, err
	}
	defer c.m.mu.Unlock()
	ok, rev, err := c.m.txnLocked(conds, ops)
	if drop {
		return false, 0, c.lost()
	}
	return ok, rev, err
}

// Grant implements kv.KV. The lease's keep-alives go through this client,
// with its faults.
func (c *Client) Grant(ctx context.Context, ttl time.Duration) (kv.Lease, error) {
	drop, err := c.enter(ctx)
	if err != nil {
		return nil, err
	}
	sent := c.m.clock.Now()
	l := c.m.grantLocked(ttl)
	id, granted := l.id, l.ttl
	c.m.mu.Unlock()
	if drop {
		return nil, c.lost()
	}
	return kv.NewLease(c.m.clock, id, granted, sent, &leaseConn{c: c, id: id}), nil
}

type leaseConn struct {
	c  *Client
	id kv.LeaseID
}

func (lc *leaseConn) KeepAlive(reply func(time.Duration, error)) {
	c, m := lc.c, lc.c.m
	m.mu.Lock()
	switch c.fault {
	case FailCalls:
		m.mu.Unlock()
		reply(0, fmt.Errorf("%w: %s cannot reach the store", kv.ErrUnavailable, c.name))
		return
	case HangCalls:
		c.pendingKeepAlives = append(c.pendingKeepAlives, reply)
		m.mu.Unlock()
		return
	}
	drop := c.fault == DropReplies
	var ttl time.Duration
	var err error
	if l := m.leases[lc.id]; l != nil {
		m.renewLocked(l)
		ttl = l.ttl
	} else {
		err = fmt.Errorf("%w: keep-alive of lease %x", kv.ErrLeaseNotFound, int64(lc.id))
	}
	m.mu.Unlock()
	if drop {
		reply(0, c.lost())
		return
	}
	reply(ttl, err)
}

func (lc *leaseConn) Revoke(ctx context.Context) error {
	drop, err := lc.c.enter(ctx)
	if err != nil {
		return err
	}
	defer lc.c.m.mu.Unlock()
	l := lc.c.m.leases[lc.id]
	if l != nil {
		lc.c.m.revokeLocked(l)
	}
	if drop {
		return lc.c.lost()
	}
	if l == nil {
		return fmt.Errorf("%w: revoke lease %x", kv.ErrLeaseNotFound, int64(lc.id))
	}
	return nil
}
