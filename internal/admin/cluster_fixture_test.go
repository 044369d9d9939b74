package admin

import "github.com/groupd/groupd/internal/inspect"

// fakeCluster serves a fixed picture of a cluster.
type fakeCluster struct {
	c  inspect.Cluster
	ps []inspect.ClusterPartition
}

func (f *fakeCluster) Cluster() (inspect.Cluster, []inspect.ClusterPartition) {
	return f.c, append([]inspect.ClusterPartition(nil), f.ps...)
}

// sampleCluster is four nodes, one of them (4) gone, seen from node 2,
// with node 1 the controller: "orders" has six partitions over three
// replicas, of which partition 2 lost node 4 from its ISR
// (under-replicated), partition 5 lost its only in-sync replica, node 4
// (offline), and partition 3 is being moved from node 4 to node 3;
// "__consumer_offsets" and "audit" are healthy.
func sampleCluster() *fakeCluster {
	f := &fakeCluster{c: inspect.Cluster{ClusterID: "dev-cluster", NodeID: 2, Controller: 1, Nodes: []inspect.ClusterNode{
		{ID: 1, Host: "10.0.0.1", Port: 9092, Rack: "rack-a", Controller: true},
		{ID: 2, Host: "10.0.0.2", Port: 9092, Rack: "rack-b", Self: true},
		{ID: 3, Host: "10.0.0.3", Port: 9092, Rack: "rack-c"},
	}}}
	add := func(p inspect.ClusterPartition) {
		if p.OfflineReplicas == nil {
			p.OfflineReplicas = []int32{}
		}
		f.ps = append(f.ps, p)
		f.c.Partitions.Total++
		if p.UnderReplicated {
			f.c.Partitions.UnderReplicated++
		}
		if p.Offline {
			f.c.Partitions.Offline++
		}
		if p.Reassigning {
			f.c.Partitions.Reassigning++
		}
		if p.Leader == f.c.NodeID {
			f.c.Partitions.Leading++
		}
	}
	for p := range int32(3) {
		add(inspect.ClusterPartition{Topic: "__consumer_offsets", Partition: p, Leader: 1 + p, LeaderEpoch: 1,
			Replicas: []int32{1 + p, 1 + (p+1)%3, 1 + (p+2)%3}, ISR: []int32{1 + p, 1 + (p+1)%3, 1 + (p+2)%3}})
	}
	add(inspect.ClusterPartition{Topic: "audit", Partition: 0, Leader: 3, LeaderEpoch: 0, Replicas: []int32{3, 1}, ISR: []int32{3, 1}})
	add(inspect.ClusterPartition{Topic: "orders", Partition: 0, Leader: 1, LeaderEpoch: 3, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}})
	add(inspect.ClusterPartition{Topic: "orders", Partition: 1, Leader: 2, LeaderEpoch: 2, Replicas: []int32{2, 3, 1}, ISR: []int32{2, 3, 1}})
	add(inspect.ClusterPartition{Topic: "orders", Partition: 2, Leader: 2, LeaderEpoch: 5, Replicas: []int32{4, 2, 1}, ISR: []int32{2, 1},
		OfflineReplicas: []int32{4}, UnderReplicated: true})
	add(inspect.ClusterPartition{Topic: "orders", Partition: 3, Leader: 1, LeaderEpoch: 1, Replicas: []int32{1, 4, 2, 3}, ISR: []int32{1, 2},
		OfflineReplicas: []int32{4}, UnderReplicated: true, Reassigning: true, AddingReplicas: []int32{3}, RemovingReplicas: []int32{4}})
	add(inspect.ClusterPartition{Topic: "orders", Partition: 4, Leader: 3, LeaderEpoch: 2, Replicas: []int32{3, 1, 2}, ISR: []int32{3, 1, 2}})
	add(inspect.ClusterPartition{Topic: "orders", Partition: 5, Leader: -1, LeaderEpoch: 7, Replicas: []int32{4, 1, 3}, ISR: []int32{4},
		OfflineReplicas: []int32{4}, Offline: true})
	f.c.Partitions.Topics = 3
	return f
}
