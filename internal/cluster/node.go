// Package cluster runs a groupd node in a cluster whose every agreement is
// held in etcd (docs/cluster.md): the node registers itself under a lease,
// follows the cluster's keys into a view (package view), campaigns to be
// the controller and, while it is, writes the controller's decisions
// (package controller) by compare-and-swap. The replication of partitions
// rides on it (replicas.go).
//
// Fencing: the node knows its lease's deadline (kv.Lease.Deadline), before
// which etcd cannot have expired it. Every role it holds came with that
// lease, so the node stops acting on all of them at the deadline minus a
// margin, and only takes them up again under a new lease, as a new
// incarnation.
package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
)

// DefaultSessionTimeout is Kafka's broker.session.timeout.ms.
const DefaultSessionTimeout = 9 * time.Second

// DefaultLeaderImbalanceCheckInterval is Kafka's
// leader.imbalance.check.interval.seconds.
const DefaultLeaderImbalanceCheckInterval = 300 * time.Second

// Config configures a Node.
type Config struct {
	NodeID int32
	// Host and Port are what other nodes and clients connect to.
	Host string
	Port int32
	Rack string
	// EmptyDisk, if set, says whether the node holds no replica log at
	// all (NodeInfo.EmptyDisk). It is asked at every registration: a
	// process that started empty and has since taken on replicas
	// registers again (after losing its lease) as a node with a log.
	EmptyDisk func() bool
	// Prefix is the etcd prefix of the cluster's keys, ending in "/".
	Prefix string
	KV     kv.KV
	Clock  kv.Clock
	Logger *slog.Logger
	// SessionTimeout is the lease's TTL (broker.session.timeout.ms).
	SessionTimeout time.Duration
	// AutoLeaderRebalance moves leadership back to preferred replicas
	// every LeaderImbalanceCheckInterval (auto.leader.rebalance.enable).
	AutoLeaderRebalance          bool
	LeaderImbalanceCheckInterval time.Duration
}

// Node is this process's membership in the cluster.
type Node struct {
	cfg  Config
	keys meta.Keys
	log  *slog.Logger

	view atomic.Pointer[view.View]
	// lease is the lease the node is registered under, nil between one
	// lost and the next granted.
	lease atomic.Pointer[leaseHolder]

	subMu sync.Mutex
	subs  []chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// err is why the node stopped on its own (a value it cannot read).
	errOnce sync.Once
	err     error
	failed  chan struct{}
}

type leaseHolder struct {
	l           kv.Lease
	incarnation meta.ID
	// registered is the revision nodes/<id> was created at under l: a
	// partition state older than it was written for an earlier process.
	registered int64
}

// Start loads the cluster's view, registers the node and starts following
// the cluster. It returns once the node is registered and its view has
// caught up with its registration: what the node serves from the view
// from then on (Metadata's brokers) names the node itself and every node
// registered before it. A client that takes its first answer for the
// cluster's membership (franz-go's admin client keeps the brokers of its
// first Metadata for minutes) would otherwise miss the node.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.KV == nil {
		return nil, errors.New("cluster: no etcd client")
	}
	if cfg.Clock == nil {
		cfg.Clock = kv.RealClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.LeaderImbalanceCheckInterval <= 0 {
		cfg.LeaderImbalanceCheckInterval = DefaultLeaderImbalanceCheckInterval
	}
	n := &Node{cfg: cfg, keys: meta.NewKeys(cfg.Prefix), log: cfg.Logger.With("node", cfg.NodeID), failed: make(chan struct{})}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	vs, rev, err := cfg.KV.List(ctx, cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster under %s: %w", cfg.Prefix, err)
	}
	v, err := view.FromListing(n.keys, vs, rev)
	if err != nil {
		return nil, err
	}
	n.view.Store(v)
	n.wg.Go(n.watchLoop)
	if err := n.register(ctx); err != nil {
		n.cancel()
		n.wg.Wait()
		return nil, err
	}
	if err := n.catchUp(ctx, n.lease.Load().registered); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		n.Close(rctx)
		return nil, fmt.Errorf("following the cluster up to the node's registration: %w", err)
	}
	n.wg.Go(n.leaseLoop)
	n.wg.Go(n.controllerLoop)
	return n, nil
}

// catchUp waits until the view is as of revision rev or later, the node
// stops, or ctx ends.
func (n *Node) catchUp(ctx context.Context, rev int64) error {
	changed, unsubscribe := n.subscribe()
	defer unsubscribe()
	for n.View().Revision < rev {
		select {
		case <-changed:
		case <-n.failed:
			return n.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// View is the cluster as of the last revision the node has seen.
func (n *Node) View() *view.View { return n.view.Load() }

// ID is the node's id.
func (n *Node) ID() int32 { return n.cfg.NodeID }

// Keys are the cluster's keys.
func (n *Node) Keys() meta.Keys { return n.keys }

// KV is the cluster's etcd.
func (n *Node) KV() kv.KV { return n.cfg.KV }

// Clock is the node's clock.
func (n *Node) Clock() kv.Clock { return n.cfg.Clock }

// LeaseDeadline is the instant before which etcd cannot have expired the
// node's registration; zero when it holds none. Every role the node holds
// ends there.
func (n *Node) LeaseDeadline() time.Time {
	if h := n.lease.Load(); h != nil {
		return h.l.Deadline()
	}
	return time.Time{}
}

// Registration is the lease deadline (see LeaseDeadline) and the etcd
// revision the node registered at under that lease; zero and 0 when it
// holds none. A partition state written before that revision names this
// node as an earlier process of it: it does not lead by it (see
// replica.Partition.Registrations).
func (n *Node) Registration() (deadline time.Time, revision int64) {
	if h := n.lease.Load(); h != nil {
		return h.l.Deadline(), h.registered
	}
	return time.Time{}, 0
}

// Failed is closed when the node stopped on its own; Err says why.
func (n *Node) Failed() <-chan struct{} { return n.failed }

// Err is why the node stopped on its own, or nil.
func (n *Node) Err() error {
	select {
	case <-n.failed:
		return n.err
	default:
		return nil
	}
}

func (n *Node) fail(err error) {
	n.errOnce.Do(func() {
		n.err = err
		n.log.Error("the node stops following the cluster", "err", err)
		close(n.failed)
		n.cancel()
	})
}

// Subscribe returns a channel that receives a token whenever the view
// changes (a token is dropped when one is pending: read View for the
// latest) or the node's lease changes.
func (n *Node) Subscribe() <-chan struct{} {
	ch, _ := n.subscribe()
	return ch
}

// subscribe is Subscribe with a function that ends the subscription.
func (n *Node) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.subMu.Lock()
	n.subs = append(n.subs, ch)
	n.subMu.Unlock()
	ch <- struct{}{}
	return ch, func() {
		n.subMu.Lock()
		defer n.subMu.Unlock()
		n.subs = slices.DeleteFunc(n.subs, func(c chan struct{}) bool { return c == ch })
	}
}

func (n *Node) notify() {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	for _, ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Close leaves the cluster: the lease is revoked, so the node's keys go at
// once instead of after the session timeout, and the loops stop.
func (n *Node) Close(ctx context.Context) error {
	var err error
	if h := n.lease.Swap(nil); h != nil {
		err = h.l.Revoke(ctx)
	}
	n.cancel()
	n.wg.Wait()
	return err
}

// watchLoop follows the cluster's prefix into the view, listing again
// when the watch breaks.
func (n *Node) watchLoop() {
	for n.ctx.Err() == nil {
		from := n.View().Revision + 1
		for ev := range n.cfg.KV.Watch(n.ctx, n.cfg.Prefix, from) {
			if ev.Err != nil {
				n.log.Warn("the cluster watch broke; reading the cluster again", "err", ev.Err)
				break
			}
			v, err := n.View().Apply(n.keys, ev)
			if err != nil {
				n.fail(err)
				return
			}
			n.view.Store(v)
			n.notify()
		}
		if n.ctx.Err() != nil {
			return
		}
		vs, rev, err := n.cfg.KV.List(n.ctx, n.cfg.Prefix)
		if err != nil {
			n.log.Warn("reading the cluster", "err", err)
			n.sleep(time.Second)
			continue
		}
		v, err := view.FromListing(n.keys, vs, rev)
		if err != nil {
			n.fail(err)
			return
		}
		n.view.Store(v)
		n.notify()
	}
}

// sleep waits d of the node's clock, or until the node stops.
func (n *Node) sleep(d time.Duration) {
	done := make(chan struct{})
	stop := n.cfg.Clock.AfterFunc(d, func() { close(done) })
	defer stop()
	select {
	case <-done:
	case <-n.ctx.Done():
	}
}

// register grants a lease and puts nodes/<id> under it. A key left by an
// earlier incarnation (a process killed less than a session ago) is waited
// out: another process of the same id would be a misconfiguration, and
// the key goes when its lease does.
func (n *Node) register(ctx context.Context) error {
	var inc meta.ID
	rand.Read(inc[:])
	info := meta.NodeInfo{ID: n.cfg.NodeID, Host: n.cfg.Host, Port: n.cfg.Port, Rack: n.cfg.Rack, Incarnation: inc,
		EmptyDisk: n.cfg.EmptyDisk != nil && n.cfg.EmptyDisk()}
	data, err := info.Encode()
	if err != nil {
		return err
	}
	waited := false
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		l, err := n.cfg.KV.Grant(ctx, n.cfg.SessionTimeout)
		if err != nil {
			n.log.Warn("granting the node's lease", "err", err)
			n.sleepCtx(ctx, time.Second)
			continue
		}
		ok, rev, err := n.cfg.KV.Txn(ctx, []kv.Cond{kv.Absent(n.keys.Node(n.cfg.NodeID))},
			[]kv.Op{kv.Put(n.keys.Node(n.cfg.NodeID), data, l.ID())})
		if err == nil && ok {
			n.lease.Store(&leaseHolder{l: l, incarnation: inc, registered: rev})
			n.log.Info("registered in the cluster", "lease_ttl", l.TTL(), "incarnation", inc.String())
			n.notify()
			return nil
		}
		l.Revoke(context.WithoutCancel(ctx))
		if err != nil {
			n.log.Warn("registering the node", "err", err)
		} else if !waited {
			n.log.Warn("node id still registered by an earlier process; waiting for its session to end",
				"key", n.keys.Node(n.cfg.NodeID), "session_timeout", n.cfg.SessionTimeout)
			waited = true
		}
		n.sleepCtx(ctx, 500*time.Millisecond)
	}
}

func (n *Node) sleepCtx(ctx context.Context, d time.Duration) {
	done := make(chan struct{})
	stop := n.cfg.Clock.AfterFunc(d, func() { close(done) })
	defer stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-n.ctx.Done():
	}
}

// leaseLoop registers the node again whenever its lease is lost.
func (n *Node) leaseLoop() {
	for {
		h := n.lease.Load()
		if h == nil {
			return // closed
		}
		select {
		case <-h.l.Done():
		case <-n.ctx.Done():
			return
		}
		if !n.lease.CompareAndSwap(h, nil) {
			return
		}
		n.log.Error("the node's lease was lost; it stops acting on every role it held and registers again", "err", h.l.Err())
		n.notify()
		if err := n.register(n.ctx); err != nil {
			return
		}
	}
}

// leaseID is the current lease's id, 0 without one.
func (n *Node) leaseID() kv.LeaseID {
	if h := n.lease.Load(); h != nil {
		return h.l.ID()
	}
	return 0
}

// ControlledShutdown asks the controller to move this node's leaderships
// to other in-sync replicas, and waits until it leads no partition that
// another live in-sync replica could take, or ctx ends: a rolling restart
// then stalls each partition for one leader move, not for a session
// timeout. The request goes with the node's lease.
func (n *Node) ControlledShutdown(ctx context.Context) error {
	h := n.lease.Load()
	if h == nil {
		return nil
	}
	data, err := meta.ControlledShutdown{NodeID: n.cfg.NodeID, Incarnation: h.incarnation}.Encode()
	if err != nil {
		return err
	}
	if _, _, err := n.cfg.KV.Txn(ctx, nil, []kv.Op{kv.Put(n.keys.ControlledShutdown(n.cfg.NodeID), data, h.l.ID())}); err != nil {
		return err
	}
	changed := n.Subscribe()
	for {
		if n.movableLeaderships(n.View()) == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// movableLeaderships counts the partitions this node leads whose ISR holds
// another live node.
func (n *Node) movableLeaderships(v *view.View) int {
	count := 0
	for _, s := range v.States {
		if s.Leader != n.cfg.NodeID {
			continue
		}
		for _, r := range s.ISR {
			if r != n.cfg.NodeID && v.Alive(r) {
				count++
				break
			}
		}
	}
	return count
}
