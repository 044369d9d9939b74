package main

import (
	"github.com/spf13/pflag"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/cluster"
	"github.com/groupd/groupd/internal/replica"
)

// addClusterFlags adds the flags that make groupd a node of a cluster,
// named after Kafka's broker configs where Kafka has one.
func addClusterFlags(f *pflag.FlagSet, c *app.ClusterConfig) {
	f.StringSliceVar(&c.EtcdEndpoints, "etcd-endpoints", nil, "etcd client URLs (URL[,URL...]): join the cluster whose agreements etcd holds; without it groupd is a single node")
	f.StringVar(&c.ClusterID, "cluster-id", app.DefaultClusterID, "the cluster's id, which Metadata reports and the default --etcd-prefix names")
	f.StringVar(&c.Prefix, "etcd-prefix", "", "etcd key prefix of the cluster (default /groupd/<cluster id>)")
	f.StringVar(&c.EtcdCACert, "etcd-cacert", "", "PEM file of the CA that signed etcd's certificate (etcd over TLS)")
	f.StringVar(&c.EtcdCert, "etcd-cert", "", "PEM file of this node's etcd client certificate")
	f.StringVar(&c.EtcdKey, "etcd-key", "", "PEM file of this node's etcd client key")
	f.StringVar(&c.Rack, "rack", "", "this node's rack (broker.rack): replicas of a partition are placed on distinct racks first")
	f.DurationVar(&c.SessionTimeout, "node-session-timeout", cluster.DefaultSessionTimeout, "a node whose etcd lease is not renewed for this long is dead to the cluster and its partitions get new leaders (broker.session.timeout.ms)")
	f.IntVar(&c.DefaultReplicationFactor, "default-replication-factor", 1, "replication factor of topics created without one, and of auto-created topics, at most the live node count (default.replication.factor)")
	f.IntVar(&c.MinInsyncReplicas, "min-insync-replicas", 1, "fewest in-sync replicas an acks=all produce needs (min.insync.replicas; a topic config overrides it)")
	f.BoolVar(&c.AutoLeaderRebalance, "auto-leader-rebalance-enable", true, "move leadership back to a partition's preferred replica when it is alive and in sync (auto.leader.rebalance.enable)")
	f.DurationVar(&c.ReplicaLagTimeMax, "replica-lag-time-max", replica.DefaultLagTimeMax, "a follower that has not caught up with the leader's log end for this long leaves the ISR (replica.lag.time.max.ms)")
}
