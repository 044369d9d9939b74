package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/kv/kvmodel"
	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/coordinator/clocktest"
)

// hangGuard bounds every wait in real time; nothing waits for time to pass.
const hangGuard = 10 * time.Second

type testCluster struct {
	t     *testing.T
	clock *clocktest.Clock
	model *kvmodel.Model
	nodes map[int32]*Node
	// cut are the nodes cut off from etcd, whose views are stale.
	cut map[int32]bool
}

func newTestCluster(t *testing.T) *testCluster {
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return &testCluster{t: t, clock: clock, model: kvmodel.New(clock, kvmodel.Options{}), nodes: map[int32]*Node{}, cut: map[int32]bool{}}
}

func (c *testCluster) client(id int32) string { return fmt.Sprintf("node-%d", id) }

// setCut cuts node id off from etcd, or heals it.
func (c *testCluster) setCut(id int32, cut bool) {
	f := kvmodel.Healthy
	if cut {
		f = kvmodel.FailCalls
	}
	c.cut[id] = cut
	c.model.SetFault(c.client(id), f)
}

func (c *testCluster) start(id int32, options ...func(*Config)) *Node {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cfg := Config{NodeID: id, Host: "127.0.0.1", Port: 9000 + id, Prefix: "/groupd/test/",
		KV: c.model.Client(c.client(id)), Clock: c.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		SessionTimeout: 9 * time.Second}
	for _, o := range options {
		o(&cfg)
	}
	n, err := Start(ctx, cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { n.cancel(); n.wg.Wait() })
	c.nodes[id] = n
	return n
}

// startThree starts nodes 1 to 3 and waits until every node sees them
// all and a controller.
func (c *testCluster) startThree() {
	c.t.Helper()
	for id := int32(1); id <= 3; id++ {
		c.start(id)
	}
	c.awaitThree()
}

// awaitThree waits until every node sees three nodes and a controller.
func (c *testCluster) awaitThree() {
	c.t.Helper()
	c.eventually("three nodes and a controller", func(v *view.View) bool { return len(v.Nodes) == 3 && v.Controller != nil })
}

// eventually waits, in real time, until every node's view satisfies cond.
func (c *testCluster) eventually(what string, cond func(v *view.View) bool) {
	c.t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		ok := true
		for id, n := range c.nodes {
			if !c.cut[id] && n.ctx.Err() == nil && !cond(n.View()) {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for id, n := range c.nodes {
				v := n.View()
				fmt.Fprintf(&b, "\nnode %d (cut %v): rev %d nodes %d controller %+v", id, c.cut[id], v.Revision, len(v.Nodes), v.Controller)
				for tp, st := range v.States {
					fmt.Fprintf(&b, "\n  %v/%d: %+v", tp.Topic.String()[:4], tp.Partition, st)
				}
			}
			c.t.Fatalf("never: %s%s", what, b.String())
		}
		time.Sleep(time.Millisecond)
	}
}

// advance moves the virtual clock in small steps, letting the nodes'
// goroutines act between them.
func (c *testCluster) advance(d time.Duration) {
	for step := 100 * time.Millisecond; d > 0; d -= step {
		c.clock.Advance(min(step, d))
		time.Sleep(3 * time.Millisecond)
	}
}

func (c *testCluster) createTopic(name string, id meta.ID, replicas [][]int32) {
	c.t.Helper()
	kvc := c.model.Client("admin")
	keys := meta.NewKeys("/groupd/test/")
	data, err := meta.Topic{Name: name, ID: id, Partitions: replicas}.Encode()
	if err != nil {
		c.t.Fatal(err)
	}
	ctx := context.Background()
	if ok, _, err := kvc.Txn(ctx, nil, []kv.Op{kv.Put(keys.Topic(name), data, 0)}); err != nil || !ok {
		c.t.Fatal(err)
	}
	for p, rs := range replicas {
		st, err := meta.PartitionState{Leader: rs[0], ISR: rs}.Encode()
		if err != nil {
			c.t.Fatal(err)
		}
		if ok, _, err := kvc.Txn(ctx, nil, []kv.Op{kv.Put(keys.Partition(id, int32(p)), st, 0)}); err != nil || !ok {
			c.t.Fatal(err)
		}
	}
}

// Three nodes register, one is elected controller; when a node is cut off
// from etcd past its session, etcd expires it, and the controller moves the
// leadership of its partitions to the next in-sync replica with the leader
// epoch bumped. The node cut off stops holding its lease before etcd can
// have expired it, and registers again as a new incarnation once it can
// reach etcd.
func TestControllerElectsNewLeaderWhenANodeIsCutOff(t *testing.T) {
	c := newTestCluster(t)
	c.startThree()
	tid := meta.ID{9}
	c.createTopic("orders", tid, [][]int32{{2, 3, 1}, {3, 1, 2}})
	tp := view.TP{Topic: tid, Partition: 0}
	c.eventually("the topic's states", func(v *view.View) bool { return v.States[tp].Leader == 2 })
	before := c.nodes[2].incarnation()

	c.setCut(2, true)
	deadline := c.nodes[2].LeaseDeadline()
	c.advance(12 * time.Second)
	if c.nodes[2].LeaseDeadline().After(deadline) {
		t.Fatal("the node cut off from etcd renewed its lease")
	}
	c.eventually("partition 0 led by node 3 at epoch 1, node 2 out of its ISR", func(v *view.View) bool {
		s := v.States[tp]
		return s.Leader == 3 && s.LeaderEpoch == 1 && !contains(s.ISR, 2) && !v.Alive(2)
	})

	c.setCut(2, false)
	c.advance(3 * time.Second)
	c.eventually("node 2 back as a new incarnation", func(v *view.View) bool {
		return v.Alive(2) && v.Nodes[2].Incarnation != before
	})
	if s := c.nodes[1].View().States[tp]; s.Leader != 3 || s.LeaderEpoch != 1 {
		t.Fatalf("partition 0 after node 2 came back: %+v", s)
	}
}

// A node says at each registration whether it holds any replica log: a
// process that started on an empty disk and has since taken on replicas
// registers again, after losing its lease, as a node with a log.
func TestRegistrationSaysWhetherTheDiskIsEmpty(t *testing.T) {
	c := newTestCluster(t)
	var empty atomic.Bool
	empty.Store(true)
	c.start(1)
	c.start(2, func(cfg *Config) { cfg.EmptyDisk = empty.Load })
	c.eventually("node 2 registered with an empty disk, node 1 without", func(v *view.View) bool {
		return v.Alive(2) && v.Nodes[2].EmptyDisk && v.Alive(1) && !v.Nodes[1].EmptyDisk
	})
	before := c.nodes[2].incarnation()
	empty.Store(false)
	c.setCut(2, true)
	c.advance(12 * time.Second)
	c.eventually("node 2 gone", func(v *view.View) bool { return !v.Alive(2) })
	c.setCut(2, false)
	c.advance(3 * time.Second)
	c.eventually("node 2 registered again, with a log", func(v *view.View) bool {
		return v.Alive(2) && !v.Nodes[2].EmptyDisk && v.Nodes[2].Incarnation != before
	})
}

// When the controller itself is cut off, another node takes over the
// controller key at the next controller epoch and goes on deciding.
func TestControllerFailover(t *testing.T) {
	c := newTestCluster(t)
	c.startThree()
	first := c.nodes[1].View().Controller.Controller
	c.setCut(first.NodeID, true)
	c.advance(12 * time.Second)
	c.eventually("another controller at the next epoch", func(v *view.View) bool {
		return v.Controller != nil && v.Controller.NodeID != first.NodeID && v.Controller.Epoch == first.Epoch+1
	})
	// It decides: the old controller's partition moves.
	tid := meta.ID{3}
	c.createTopic("t", tid, [][]int32{{first.NodeID, 1 + first.NodeID%3}})
	c.eventually("the partition of the node cut off moves", func(v *view.View) bool {
		s := v.States[view.TP{Topic: tid}]
		return s.Leader == 1+first.NodeID%3 && s.LeaderEpoch == 1
	})
}

// Start returns only once the node's view holds its own registration and
// every node registered before it, even when the node's watch lags its
// writes: Metadata is answered from the view as soon as Start returns, and
// a client that keeps its first answer's brokers (franz-go's admin client)
// would otherwise never learn of the node (the e2e clusters' "brokers
// [1 2]" with node 3 answering first).
func TestStartWaitsForItsRegistrationInTheView(t *testing.T) {
	c := newTestCluster(t)
	c.start(1)
	c.eventually("node 1 sees itself", func(v *view.View) bool { return v.Alive(1) })
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	n, err := Start(ctx, Config{NodeID: 2, Host: "127.0.0.1", Port: 9002, Prefix: "/groupd/test/",
		KV: laggingWatch{KV: c.model.Client(c.client(2)), lag: 50 * time.Millisecond}, Clock: c.clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SessionTimeout: 9 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.cancel(); n.wg.Wait() })
	v := n.View()
	if _, reg := n.Registration(); v.Revision < reg || !v.Alive(1) || !v.Alive(2) || v.Registration(2) != reg {
		t.Fatalf("Start returned with the view at revision %d, nodes %v; the node registered at revision %d", v.Revision, v.SortedNodes(), reg)
	}
}

// laggingWatch is a KV whose watches deliver each event lag late.
type laggingWatch struct {
	kv.KV
	lag time.Duration
}

func (l laggingWatch) Watch(ctx context.Context, prefix string, fromRevision int64) <-chan kv.WatchEvent {
	in := l.KV.Watch(ctx, prefix, fromRevision)
	out := make(chan kv.WatchEvent)
	go func() {
		defer close(out)
		for ev := range in {
			time.Sleep(l.lag)
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func contains(s []int32, x int32) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

func (n *Node) incarnation() meta.ID {
	if h := n.lease.Load(); h != nil {
		return h.incarnation
	}
	return meta.ID{}
}
