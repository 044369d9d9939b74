package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/inspect"
)

// The rebalance history seen from both sides: franz-go members go through
// joins, a clean stop, a kill and a member that sleeps past its rebalance
// timeout, each recording its own OnPartitionsAssigned/Revoked/Lost
// callbacks; the coordinator's records, read through the admin API
// (GET /api/v1/groups/{group}/rebalances), must name each rebalance's
// trigger and member, and every partition's pause must agree with what
// the callbacks saw. groupd's /metrics must count the same rebalances and
// pauses.

const (
	histPartitions = 6
	histSession    = 2 * time.Second
	histHeartbeat  = 50 * time.Millisecond
	histRebalance  = 2 * time.Second
	// pauseTolerance is how far a pause may be from the clients' view.
	pauseTolerance = 100 * time.Millisecond
)

// histEvent is one callback, or the test killing a member.
type histEvent struct {
	at     time.Time
	client string
	member string // the member id when it happened
	kind   string // assigned, revoked, lost, killed
	parts  []int32
}

// timeline collects every member's events.
type timeline struct {
	mu     sync.Mutex
	events []histEvent
}

func (tl *timeline) add(ev histEvent) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, ev)
}

func (tl *timeline) snapshot() []histEvent {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.events)
}

func (tl *timeline) String() string {
	var b strings.Builder
	for _, ev := range tl.snapshot() {
		fmt.Fprintf(&b, "%s %s %s %s %v\n", ev.at.Format("15:04:05.000"), ev.client, ev.member, ev.kind, ev.parts)
	}
	return b.String()
}

// histMember is a kgo group member whose callbacks go to a timeline.
type histMember struct {
	name   string
	cl     *kgo.Client
	kd     *killDialer
	cancel context.CancelFunc
	done   chan struct{}
	// sleepOnRevoke, when set, makes the next OnPartitionsRevoked sleep
	// that long: the member holds up the join phase.
	sleepOnRevoke chan time.Duration
}

func startHistMember(t *testing.T, addr, topic, groupID, name string, bal kgo.GroupBalancer, tl *timeline, extra ...kgo.Opt) *histMember {
	hm := &histMember{name: name, kd: &killDialer{}, done: make(chan struct{}), sleepOnRevoke: make(chan time.Duration, 1)}
	memberID := func(cl *kgo.Client) string { id, _ := cl.GroupMetadata(); return id }
	note := func(cl *kgo.Client, kind string, ps map[string][]int32) {
		tl.add(histEvent{at: time.Now(), client: name, member: memberID(cl), kind: kind, parts: topicParts(ps, topic)})
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ClientID(name),
		kgo.Dialer(hm.kd.DialContext),
		kgo.ConsumerGroup(groupID),
		kgo.ConsumeTopics(topic),
		kgo.Balancers(bal),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(histSession),
		kgo.HeartbeatInterval(histHeartbeat),
		kgo.RebalanceTimeout(histRebalance),
		kgo.AutoCommitInterval(200 * time.Millisecond),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, a map[string][]int32) { note(cl, "assigned", a) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, r map[string][]int32) {
			note(cl, "revoked", r)
			select {
			case d := <-hm.sleepOnRevoke:
				time.Sleep(d)
			default:
			}
			if !hm.kd.isDead() {
				cl.CommitUncommittedOffsets(ctx)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, l map[string][]int32) { note(cl, "lost", l) }),
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	hm.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	hm.cancel = cancel
	go func() {
		defer close(hm.done)
		for ctx.Err() == nil {
			if cl.PollFetches(ctx).IsClientClosed() {
				return
			}
		}
	}()
	t.Cleanup(func() {
		hm.cancel()
		<-hm.done
		closeWithin(t, name, cl.Close, 10*time.Second)
	})
	return hm
}

// stop closes the member cleanly: it revokes, commits and leaves.
func (hm *histMember) stop() {
	hm.cancel()
	<-hm.done
	hm.cl.Close()
}

// kill drops the member's connections without a LeaveGroup; the timeline
// notes that it stopped consuming everything then.
func (hm *histMember) kill(tl *timeline) {
	id, _ := hm.cl.GroupMetadata()
	hm.cancel()
	<-hm.done
	hm.kd.kill()
	tl.add(histEvent{at: time.Now(), client: hm.name, member: id, kind: "killed"})
}

// holdings is what each client holds according to its callbacks.
func holdings(tl *timeline) map[string][]int32 {
	held := map[string][]int32{}
	for _, ev := range tl.snapshot() {
		switch ev.kind {
		case "assigned":
			held[ev.client] = append(held[ev.client], ev.parts...)
		case "revoked", "lost":
			held[ev.client] = slices.DeleteFunc(held[ev.client], func(p int32) bool { return slices.Contains(ev.parts, p) })
		case "killed":
			delete(held, ev.client)
		}
	}
	return held
}

// waitHistSettled waits until the group is Stable with exactly the live
// clients, its latest rebalance has ended, and the clients' callbacks
// agree that each partition is held by exactly one of them.
func waitHistSettled(t *testing.T, src inspect.Source, groupID string, tl *timeline, live []string, phase string) {
	t.Helper()
	deadline := time.Now().Add(groupPhaseWait)
	why := ""
	for time.Now().Before(deadline) {
		why = histSettled(src, groupID, tl, live)
		if why == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not settled after %v: %s\n%s", phase, groupPhaseWait, why, tl)
}

func histSettled(src inspect.Source, groupID string, tl *timeline, live []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g, ok, err := src.Group(ctx, groupID)
	switch {
	case err != nil || !ok:
		return fmt.Sprintf("group: ok=%v err=%v", ok, err)
	case g.State != "Stable" || len(g.Members) != len(live):
		return fmt.Sprintf("group %s with %d members, want Stable with %d", g.State, len(g.Members), len(live))
	case g.LastRebalance == nil || g.LastRebalance.EndedAt == nil:
		return "a rebalance is in progress"
	}
	var clients []string
	for _, m := range g.Members {
		clients = append(clients, m.ClientID)
	}
	slices.Sort(clients)
	if !slices.Equal(clients, live) {
		return fmt.Sprintf("members %v, want %v", clients, live)
	}
	owner := map[int32]string{}
	for c, ps := range holdings(tl) {
		for _, p := range ps {
			if o, dup := owner[p]; dup {
				return fmt.Sprintf("partition %d held by %s and %s", p, o, c)
			}
			owner[p] = c
		}
	}
	for p := range int32(histPartitions) {
		if !slices.Contains(live, owner[p]) {
			return fmt.Sprintf("partition %d held by %q", p, owner[p])
		}
	}
	return ""
}

// rebalancesOf reads a group's history; a group not created yet has none.
func rebalancesOf(t *testing.T, src inspect.Source, groupID string) []inspect.Rebalance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rs, _, err := src.Rebalances(ctx, groupID)
	if err != nil {
		t.Fatalf("rebalances of %s: %v", groupID, err)
	}
	return rs
}

// findRebalance returns the first record of rs with the trigger whose
// member is the client.
func findRebalance(rs []inspect.Rebalance, trigger, client string) *inspect.Rebalance {
	for i := range rs {
		if r := &rs[i]; r.Trigger == trigger && r.Member != nil && r.Member.ClientID == client {
			return r
		}
	}
	return nil
}

// clientPause is the pause of one move as the callbacks saw it: from the
// previous owner's first revoke, loss or kill of the partition after it was
// last given it, to the new owner's assignment in this rebalance. ok is
// false when the callbacks hold no such pair.
func clientPause(evs []histEvent, r *inspect.Rebalance, mv inspect.Move) (time.Duration, string, bool) {
	holds := func(ev *histEvent) bool { return slices.Contains(ev.parts, mv.Partition) }
	a := slices.IndexFunc(evs, func(ev histEvent) bool {
		return ev.kind == "assigned" && ev.member == mv.To && holds(&ev) && !ev.at.Before(r.StartedAt)
	})
	if a < 0 {
		return 0, "no assignment callback", false
	}
	given := -1
	for i := range a {
		if ev := &evs[i]; ev.kind == "assigned" && ev.member == mv.From && holds(ev) {
			given = i
		}
	}
	for i := given + 1; i < a; i++ {
		ev := &evs[i]
		if ev.member == mv.From && (ev.kind == "killed" || ((ev.kind == "revoked" || ev.kind == "lost") && holds(ev))) {
			return evs[a].at.Sub(ev.at), fmt.Sprintf("%s %s at %s, %s assigned at %s", ev.client, ev.kind,
				ev.at.Format("15:04:05.000"), evs[a].client, evs[a].at.Format("15:04:05.000")), true
		}
	}
	return 0, "no release callback", false
}

func TestRebalanceHistory(t *testing.T) {
	for _, c := range []struct {
		name string
		bal  func() kgo.GroupBalancer
	}{
		{"eager", kgo.RangeBalancer},
		{"cooperative", kgo.CooperativeStickyBalancer},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runHistoryScenario(t, c.name, c.bal)
		})
	}
}

func runHistoryScenario(t *testing.T, protocol string, bal func() kgo.GroupBalancer) {
	a := startServer(t, t.TempDir(), withHTTP, func(c *app.Config) {
		c.Group.InitialRebalanceDelay = 200 * time.Millisecond
		c.Group.MinSessionTimeout = 500 * time.Millisecond
	})
	addr, src := a.Addr(), httpAdmin(a.HTTPAddr())
	metricsBefore := scrape(t, a.HTTPAddr())
	const topic, groupID = "hist", "hist-group"
	createTopic(t, addr, topic, histPartitions)
	tl := &timeline{}
	defer func() {
		if t.Failed() {
			t.Logf("callbacks:\n%s", tl)
		}
	}()
	// Records keep flowing so that there is something to commit.
	pc := newClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	stopProducing := make(chan struct{})
	produced := make(chan error, 1)
	go func() {
		n := 0
		for {
			select {
			case <-stopProducing:
				produced <- nil
				return
			case <-time.After(20 * time.Millisecond):
			}
			if err := produceSpread(pc, n, n+10, time.Millisecond); err != nil {
				produced <- err
				return
			}
			n += 10
		}
	}()
	defer func() {
		close(stopProducing)
		if err := <-produced; err != nil {
			t.Errorf("produce: %v", err)
		}
	}()

	members := map[string]*histMember{}
	var live []string
	start := func(names ...string) {
		for _, n := range names {
			members[n] = startHistMember(t, addr, topic, groupID, n, bal(), tl)
			live = append(live, n)
		}
		slices.Sort(live)
	}
	drop := func(n string) { live = slices.DeleteFunc(live, func(s string) bool { return s == n }) }
	since := 0
	// phase runs a change, waits for the group to settle, and returns the
	// rebalances it caused.
	phase := func(name string, change func()) []inspect.Rebalance {
		t.Helper()
		change()
		waitHistSettled(t, src, groupID, tl, live, name)
		rs := rebalancesOf(t, src, groupID)
		got := rs[since:]
		since = len(rs)
		var lines []string
		for _, r := range got {
			lines = append(lines, fmt.Sprintf("#%d %s by %s, %d ms, %d moved", r.Seq, r.Trigger, r.Member.ClientID, r.DurationMs, len(r.Moved)))
		}
		t.Logf("%s: %s", name, strings.Join(lines, "; "))
		return got
	}
	expect := func(rs []inspect.Rebalance, trigger, client string) *inspect.Rebalance {
		t.Helper()
		r := findRebalance(rs, trigger, client)
		if r == nil {
			t.Fatalf("no %s rebalance by %s among %+v", trigger, client, rs)
		}
		if r.Protocol != protocol {
			t.Errorf("rebalance #%d: protocol %s, want %s", r.Seq, r.Protocol, protocol)
		}
		return r
	}

	phase("three members join", func() { start("m1", "m2", "m3") })
	expect(phase("a fourth joins", func() { start("m4") }), inspect.TriggerMemberJoined, "m4")
	expect(phase("m1 stops cleanly", func() { drop("m1"); members["m1"].stop() }), inspect.TriggerMemberLeft, "m1")
	killed := expect(phase("m2 is killed", func() { drop("m2"); members["m2"].kill(tl) }), inspect.TriggerSessionTimeout, "m2")
	if len(killed.MembersOut) != 1 || killed.MembersOut[0] != killed.Member.MemberID {
		t.Errorf("session-timeout rebalance: members out %v, want the killed member", killed.MembersOut)
	}

	// m3 sleeps in its next revoke callback for longer than the
	// rebalance timeout, while m5 joining makes everyone rejoin: the join
	// phase gives up on m3 and removes it; m3 then comes back.
	m3before, _ := members["m3"].cl.GroupMetadata()
	members["m3"].sleepOnRevoke <- histRebalance + time.Second
	rs := phase("m3 sleeps past its rebalance timeout", func() { start("m5") })
	joined := expect(rs, inspect.TriggerMemberJoined, "m5")
	if len(joined.WaitedFor) == 0 || joined.WaitedFor[0].Member != m3before || joined.WaitedFor[0].Rejoined ||
		joined.WaitedFor[0].WaitedMs < histRebalance.Milliseconds()-100 {
		t.Errorf("the rebalance m5 opened waited for %+v, want the straggler %s first, for the whole rebalance timeout", joined.WaitedFor, m3before)
	}
	if !slices.Contains(joined.MembersOut, m3before) {
		t.Errorf("the rebalance m5 opened: members out %v, want %s", joined.MembersOut, m3before)
	}
	expect(rs, inspect.TriggerRebalanceTimeout, "m3")

	// Every pause agrees with the callbacks. A cooperative member removed
	// while it sleeps goes on consuming what it held until it wakes: the
	// hand-off overlaps, and no callback marks a release to compare with.
	all := rebalancesOf(t, src, groupID)
	compared := 0
	// The coordinator records a rebalance's end once it has sent every
	// assignment; the clients' callbacks for it may still be on their way.
	// Wait (a bounded while) until each move has its callbacks.
	compares := func(mv inspect.Move) bool {
		return mv.From != "" && (protocol != "cooperative" || mv.From != m3before)
	}
	evs := tl.snapshot()
	for settle := time.Now().Add(5 * time.Second); time.Now().Before(settle); evs = tl.snapshot() {
		missing := false
		for i := range all {
			for _, mv := range all[i].Moved {
				if all[i].Outcome == "stable" && compares(mv) {
					if _, _, ok := clientPause(evs, &all[i], mv); !ok {
						missing = true
					}
				}
			}
		}
		if !missing {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range all {
		r := &all[i]
		if r.Outcome != "stable" {
			continue
		}
		for _, mv := range r.Moved {
			if !compares(mv) {
				continue
			}
			pause, how, ok := clientPause(evs, r, mv)
			if !ok {
				t.Errorf("rebalance #%d (%s): move %s/%d %s -> %s: %s", r.Seq, r.Trigger, mv.Topic, mv.Partition, mv.From, mv.To, how)
				continue
			}
			compared++
			if diff := pause - time.Duration(mv.PauseMs)*time.Millisecond; diff.Abs() > pauseTolerance {
				t.Errorf("rebalance #%d (%s): move %s/%d %s -> %s paused %d ms, the clients saw %v (%s)",
					r.Seq, r.Trigger, mv.Topic, mv.Partition, mv.From, mv.To, mv.PauseMs, pause.Round(time.Millisecond), how)
			}
		}
	}
	// Eager hands every partition over in every rebalance; cooperative
	// at least one for each membership change but m5's arrival.
	if want := map[string]int{"eager": 3 * histPartitions, "cooperative": 4}[protocol]; compared < want {
		t.Errorf("only %d pauses compared, want at least %d", compared, want)
	}
	if testing.Verbose() {
		for _, r := range all {
			t.Logf("#%d %s by %s (%s) %d ms out=%v waited=%+v moved=%+v", r.Seq, r.Trigger, r.Member.MemberID, r.Member.ClientID, r.DurationMs, r.MembersOut, r.WaitedFor, r.Moved)
		}
	}
	t.Logf("%d pauses agree with the clients within %v", compared, pauseTolerance)

	// The API serves what the coordinator holds.
	direct := rebalancesOf(t, a.Inspect(), groupID)
	if got, want := mustJSON(t, all), mustJSON(t, direct); got != want {
		t.Errorf("the admin API's history differs from the coordinator's:\n%s\n%s", got, want)
	}
	checkScenarioMetrics(t, a.HTTPAddr(), src, metricsBefore, groupID, len(live))
}

// withHTTP turns groupd's HTTP side on, on a free port.
func withHTTP(c *app.Config) { c.HTTPListen, c.MetricsMaxGroups = "127.0.0.1:0", 10 }

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkScenarioMetrics checks that /metrics counted the group's finished
// rebalances, by protocol and trigger, and the pause of each partition they
// moved, exactly; and that the request, connection and store counters
// moved since before.
func checkScenarioMetrics(t *testing.T, httpAddr string, src inspect.Source, before map[string]*dto.MetricFamily, groupID string, members int) {
	t.Helper()
	// A history read on both sides of the scrape that did not change
	// is what the scrape saw.
	var rs []inspect.Rebalance
	var after map[string]*dto.MetricFamily
	waitFor(t, 10*time.Second, "a scrape between two equal histories", func() (bool, string) {
		rs = rebalancesOf(t, src, groupID)
		after = scrape(t, httpAddr)
		again := rebalancesOf(t, src, groupID)
		return len(again) == len(rs) && again[len(again)-1].EndedAt != nil, fmt.Sprintf("%d then %d rebalances", len(rs), len(again))
	})
	type key struct{ protocol, trigger string }
	rebalances, durations, pauses := map[key]int{}, map[string]int{}, map[string]int{}
	for _, r := range rs {
		if r.EndedAt == nil {
			continue
		}
		rebalances[key{r.Protocol, r.Trigger}]++
		durations[r.Protocol]++
		pauses[r.Protocol] += len(r.Moved)
	}
	for k, n := range rebalances {
		if got := metricValue(after, "groupd_rebalances_total", "protocol", k.protocol, "trigger", k.trigger); got != float64(n) {
			t.Errorf("groupd_rebalances_total{protocol=%q,trigger=%q} = %v, the history has %d", k.protocol, k.trigger, got, n)
		}
	}
	if got, want := metricValue(after, "groupd_rebalances_total"), float64(len(rs)); got != want {
		t.Errorf("groupd_rebalances_total = %v in all, the history has %v", got, want)
	}
	for protocol, n := range durations {
		if got := metricValue(after, "groupd_rebalance_duration_seconds", "protocol", protocol); got != float64(n) {
			t.Errorf("groupd_rebalance_duration_seconds{protocol=%q} counts %v, the history has %d rebalances", protocol, got, n)
		}
		if got := metricValue(after, "groupd_partition_pause_seconds", "protocol", protocol); got != float64(pauses[protocol]) {
			t.Errorf("groupd_partition_pause_seconds{protocol=%q} counts %v, the history moved %d partitions", protocol, got, pauses[protocol])
		}
	}
	for _, c := range []struct {
		name   string
		labels []string
	}{
		{"groupd_requests_total", []string{"api", "JoinGroup"}},
		{"groupd_requests_total", []string{"api", "SyncGroup"}},
		{"groupd_requests_total", []string{"api", "Heartbeat"}},
		{"groupd_requests_total", []string{"api", "LeaveGroup"}},
		{"groupd_requests_total", []string{"api", "OffsetCommit"}},
		{"groupd_requests_total", []string{"api", "Fetch"}},
		{"groupd_requests_total", []string{"api", "Produce"}},
		{"groupd_request_duration_seconds", []string{"api", "JoinGroup"}},
		{"groupd_connections_opened_total", nil},
		{"groupd_coordinator_store_write_seconds", nil},
		{"groupd_coordinator_store_records_written_total", nil},
	} {
		was, is := metricValue(before, c.name, c.labels...), metricValue(after, c.name, c.labels...)
		if is <= was {
			t.Errorf("%s%v did not move: %v before the scenario, %v after", c.name, c.labels, was, is)
		}
	}
	if got := metricValue(after, "groupd_connections_open"); got < float64(members) {
		t.Errorf("groupd_connections_open = %v with %d members connected", got, members)
	}
	if got := metricValue(after, "groupd_group_members", "group", groupID); got != float64(members) {
		t.Errorf("groupd_group_members{group=%q} = %v, want %d", groupID, got, members)
	}
	if got := metricValue(after, "groupd_groups", "state", "Stable", "type", "classic"); got != 1 {
		t.Errorf("groupd_groups{state=Stable,type=classic} = %v, want 1", got)
	}
}

// slowConn delays every write: the requests of a client on a slow or
// overloaded network arrive late.
type slowConn struct {
	net.Conn
	delay time.Duration
}

func (c slowConn) Write(b []byte) (int, error) {
	time.Sleep(c.delay)
	return c.Conn.Write(b)
}

// TestRebalanceStorm runs a member whose session timeout is shorter than
// the gaps between its heartbeats: it expires, comes back, expires again.
// The coordinator flags the repeated session timeouts as a storm that names
// the member, its session timeout and the gap it saw.
func TestRebalanceStorm(t *testing.T) {
	t.Parallel()
	a := startServer(t, t.TempDir(), withHTTP, func(c *app.Config) {
		c.Group.InitialRebalanceDelay = 100 * time.Millisecond
		c.Group.MinSessionTimeout = 500 * time.Millisecond
	})
	addr, src := a.Addr(), httpAdmin(a.HTTPAddr())
	const topic, groupID = "storm", "storm-group"
	createTopic(t, addr, topic, 2)
	tl := &timeline{}
	startHistMember(t, addr, topic, groupID, "steady", kgo.RangeBalancer(), tl)
	// Heartbeats every second, each written 300 ms late, against a
	// session timeout of one second.
	d := net.Dialer{}
	startHistMember(t, addr, topic, groupID, "flaky", kgo.RangeBalancer(), tl,
		kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(time.Second),
		kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, host)
			if err != nil {
				return nil, err
			}
			return slowConn{c, 300 * time.Millisecond}, nil
		}))

	deadline := time.Now().Add(90 * time.Second)
	for {
		rs := rebalancesOf(t, src, groupID)
		for _, r := range rs {
			if !r.Storm || r.Trigger != inspect.TriggerSessionTimeout {
				continue
			}
			if r.Member == nil || r.Member.ClientID != "flaky" {
				t.Fatalf("storm #%d names %+v, want the flaky member", r.Seq, r.Member)
			}
			if !strings.HasPrefix(r.StormCause, group.StormSessionTimeout+": session timeout 1000 ms, heartbeat gap ") {
				t.Fatalf("storm cause %q", r.StormCause)
			}
			expired := 0
			for _, o := range rs {
				if o.Trigger == inspect.TriggerSessionTimeout && o.Seq <= r.Seq {
					expired++
					if o.Member.ClientID != "flaky" {
						t.Errorf("session-timeout rebalance #%d by %+v", o.Seq, o.Member)
					}
				}
			}
			if expired < group.DefaultConfig().StormCount {
				t.Fatalf("storm flagged after %d session timeouts", expired)
			}
			// Counted once it ends.
			waitFor(t, 10*time.Second, "the storm counted in /metrics", func() (bool, string) {
				got := metricValue(scrape(t, a.HTTPAddr()), "groupd_rebalance_storms_total", "trigger", inspect.TriggerSessionTimeout)
				return got >= 1, fmt.Sprintf("groupd_rebalance_storms_total{trigger=session-timeout} = %v", got)
			})
			t.Logf("storm at rebalance #%d: %s", r.Seq, r.StormCause)
			return
		}
		if time.Now().After(deadline) {
			var lines []string
			for _, r := range rs {
				lines = append(lines, fmt.Sprintf("#%d %s by %+v storm=%v", r.Seq, r.Trigger, r.Member, r.Storm))
			}
			t.Fatalf("no storm after 90 s; rebalances:\n%s", strings.Join(lines, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRebalanceHistorySurvivesRestart stops groupd after a few rebalances
// and starts it again over the same data directory: the history reads back
// the same through the admin API, record for record. The coordinator's
// own view must be the same too.
func TestRebalanceHistorySurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fast := func(c *app.Config) {
		c.Group.InitialRebalanceDelay = 100 * time.Millisecond
		c.Group.MinSessionTimeout = 500 * time.Millisecond
	}
	a := startServer(t, dir, fast, withHTTP)
	addr, src := a.Addr(), httpAdmin(a.HTTPAddr())
	const topic, groupID = "restart", "restart-group"
	createTopic(t, addr, topic, histPartitions)
	tl := &timeline{}
	m1 := startHistMember(t, addr, topic, groupID, "m1", kgo.RangeBalancer(), tl)
	waitHistSettled(t, src, groupID, tl, []string{"m1"}, "one member")
	m2 := startHistMember(t, addr, topic, groupID, "m2", kgo.RangeBalancer(), tl)
	waitHistSettled(t, src, groupID, tl, []string{"m1", "m2"}, "two members")
	m2.stop()
	m1.stop()
	var before, direct []inspect.Rebalance
	waitFor(t, 10*time.Second, "the group to empty", func() (bool, string) {
		before = rebalancesOf(t, src, groupID)
		last := before[len(before)-1]
		return last.Outcome == "empty", fmt.Sprintf("last rebalance %+v", last)
	})
	direct = rebalancesOf(t, a.Inspect(), groupID)
	stopServer(t, a)

	b := startServer(t, dir, fast, withHTTP)
	var after []inspect.Rebalance
	// Until its shards have loaded, the API answers 503.
	waitFor(t, 10*time.Second, "the coordinator to load", func() (bool, string) {
		rs, _, err := httpAdmin(b.HTTPAddr()).Rebalances(context.Background(), groupID)
		if err != nil && !errors.Is(err, inspect.ErrUnavailable) {
			t.Fatalf("rebalances after restart: %v", err)
		}
		after = rs
		return err == nil, fmt.Sprint(err)
	})
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("history after restart:\n%+v\nbefore:\n%+v", after, before)
	}
	if again := rebalancesOf(t, b.Inspect(), groupID); !reflect.DeepEqual(again, direct) {
		t.Fatalf("the coordinator's history after restart:\n%+v\nbefore:\n%+v", again, direct)
	}
	if len(after) < 3 {
		t.Fatalf("%d rebalances kept, want at least 3", len(after))
	}
}
