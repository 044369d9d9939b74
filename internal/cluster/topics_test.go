package cluster

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
)

func nodesOf(racks ...string) []meta.NodeInfo {
	var ns []meta.NodeInfo
	for i, r := range racks {
		ns = append(ns, meta.NodeInfo{ID: int32(i + 1), Host: "h", Port: 1, Rack: r, Incarnation: meta.ID{1}})
	}
	return ns
}

func TestPlace(t *testing.T) {
	got, err := Place(nodesOf("", "", ""), 0, 6, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	leaders := map[int32]int{}
	for p, rs := range got {
		if len(rs) != 3 {
			t.Fatalf("partition %d: %v", p, rs)
		}
		seen := map[int32]bool{}
		for _, r := range rs {
			if seen[r] {
				t.Fatalf("partition %d lists node %d twice: %v", p, r, rs)
			}
			seen[r] = true
		}
		leaders[rs[0]]++
	}
	for id, n := range leaders {
		if n != 2 {
			t.Fatalf("preferred leaders %v: node %d leads %d of 6", leaders, id, n)
		}
	}
	// Two racks: every partition of rf 2 has one replica in each.
	got, _ = Place(nodesOf("a", "a", "b", "b"), 0, 8, 2, 3)
	rack := map[int32]string{1: "a", 2: "a", 3: "b", 4: "b"}
	for p, rs := range got {
		if rack[rs[0]] == rack[rs[1]] {
			t.Fatalf("partition %d: both replicas in rack %s: %v", p, rack[rs[0]], rs)
		}
	}
	if _, err := Place(nodesOf("", ""), 0, 1, 3, 0); !errors.Is(err, kerr.InvalidReplicationFactor) {
		t.Fatalf("rf above the live nodes: %v", err)
	}
}

// A topic created by any node gets its partition states from the
// controller; a second creation of the name is refused; producer id blocks
// never overlap.
func TestCreateTopicThroughTheController(t *testing.T) {
	c := newTestCluster(t)
	c.startThree()
	ctx := context.Background()
	topic, err := c.nodes[2].CreateTopic(ctx, "events", 4, 3, map[string]string{"min.insync.replicas": "2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[2].WaitTopic(ctx, "events", 4); err != nil {
		t.Fatal(err)
	}
	for p, rs := range topic.Partitions {
		s := c.nodes[2].View().States[view.TP{Topic: topic.ID, Partition: int32(p)}]
		if s.Leader != rs[0] || !slices.Equal(s.ISR, rs) || s.LeaderEpoch != 0 {
			t.Fatalf("partition %d (replicas %v): %+v", p, rs, s)
		}
	}
	// Each node acts on its own view, which follows etcd's.
	c.eventually("every node sees the topic", func(v *view.View) bool { _, ok := v.Topic("events"); return ok })
	if _, err := c.nodes[3].CreateTopic(ctx, "events", 1, 1, nil); !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("second creation: %v", err)
	}
	if err := c.nodes[1].CreatePartitions(ctx, "events", 6); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[1].WaitTopic(ctx, "events", 6); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for i := range 6 {
		first, err := c.nodes[int32(1+i%3)].NextProducerIDBlock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[first] {
			t.Fatalf("producer id block at %d handed out twice", first)
		}
		seen[first] = true
	}
	c.eventually("every node sees six partitions", func(v *view.View) bool { t, ok := v.Topic("events"); return ok && len(t.Partitions) == 6 })
	if err := c.nodes[3].DeleteTopic(ctx, "events"); err != nil {
		t.Fatal(err)
	}
	c.eventually("the topic and its states gone", func(v *view.View) bool {
		_, ok := v.Topic("events")
		return !ok && len(v.States) == 0
	})
}
