package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafka "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The group-client scenario: a topic of groupPartitions partitions gets
// groupRecords records in four equal parts, one per phase. Phase 1 starts
// three consumers in one group, phase 2 adds two, phase 3 stops one cleanly
// (LeaveGroup), phase 4 kills one (its connections are dropped and it never
// dials again, so the broker only learns of it by the session timeout).
// Each phase ends when the group is Stable with the expected members, every
// partition is owned by exactly one of them, and every record produced so
// far has been consumed.
const (
	groupPartitions = 12
	groupRecords    = 6000
	groupSession    = 6 * time.Second // the broker's minimum session timeout
	groupHeartbeat  = 500 * time.Millisecond
	groupPhaseWait  = 45 * time.Second
)

var errKilled = errors.New("killed by the test")

// killDialer dials TCP and remembers every connection so that kill can
// drop them all at once and refuse every later dial: to the broker the
// client vanishes without a LeaveGroup.
type killDialer struct {
	mu    sync.Mutex
	d     net.Dialer
	conns []net.Conn
	dead  bool
}

func (k *killDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	k.mu.Lock()
	dead := k.dead
	k.mu.Unlock()
	if dead {
		return nil, errKilled
	}
	c, err := k.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		c.Close()
		return nil, errKilled
	}
	k.conns = append(k.conns, c)
	return c, nil
}

// Dial makes killDialer a golang.org/x/net/proxy.Dialer for sarama.
func (k *killDialer) Dial(network, addr string) (net.Conn, error) {
	return k.DialContext(context.Background(), network, addr)
}

func (k *killDialer) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dead = true
	for _, c := range k.conns {
		c.Close()
	}
	k.conns = nil
}

// ownershipTracker collects what every member of one group says it owns,
// from the clients' own assignment callbacks, and what every member
// consumed. It fails the test when a partition is handed to a member while
// another live member still holds it, when a key is consumed twice before
// any member was killed, and (for cooperative protocols) when a member is
// revoked from a partition that it is then given back.
type ownershipTracker struct {
	t           testing.TB
	cooperative bool

	mu            sync.Mutex
	owner         map[int32]string // partition -> member holding it
	gen           map[string]int32 // member -> last generation it reported
	dead          map[string]bool  // killed or left: callbacks are ignored
	leaving       map[string]bool  // stopping cleanly: revokes are expected
	pendingRevoke map[int32]string // cooperative: partition -> member it was revoked from
	seen          map[string]int   // key -> times consumed
	dupsAllowed   bool             // set when a member is killed
	dups          int
	events        []string
	failures      int
}

func newOwnershipTracker(t testing.TB, cooperative bool) *ownershipTracker {
	return &ownershipTracker{
		t:             t,
		cooperative:   cooperative,
		owner:         make(map[int32]string),
		gen:           make(map[string]int32),
		dead:          make(map[string]bool),
		leaving:       make(map[string]bool),
		pendingRevoke: make(map[int32]string),
		seen:          make(map[string]int),
	}
}

// failf reports a violation; it is safe to call from any goroutine.
func (tr *ownershipTracker) failf(format string, args ...any) {
	tr.failures++
	if tr.failures <= 20 {
		tr.t.Errorf(format, args...)
	}
}

func (tr *ownershipTracker) logf(format string, args ...any) {
	tr.events = append(tr.events, fmt.Sprintf("%s "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...))
}

func (tr *ownershipTracker) assigned(m string, gen int32, parts []int32) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.dead[m] {
		return
	}
	tr.logf("%s assigned gen %d %v", m, gen, parts)
	if prev, ok := tr.gen[m]; ok && gen < prev {
		tr.failf("%s: assignment in generation %d after generation %d", m, gen, prev)
	}
	tr.gen[m] = gen
	for _, p := range parts {
		if o := tr.owner[p]; o != "" && o != m {
			tr.failf("generation %d: partition %d assigned to %s while %s still holds it", gen, p, m, o)
		}
		if tr.cooperative {
			if r, ok := tr.pendingRevoke[p]; ok && r == m {
				tr.failf("cooperative generation %d: %s was revoked from partition %d and then given it back (a kept partition must never be revoked)", gen, m, p)
			}
			delete(tr.pendingRevoke, p)
		}
		tr.owner[p] = m
	}
}

func (tr *ownershipTracker) revoked(m string, gen int32, parts []int32) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.dead[m] {
		return
	}
	tr.logf("%s revoked gen %d %v", m, gen, parts)
	for _, p := range parts {
		if o := tr.owner[p]; o != m {
			tr.failf("%s revoked from partition %d that it does not hold (holder %q)", m, p, o)
			continue
		}
		delete(tr.owner, p)
		if tr.cooperative && !tr.leaving[m] {
			tr.pendingRevoke[p] = m
		}
	}
}

// releasedUnstarted records the end of a session, while m stops, for
// partitions the session claimed but never handed to the application
// (sarama skips a claim's ConsumeClaim once the session is over). Those m
// still holds are released; a cooperative claim carried over from an
// earlier session may already have been released by its ConsumeClaim.
func (tr *ownershipTracker) releasedUnstarted(m string, gen int32, parts []int32) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.dead[m] {
		return
	}
	var held []int32
	for _, p := range parts {
		if tr.owner[p] == m {
			held = append(held, p)
			delete(tr.owner, p)
		}
	}
	if len(held) > 0 {
		tr.logf("%s released unstarted claims gen %d %v", m, gen, held)
	}
}

// lost is kgo's OnPartitionsLost: the member was fenced. That happens only
// to a member the test killed, whose callbacks are already ignored.
func (tr *ownershipTracker) lost(m string, parts []int32) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.dead[m] {
		return
	}
	tr.logf("%s lost %v", m, parts)
	tr.failf("%s lost partitions %v although it was never killed", m, parts)
	for _, p := range parts {
		if tr.owner[p] == m {
			delete(tr.owner, p)
		}
	}
}

func (tr *ownershipTracker) record(m string, p int32, key string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.seen[key]++
	if tr.seen[key] > 1 {
		tr.dups++
		if !tr.dupsAllowed {
			tr.failf("key %s (partition %d) consumed twice, the second time by %s, with only clean membership changes so far", key, p, m)
		}
	}
}

func (tr *ownershipTracker) startLeaving(m string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.logf("%s leaving", m)
	tr.leaving[m] = true
}

// left is called after a member stopped cleanly: its revoke callbacks must
// have released everything it held.
func (tr *ownershipTracker) left(m string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.logf("%s left", m)
	for p, o := range tr.owner {
		if o == m {
			tr.failf("%s stopped cleanly but never released partition %d", m, p)
			delete(tr.owner, p)
		}
	}
	tr.dead[m] = true
}

// killed is called after a member was killed: what it held is fenced off by
// the broker once its session expires, and its uncommitted records may be
// consumed again.
func (tr *ownershipTracker) killed(m string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.logf("%s killed", m)
	for p, o := range tr.owner {
		if o == m {
			delete(tr.owner, p)
		}
	}
	tr.dead[m] = true
	tr.dupsAllowed = true
}

// settled says whether every partition is held by one of members, each of
// them holds something, and keys 0..want-1 were all consumed.
func (tr *ownershipTracker) settled(members []string, want int) (bool, string) {
	return tr.settledOn(members, groupPartitions, want)
}

// settledOn is settled for a topic of partitions partitions.
func (tr *ownershipTracker) settledOn(members []string, partitions int32, want int) (bool, string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	held := make(map[string]int)
	for p := range partitions {
		o := tr.owner[p]
		if o == "" {
			return false, fmt.Sprintf("partition %d unowned", p)
		}
		if !slices.Contains(members, o) {
			return false, fmt.Sprintf("partition %d held by %s, not one of %v", p, o, members)
		}
		held[o]++
	}
	for _, m := range members {
		if held[m] == 0 {
			return false, fmt.Sprintf("%s holds nothing", m)
		}
	}
	for i := range want {
		if tr.seen[strconv.Itoa(i)] == 0 {
			return false, fmt.Sprintf("key %d not consumed (%d distinct keys so far)", i, tr.distinctLocked())
		}
	}
	return true, ""
}

func (tr *ownershipTracker) distinctLocked() int {
	n := 0
	for _, c := range tr.seen {
		if c > 0 {
			n++
		}
	}
	return n
}

// rejoin lets a member that left take part again (a static member's next
// incarnation).
func (tr *ownershipTracker) rejoin(m string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.logf("%s rejoins", m)
	delete(tr.dead, m)
	delete(tr.leaving, m)
}

// eventsOf returns the callbacks m reported, without their times.
func (tr *ownershipTracker) eventsOf(m string) []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []string
	for _, e := range tr.events {
		f := strings.SplitN(e, " ", 3)
		if len(f) == 3 && f[1] == m {
			out = append(out, f[2])
		}
	}
	return out
}

func (tr *ownershipTracker) dump() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.events, "\n")
}

// groupMember is one consumer of the scenario, whatever its client.
type groupMember interface {
	// stop stops the member cleanly: it commits and sends LeaveGroup.
	stop()
	// kill stops the member's processing, then drops its connections and
	// makes every later dial fail, so no LeaveGroup reaches the broker.
	kill()
}

type groupClient struct {
	name        string
	cooperative bool
	start       func(t *testing.T, addr, topic, group, member string, tr *ownershipTracker) groupMember
}

func TestGroupClients(t *testing.T) {
	var clients []groupClient
	for _, b := range []struct {
		name string
		bal  func() kgo.GroupBalancer
		coop bool
	}{
		{"range", kgo.RangeBalancer, false},
		{"roundrobin", kgo.RoundRobinBalancer, false},
		{"sticky", kgo.StickyBalancer, false},
		{"cooperative-sticky", kgo.CooperativeStickyBalancer, true},
	} {
		clients = append(clients, groupClient{"kgo/" + b.name, b.coop, func(t *testing.T, addr, topic, group, m string, tr *ownershipTracker) groupMember {
			return startKgoMember(t, addr, topic, group, m, tr, kgo.Balancers(b.bal()))
		}})
	}
	for _, b := range []struct {
		name string
		bal  func() sarama.BalanceStrategy
		coop bool
	}{
		{"range", func() sarama.BalanceStrategy { return sarama.NewBalanceStrategyRange() }, false},
		{"roundrobin", func() sarama.BalanceStrategy { return sarama.NewBalanceStrategyRoundRobin() }, false},
		{"sticky", func() sarama.BalanceStrategy { return sarama.NewBalanceStrategySticky() }, false},
		{"cooperative-sticky", sarama.NewBalanceStrategyCooperativeSticky, true},
	} {
		clients = append(clients, groupClient{"sarama/" + b.name, b.coop, func(t *testing.T, addr, topic, group, m string, tr *ownershipTracker) groupMember {
			return startSaramaMember(t, addr, topic, group, m, tr, b.bal())
		}})
	}
	clients = append(clients, groupClient{"kafka-go/range", false, startKafkaGoMember})

	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runGroupScenario(t, c)
		})
	}
}

func runGroupScenario(t *testing.T, c groupClient) {
	runGroupScenarioDescribed(t, c, describeClassicGroup)
}

// runGroupScenarioDescribed is the scenario with describe telling the
// group's state and member count: DescribeGroups for classic groups,
// ConsumerGroupDescribe for consumer-protocol ones.
func runGroupScenarioDescribed(t *testing.T, c groupClient,
	describe func(ctx context.Context, adm *kadm.Client, group string) (string, int, error),
) {
	begin := time.Now()
	a := startServer(t, t.TempDir(), fastGroups, fastConsumerGroups)
	addr := a.Addr()
	const topic, group = "gc", "gc-group"
	createTopic(t, addr, topic, groupPartitions)
	pc := newClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	adm := kadm.NewClient(newClient(t, addr))
	tr := newOwnershipTracker(t, c.cooperative)
	defer func() {
		if t.Failed() {
			t.Logf("callback log:\n%s", tr.dump())
		}
	}()

	members := map[string]groupMember{}
	var live []string
	add := func(names ...string) {
		for _, n := range names {
			members[n] = c.start(t, addr, topic, group, n, tr)
			live = append(live, n)
		}
	}
	const part = groupRecords / 4
	// Each phase's records are produced over about a second while the
	// membership change happens, so rebalances meet records in flight
	// and uncommitted work.
	phase := func(name string, n int, change func()) {
		t.Helper()
		produced := make(chan error, 1)
		go func() { produced <- produceSpread(pc, (n-1)*part, n*part, time.Second) }()
		time.Sleep(200 * time.Millisecond)
		change()
		if err := <-produced; err != nil {
			t.Fatalf("%s: produce: %v", name, err)
		}
		waitGroupSettled(t, tr, live, n*part, name, func(ctx context.Context) (string, int, error) {
			return describe(ctx, adm, group)
		})
		t.Logf("%s settled after %v", name, time.Since(begin).Round(time.Millisecond))
	}

	phase("phase 1 (three members)", 1, func() { add("m1", "m2", "m3") })
	phase("phase 2 (two members added)", 2, func() { add("m4", "m5") })
	phase("phase 3 (one member stopped cleanly)", 3, func() {
		tr.startLeaving("m1")
		members["m1"].stop()
		tr.left("m1")
		live = slices.DeleteFunc(live, func(s string) bool { return s == "m1" })
	})

	tr.mu.Lock()
	dupsBeforeKill := tr.dups
	tr.mu.Unlock()
	if dupsBeforeKill != 0 {
		t.Errorf("%d records consumed twice before any member was killed", dupsBeforeKill)
	}

	phase("phase 4 (one member killed)", 4, func() {
		members["m2"].kill()
		tr.killed("m2")
		live = slices.DeleteFunc(live, func(s string) bool { return s == "m2" })
	})

	tr.mu.Lock()
	distinct, dups := tr.distinctLocked(), tr.dups
	tr.mu.Unlock()
	if distinct != groupRecords {
		t.Errorf("%d distinct keys consumed, want %d", distinct, groupRecords)
	}
	t.Logf("%d records consumed, %d redelivered after the kill", groupRecords, dups)

	for _, n := range live {
		tr.startLeaving(n)
		members[n].stop()
		tr.left(n)
	}
	t.Logf("wall time %v", time.Since(begin).Round(time.Millisecond))
}

// produceSpread writes records with keys from..to-1 in batches of 50
// spread evenly over about d.
func produceSpread(cl *kgo.Client, from, to int, d time.Duration) error {
	const batch = 50
	pause := d / time.Duration((to-from+batch-1)/batch)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for lo := from; lo < to; lo += batch {
		var rs []*kgo.Record
		for i := lo; i < min(lo+batch, to); i++ {
			rs = append(rs, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: fmt.Appendf(nil, "v-%d", i)})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			return err
		}
		time.Sleep(pause)
	}
	return nil
}

// produceRange writes records with keys from..to-1 (values as produceKeyed).
func produceRange(t testing.TB, cl *kgo.Client, from, to int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var firstErr atomic.Value
	for i := from; i < to; i++ {
		r := &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: fmt.Appendf(nil, "v-%d", i)}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err, _ := firstErr.Load().(error); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// describeClassicGroup returns a classic group's state and member count
// (DescribeGroups).
func describeClassicGroup(ctx context.Context, adm *kadm.Client, group string) (string, int, error) {
	dg, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return "", 0, err
	}
	g := dg[group]
	return g.State, len(g.Members), g.Err
}

// describeConsumerGroup returns a consumer group's state and member count
// (ConsumerGroupDescribe).
func describeConsumerGroup(ctx context.Context, adm *kadm.Client, group string) (string, int, error) {
	dg, err := adm.DescribeConsumerGroups(ctx, group)
	if err != nil {
		return "", 0, err
	}
	g := dg[group]
	return g.State, len(g.Members), g.Err
}

// waitGroupSettled waits until describe shows the group Stable with exactly
// the live members and the tracker agrees on ownership and consumption.
func waitGroupSettled(t *testing.T, tr *ownershipTracker, live []string, want int, phase string,
	describe func(context.Context) (state string, members int, err error),
) {
	t.Helper()
	deadline := time.Now().Add(groupPhaseWait)
	var why string
	for time.Now().Before(deadline) {
		ok, w := tr.settled(live, want)
		why = w
		if ok {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			state, members, err := describe(ctx)
			cancel()
			switch {
			case err != nil:
				why = err.Error()
			case state != "Stable" || members != len(live):
				why = fmt.Sprintf("group %s with %d members, want Stable with %d", state, members, len(live))
			default:
				// Stable and agreed; check again that nothing moved
				// while we asked.
				if ok, w := tr.settled(live, want); ok {
					return
				} else {
					why = w
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not settled after %v: %s", phase, groupPhaseWait, why)
}

func topicParts(m map[string][]int32, topic string) []int32 {
	ps := slices.Clone(m[topic])
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

// ---- franz-go ----

type kgoMember struct {
	closed atomic.Bool
	name   string
	cl     *kgo.Client
	kd     *killDialer
	cancel context.CancelFunc
	done   chan struct{}
}

func startKgoMember(t *testing.T, addr, topic, group, m string, tr *ownershipTracker, opts ...kgo.Opt) groupMember {
	kd := &killDialer{}
	km := &kgoMember{name: m, kd: kd, done: make(chan struct{})}
	gen := func(cl *kgo.Client) int32 { _, g := cl.GroupMetadata(); return g }
	all := []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ClientID(m),
		kgo.Dialer(kd.DialContext),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(groupSession),
		kgo.HeartbeatInterval(groupHeartbeat),
		kgo.RebalanceTimeout(20 * time.Second),
		kgo.AutoCommitInterval(300 * time.Millisecond),
		kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, a map[string][]int32) {
			tr.assigned(m, gen(cl), topicParts(a, topic))
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, r map[string][]int32) {
			// What kgo's default revoke does: commit what was polled
			// before giving the partitions up.
			if err := cl.CommitUncommittedOffsets(ctx); err != nil && !kd.isDead() {
				t.Logf("%s: commit on revoke: %v", m, err)
			}
			tr.revoked(m, gen(cl), topicParts(r, topic))
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) {
			tr.lost(m, topicParts(l, topic))
		}),
	}
	cl, err := kgo.NewClient(append(all, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	km.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	km.cancel = cancel
	go func() {
		defer close(km.done)
		for {
			fs := cl.PollFetches(ctx)
			// Everything polled is recorded, even on the way out:
			// autocommit may already cover it.
			fs.EachRecord(func(r *kgo.Record) { tr.record(m, r.Partition, string(r.Key)) })
			if ctx.Err() != nil || fs.IsClientClosed() {
				return
			}
		}
	}()
	t.Cleanup(func() {
		km.cancel()
		<-km.done
		if km.closed.CompareAndSwap(false, true) {
			closeWithin(t, m, cl.Close, 10*time.Second)
		}
	})
	return km
}

func (k *killDialer) isDead() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dead
}

func (km *kgoMember) stop() {
	km.cancel()
	<-km.done
	km.closed.Store(true)
	km.cl.Close() // commits in OnPartitionsRevoked, then LeaveGroup
}

func (km *kgoMember) kill() {
	km.cancel()
	<-km.done
	km.kd.kill()
}

// closeWithin runs close but gives up waiting after d: a killed client may
// spend a while retrying dials that will never succeed.
func closeWithin(t testing.TB, name string, close func(), d time.Duration) {
	done := make(chan struct{})
	go func() { close(); closeOnce(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Logf("%s: close still running after %v; leaving it", name, d)
	}
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// ---- sarama ----

type saramaMember struct {
	t        testing.TB
	name     string
	cg       sarama.ConsumerGroup
	kd       *killDialer
	cancel   context.CancelFunc
	done     chan struct{}
	dead     atomic.Bool
	closed   atomic.Bool
	stopping atomic.Bool
}

type saramaHandler struct {
	sm    *saramaMember
	tr    *ownershipTracker
	topic string

	mu      sync.Mutex
	started map[int32]bool // partitions of the session whose ConsumeClaim ran
}

func (h *saramaHandler) Setup(s sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	h.started = map[int32]bool{}
	h.mu.Unlock()
	if !h.sm.dead.Load() {
		h.tr.assigned(h.sm.name, s.GenerationID(), topicParts(s.Claims(), h.topic))
	}
	return nil
}

// Cleanup runs once every ConsumeClaim of the session returned; sarama
// commits marked offsets after it, before it rejoins or leaves. A session
// that ends while the member stops may end before sarama started a claim's
// ConsumeClaim (it skips them once the session is done): the member held
// those partitions from Setup until here.
func (h *saramaHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	if !h.sm.stopping.Load() || h.sm.dead.Load() {
		return nil
	}
	h.mu.Lock()
	var never []int32
	for _, p := range topicParts(s.Claims(), h.topic) {
		if !h.started[p] {
			never = append(never, p)
		}
	}
	h.mu.Unlock()
	h.tr.releasedUnstarted(h.sm.name, s.GenerationID(), never)
	return nil
}

func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	m, p := h.sm.name, c.Partition()
	h.mu.Lock()
	h.started[p] = true
	h.mu.Unlock()
	if !h.sm.dead.Load() {
		// For cooperative sessions this is where a newly added
		// partition shows up; for eager ones Setup already told us.
		h.tr.assigned(m, s.GenerationID(), []int32{p})
	}
	defer func() {
		if !h.sm.dead.Load() {
			h.tr.revoked(m, s.GenerationID(), []int32{p})
		}
	}()
	for {
		select {
		case msg, ok := <-c.Messages():
			if !ok {
				return nil
			}
			if h.sm.dead.Load() {
				continue // killed: neither processed nor marked
			}
			h.tr.record(m, p, string(msg.Key))
			s.MarkMessage(msg, "")
		case <-s.Context().Done():
			return nil
		}
	}
}

func startSaramaMember(t *testing.T, addr, topic, group, m string, tr *ownershipTracker, bal sarama.BalanceStrategy) groupMember {
	kd := &killDialer{}
	cfg := saramaConfig()
	cfg.ClientID = m
	cfg.Version = sarama.V2_8_0_0 // cooperative-sticky needs >= 2.4
	cfg.Consumer.Return.Errors = false
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{bal}
	cfg.Consumer.Group.Session.Timeout = groupSession
	cfg.Consumer.Group.Heartbeat.Interval = groupHeartbeat
	cfg.Consumer.Group.Rebalance.Timeout = 20 * time.Second
	cfg.Consumer.Group.Rebalance.Retry.Backoff = 200 * time.Millisecond
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 300 * time.Millisecond
	cfg.Consumer.MaxWaitTime = 200 * time.Millisecond
	cfg.Net.Proxy.Enable = true
	cfg.Net.Proxy.Dialer = kd
	cg, err := sarama.NewConsumerGroup([]string{addr}, group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sm := &saramaMember{t: t, name: m, cg: cg, kd: kd, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	sm.cancel = cancel
	h := &saramaHandler{sm: sm, tr: tr, topic: topic}
	go func() {
		defer close(sm.done)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil && !sm.dead.Load() {
				t.Logf("%s: consume: %v", m, err)
			}
			if ctx.Err() == nil && sm.dead.Load() {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() {
		sm.cancel()
		<-sm.done
		if sm.closed.CompareAndSwap(false, true) {
			closeWithin(t, m, func() { cg.Close() }, 10*time.Second)
		}
	})
	return sm
}

func (sm *saramaMember) stop() {
	sm.stopping.Store(true)
	sm.cancel()
	<-sm.done // the session is released: claims done, offsets committed
	sm.closed.Store(true)
	if err := sm.cg.Close(); err != nil { // LeaveGroup
		sm.t.Errorf("%s: close: %v", sm.name, err)
	}
}

func (sm *saramaMember) kill() {
	sm.dead.Store(true)
	sm.kd.kill()
}

// ---- kafka-go ----

// kafka-go's Reader hides generations and assignments, so the member runs
// the lower-level ConsumerGroup itself: one partition Reader per assigned
// partition, committing through the generation (OffsetCommit v2).
type kafkaGoMember struct {
	t      testing.TB
	name   string
	cg     *kafka.ConsumerGroup
	kd     *killDialer
	cancel context.CancelFunc
	done   chan struct{}
	dead   atomic.Bool
}

func startKafkaGoMember(t *testing.T, addr, topic, group, m string, tr *ownershipTracker) groupMember {
	kd := &killDialer{}
	dialer := &kafka.Dialer{ClientID: m, Timeout: 5 * time.Second, DialFunc: kd.DialContext}
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                group,
		Brokers:           []string{addr},
		Dialer:            dialer,
		Topics:            []string{topic},
		GroupBalancers:    []kafka.GroupBalancer{kafka.RangeGroupBalancer{}},
		HeartbeatInterval: groupHeartbeat,
		SessionTimeout:    groupSession,
		RebalanceTimeout:  20 * time.Second,
		JoinGroupBackoff:  200 * time.Millisecond,
		StartOffset:       kafka.FirstOffset,
		Timeout:           5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	km := &kafkaGoMember{t: t, name: m, cg: cg, kd: kd, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	km.cancel = cancel
	go func() {
		defer close(km.done)
		for {
			gen, err := cg.Next(ctx)
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if km.dead.Load() {
				continue
			}
			var parts []int32
			for _, pa := range gen.Assignments[topic] {
				parts = append(parts, int32(pa.ID))
			}
			slices.Sort(parts)
			tr.assigned(m, gen.ID, parts)
			for _, pa := range gen.Assignments[topic] {
				gen.Start(func(gctx context.Context) {
					km.consumePartition(gctx, t, gen, addr, dialer, topic, pa, tr)
					// kafka-go waits for every function started
					// in a generation before it joins again or
					// leaves, so this revoke comes before any
					// later assignment of the partition.
					if !km.dead.Load() {
						tr.revoked(m, gen.ID, []int32{int32(pa.ID)})
					}
				})
			}
		}
	}()
	t.Cleanup(func() {
		km.cancel()
		closeWithin(t, m, func() { cg.Close() }, 10*time.Second)
		<-km.done
	})
	return km
}

func (km *kafkaGoMember) consumePartition(ctx context.Context, t *testing.T, gen *kafka.Generation, addr string, dialer *kafka.Dialer, topic string, pa kafka.PartitionAssignment, tr *ownershipTracker) {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   []string{addr},
		Topic:     topic,
		Partition: pa.ID,
		Dialer:    dialer,
		MinBytes:  1,
		MaxBytes:  1 << 20,
		MaxWait:   100 * time.Millisecond,
	})
	defer r.Close()
	if err := r.SetOffset(pa.Offset); err != nil {
		t.Errorf("%s: set offset %d of partition %d: %v", km.name, pa.Offset, pa.ID, err)
		return
	}
	next, committed := int64(-1), int64(-1)
	commit := func() {
		if next < 0 || next == committed || km.dead.Load() {
			return
		}
		if err := gen.CommitOffsets(map[string]map[int]int64{topic: {pa.ID: next}}); err != nil {
			t.Logf("%s: commit partition %d at %d: %v", km.name, pa.ID, next, err)
			return
		}
		committed = next
	}
	defer commit() // the generation is ending: commit before kafka-go rejoins or leaves
	for {
		rctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		msg, err := r.ReadMessage(rctx)
		cancel()
		if ctx.Err() != nil || km.dead.Load() {
			return
		}
		if err != nil {
			commit() // idle: commit what was read
			continue
		}
		tr.record(km.name, int32(pa.ID), string(msg.Key))
		next = msg.Offset + 1
		if next-committed >= 50 {
			commit()
		}
	}
}

func (km *kafkaGoMember) stop() {
	km.cancel()
	if err := km.cg.Close(); err != nil { // ends the generation, then LeaveGroup
		km.t.Errorf("%s: close: %v", km.name, err)
	}
	<-km.done
}

func (km *kafkaGoMember) kill() {
	km.dead.Store(true)
	km.kd.kill()
}
