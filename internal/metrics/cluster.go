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
}

// WatchCluster registers the cluster metrics, read from stats at every
// scrape. Call it once, in cluster mode.
func (m *Metrics) WatchCluster(stats func() ClusterStats) {
	if m == nil {
		return
	}
	gauge := func(name, help string, f func(ClusterStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(stats()) })
	}
	counter := func(name, help string, f func(ClusterStats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(stats()) })
	}
	m.reg.MustRegister(
		gauge("groupd_cluster_nodes", "Live nodes of the cluster, as this node sees etcd.",
			func(s ClusterStats) float64 { return float64(s.Nodes) }),
		gauge("groupd_cluster_controller", "1 if this node is the cluster's controller, else 0.",
			func(s ClusterStats) float64 { return b2f(s.Controller) }),
		gauge("groupd_cluster_partitions", "Partitions of the cluster's topics.",
			func(s ClusterStats) float64 { return float64(s.Partitions) }),
		gauge("groupd_cluster_under_replicated_partitions", "Partitions whose ISR is smaller than their replica list.",
			func(s ClusterStats) float64 { return float64(s.UnderReplicated) }),
		gauge("groupd_cluster_offline_partitions", "Partitions without a live leader.",
			func(s ClusterStats) float64 { return float64(s.Offline) }),
		gauge("groupd_cluster_leader_partitions", "Partitions this node leads.",
			func(s ClusterStats) float64 { return float64(s.Leading) }),
		counter("groupd_cluster_leader_elections_total", "Leader epochs seen to change in etcd since this node started.",
			func(s ClusterStats) float64 { return float64(s.LeaderElections) }),
		counter("groupd_cluster_isr_shrinks_total", "ISRs seen to shrink in etcd since this node started.",
			func(s ClusterStats) float64 { return float64(s.ISRShrinks) }),
		counter("groupd_cluster_isr_expands_total", "ISRs seen to grow in etcd since this node started.",
			func(s ClusterStats) float64 { return float64(s.ISRExpands) }),
	)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
