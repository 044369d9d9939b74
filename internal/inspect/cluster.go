package inspect

// The cluster as one node sees it (its view of etcd), for the admin API's
// /api/v1/cluster and /api/v1/cluster/partitions and the status page's
// Cluster tab. Like the group views, they are plain values.

// Cluster is the cluster's nodes and a count of its partitions.
type Cluster struct {
	ClusterID string `json:"cluster_id"`
	// NodeID is the node that answers.
	NodeID int32 `json:"node_id"`
	// Controller is the controller's node id, -1 while none is elected.
	Controller int32 `json:"controller"`
	// Nodes are the live nodes, by id.
	Nodes      []ClusterNode   `json:"nodes"`
	Partitions PartitionCounts `json:"partitions"`
}

// ClusterNode is a live node.
type ClusterNode struct {
	ID   int32  `json:"id"`
	Host string `json:"host"`
	Port int32  `json:"port"`
	// Rack is empty when the node has none.
	Rack string `json:"rack"`
	// Self marks the node that answers; Controller the controller.
	Self       bool `json:"self"`
	Controller bool `json:"controller"`
}

// PartitionCounts counts the cluster's partitions, every topic's
// (internal ones too), by the flags of ClusterPartition.
type PartitionCounts struct {
	Topics          int `json:"topics"`
	Total           int `json:"total"`
	UnderReplicated int `json:"under_replicated"`
	Offline         int `json:"offline"`
	Reassigning     int `json:"reassigning"`
	// Leading counts those the answering node leads.
	Leading int `json:"leading"`
}

// ClusterPartition is one partition's leadership and replicas.
type ClusterPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Leader is the leading node, -1 when the partition has no live
	// leader (as Metadata answers).
	Leader      int32 `json:"leader"`
	LeaderEpoch int32 `json:"leader_epoch"`
	// Replicas are the assigned replicas, the preferred leader first;
	// ISR the in-sync ones; OfflineReplicas those on no live node.
	Replicas        []int32 `json:"replicas"`
	ISR             []int32 `json:"isr"`
	OfflineReplicas []int32 `json:"offline_replicas"`
	// UnderReplicated is a partition with a live leader whose ISR is
	// smaller than its replica list (Kafka's UnderReplicatedPartitions,
	// which the leader reports); Offline one without a live leader
	// (Kafka's OfflinePartitionsCount). No partition is both.
	UnderReplicated bool `json:"under_replicated"`
	Offline         bool `json:"offline"`
	// Reassigning marks a reassignment under way; AddingReplicas and
	// RemovingReplicas are its moves.
	Reassigning      bool    `json:"reassigning"`
	AddingReplicas   []int32 `json:"adding_replicas,omitempty"`
	RemovingReplicas []int32 `json:"removing_replicas,omitempty"`
}
