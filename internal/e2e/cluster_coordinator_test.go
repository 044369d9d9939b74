package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/inspect"
)

// groupCoordinator asks FindCoordinator which node coordinates group.
func groupCoordinator(t *testing.T, ctx context.Context, cl *kgo.Client, group string) (int32, error) {
	t.Helper()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = group
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, err
	}
	if resp.ErrorCode != 0 {
		return -1, fmt.Errorf("FindCoordinator: error %d", resp.ErrorCode)
	}
	return resp.NodeID, nil
}

// TestClusterCoordinatorMovesWithoutARebalance runs a consumer group on a
// three-node cluster, stops the node that coordinates it, and checks
// that the group goes on at the partition's new leader: no rebalance,
// no record lost, the commits made before the move still there. It then
// reads __consumer_offsets as any client can and decodes the commits
// with Kafka's schemas.
func TestClusterCoordinatorMovesWithoutARebalance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c := startLocalCluster(t, ctx, []func(*app.Config){func(cfg *app.Config) { cfg.OffsetsTopicPartitions = 6 }},
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("work"), kgo.RetryTimeout(60*time.Second))
	if res, err := c.adm.CreateTopic(ctx, 3, 3, nil, "work"); err != nil || res.Err != nil {
		t.Fatalf("create topic: %v %v", err, res.Err)
	}
	const group = "failover"
	var coord int32
	waitUntil(t, ctx, func() (err error) {
		coord, err = groupCoordinator(t, ctx, c.cl, group)
		return err
	})
	t.Logf("node %d coordinates the group", coord)
	var live []string
	for i, a := range c.addrs {
		if int32(i+1) != coord {
			live = append(live, a)
		}
	}

	// The consumer is seeded with the nodes that stay, so that the stop
	// is of the coordinator and nothing else of the client's.
	var assigned atomic.Int32
	var mu sync.Mutex
	seen := map[string]bool{}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics("work"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(200*time.Millisecond),
		kgo.MetadataMinAge(50*time.Millisecond),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { assigned.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	const n = 300
	produce := func(from int) {
		for i := from; i < from+n; i++ {
			if err := c.cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "r%05d", i)}).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	consume := func(want int) {
		t.Helper()
		for {
			mu.Lock()
			got := len(seen)
			mu.Unlock()
			if got >= want {
				return
			}
			fs := consumer.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d: %v", got, want, ctx.Err())
			}
			fs.EachRecord(func(r *kgo.Record) {
				mu.Lock()
				seen[string(r.Value)] = true
				mu.Unlock()
			})
			if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
				t.Logf("commit: %v", err)
			}
		}
	}
	produce(0)
	consume(n)
	stateBefore, genBefore := c.generation(t, ctx, coord, group)
	if stateBefore != "Stable" {
		t.Fatalf("group %s before the move", stateBefore)
	}
	committed, err := kadm.NewClient(consumer).FetchOffsets(ctx, group)
	if err != nil || committed.Error() != nil {
		t.Fatalf("fetch offsets: %v %v", err, committed.Error())
	}

	t.Logf("stopping node %d, the coordinator, at generation %d", coord, genBefore)
	stopServer(t, c.nodes[coord-1])
	liveCl := mustClient(t, kgo.SeedBrokers(live...))
	admLive := kadm.NewClient(liveCl)
	var moved int32
	waitUntil(t, ctx, func() (err error) {
		moved, err = groupCoordinator(t, ctx, liveCl, group)
		if err == nil && moved == coord {
			err = fmt.Errorf("node %d still named", moved)
		}
		return err
	})
	t.Logf("node %d coordinates the group now", moved)
	// The offsets committed before the move are at the new coordinator.
	after, err := admLive.FetchOffsets(ctx, group)
	if err != nil || after.Error() != nil {
		t.Fatalf("fetch offsets after the move: %v %v", err, after.Error())
	}
	committed.Each(func(o kadm.OffsetResponse) {
		if a, ok := after.Lookup(o.Topic, o.Partition); !ok || a.At < o.At {
			t.Fatalf("%s/%d committed %d before the move, %d (%v) after", o.Topic, o.Partition, o.At, a.At, ok)
		}
	})

	produce(n)
	consume(2 * n)
	if a := assigned.Load(); a != 1 {
		t.Fatalf("partitions assigned %d times, want once: the move rebalanced the group", a)
	}
	if state, gen := c.generation(t, ctx, moved, group); state != "Stable" || gen != genBefore {
		t.Fatalf("group %s at generation %d after the move, Stable at %d before", state, gen, genBefore)
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	// The new coordinator says where the group came from.
	if mv := c.inspectGroup(t, ctx, moved, group).CoordinatorMove; mv == nil || mv.From != coord || mv.To != moved {
		t.Fatalf("coordinator move %+v, want from node %d to node %d", mv, coord, moved)
	}

	// __consumer_offsets, read as a client reads any topic, holds the
	// group's commits in Kafka's schemas.
	found := map[int32]int64{}
	rd := mustClient(t, kgo.SeedBrokers(live...), kgo.ConsumeTopics("__consumer_offsets"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	waitUntil(t, ctx, func() error {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		rd.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			if len(r.Key) < 2 || binary.BigEndian.Uint16(r.Key) != 1 || r.Value == nil {
				return
			}
			k, v := kmsg.NewOffsetCommitKey(), kmsg.NewOffsetCommitValue()
			if err := k.ReadFrom(r.Key); err != nil {
				t.Fatalf("OffsetCommitKey: %v", err)
			}
			if err := v.ReadFrom(r.Value); err != nil {
				t.Fatalf("OffsetCommitValue: %v", err)
			}
			if k.Group == group && k.Topic == "work" {
				found[k.Partition] = max(found[k.Partition], v.Offset)
			}
		})
		var total int64
		for _, o := range found {
			total += o
		}
		if total != 2*n {
			return fmt.Errorf("commits read from %s add up to %d, want %d", "__consumer_offsets", total, 2*n)
		}
		return nil
	})
}

func mustClient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// generation is the group's state and generation as the node that
// coordinates it shows them (the status page's view).
func (c *localCluster) generation(t *testing.T, ctx context.Context, node int32, group string) (string, int32) {
	g := c.inspectGroup(t, ctx, node, group)
	return g.State, g.Generation
}

// inspectGroup is the group as the node that coordinates it shows it.
func (c *localCluster) inspectGroup(t *testing.T, ctx context.Context, node int32, group string) inspect.Group {
	t.Helper()
	var g inspect.Group
	waitUntil(t, ctx, func() error {
		var ok bool
		var err error
		g, ok, err = c.nodes[node-1].Inspect().Group(ctx, group)
		if err == nil && !ok {
			err = fmt.Errorf("node %d does not coordinate %s", node, group)
		}
		return err
	})
	return g
}

// TestClusterDeletedTopicLeavesNoOffsets deletes a topic through a node
// that does not coordinate the group that committed to it: the node that
// does removes the group's offsets of it, as Kafka's coordinators do.
func TestClusterDeletedTopicLeavesNoOffsets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startLocalCluster(t, ctx, []func(*app.Config){func(cfg *app.Config) { cfg.OffsetsTopicPartitions = 3 }})
	for _, topic := range []string{"kept", "gone"} {
		if res, err := c.adm.CreateTopic(ctx, 1, 3, nil, topic); err != nil || res.Err != nil {
			t.Fatalf("create %s: %v %v", topic, err, res.Err)
		}
	}
	const group = "deleter"
	var coord int32
	waitUntil(t, ctx, func() (err error) {
		coord, err = groupCoordinator(t, ctx, c.cl, group)
		return err
	})
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "kept", Partition: 0, At: 5, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: "gone", Partition: 0, At: 7, LeaderEpoch: -1})
	waitUntil(t, ctx, func() error {
		r, err := c.adm.CommitOffsets(ctx, group, offs)
		if err == nil {
			err = r.Error()
		}
		return err
	})
	got, err := c.adm.FetchOffsets(ctx, group)
	if o, ok := got.Lookup("gone", 0); err != nil || !ok || o.At != 7 {
		t.Fatalf("before the delete: %+v %v %v", o, ok, err)
	}
	other := c.addrs[coord%3] // another node's address
	adm := kadm.NewClient(mustClient(t, kgo.SeedBrokers(other)))
	if res, err := adm.DeleteTopics(ctx, "gone"); err != nil || res.Error() != nil {
		t.Fatalf("delete: %v %v", err, res.Error())
	}
	// A topic created again under the name does not inherit the old
	// one's commits.
	waitUntil(t, ctx, func() error {
		res, err := c.adm.CreateTopic(ctx, 1, 3, nil, "gone")
		if err == nil {
			err = res.Err
		}
		return err
	})
	waitUntil(t, ctx, func() error {
		got, err := c.adm.FetchOffsets(ctx, group)
		if err != nil {
			return err
		}
		if o, ok := got.Lookup("gone", 0); ok {
			return fmt.Errorf("the deleted topic's offset %d is committed for its namesake", o.At)
		}
		if o, ok := got.Lookup("kept", 0); !ok || o.At != 5 {
			t.Fatalf("the kept topic's offset: %+v %v", o, ok)
		}
		return nil
	})
}
