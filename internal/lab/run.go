package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Result is one scenario under one protocol.
type Result struct {
	Scenario string   `json:"scenario"`
	Protocol Protocol `json:"protocol"`
	Group    string   `json:"group"`
	Topics   []string `json:"topics"`
	// Unsupported says why the broker could not run the protocol; the
	// scenario was not run.
	Unsupported string `json:"unsupported,omitempty"`
	// Err says why the run failed: it did not settle, or lost records.
	Err          string        `json:"error,omitempty"`
	Elapsed      time.Duration `json:"elapsed_ns"`
	Actions      []Action      `json:"actions"`
	Measurements *Measurements `json:"measurements,omitempty"`
	// Broker is groupd's own record of the rebalances, when the broker
	// is groupd and its admin API was reachable.
	Broker *BrokerView `json:"broker,omitempty"`
	// BrokerErr says why Broker is missing, when it was expected.
	BrokerErr string `json:"broker_error,omitempty"`
	// ProduceErrors counts records the broker did not acknowledge.
	ProduceErrors int64 `json:"produce_errors"`
	// Baseline and DisruptionEnd delimit the measured periods, on the
	// run's clock.
	BaselineStart time.Duration `json:"baseline_start_ns"`
	FirstAction   time.Duration `json:"first_action_ns"`
	DisruptionEnd time.Duration `json:"disruption_end_ns"`
	End           time.Duration `json:"end_ns"`
}

// Failed says whether the run failed.
func (r *Result) Failed() bool { return r.Err != "" }

// Report is a whole lab run.
type Report struct {
	Started time.Time `json:"started"`
	// Broker says what the lab ran against.
	Broker  string        `json:"broker"`
	Config  ReportConfig  `json:"config"`
	Results []Result      `json:"results"`
	Elapsed time.Duration `json:"elapsed_ns"`
}

// ReportConfig is the part of the Config a report shows.
type ReportConfig struct {
	Members            int           `json:"members"`
	Change             int           `json:"change"`
	Partitions         int           `json:"partitions"`
	Rate               int           `json:"rate"`
	RecordBytes        int           `json:"record_bytes"`
	Processing         time.Duration `json:"processing_ns"`
	MaxPollRecords     int           `json:"max_poll_records"`
	CommitMode         string        `json:"commit_mode"`
	AutoCommitInterval time.Duration `json:"auto_commit_interval_ns"`
	SessionTimeout     time.Duration `json:"session_timeout_ns"`
	RebalanceTimeout   time.Duration `json:"rebalance_timeout_ns"`
	HeartbeatInterval  time.Duration `json:"heartbeat_interval_ns"`
	Quiet              time.Duration `json:"quiet_ns"`
	Cooldown           time.Duration `json:"cooldown_ns"`
	RestartDelay       time.Duration `json:"restart_delay_ns"`
	Seed               uint64        `json:"seed"`
}

// Failed lists the runs that failed.
func (r *Report) Failed() []Result {
	var out []Result
	for _, res := range r.Results {
		if res.Failed() {
			out = append(out, res)
		}
	}
	return out
}

// ErrFailed is returned by Run when a scenario failed (lost records, or a
// group that never settled); the report is complete all the same.
var ErrFailed = errors.New("the lab run failed")

// Run runs every scenario under every protocol, each on a fresh group and
// topic, and reports what each cost. It starts an embedded groupd unless
// cfg.Bootstrap names a cluster.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	report := &Report{Started: time.Now(), Broker: cfg.Bootstrap, Config: reportConfig(cfg)}
	if cfg.Bootstrap == "" {
		e, err := StartEmbedded(cfg)
		if err != nil {
			return nil, fmt.Errorf("starting the embedded groupd: %w", err)
		}
		defer func() {
			if err := e.Close(); err != nil {
				cfg.Logger.Warn("stopping the embedded groupd", "err", err)
			}
		}()
		cfg.Bootstrap, cfg.AdminAddr = e.Addr(), e.AdminAddr()
		report.Broker = "embedded groupd"
	}
	adm, err := newAdmin(cfg)
	if err != nil {
		return nil, err
	}
	defer adm.Close()

	unsupported := ""
	if slices.ContainsFunc(cfg.Protocols, func(p Protocol) bool { return p.Base == Consumer }) {
		sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		unsupported, err = consumerProtocolSupport(sctx, adm)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("asking the broker which APIs it serves: %w", err)
		}
	}
	total := len(cfg.Scenarios) * len(cfg.Protocols)
	for _, sc := range cfg.Scenarios {
		for _, p := range cfg.Protocols {
			if ctx.Err() != nil {
				return report, ctx.Err()
			}
			n := len(report.Results) + 1
			if p.Base == Consumer && unsupported != "" {
				report.Results = append(report.Results, Result{Scenario: sc, Protocol: p, Unsupported: unsupported})
				progressf(cfg, "[%d/%d] %s / %s: not run, the consumer protocol is unsupported: %s\n", n, total, sc, p.Name, unsupported)
				continue
			}
			r := newRun(cfg, adm, sc, p, n, total)
			res := r.execute(ctx)
			report.Results = append(report.Results, res)
		}
	}
	report.Elapsed = time.Since(report.Started)
	if len(report.Failed()) > 0 {
		return report, ErrFailed
	}
	return report, nil
}

func reportConfig(c Config) ReportConfig {
	return ReportConfig{
		Members: c.Members, Change: c.Change, Partitions: c.Partitions, Rate: c.Rate, RecordBytes: c.RecordBytes,
		Processing: c.Processing, MaxPollRecords: c.MaxPollRecords, CommitMode: c.CommitMode,
		AutoCommitInterval: c.AutoCommitInterval, SessionTimeout: c.SessionTimeout,
		RebalanceTimeout: c.RebalanceTimeout, HeartbeatInterval: c.HeartbeatInterval,
		Quiet: c.Quiet, Cooldown: c.Cooldown, RestartDelay: c.RestartDelay, Seed: c.Seed,
	}
}

func newAdmin(cfg Config) (*kadm.Client, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(splitList(cfg.Bootstrap)...), kgo.ClientID("lab-admin"),
		kgo.WithLogger(kgoLogger{cfg.Logger, "admin"}))
	if err != nil {
		return nil, err
	}
	return kadm.NewClient(cl), nil
}

func progressf(cfg Config, format string, args ...any) {
	if cfg.Progress == nil {
		return
	}
	if cfg.Terminal {
		// Clear the redrawn status line first.
		fmt.Fprint(cfg.Progress, "\r\033[K")
	}
	fmt.Fprintf(cfg.Progress, format, args...)
}

// run is one scenario under one protocol.
type run struct {
	cfg      Config
	adm      *kadm.Client
	scenario string
	proto    Protocol
	n, total int
	log      *slog.Logger
	rng      *rand.Rand

	group  string
	topic  string
	topic2 string

	rec      *recorder
	producer *producer

	mu      sync.Mutex
	members map[string]*member // name -> current incarnation
	order   []string           // member names, in the order they joined
	sub     []string           // topics the members subscribe to
	want    []TP               // partitions the group should own
	phase   string
	killed  []chan struct{}
}

func newRun(cfg Config, adm *kadm.Client, scenario string, p Protocol, n, total int) *run {
	seed := cfg.Seed
	// Names unique to this run, so that re-running the lab against the
	// same cluster never meets an old group or topic.
	suffix := fmt.Sprintf("%d-%d", seed, time.Now().UnixNano()%1_000_000)
	r := &run{
		cfg: cfg, adm: adm, scenario: scenario, proto: p, n: n, total: total,
		log:     cfg.Logger.With("scenario", scenario, "protocol", p.Name),
		rng:     rand.New(rand.NewPCG(seed, uint64(n))),
		group:   fmt.Sprintf("lab-%s-%s-%s", scenario, p.Name, suffix),
		topic:   fmt.Sprintf("lab-%s-%s-%s", scenario, p.Name, suffix),
		members: map[string]*member{},
	}
	if scenario == SubscriptionChange {
		r.topic2 = r.topic + "-b"
	}
	r.sub = []string{r.topic}
	return r
}

func (r *run) subscription() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sub)
}

func (r *run) live() []owner {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []owner
	for _, name := range r.order {
		if m := r.members[name]; m != nil {
			out = append(out, m.owner())
		}
	}
	return out
}

func (r *run) wantPartitions() []TP {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.want)
}

func (r *run) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
}

// execute runs the scenario: start the group, let it settle, measure a
// quiet baseline, act, settle, cool down, drain, stop, analyze.
func (r *run) execute(ctx context.Context) Result {
	res := Result{Scenario: r.scenario, Protocol: r.proto, Group: r.group, Topics: []string{r.topic}}
	if r.topic2 != "" {
		res.Topics = append(res.Topics, r.topic2)
	}
	r.rec = newRecorder()
	stopProgress := r.progress()
	err := r.scenarioSteps(ctx, &res)
	stopProgress()
	r.teardown()
	res.Elapsed = r.rec.now()

	rec := r.rec.recording()
	rec.Partitions = r.wantPartitions()
	rec.BaselineStart, rec.DisruptionEnd, rec.End = res.BaselineStart, res.DisruptionEnd, res.End
	if rec.End == 0 {
		rec.End = res.Elapsed
	}
	res.Actions = rec.Actions
	if len(rec.Actions) > 0 {
		res.FirstAction = rec.Actions[0].At
	}
	m := Analyze(rec)
	res.Measurements = m
	if r.producer != nil {
		res.ProduceErrors = r.producer.failed.Load()
	}
	var fails []string
	if err != nil {
		fails = append(fails, err.Error())
	}
	if m.Lost > 0 {
		fails = append(fails, fmt.Sprintf("%d acknowledged records were never consumed (first: %s offset %d)", m.Lost, m.LostRecords[0].TP, m.LostRecords[0].Offset))
	}
	if m.Mismatched > 0 {
		fails = append(fails, fmt.Sprintf("%d consumed records carry another key than the one acknowledged at their offset", m.Mismatched))
	}
	res.Err = strings.Join(fails, "; ")

	if r.cfg.AdminAddr != "" {
		bctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, err := readBrokerView(bctx, r.cfg.AdminAddr, r.group, r.rec.start.Add(res.BaselineStart), r.rec.start.Add(rec.End))
		cancel()
		if err != nil {
			res.BrokerErr = err.Error()
		} else {
			res.Broker = v
		}
	}
	r.cleanup()
	status := "ok"
	if res.Err != "" {
		status = "FAILED: " + res.Err
	}
	progressf(r.cfg, "[%d/%d] %s / %s: %s in %s, %s, max pause %s, %d duplicates, %d lost\n",
		r.n, r.total, r.scenario, r.proto.Name, status, res.Elapsed.Round(100*time.Millisecond),
		count(m.Rebalances, "rebalance"), fmtMs(m.Pause.Max), m.Duplicates, m.Lost)
	return res
}

// scenarioSteps runs the run up to the drain; the results it fills in are
// the periods' bounds.
func (r *run) scenarioSteps(ctx context.Context, res *Result) error {
	if err := r.createTopic(ctx, r.topic); err != nil {
		return err
	}
	if r.topic2 != "" {
		if err := r.createTopic(ctx, r.topic2); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.want = partitionsOf(r.topic, r.cfg.Partitions)
	r.mu.Unlock()

	var err error
	r.producer, err = startProducer(r.cfg, r.rec, r.log, []string{r.topic})
	if err != nil {
		return err
	}
	r.setPhase("starting")
	var names []string
	for i := 1; i <= r.cfg.Members; i++ {
		names = append(names, fmt.Sprintf("m%d", i))
	}
	if err := r.add(names...); err != nil {
		return err
	}
	if _, err := r.settle(ctx, "the group's first assignment"); err != nil {
		return err
	}
	res.BaselineStart = r.rec.now()
	r.setPhase("baseline")
	if err := sleep(ctx, r.cfg.Quiet); err != nil {
		return err
	}
	r.setPhase(r.scenario)
	last, err := r.act(ctx)
	if err != nil {
		return err
	}
	res.DisruptionEnd = last
	r.setPhase("cooldown")
	if err := sleep(ctx, r.cfg.Cooldown); err != nil {
		return err
	}
	r.setPhase("draining")
	r.producer.stop()
	deadline := time.Now().Add(r.cfg.SettleTimeout)
	for !r.rec.drained() && time.Now().Before(deadline) {
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	res.End = r.rec.now()
	return nil
}

func partitionsOf(topic string, n int) []TP {
	out := make([]TP, n)
	for i := range out {
		out[i] = TP{topic, int32(i)}
	}
	return out
}

func (r *run) createTopic(ctx context.Context, topic string) error {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := r.adm.CreateTopic(cctx, int32(r.cfg.Partitions), -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("creating topic %s: %w", topic, err)
	}
	return nil
}

// add starts new members (their first incarnation) at once.
func (r *run) add(names ...string) error {
	ms := make([]*member, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { ms[i], errs[i] = r.startMember(name, 0) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, name := range names {
		r.members[name] = ms[i]
		r.order = append(r.order, name)
	}
	return nil
}

// remove takes members out of the live set (after they stopped or died).
func (r *run) remove(name string) *member {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.members[name]
	delete(r.members, name)
	r.order = slices.DeleteFunc(r.order, func(s string) bool { return s == name })
	return m
}

func (r *run) member(name string) *member {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.members[name]
}

// pick chooses k of the live members, by the seed.
func (r *run) pick(k int) []string {
	r.mu.Lock()
	names := slices.Clone(r.order)
	r.mu.Unlock()
	r.rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	names = names[:min(k, len(names))]
	slices.Sort(names)
	return names
}

// settleQuiet is how long ownership must stay unchanged before the group
// counts as settled: long enough for a cooperative follow-up rebalance or
// a consumer-protocol reconciliation to begin.
const settleQuiet = 500 * time.Millisecond

// settle waits until every partition is owned by exactly one live member
// and every live member that can own something does. It returns when
// ownership last changed.
func (r *run) settle(ctx context.Context, what string) (time.Duration, error) {
	deadline := time.Now().Add(r.cfg.SettleTimeout)
	var why string
	for {
		ok, w, last := r.rec.settled(r.wantPartitions(), r.live(), settleQuiet)
		if ok {
			return last, nil
		}
		why = w
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s: the group did not settle within %v: %s", what, r.cfg.SettleTimeout, why)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// teardown stops every member cleanly and waits, for a while, for the
// killed ones' clients to close.
func (r *run) teardown() {
	if r.producer != nil {
		select {
		case <-r.producer.done:
		default:
			r.producer.stop()
		}
	}
	r.mu.Lock()
	ms := make([]*member, 0, len(r.members))
	for _, name := range r.order {
		ms = append(ms, r.members[name])
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(m.stop)
	}
	wg.Wait()
	for _, c := range r.killed {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			r.log.Warn("a killed member's client is still closing; leaving it")
		}
	}
}

// cleanup deletes the run's group and topics from a cluster the lab does
// not own; the embedded groupd's data goes with its directory.
func (r *run) cleanup() {
	if r.cfg.AdminAddr != "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.adm.DeleteGroups(ctx, r.group); err != nil {
		r.log.Debug("deleting the lab's group", "err", err)
	}
	topics := []string{r.topic}
	if r.topic2 != "" {
		topics = append(topics, r.topic2)
	}
	if _, err := r.adm.DeleteTopics(ctx, topics...); err != nil {
		r.log.Debug("deleting the lab's topics", "err", err)
	}
}

// progress redraws a status line every half second on a terminal; off a
// terminal the per-run lines are enough.
func (r *run) progress() (stop func()) {
	if r.cfg.Progress == nil || !r.cfg.Terminal {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(r.cfg.Progress, "\r\033[K")
				return
			case <-t.C:
				produced, consumed, pending := r.rec.counts()
				r.mu.Lock()
				phase := r.phase
				r.mu.Unlock()
				fmt.Fprintf(r.cfg.Progress, "\r\033[K[%d/%d] %s / %s  %s  %5.1fs  produced %d  consumed %d  behind %d",
					r.n, r.total, r.scenario, r.proto.Name, phase, r.rec.now().Seconds(), produced, consumed, pending)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func fmtMs(v float64) string {
	return (time.Duration(v * float64(time.Millisecond))).Round(time.Millisecond).String()
}
