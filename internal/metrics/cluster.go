package metrics

import "github.com/prometheus/client_golang/prometheus"

// ClusterStats is what the cluster metrics read when scraped: this node's
// picture of the cluster (its view of etcd), and the changes it has seen.
type ClusterStats struct {
	// Nodes are the live nodes; Controller is whether this node is the
	// controller.
	Nodes      int
	Controller bool
	// Partitions counts every partition; UnderReplicated those whose ISR
	// is smaller than their replica list; Offline those without a live
	// leader; Leading those this node leads.
	Partitions, UnderReplicated, Offline, Leading int
	// LeaderElections counts the leader epochs seen to change, and
	// ISRShrinks and ISRExpands the ISR changes, in etcd since the start.
	LeaderElections, ISRShrinks, ISRExpands uint64
	// ReplicaMaxLag is the largest lag, in records, of a follower behind
	// this node as leader: its log end offset less the follower's last
	// fetch offset, over the partitions it leads.
	ReplicaMaxLag int64
}

// clusterMetric is one series of the cluster metrics.
type clusterMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(ClusterStats) float64
}

// clusterCollector reads the stats once per scrape, so that every series
// of a scrape is of one reading.
type clusterCollector struct {
	stats   func() ClusterStats
	metrics []clusterMetric
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, m := range c.metrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(s))
	}
}

// WatchCluster registers the cluster metrics, read from stats at every
// scrape. Call it once, in cluster mode.
func (m *Metrics) WatchCluster(stats func() ClusterStats) {
	if m == nil {
		return
	}
	c := &clusterCollector{stats: stats}
	add := func(typ prometheus.ValueType, name, help string, f func(ClusterStats) float64) {
		c.metrics = append(c.metrics, clusterMetric{prometheus.NewDesc(name, help, nil, nil), typ, f})
	}
	gauge := func(name, help string, f func(ClusterStats) float64) { add(prometheus.GaugeValue, name, help, f) }
	counter := func(name, help string, f func(ClusterStats) float64) { add(prometheus.CounterValue, name, help, f) }
	gauge("groupd_cluster_nodes", "Live nodes of the cluster, as this node sees etcd.",
		func(s ClusterStats) float64 { return float64(s.Nodes) })
	gauge("groupd_cluster_controller", "1 if this node is the cluster's controller, else 0.",
		func(s ClusterStats) float64 { return b2f(s.Controller) })
	gauge("groupd_cluster_partitions", "Partitions of the cluster's topics.",
		func(s ClusterStats) float64 { return float64(s.Partitions) })
	gauge("groupd_cluster_under_replicated_partitions", "Partitions whose ISR is smaller than their replica list.",
		func(s ClusterStats) float64 { return float64(s.UnderReplicated) })
	gauge("groupd_cluster_offline_partitions", "Partitions without a live leader.",
		func(s ClusterStats) float64 { return float64(s.Offline) })
	gauge("groupd_cluster_leader_partitions", "Partitions this node leads.",
		func(s ClusterStats) float64 { return float64(s.Leading) })
	gauge("groupd_cluster_replica_max_lag", "The largest lag, in records, of a follower behind this node as leader: "+
		"its log end offset less the follower's last fetch offset, over the partitions it leads (Kafka's "+
		"ReplicaFetcherManager MaxLag, seen from the leader, so that a follower that stopped fetching shows).",
		func(s ClusterStats) float64 { return float64(s.ReplicaMaxLag) })
	counter("groupd_cluster_leader_elections_total", "Leader epochs seen to change in etcd since this node started.",
		func(s ClusterStats) float64 { return float64(s.LeaderElections) })
	counter("groupd_cluster_isr_shrinks_total", "ISRs seen to shrink in etcd since this node started.",
		func(s ClusterStats) float64 { return float64(s.ISRShrinks) })
	counter("groupd_cluster_isr_expands_total", "ISRs seen to grow in etcd since this node started.",
		func(s ClusterStats) float64 { return float64(s.ISRExpands) })
	m.reg.MustRegister(c)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
