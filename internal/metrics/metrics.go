// Package metrics exposes groupd's Prometheus metrics: counters and
// histograms fed by hooks that the server and the coordinator call as
// things happen (requests, connections, rebalances, store writes), and
// gauges of groups, members and lag read from an inspect.Source when
// Prometheus scrapes, so nothing polls the coordinator between scrapes.
//
// Per-group series are bounded: only the MaxGroups groups with the most
// lag get their own members and lag series; the rest are summed into
// aggregate gauges, so a broker with 100,000 groups still exposes a few
// hundred series.
package metrics

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/inspect"
)

// DefaultMaxGroups is how many groups get their own series by default.
const DefaultMaxGroups = 100

// DefaultScrapeTimeout bounds how long a scrape waits for the group
// gauges; it is below Prometheus's default scrape timeout of 10s so the
// hook metrics still arrive when the coordinator is slow to answer.
const DefaultScrapeTimeout = 5 * time.Second

// Config configures Metrics.
type Config struct {
	// MaxGroups is how many groups get per-group series (members, lag
	// per topic); the others are aggregated. 0 aggregates every group.
	MaxGroups int
	// ScrapeTimeout bounds the reads from the Source during one scrape;
	// 0 means DefaultScrapeTimeout.
	ScrapeTimeout time.Duration
}

// Metrics holds groupd's collectors. Its hook methods are safe for
// concurrent use and do nothing on a nil *Metrics, so a caller without
// metrics can hold a nil one.
type Metrics struct {
	reg *prometheus.Registry
	cfg Config

	source atomic.Pointer[sourceHolder]

	rebalances        *prometheus.CounterVec
	storms            *prometheus.CounterVec
	rebalanceDuration *prometheus.HistogramVec
	partitionPause    *prometheus.HistogramVec
	commitGap         *prometheus.CounterVec

	requests       *prometheus.CounterVec
	requestErrors  *prometheus.CounterVec
	requestLatency *prometheus.HistogramVec
	// apis caches each API key's children so the per-request hook does
	// no label lookup: index kmsg.MaxKey+1 holds keys kmsg does not know.
	apis [kmsg.MaxKey + 2]atomic.Pointer[apiMetrics]

	storeWrites      prometheus.Histogram
	storeWriteErrors prometheus.Counter
	storeRecords     prometheus.Counter
	shardPanics      prometheus.Counter
	shardsDown       prometheus.Gauge
	shardLoads       *prometheus.CounterVec
	shardMoves       *prometheus.CounterVec
	shardLoadTime    *prometheus.GaugeVec

	connsOpen    prometheus.Gauge
	connsOpened  prometheus.Counter
	connsRefused prometheus.Counter
}

type sourceHolder struct{ src inspect.Source }

type apiMetrics struct {
	requests prometheus.Counter
	errors   prometheus.Counter
	latency  prometheus.Observer
}

// Buckets in seconds. Rebalances and pauses run from milliseconds up to a
// rebalance timeout (minutes); requests include JoinGroup and Fetch calls
// that are parked for seconds.
var (
	rebalanceBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	requestBuckets   = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	storeBuckets     = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
)

// New returns Metrics with every collector registered, including the Go
// runtime and process collectors.
func New(cfg Config) *Metrics {
	if cfg.ScrapeTimeout <= 0 {
		cfg.ScrapeTimeout = DefaultScrapeTimeout
	}
	if cfg.MaxGroups < 0 {
		cfg.MaxGroups = 0
	}
	m := &Metrics{reg: prometheus.NewRegistry(), cfg: cfg}
	m.rebalances = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "groupd_rebalances_total",
		Help: "Rebalances that ended, by protocol (eager, cooperative, consumer) and trigger.",
	}, []string{"protocol", "trigger"})
	m.storms = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "groupd_rebalance_storms_total",
		Help: "Rebalances flagged as part of a storm (the same trigger from the same member repeating), by protocol and trigger.",
	}, []string{"protocol", "trigger"})
	m.rebalanceDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "groupd_rebalance_duration_seconds",
		Help:    "Time from a rebalance's start until every member had its new assignment, by protocol.",
		Buckets: rebalanceBuckets,
	}, []string{"protocol"})
	m.partitionPause = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "groupd_partition_pause_seconds",
		Help:    "For each partition that changed owner in a rebalance, the time from its release by the old owner until the new owner received it, by protocol.",
		Buckets: rebalanceBuckets,
	}, []string{"protocol"})
	m.commitGap = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "groupd_rebalance_commit_gap_records_total",
		Help: "Sum over partitions handed to a new owner of high watermark minus committed offset at hand-off: records that may be consumed twice, by protocol.",
	}, []string{"protocol"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "groupd_requests_total",
		Help: "Kafka requests handled, by API.",
	}, []string{"api"})
	m.requestErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "groupd_request_errors_total",
		Help: "Kafka requests whose handling failed (the connection is closed), by API.",
	}, []string{"api"})
	m.requestLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "groupd_request_duration_seconds",
		Help:    "Time from reading a Kafka request until its reply was ready, by API; parked requests (JoinGroup, Fetch waits) included.",
		Buckets: requestBuckets,
	}, []string{"api"})
	m.storeWrites = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "groupd_coordinator_store_write_seconds",
		Help:    "Time to make one batch of coordinator records durable.",
		Buckets: storeBuckets,
	})
	m.storeWriteErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "groupd_coordinator_store_write_errors_total",
		Help: "Coordinator store writes that failed.",
	})
	m.storeRecords = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "groupd_coordinator_store_records_written_total",
		Help: "Coordinator records made durable.",
	})
	m.shardPanics = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "groupd_coordinator_shard_panics_total",
		Help: "Panics of a coordinator shard's group machine that were contained: the shard failed the requests it held and was rebuilt from the store.",
	})
	m.shardsDown = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "groupd_coordinator_shards_unavailable",
		Help: "Coordinator shards whose machine panicked again while being rebuilt: their groups are answered COORDINATOR_NOT_AVAILABLE until groupd restarts.",
	})
	m.shardLoads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "groupd_coordinator_shard_loads_total",
		Help: "Loads of a coordinator shard (a partition of __consumer_offsets) by this node, in a cluster: each time it became the partition's leader.",
	}, []string{"shard"})
	m.shardMoves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "groupd_coordinator_moves_total",
		Help: "Loads of a coordinator shard whose records another node wrote last: its groups' coordinator moved to this node.",
	}, []string{"shard"})
	m.shardLoadTime = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "groupd_coordinator_shard_load_seconds",
		Help: "How long the last load of a coordinator shard took, from its first read to serving.",
	}, []string{"shard"})
	m.connsOpen = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "groupd_connections_open",
		Help: "Kafka connections open now.",
	})
	m.connsOpened = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "groupd_connections_opened_total",
		Help: "Kafka connections accepted.",
	})
	m.connsRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "groupd_connections_refused_total",
		Help: "Kafka connections refused or closed for bad input.",
	})
	m.reg.MustRegister(
		m.rebalances, m.storms, m.rebalanceDuration, m.partitionPause, m.commitGap,
		m.requests, m.requestErrors, m.requestLatency,
		m.storeWrites, m.storeWriteErrors, m.storeRecords, m.shardPanics, m.shardsDown,
		m.shardLoads, m.shardMoves, m.shardLoadTime,
		m.connsOpen, m.connsOpened, m.connsRefused,
		newGroupCollector(m),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// SetSource sets where the group gauges are read from at scrape time.
// Until it is called (or with nil) those gauges are absent and
// groupd_group_scrape_success is 0.
func (m *Metrics) SetSource(src inspect.Source) {
	if src == nil {
		m.source.Store(nil)
		return
	}
	m.source.Store(&sourceHolder{src: src})
}

// Registry is the registry every groupd collector is registered in.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition formats. A
// failing collector leaves its metrics out rather than failing the scrape.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// ConnectionOpened records an accepted Kafka connection.
func (m *Metrics) ConnectionOpened() {
	if m == nil {
		return
	}
	m.connsOpened.Inc()
	m.connsOpen.Inc()
}

// ConnectionClosed records the end of a connection ConnectionOpened saw.
func (m *Metrics) ConnectionClosed() {
	if m == nil {
		return
	}
	m.connsOpen.Dec()
}

// ConnectionRefused records a connection refused or closed for bad input.
func (m *Metrics) ConnectionRefused() {
	if m == nil {
		return
	}
	m.connsRefused.Inc()
}

// RequestHandled records one Kafka request: its API key, how long it took
// and whether handling it failed. The version is not a label, to keep the
// series count down.
func (m *Metrics) RequestHandled(key, version int16, took time.Duration, err error) {
	if m == nil {
		return
	}
	a := m.api(key)
	a.requests.Inc()
	a.latency.Observe(took.Seconds())
	if err != nil {
		a.errors.Inc()
	}
}

func (m *Metrics) api(key int16) *apiMetrics {
	i := int(key)
	if i < 0 || i > kmsg.MaxKey {
		i = len(m.apis) - 1
	}
	if a := m.apis[i].Load(); a != nil {
		return a
	}
	name := kmsg.NameForKey(int16(i))
	if i == len(m.apis)-1 {
		name = kmsg.NameForKey(-1)
	}
	a := &apiMetrics{
		requests: m.requests.WithLabelValues(name),
		errors:   m.requestErrors.WithLabelValues(name),
		latency:  m.requestLatency.WithLabelValues(name),
	}
	// Two first requests of a key may race here; both built the same
	// children (WithLabelValues is idempotent), so either copy is right.
	m.apis[i].CompareAndSwap(nil, a)
	return m.apis[i].Load()
}

// RebalanceEnded records a finished rebalance: its count, duration, the
// pause of every partition that changed owner and the records that may be
// read twice.
func (m *Metrics) RebalanceEnded(r inspect.Rebalance) {
	if m == nil {
		return
	}
	m.rebalances.WithLabelValues(r.Protocol, r.Trigger).Inc()
	if r.Storm {
		m.storms.WithLabelValues(r.Protocol, r.Trigger).Inc()
	}
	m.rebalanceDuration.WithLabelValues(r.Protocol).Observe(msToSeconds(r.DurationMs))
	if len(r.Moved) == 0 {
		return
	}
	pause := m.partitionPause.WithLabelValues(r.Protocol)
	var gap int64
	for _, mv := range r.Moved {
		pause.Observe(msToSeconds(mv.PauseMs))
		if mv.CommitGap > 0 {
			gap += mv.CommitGap
		}
	}
	if gap > 0 {
		m.commitGap.WithLabelValues(r.Protocol).Add(float64(gap))
	}
}

// StoreWrite records one coordinator store write of records records.
func (m *Metrics) StoreWrite(took time.Duration, records int, err error) {
	if m == nil {
		return
	}
	m.storeWrites.Observe(took.Seconds())
	if err != nil {
		m.storeWriteErrors.Inc()
		return
	}
	m.storeRecords.Add(float64(records))
}

// ShardPanic records a contained panic of a coordinator shard's machine;
// down says the shard stays unavailable.
func (m *Metrics) ShardPanic(_ int, down bool) {
	if m == nil {
		return
	}
	m.shardPanics.Inc()
	if down {
		m.shardsDown.Inc()
	}
}

// ShardLoaded records the load of a coordinator shard in a cluster
// (coordinator.LoadObserver).
func (m *Metrics) ShardLoaded(shard int, mv inspect.CoordinatorMove) {
	if m == nil {
		return
	}
	label := strconv.Itoa(shard)
	m.shardLoads.WithLabelValues(label).Inc()
	if mv.From >= 0 && mv.From != mv.To {
		m.shardMoves.WithLabelValues(label).Inc()
	}
	m.shardLoadTime.WithLabelValues(label).Set(msToSeconds(mv.LoadMs))
}

func msToSeconds(ms int64) float64 {
	if ms < 0 {
		return 0
	}
	return float64(ms) / 1000
}

// groupCollector reads the group gauges from the Source when scraped.
type groupCollector struct {
	m *Metrics

	groups, members, lag           *prometheus.Desc
	aggregated, aggMembers, aggLag *prometheus.Desc
	success, took                  *prometheus.Desc
}

func newGroupCollector(m *Metrics) *groupCollector {
	return &groupCollector{
		m: m,
		groups: prometheus.NewDesc("groupd_groups",
			"Groups by state and type.", []string{"state", "type"}, nil),
		members: prometheus.NewDesc("groupd_group_members",
			"Members of a group, for the groups with their own series (see groupd_groups_aggregated).", []string{"group"}, nil),
		lag: prometheus.NewDesc("groupd_group_lag",
			"High watermark minus committed offset, summed over a topic's partitions the group committed, for the groups with their own series.", []string{"group", "topic"}, nil),
		aggregated: prometheus.NewDesc("groupd_groups_aggregated",
			"Groups beyond the per-group series bound (the groups with the most lag come first); their members and lag are summed in groupd_aggregated_group_members and groupd_aggregated_group_lag.", nil, nil),
		aggMembers: prometheus.NewDesc("groupd_aggregated_group_members",
			"Members of the groups without their own series.", nil, nil),
		aggLag: prometheus.NewDesc("groupd_aggregated_group_lag",
			"Lag of the groups without their own series (known lag only).", nil, nil),
		success: prometheus.NewDesc("groupd_group_scrape_success",
			"1 if this scrape read every group gauge from the coordinator, else 0.", nil, nil),
		took: prometheus.NewDesc("groupd_group_scrape_duration_seconds",
			"Time this scrape spent reading the group gauges.", nil, nil),
	}
}

func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.groups, c.members, c.lag, c.aggregated, c.aggMembers, c.aggLag, c.success, c.took} {
		ch <- d
	}
}

func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	start := time.Now()
	ok := c.collect(ch)
	v := 0.0
	if ok {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.success, prometheus.GaugeValue, v)
	ch <- prometheus.MustNewConstMetric(c.took, prometheus.GaugeValue, time.Since(start).Seconds())
}

// collect emits the group gauges and reports whether it read them all;
// on a timeout it emits what it had read.
func (c *groupCollector) collect(ch chan<- prometheus.Metric) bool {
	h := c.m.source.Load()
	if h == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.m.cfg.ScrapeTimeout)
	defer cancel()
	groups, err := h.src.Groups(ctx)
	if err != nil {
		return false
	}

	type stateType struct{ state, typ string }
	counts := map[stateType]int{}
	for _, g := range groups {
		counts[stateType{g.State, g.Type}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.groups, prometheus.GaugeValue, float64(n), k.state, k.typ)
	}

	listed, rest := pickGroups(groups, c.m.cfg.MaxGroups)
	var restMembers, restLag int64
	for _, g := range rest {
		restMembers += int64(g.MemberCount)
		if g.Lag > 0 {
			restLag += g.Lag
		}
	}
	ch <- prometheus.MustNewConstMetric(c.aggregated, prometheus.GaugeValue, float64(len(rest)))
	ch <- prometheus.MustNewConstMetric(c.aggMembers, prometheus.GaugeValue, float64(restMembers))
	ch <- prometheus.MustNewConstMetric(c.aggLag, prometheus.GaugeValue, float64(restLag))

	ok := true
	for _, g := range listed {
		ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(g.MemberCount), g.Group)
		if g.Lag < 0 || !ok {
			continue
		}
		full, found, err := h.src.Group(ctx, g.Group)
		if err != nil {
			// Past the deadline every read fails; stop reading but
			// keep the member gauges, which cost nothing more.
			ok = false
			continue
		}
		if !found {
			continue // deleted since the list was read
		}
		for _, tl := range lagByTopic(full.Offsets) {
			ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(tl.lag), g.Group, tl.topic)
		}
	}
	return ok
}

// pickGroups splits groups into the max that get their own series and
// the rest. The most lag goes first (the groups an operator watches),
// then the most members; ties by group id, so the choice is stable
// between scrapes.
func pickGroups(groups []inspect.GroupSummary, max int) (listed, rest []inspect.GroupSummary) {
	if len(groups) <= max {
		return groups, nil
	}
	sorted := append([]inspect.GroupSummary(nil), groups...)
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.Lag != b.Lag {
			return a.Lag > b.Lag
		}
		if a.MemberCount != b.MemberCount {
			return a.MemberCount > b.MemberCount
		}
		return a.Group < b.Group
	})
	return sorted[:max], sorted[max:]
}

type topicLag struct {
	topic string
	lag   int64
}

// lagByTopic sums the known lag per topic, in topic order; a topic whose
// every partition has unknown lag is left out.
func lagByTopic(offsets []inspect.PartitionOffset) []topicLag {
	sums := map[string]int64{}
	for _, o := range offsets {
		if o.Lag >= 0 {
			sums[o.Topic] += o.Lag
		}
	}
	out := make([]topicLag, 0, len(sums))
	for t, l := range sums {
		out = append(out, topicLag{t, l})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].topic < out[j].topic })
	return out
}
