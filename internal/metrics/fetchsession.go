package metrics

import "github.com/prometheus/client_golang/prometheus"

// FetchSessionStats is what the fetch session metrics read when scraped.
type FetchSessionStats struct {
	Sessions, Partitions int
	Created, Evicted     uint64
}

// WatchFetchSessions registers the incremental fetch session metrics,
// read from stats at every scrape: the open sessions and the partitions
// they hold, and the sessions opened and evicted. Call it once.
func (m *Metrics) WatchFetchSessions(stats func() FetchSessionStats) {
	if m == nil {
		return
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "groupd_fetch_sessions",
			Help: "Incremental fetch sessions (KIP-227) open now.",
		}, func() float64 { return float64(stats().Sessions) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "groupd_fetch_session_partitions",
			Help: "Partitions held by the open incremental fetch sessions.",
		}, func() float64 { return float64(stats().Partitions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "groupd_fetch_sessions_created_total",
			Help: "Incremental fetch sessions opened.",
		}, func() float64 { return float64(stats().Created) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "groupd_fetch_session_evictions_total",
			Help: "Incremental fetch sessions evicted to make room for another (--max-incremental-fetch-session-cache-slots).",
		}, func() float64 { return float64(stats().Evicted) }),
	)
}
