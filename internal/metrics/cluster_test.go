package metrics

import "testing"

// The cluster metrics are read from the stats at each scrape, once per
// scrape, every series of it from that one reading.
func TestClusterMetrics(t *testing.T) {
	m := New(Config{})
	st := ClusterStats{Nodes: 3, Controller: true, Partitions: 12, UnderReplicated: 2, Offline: 1, Leading: 4,
		LeaderElections: 5, ISRShrinks: 6, ISRExpands: 7, ReplicaMaxLag: 1234}
	reads := 0
	m.WatchCluster(func() ClusterStats { reads++; return st })
	want := map[string]float64{
		"groupd_cluster_nodes": 3, "groupd_cluster_controller": 1, "groupd_cluster_partitions": 12,
		"groupd_cluster_under_replicated_partitions": 2, "groupd_cluster_offline_partitions": 1,
		"groupd_cluster_leader_partitions": 4, "groupd_cluster_replica_max_lag": 1234,
		"groupd_cluster_leader_elections_total": 5, "groupd_cluster_isr_shrinks_total": 6,
		"groupd_cluster_isr_expands_total": 7,
	}
	counters := map[string]bool{"groupd_cluster_leader_elections_total": true, "groupd_cluster_isr_shrinks_total": true,
		"groupd_cluster_isr_expands_total": true}
	check := func() {
		t.Helper()
		fams := scrape(t, m)
		for name, v := range want {
			f := fams[name]
			if f == nil || len(f.Metric) != 1 {
				t.Fatalf("%s missing: %v", name, f)
			}
			if (f.Metric[0].Counter != nil) != counters[name] {
				t.Errorf("%s: counter %v, want %v", name, f.Metric[0].Counter != nil, counters[name])
			}
			if got := value(fams, name); got != v {
				t.Errorf("%s = %v, want %v", name, got, v)
			}
		}
	}
	check()
	if reads != 1 {
		t.Errorf("one scrape read the stats %d times, want once", reads)
	}
	st.ReplicaMaxLag, st.Controller, st.Offline = 0, false, 0
	want["groupd_cluster_replica_max_lag"], want["groupd_cluster_controller"], want["groupd_cluster_offline_partitions"] = 0, 0, 0
	check()
	var nilMetrics *Metrics
	nilMetrics.WatchCluster(func() ClusterStats { return st })
}
