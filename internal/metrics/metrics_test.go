package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/groupd/groupd/internal/inspect"
)

// Metrics provides the hooks the server and the coordinator call, with
// exactly their method sets.
var (
	_ interface {
		ConnectionOpened()
		ConnectionClosed()
		RequestHandled(key, version int16, took time.Duration, err error)
		ConnectionRefused()
	} = (*Metrics)(nil)
	_ interface {
		RebalanceEnded(r inspect.Rebalance)
		StoreWrite(took time.Duration, records int, err error)
	} = (*Metrics)(nil)
)

// scrape fetches /metrics as Prometheus text and parses it with the
// client library's own parser.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	m.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type %q, want text/plain", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.Reader(rec.Body))
	if err != nil {
		t.Fatalf("parsing /metrics as Prometheus text: %v", err)
	}
	return fams
}

// find returns the metric of family name whose labels include labels
// ("k=v" pairs), or nil.
func find(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, lp := range m.Label {
			have[lp.GetName()] = lp.GetValue()
		}
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is a counter's or gauge's value, or a histogram's count; -1 when
// the series is absent.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	m := find(fams, name, labels...)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

func histSum(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	m := find(fams, name, labels...)
	if m == nil || m.Histogram == nil {
		return -1
	}
	return m.Histogram.GetSampleSum()
}

func TestHooksMoveCounters(t *testing.T) {
	m := New(Config{})
	before := scrape(t, m)
	for _, name := range []string{"go_goroutines", "groupd_connections_open", "groupd_coordinator_store_write_errors_total"} {
		if before[name] == nil {
			t.Errorf("fresh /metrics lacks %s", name)
		}
	}
	if v := value(before, "groupd_requests_total", "api=JoinGroup"); v != -1 {
		t.Fatalf("JoinGroup requests before any request: %v, want no series", v)
	}

	m.ConnectionOpened()
	m.ConnectionOpened()
	m.ConnectionOpened()
	m.ConnectionClosed()
	m.ConnectionRefused()
	m.RequestHandled(11, 9, 3*time.Millisecond, nil) // JoinGroup
	m.RequestHandled(11, 5, 2*time.Second, errors.New("closed"))
	m.RequestHandled(8, 9, 500*time.Microsecond, nil) // OffsetCommit
	m.RequestHandled(999, 0, time.Millisecond, nil)   // a key kmsg does not know
	m.StoreWrite(2*time.Millisecond, 7, nil)
	m.StoreWrite(time.Millisecond, 3, errors.New("disk full"))
	m.RebalanceEnded(inspect.Rebalance{
		Protocol: inspect.ProtocolCooperative, Trigger: inspect.TriggerMemberJoined, DurationMs: 1500,
		Moved: []inspect.Move{
			{Topic: "t", Partition: 0, PauseMs: 200, CommitGap: 10},
			{Topic: "t", Partition: 1, PauseMs: 300, CommitGap: -1},
		},
	})
	m.RebalanceEnded(inspect.Rebalance{
		Protocol: inspect.ProtocolEager, Trigger: inspect.TriggerSessionTimeout, DurationMs: 45000,
		Storm: true, Moved: []inspect.Move{{Topic: "t", Partition: 2, PauseMs: 45000, CommitGap: 5}},
	})

	after := scrape(t, m)
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"groupd_connections_open", nil, 2},
		{"groupd_connections_opened_total", nil, 3},
		{"groupd_connections_refused_total", nil, 1},
		{"groupd_requests_total", []string{"api=JoinGroup"}, 2},
		{"groupd_request_errors_total", []string{"api=JoinGroup"}, 1},
		{"groupd_request_duration_seconds", []string{"api=JoinGroup"}, 2},
		{"groupd_requests_total", []string{"api=OffsetCommit"}, 1},
		{"groupd_request_errors_total", []string{"api=OffsetCommit"}, 0},
		{"groupd_requests_total", []string{"api=Unknown"}, 1},
		{"groupd_coordinator_store_write_seconds", nil, 2},
		{"groupd_coordinator_store_write_errors_total", nil, 1},
		{"groupd_coordinator_store_records_written_total", nil, 7},
		{"groupd_rebalances_total", []string{"protocol=cooperative", "trigger=member-joined"}, 1},
		{"groupd_rebalances_total", []string{"protocol=eager", "trigger=session-timeout"}, 1},
		{"groupd_rebalance_storms_total", []string{"protocol=eager", "trigger=session-timeout"}, 1},
		{"groupd_rebalance_storms_total", []string{"protocol=cooperative", "trigger=member-joined"}, -1},
		{"groupd_rebalance_duration_seconds", []string{"protocol=cooperative"}, 1},
		{"groupd_partition_pause_seconds", []string{"protocol=cooperative"}, 2},
		{"groupd_partition_pause_seconds", []string{"protocol=eager"}, 1},
		{"groupd_rebalance_commit_gap_records_total", []string{"protocol=cooperative"}, 10},
		{"groupd_rebalance_commit_gap_records_total", []string{"protocol=eager"}, 5},
	}
	for _, c := range checks {
		if got := value(after, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	sums := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"groupd_request_duration_seconds", []string{"api=JoinGroup"}, 2.003},
		{"groupd_rebalance_duration_seconds", []string{"protocol=eager"}, 45},
		{"groupd_partition_pause_seconds", []string{"protocol=cooperative"}, 0.5},
	}
	for _, c := range sums {
		if got := histSum(after, c.name, c.labels...); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("sum of %s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

func TestNilMetricsHooksDoNothing(t *testing.T) {
	var m *Metrics
	m.ConnectionOpened()
	m.ConnectionClosed()
	m.ConnectionRefused()
	m.RequestHandled(0, 0, time.Millisecond, nil)
	m.StoreWrite(time.Millisecond, 1, nil)
	m.RebalanceEnded(inspect.Rebalance{Moved: []inspect.Move{{}}})
}

// fakeSource serves fixed groups; it records whether every read carried
// a deadline, and can fail.
type fakeSource struct {
	groups     []inspect.Group
	err        error
	failDetail bool
	noDeadline int
	reads      int
}

func (f *fakeSource) read(ctx context.Context) {
	f.reads++
	if _, ok := ctx.Deadline(); !ok {
		f.noDeadline++
	}
}

func (f *fakeSource) Groups(ctx context.Context) ([]inspect.GroupSummary, error) {
	f.read(ctx)
	if f.err != nil {
		return nil, f.err
	}
	out := make([]inspect.GroupSummary, len(f.groups))
	for i, g := range f.groups {
		out[i] = g.GroupSummary
	}
	return out, nil
}

func (f *fakeSource) Group(ctx context.Context, id string) (inspect.Group, bool, error) {
	f.read(ctx)
	if f.failDetail {
		return inspect.Group{}, false, context.DeadlineExceeded
	}
	for _, g := range f.groups {
		if g.Group == id {
			return g, true, nil
		}
	}
	return inspect.Group{}, false, nil
}

func (f *fakeSource) Rebalances(ctx context.Context, id string) ([]inspect.Rebalance, bool, error) {
	return nil, false, nil
}

// group makes a group whose lag is spread over the given topics, one
// partition each, with lag per topic.
func group(id, state string, members int, lags map[string]int64) inspect.Group {
	g := inspect.Group{GroupSummary: inspect.GroupSummary{Group: id, Type: inspect.TypeClassic, State: state, MemberCount: members}}
	topics := make([]string, 0, len(lags))
	for t := range lags {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		for p, l := range []int64{lags[t], 0} {
			g.Offsets = append(g.Offsets, inspect.PartitionOffset{Topic: t, Partition: int32(p), Committed: 100, HighWatermark: 100 + l, Lag: l})
		}
		g.Lag += lags[t]
	}
	return g
}

func TestGroupGaugesAreBounded(t *testing.T) {
	src := &fakeSource{groups: []inspect.Group{
		group("quiet", "Stable", 9, map[string]int64{"a": 0}),
		group("busy", "Stable", 3, map[string]int64{"a": 70, "b": 30}),
		group("behind", "PreparingRebalance", 2, map[string]int64{"a": 500}),
		group("idle", "Empty", 0, map[string]int64{"c": 4}),
		group("tiny", "Stable", 1, map[string]int64{"a": 0}),
	}}
	// One group with unknown lag everywhere.
	src.groups = append(src.groups, inspect.Group{
		GroupSummary: inspect.GroupSummary{Group: "gone", Type: inspect.TypeConsumer, State: "Stable", MemberCount: 4, Lag: -1},
		Offsets:      []inspect.PartitionOffset{{Topic: "deleted", Committed: 3, HighWatermark: -1, Lag: -1}},
	})
	m := New(Config{MaxGroups: 3})
	m.SetSource(src)
	fams := scrape(t, m)

	if got := value(fams, "groupd_group_scrape_success"); got != 1 {
		t.Errorf("scrape success %v, want 1", got)
	}
	if src.noDeadline != 0 || src.reads == 0 {
		t.Errorf("%d of %d source reads had no deadline", src.noDeadline, src.reads)
	}
	states := map[string]float64{
		"state=Stable,type=classic": 3, "state=PreparingRebalance,type=classic": 1,
		"state=Empty,type=classic": 1, "state=Stable,type=consumer": 1,
	}
	for labels, want := range states {
		if got := value(fams, "groupd_groups", strings.Split(labels, ",")...); got != want {
			t.Errorf("groupd_groups{%s} = %v, want %v", labels, got, want)
		}
	}
	// Most lag first: behind (500), busy (100), idle (4); the rest are
	// aggregated.
	if n := len(fams["groupd_group_members"].GetMetric()); n != 3 {
		t.Errorf("%d groupd_group_members series, want 3 (the bound)", n)
	}
	for id, want := range map[string]float64{"behind": 2, "busy": 3, "idle": 0, "quiet": -1, "gone": -1} {
		if got := value(fams, "groupd_group_members", "group="+id); got != want {
			t.Errorf("members of %s = %v, want %v", id, got, want)
		}
	}
	lags := map[string]float64{"group=busy,topic=a": 70, "group=busy,topic=b": 30, "group=behind,topic=a": 500, "group=idle,topic=c": 4}
	for labels, want := range lags {
		if got := value(fams, "groupd_group_lag", strings.Split(labels, ",")...); got != want {
			t.Errorf("groupd_group_lag{%s} = %v, want %v", labels, got, want)
		}
	}
	if n := len(fams["groupd_group_lag"].GetMetric()); n != len(lags) {
		t.Errorf("%d groupd_group_lag series, want %d", n, len(lags))
	}
	for name, want := range map[string]float64{
		"groupd_groups_aggregated":        3,
		"groupd_aggregated_group_members": 9 + 1 + 4,
		"groupd_aggregated_group_lag":     0, // quiet and tiny have none; gone's is unknown
	} {
		if got := value(fams, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	// Every group fits: no aggregation.
	m2 := New(Config{MaxGroups: 100})
	m2.SetSource(src)
	fams = scrape(t, m2)
	if n := len(fams["groupd_group_members"].GetMetric()); n != len(src.groups) {
		t.Errorf("%d member series with room for all, want %d", n, len(src.groups))
	}
	if got := value(fams, "groupd_groups_aggregated"); got != 0 {
		t.Errorf("groupd_groups_aggregated = %v with room for all, want 0", got)
	}
}

func TestGroupGaugesWhenSourceFails(t *testing.T) {
	m := New(Config{MaxGroups: 10})
	fams := scrape(t, m)
	if got := value(fams, "groupd_group_scrape_success"); got != 0 {
		t.Errorf("scrape success without a source = %v, want 0", got)
	}
	if fams["groupd_groups"] != nil {
		t.Error("groupd_groups present without a source")
	}

	src := &fakeSource{err: fmt.Errorf("shard 3: %w", context.DeadlineExceeded)}
	m.SetSource(src)
	fams = scrape(t, m)
	if got := value(fams, "groupd_group_scrape_success"); got != 0 {
		t.Errorf("scrape success with a failing source = %v, want 0", got)
	}
	if fams["go_goroutines"] == nil {
		t.Error("a failing source took the other metrics down with it")
	}

	// The list arrives but the details time out: members are still
	// reported, lag is not, and the scrape says it is incomplete.
	src = &fakeSource{groups: []inspect.Group{group("g", "Stable", 2, map[string]int64{"t": 5})}, failDetail: true}
	m.SetSource(src)
	fams = scrape(t, m)
	if got := value(fams, "groupd_group_scrape_success"); got != 0 {
		t.Errorf("scrape success with failing details = %v, want 0", got)
	}
	if got := value(fams, "groupd_group_members", "group=g"); got != 2 {
		t.Errorf("members of g = %v, want 2", got)
	}
	if fams["groupd_group_lag"] != nil {
		t.Error("lag reported though every detail read failed")
	}
}

// BenchmarkRequestHandled is the cost the server pays per request.
func BenchmarkRequestHandled(b *testing.B) {
	m := New(Config{})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.RequestHandled(int16(i&15), 4, time.Duration(i&1023)*time.Microsecond, nil)
	}
}

func BenchmarkRequestHandledParallel(b *testing.B) {
	m := New(Config{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			m.RequestHandled(int16(i&15), 4, time.Duration(i&1023)*time.Microsecond, nil)
			i++
		}
	})
}

var _ interface {
	ShardLoaded(shard int, mv inspect.CoordinatorMove)
} = (*Metrics)(nil)

// TestShardLoadsAndMoves: every load of a shard counts, only a load of
// records another node wrote is a move, and the last load time is kept.
func TestShardLoadsAndMoves(t *testing.T) {
	m := New(Config{})
	m.ShardLoaded(7, inspect.CoordinatorMove{From: 2, To: 1, LoadMs: 250})
	m.ShardLoaded(7, inspect.CoordinatorMove{From: 1, To: 1, LoadMs: 40}) // this node, restarted
	m.ShardLoaded(9, inspect.CoordinatorMove{From: -1, To: 1, LoadMs: 3}) // a new partition
	fams := scrape(t, m)
	for _, c := range []struct {
		name, shard string
		want        float64
	}{
		{"groupd_coordinator_shard_loads_total", "7", 2},
		{"groupd_coordinator_moves_total", "7", 1},
		{"groupd_coordinator_shard_load_seconds", "7", 0.04},
		{"groupd_coordinator_shard_loads_total", "9", 1},
	} {
		if got := value(fams, c.name, "shard="+c.shard); got != c.want {
			t.Errorf("%s{shard=%s} = %v, want %v", c.name, c.shard, got, c.want)
		}
	}
	if find(fams, "groupd_coordinator_moves_total", "shard=9") != nil {
		t.Error("the load of a new partition counted as a move")
	}
}
