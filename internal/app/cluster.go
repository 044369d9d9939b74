package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/cluster"
	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/kv/etcdkv"
	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/inspect"
	"github.com/groupd/groupd/internal/metrics"
)

// ClusterConfig makes groupd a node of a cluster whose agreements are in
// etcd (docs/cluster.md). Without EtcdEndpoints groupd is a single node.
type ClusterConfig struct {
	// EtcdEndpoints are the etcd client URLs.
	EtcdEndpoints []string
	// ClusterID names the cluster; Prefix, if empty, is
	// /groupd/<ClusterID>/.
	ClusterID string
	Prefix    string
	// EtcdCACert, EtcdCert and EtcdKey are PEM files for etcd's TLS:
	// the CA that signed etcd's certificate, and this node's client
	// certificate and key.
	EtcdCACert, EtcdCert, EtcdKey string
	Rack                          string
	// SessionTimeout is broker.session.timeout.ms: a node whose lease
	// etcd has not seen renewed for this long is dead to the cluster.
	SessionTimeout time.Duration
	// DefaultReplicationFactor is default.replication.factor;
	// MinInsyncReplicas is the broker's min.insync.replicas.
	DefaultReplicationFactor int
	MinInsyncReplicas        int
	// AutoLeaderRebalance is auto.leader.rebalance.enable.
	AutoLeaderRebalance bool
	// ReplicaLagTimeMax is replica.lag.time.max.ms.
	ReplicaLagTimeMax time.Duration
}

// Enabled reports whether the node joins a cluster.
func (c ClusterConfig) Enabled() bool { return len(c.EtcdEndpoints) > 0 }

// DefaultClusterID is the cluster id of --cluster-id's default.
const DefaultClusterID = "groupd"

// id is the cluster id, --cluster-id's default when none is set.
func (c ClusterConfig) id() string {
	if c.ClusterID == "" {
		return DefaultClusterID
	}
	return c.ClusterID
}

func (c ClusterConfig) prefix() string {
	p := c.Prefix
	if p == "" {
		p = "/groupd/" + c.id()
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

// clusterSide is a running node's membership and replicas.
type clusterSide struct {
	cfg       ClusterConfig
	counts    clusterCounts
	etcd      *clientv3.Client
	node      *cluster.Node
	reps      *cluster.Replicas
	transport *cluster.KafkaTransport
	log       *slog.Logger
	// configsAt is, per topic, the revision of its key whose configs the
	// replicas here were given; only the app's view loop touches it.
	configsAt map[meta.ID]int64
	// topicNames are the topics of the last view the app's view loop
	// saw, so that it sees which were deleted.
	topicNames map[string]bool
}

// deletedTopics returns the topics of the last view that v no longer
// has. The first call sees none deleted.
func (cs *clusterSide) deletedTopics(v *view.View) []string {
	var gone []string
	for name := range cs.topicNames {
		if _, ok := v.Topic(name); !ok {
			gone = append(gone, name)
		}
	}
	cs.topicNames = make(map[string]bool, len(v.Topics))
	for name := range v.Topics {
		cs.topicNames[name] = true
	}
	slices.Sort(gone)
	return gone
}

// startCluster connects to etcd, registers the node at host:port, drops
// the replicas of topics deleted while it was down, and starts its
// replicas.
func startCluster(ctx context.Context, cfg ClusterConfig, nodeID int32, host string, port int32, b *broker.Broker, log *slog.Logger,
	leadership func(v *view.View, tp view.TP, leading bool, epoch int32),
) (*clusterSide, error) {
	var tlsCfg *tls.Config
	if cfg.EtcdCACert != "" || cfg.EtcdCert != "" || cfg.EtcdKey != "" {
		info := transport.TLSInfo{CertFile: cfg.EtcdCert, KeyFile: cfg.EtcdKey, TrustedCAFile: cfg.EtcdCACert}
		var err error
		if tlsCfg, err = info.ClientConfig(); err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.EtcdEndpoints,
		DialTimeout: 5 * time.Second,
		TLS:         tlsCfg,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", cfg.EtcdEndpoints, err)
	}
	cs := &clusterSide{cfg: cfg, etcd: cli, log: log}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cs.node, err = cluster.Start(sctx, cluster.Config{
		NodeID: nodeID, Host: host, Port: port, Rack: cfg.Rack, EmptyDisk: emptyDisk(b, log),
		Prefix: cfg.prefix(), KV: etcdkv.New(cli, kv.RealClock()), Logger: log,
		SessionTimeout:      cfg.SessionTimeout,
		AutoLeaderRebalance: cfg.AutoLeaderRebalance,
	})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("joining the cluster at %v under %s: %w", cfg.EtcdEndpoints, cfg.prefix(), err)
	}
	cs.counts.observe(cs.node.View())
	cs.deletedTopics(cs.node.View()) // the topics deletions are seen against
	cs.dropDeletedReplicas(b)
	cs.transport = cluster.NewKafkaTransport(cs.node)
	cs.reps = cluster.NewReplicas(cluster.ReplicasConfig{
		Node: cs.node, Logs: brokerLogs{b}, Transport: cs.transport, Logger: log,
		MinInsync: cfg.MinInsyncReplicas, LagTimeMax: cfg.ReplicaLagTimeMax,
		Leadership: func(tp view.TP, leading bool, epoch int32) {
			if leadership != nil {
				leadership(cs.node.View(), tp, leading, epoch)
			}
		},
	})
	log.Info("joined the cluster", "node", nodeID, "etcd", cfg.EtcdEndpoints, "prefix", cfg.prefix(),
		"nodes", len(cs.node.View().Nodes), "controller", cs.node.View().ControllerID())
	return cs, nil
}

// checkOffsetsTopic refuses a start whose --offsets-topic-partitions
// differs from the partition count of the cluster's __consumer_offsets:
// the partition of a group is its hash modulo that count, so nodes that
// disagree would look for a group's records in different partitions.
func (cs *clusterSide) checkOffsetsTopic(partitions int) error {
	t, ok := cs.node.View().Topic(broker.OffsetsTopicName)
	if !ok || len(t.Partitions) == partitions {
		return nil
	}
	return fmt.Errorf("the cluster's %s has %d partitions and this node was started with --offsets-topic-partitions %d: every node must use the topic's count",
		broker.OffsetsTopicName, len(t.Partitions), partitions)
}

// applyTopicConfigs gives the replicas here the configs of every topic
// whose key changed since they were last given them: an AlterConfigs on
// any node reaches every replica of the topic through etcd.
func (cs *clusterSide) applyTopicConfigs(b *broker.Broker) {
	if cs.configsAt == nil {
		cs.configsAt = map[meta.ID]int64{}
	}
	v := cs.node.View()
	for _, t := range v.Topics {
		if cs.configsAt[t.ID] == t.Revision {
			continue
		}
		cs.configsAt[t.ID] = t.Revision
		b.SetReplicaConfigs(broker.TopicID(t.ID), t.Configs)
	}
	for id := range cs.configsAt {
		if _, ok := v.TopicByID(id); !ok {
			delete(cs.configsAt, id)
		}
	}
}

// emptyDisk says, at each registration of the node, whether it holds no
// replica log at all: the controller does not elect such a node from an
// ISR it joined with a log it no longer has. A directory it cannot list
// counts as not empty, as before the question was asked.
func emptyDisk(b *broker.Broker, log *slog.Logger) func() bool {
	return func() bool {
		keys, err := b.ReplicaKeys()
		if err != nil {
			log.Warn("listing the replica logs", "err", err)
			return false
		}
		if len(keys) == 0 {
			log.Info("no replica log on disk: registering as a node with an empty disk")
		}
		return len(keys) == 0
	}
}

// Cluster is this node's picture of the cluster, for the admin API and
// the status page (admin.ClusterSource).
func (cs *clusterSide) Cluster() (inspect.Cluster, []inspect.ClusterPartition) {
	return clusterPicture(cs.node.View(), cs.node.ID(), cs.cfg.id())
}

// dropDeletedReplicas deletes the replica logs of topics the cluster no
// longer has: they were deleted while this node was away.
func (cs *clusterSide) dropDeletedReplicas(b *broker.Broker) {
	keys, err := b.ReplicaKeys()
	if err != nil {
		cs.log.Warn("listing the replica logs", "err", err)
		return
	}
	v := cs.node.View()
	for _, k := range keys {
		if _, ok := v.TopicByID(meta.ID(k.Topic)); ok {
			continue
		}
		if err := b.DropReplica(k); err != nil {
			cs.log.Warn("deleting the replica of a deleted topic", "topic_id", k.Topic.String(), "partition", k.Partition, "err", err)
			continue
		}
		cs.log.Info("deleted the replica of a topic deleted while this node was away", "topic_id", k.Topic.String(), "partition", k.Partition)
	}
}

// shutdown hands this node's leaderships to other replicas (a controlled
// shutdown, as Kafka's on SIGTERM), within ctx.
func (cs *clusterSide) shutdown(ctx context.Context) {
	if err := cs.node.ControlledShutdown(ctx); err != nil {
		cs.log.Warn("controlled shutdown did not finish; leaderships move once the node's lease expires", "err", err)
	}
}

// close stops the replicas and leaves the cluster.
func (cs *clusterSide) close() error {
	cs.reps.Close()
	cs.transport.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := cs.node.Close(ctx)
	return errors.Join(err, cs.etcd.Close())
}

// brokerLogs opens replica logs in the broker's data directory.
type brokerLogs struct{ b *broker.Broker }

func (l brokerLogs) Replica(t meta.Topic, p int32) (cluster.ReplicaLog, error) {
	return l.b.OpenReplica(broker.ReplicaKey{Topic: broker.TopicID(t.ID), Partition: p}, t.Name, t.Configs)
}

func (l brokerLogs) Drop(topic meta.ID, p int32) error {
	return l.b.DropReplica(broker.ReplicaKey{Topic: broker.TopicID(topic), Partition: p})
}

// clusterTopics is the coordinator's picture of the topics in cluster
// mode: the cluster's, from the node's view.
func clusterTopics(cs *atomic.Pointer[clusterSide]) func() []group.Topic {
	return func() []group.Topic {
		c := cs.Load()
		if c == nil {
			return nil
		}
		ts := c.node.View().SortedTopics()
		out := make([]group.Topic, len(ts))
		for i, t := range ts {
			out[i] = group.Topic{Name: t.Name, ID: consumer.TopicID(t.ID), Partitions: int32(len(t.Partitions))}
		}
		return out
	}
}

// clusterHighWatermark is a partition's high watermark for the
// coordinator's lag figures, when this node holds a replica of it.
func clusterHighWatermark(cs *atomic.Pointer[clusterSide]) func(string, int32) (int64, bool) {
	return func(topic string, p int32) (int64, bool) {
		c := cs.Load()
		if c == nil {
			return 0, false
		}
		t, ok := c.node.View().Topic(topic)
		if !ok {
			return 0, false
		}
		s, ok := c.reps.Replica(view.TP{Topic: t.ID, Partition: p})
		if !ok {
			return 0, false
		}
		return s.Log().HighWatermark(), true
	}
}

// clusterCounts tallies the changes a node sees in the cluster's
// partition states, view after view, for the cluster metrics.
type clusterCounts struct {
	mu                              sync.Mutex
	last                            *view.View
	elections, isrShrinks, isrGrows uint64
}

// observe counts what changed between the last view and v.
func (c *clusterCounts) observe(v *view.View) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil {
		e, s, g := viewChanges(c.last, v)
		c.elections += e
		c.isrShrinks += s
		c.isrGrows += g
	}
	c.last = v
}

// viewChanges counts the partitions whose leader epoch moved, and whose
// ISR shrank or grew, from old to cur. Partitions new in cur count for
// nothing: their first state is not a change.
func viewChanges(old, cur *view.View) (elections, shrinks, grows uint64) {
	for tp, st := range cur.States {
		was, ok := old.States[tp]
		if !ok {
			continue
		}
		if st.LeaderEpoch > was.LeaderEpoch {
			elections++
		}
		switch {
		case len(st.ISR) < len(was.ISR):
			shrinks++
		case len(st.ISR) > len(was.ISR):
			grows++
		}
	}
	return elections, shrinks, grows
}

// stats is the cluster metrics' reading of node me's view v.
func (c *clusterCounts) stats(v *view.View, me int32) metrics.ClusterStats {
	s := metrics.ClusterStats{Nodes: len(v.Nodes), Controller: v.ControllerID() == me}
	for _, t := range v.Topics {
		for p := range t.Partitions {
			st, offline, under := partitionHealth(v, t, p)
			s.Partitions++
			switch {
			case offline:
				s.Offline++
				continue
			case under:
				s.UnderReplicated++
			}
			if st.Leader == me {
				s.Leading++
			}
		}
	}
	c.mu.Lock()
	s.LeaderElections, s.ISRShrinks, s.ISRExpands = c.elections, c.isrShrinks, c.isrGrows
	c.mu.Unlock()
	return s
}

// partitionHealth is partition p of t as v has it: its state, whether it
// is offline (no state, no leader, or a leader that is not alive), and
// whether, led, its ISR is smaller than its replica list. The metrics,
// the admin API and the status page all count by it.
func partitionHealth(v *view.View, t view.Topic, p int) (st view.State, offline, under bool) {
	st, ok := v.States[view.TP{Topic: t.ID, Partition: int32(p)}]
	if !ok || st.Leader == meta.NoLeader || !v.Alive(st.Leader) {
		return st, true, false
	}
	return st, false, len(st.ISR) < len(t.Partitions[p])
}

// clusterPicture is node me's view v for the admin API and the status
// page: the live nodes, and every partition, by topic and partition.
func clusterPicture(v *view.View, me int32, clusterID string) (inspect.Cluster, []inspect.ClusterPartition) {
	c := inspect.Cluster{ClusterID: clusterID, NodeID: me, Controller: v.ControllerID(), Nodes: []inspect.ClusterNode{}}
	for _, n := range v.SortedNodes() {
		c.Nodes = append(c.Nodes, inspect.ClusterNode{ID: n.ID, Host: n.Host, Port: n.Port, Rack: n.Rack,
			Self: n.ID == me, Controller: n.ID == c.Controller})
	}
	ps := []inspect.ClusterPartition{}
	for _, t := range v.SortedTopics() {
		c.Partitions.Topics++
		for p, replicas := range t.Partitions {
			st, offline, under := partitionHealth(v, t, p)
			cp := inspect.ClusterPartition{Topic: t.Name, Partition: int32(p), Leader: st.Leader, LeaderEpoch: st.LeaderEpoch,
				Replicas: slices.Clone(replicas), ISR: slices.Clone(st.ISR), OfflineReplicas: []int32{},
				UnderReplicated: under, Offline: offline}
			if cp.Replicas == nil {
				cp.Replicas = []int32{}
			}
			if cp.ISR == nil {
				cp.ISR = []int32{}
			}
			if offline {
				cp.Leader = meta.NoLeader
			}
			for _, r := range replicas {
				if !v.Alive(r) {
					cp.OfflineReplicas = append(cp.OfflineReplicas, r)
				}
			}
			if r, ok := v.Reassignments[view.TP{Topic: t.ID, Partition: int32(p)}]; ok {
				cp.Reassigning, cp.AddingReplicas, cp.RemovingReplicas = true, slices.Clone(r.Adding), slices.Clone(r.Removing)
				c.Partitions.Reassigning++
			}
			c.Partitions.Total++
			switch {
			case offline:
				c.Partitions.Offline++
			case under:
				c.Partitions.UnderReplicated++
			}
			if !offline && st.Leader == me {
				c.Partitions.Leading++
			}
			ps = append(ps, cp)
		}
	}
	return c, ps
}
