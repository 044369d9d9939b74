package metrics

import "testing"

func TestFetchSessionMetrics(t *testing.T) {
	m := New(Config{})
	st := FetchSessionStats{Sessions: 3, Partitions: 1200, Created: 9, Evicted: 2}
	m.WatchFetchSessions(func() FetchSessionStats { return st })
	want := map[string]float64{"groupd_fetch_sessions": 3, "groupd_fetch_session_partitions": 1200,
		"groupd_fetch_sessions_created_total": 9, "groupd_fetch_session_evictions_total": 2}
	check := func() {
		t.Helper()
		fams := scrape(t, m)
		for name, v := range want {
			f := fams[name]
			if f == nil || len(f.Metric) != 1 {
				t.Fatalf("%s missing: %v", name, f)
			}
			got := f.Metric[0].GetGauge().GetValue() + f.Metric[0].GetCounter().GetValue()
			if got != v {
				t.Errorf("%s = %v, want %v", name, got, v)
			}
		}
	}
	check()
	st.Sessions, st.Evicted = 1, 5 // read again at the next scrape
	want["groupd_fetch_sessions"], want["groupd_fetch_session_evictions_total"] = 1, 5
	check()
	var nilMetrics *Metrics
	nilMetrics.WatchFetchSessions(func() FetchSessionStats { return st })
}
