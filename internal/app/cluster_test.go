package app

import (
	"testing"

	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/metrics"
)

// testView is a cluster of nodes 1–3 (node 3 dead unless alive3) with one
// topic of two partitions on all three, in the states given.
func testView(alive3 bool, states ...meta.PartitionState) *view.View {
	v := view.Empty()
	for _, id := range []int32{1, 2, 3} {
		if id != 3 || alive3 {
			v.Nodes[id] = meta.NodeInfo{ID: id}
		}
	}
	v.Controller = &view.Controller{Controller: meta.Controller{NodeID: 1, Epoch: 1}}
	id := meta.ID{1}
	v.Topics["t"] = view.Topic{Topic: meta.Topic{Name: "t", ID: id, Partitions: [][]int32{{1, 2, 3}, {2, 3, 1}}}}
	v.ByID[id] = "t"
	for p, st := range states {
		v.States[view.TP{Topic: id, Partition: int32(p)}] = view.State{PartitionState: st}
	}
	return v
}

func TestClusterCountsFollowTheViews(t *testing.T) {
	var c clusterCounts
	c.observe(testView(true,
		meta.PartitionState{Leader: 1, LeaderEpoch: 0, ISR: []int32{1, 2, 3}},
		meta.PartitionState{Leader: 2, LeaderEpoch: 0, ISR: []int32{2, 3, 1}}))
	// Node 3 dies: partition 0 loses it from its ISR; partition 1 ...
	c.observe(testView(false,
		meta.PartitionState{Leader: 1, LeaderEpoch: 0, ISR: []int32{1, 2}},
		meta.PartitionState{Leader: 2, LeaderEpoch: 0, ISR: []int32{2, 3, 1}}))
	// ... then node 2 dies too: partition 1 gets node 1 as leader, and
	// partition 0 loses node 2.
	v := testView(false,
		meta.PartitionState{Leader: 1, LeaderEpoch: 0, ISR: []int32{1}},
		meta.PartitionState{Leader: 1, LeaderEpoch: 1, ISR: []int32{1}})
	delete(v.Nodes, 2)
	c.observe(v)
	got := c.stats(v, 1)
	want := metrics.ClusterStats{Nodes: 1, Controller: true, Partitions: 2, UnderReplicated: 2, Leading: 2,
		LeaderElections: 1, ISRShrinks: 3}
	if got != want {
		t.Fatalf("stats\n got %+v\nwant %+v", got, want)
	}
	// Node 3 comes back into partition 0's ISR; partition 1's leader
	// dies with nobody else in sync: it is offline.
	v = testView(true,
		meta.PartitionState{Leader: 1, LeaderEpoch: 0, ISR: []int32{1, 3}},
		meta.PartitionState{Leader: 2, LeaderEpoch: 1, ISR: []int32{2}})
	delete(v.Nodes, 2)
	c.observe(v)
	got = c.stats(v, 3)
	want = metrics.ClusterStats{Nodes: 2, Partitions: 2, UnderReplicated: 1, Offline: 1,
		LeaderElections: 1, ISRShrinks: 3, ISRExpands: 1}
	if got != want {
		t.Fatalf("stats\n got %+v\nwant %+v", got, want)
	}
}
