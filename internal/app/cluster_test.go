package app

import (
	"reflect"
	"testing"

	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/inspect"
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

// TestClusterPicture checks the admin API's picture of a view: the nodes
// with this node and the controller marked, each partition's flags, and
// counts that agree with the metrics' reading of the same view.
func TestClusterPicture(t *testing.T) {
	// Node 3 is dead. Partition 0 is led by 1 with 3 out of its ISR
	// and is being moved from 3 to 4; partition 1's leader is node 3,
	// which is dead: it is offline.
	v := testView(false,
		meta.PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2}},
		meta.PartitionState{Leader: 3, LeaderEpoch: 2, ISR: []int32{3}})
	v.Nodes[2] = meta.NodeInfo{ID: 2, Host: "h2", Port: 9092, Rack: "r2"}
	v.Reassignments[view.TP{Topic: meta.ID{1}, Partition: 0}] = view.Reassignment{Reassignment: meta.Reassignment{Target: []int32{1, 2, 4}, Adding: []int32{4}, Removing: []int32{3}}}

	c, ps := clusterPicture(v, 2, "dev")
	if c.ClusterID != "dev" || c.NodeID != 2 || c.Controller != 1 {
		t.Errorf("cluster id %q, node %d, controller %d; want dev, 2, 1", c.ClusterID, c.NodeID, c.Controller)
	}
	want := []inspect.ClusterNode{{ID: 1, Controller: true}, {ID: 2, Host: "h2", Port: 9092, Rack: "r2", Self: true}}
	if !reflect.DeepEqual(c.Nodes, want) {
		t.Errorf("nodes\n got %+v\nwant %+v", c.Nodes, want)
	}
	wantPs := []inspect.ClusterPartition{
		{Topic: "t", Partition: 0, Leader: 1, LeaderEpoch: 4, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}, OfflineReplicas: []int32{3},
			UnderReplicated: true, Reassigning: true, AddingReplicas: []int32{4}, RemovingReplicas: []int32{3}},
		{Topic: "t", Partition: 1, Leader: -1, LeaderEpoch: 2, Replicas: []int32{2, 3, 1}, ISR: []int32{3}, OfflineReplicas: []int32{3},
			Offline: true},
	}
	if !reflect.DeepEqual(ps, wantPs) {
		t.Errorf("partitions\n got %+v\nwant %+v", ps, wantPs)
	}
	wantCounts := inspect.PartitionCounts{Topics: 1, Total: 2, UnderReplicated: 1, Offline: 1, Reassigning: 1}
	if c.Partitions != wantCounts {
		t.Errorf("counts %+v, want %+v", c.Partitions, wantCounts)
	}
	// The metrics count the same view the same way.
	var cc clusterCounts
	s := cc.stats(v, 2)
	if s.Partitions != c.Partitions.Total || s.UnderReplicated != c.Partitions.UnderReplicated ||
		s.Offline != c.Partitions.Offline || s.Leading != c.Partitions.Leading {
		t.Errorf("metrics %+v disagree with the picture's counts %+v", s, c.Partitions)
	}
	// Node 1 leads partition 0.
	if c, _ := clusterPicture(v, 1, "dev"); c.Partitions.Leading != 1 || !c.Nodes[0].Self {
		t.Errorf("node 1's picture: leading %d, nodes %+v", c.Partitions.Leading, c.Nodes)
	}
}
