package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/groupd/groupd/internal/app"
)

// The consumer (KIP-848) protocol with real clients: franz-go with its
// server-side balancer, and confluent-kafka-go (librdkafka) with
// group.protocol=consumer, alone and in one group together.

// fastConsumerGroups shortens the consumer protocol's session timeout and
// heartbeat interval, as --group-consumer-session-timeout and
// --group-consumer-heartbeat-interval would, so that a killed member is
// fenced within seconds and members learn of freed partitions quickly.
func fastConsumerGroups(c *app.Config) {
	c.Group.Consumer.SessionTimeout = groupSession
	c.Group.Consumer.HeartbeatInterval = groupHeartbeat
}

// startConfluentMember starts a confluent-kafka-go consumer with
// group.protocol=consumer in a process of its own (so that killing it is
// kill -9). It is set by the file built with cgo; nil without it.
var startConfluentMember func(t *testing.T, addr, topic, group, member, instance string, tr *ownershipTracker) groupMember

// needConfluent skips a test without confluent-kafka-go (it needs cgo and
// a C compiler), except under CI=true, where .ci/run provides both.
func needConfluent(t *testing.T) {
	t.Helper()
	if startConfluentMember != nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("confluent-kafka-go needs cgo (CGO_ENABLED=1 and gcc), which CI must provide")
	}
	t.Skip("confluent-kafka-go needs cgo: build with CGO_ENABLED=1 and a C compiler (.ci/run installs gcc)")
}

// startKgo848Member starts a franz-go member that uses the consumer
// protocol: ServerSideBalancer, with the balancer that names the server
// assignor (range for range, uniform for sticky).
func startKgo848Member(bal func() kgo.GroupBalancer, extra ...kgo.Opt) func(t *testing.T, addr, topic, group, m string, tr *ownershipTracker) groupMember {
	return func(t *testing.T, addr, topic, group, m string, tr *ownershipTracker) groupMember {
		return startKgoMember(t, addr, topic, group, m, tr, append([]kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(bal())}, extra...)...)
	}
}

// TestConsumerProtocolClients runs the group-client scenario (12
// partitions, 6,000 records; three members, then two more, one stopped
// cleanly, one killed) over the consumer protocol: every record consumed,
// no partition held by two members at once, no record consumed twice
// before the kill.
func TestConsumerProtocolClients(t *testing.T) {
	confluent := func(t *testing.T, addr, topic, group, m string, tr *ownershipTracker) groupMember {
		return startConfluentMember(t, addr, topic, group, m, "", tr)
	}
	// Members alternate between the two clients: m1, m3 and m5 are
	// franz-go, m2 (the one killed) and m4 librdkafka.
	mixed := func(t *testing.T, addr, topic, group, m string, tr *ownershipTracker) groupMember {
		if m == "m2" || m == "m4" {
			return confluent(t, addr, topic, group, m, tr)
		}
		return startKgo848Member(kgo.StickyBalancer)(t, addr, topic, group, m, tr)
	}
	for _, c := range []struct {
		groupClient
		confluent bool
	}{
		{groupClient{"kgo/range", true, startKgo848Member(kgo.RangeBalancer)}, false},
		{groupClient{"kgo/sticky", true, startKgo848Member(kgo.StickyBalancer)}, false},
		{groupClient{"confluent", true, confluent}, true},
		{groupClient{"kgo+confluent", true, mixed}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.confluent {
				needConfluent(t)
			}
			t.Parallel()
			runGroupScenarioDescribed(t, c.groupClient, describeConsumerGroup)
		})
	}
}

// consumerGroupView is what ConsumerGroupDescribe says of a group: its
// state and epoch, and each member by instance id (or member id).
type consumerGroupView struct {
	state  string
	epoch  int32
	ids    map[string]string  // instance -> member id
	epochs map[string]int32   // instance -> member epoch
	parts  map[string][]int32 // instance -> partitions of the topic
}

func describeConsumer(t *testing.T, adm *kadm.Client, group, topic string) consumerGroupView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dg, err := adm.DescribeConsumerGroups(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	g := dg[group]
	if g.Err != nil {
		t.Fatal(g.Err)
	}
	v := consumerGroupView{state: g.State, epoch: g.Epoch, ids: map[string]string{}, epochs: map[string]int32{}, parts: map[string][]int32{}}
	for _, m := range g.Members {
		inst := m.MemberID
		if m.InstanceID != nil {
			inst = *m.InstanceID
		}
		v.ids[inst], v.epochs[inst] = m.MemberID, m.MemberEpoch
		m.Assignment.EachPartitions(func(tp string, ps []int32) {
			if tp == topic {
				ps = slices.Clone(ps)
				slices.Sort(ps)
				v.parts[inst] = ps
			}
		})
	}
	return v
}

// TestConsumerProtocolStaticRestart restarts one of two static members of
// a consumer-protocol group within its session timeout: the new
// incarnation gets the same partitions at the same group epoch, and the
// other member sees no revocation, no assignment and no epoch change, also
// after the old incarnation's session would have run out.
func TestConsumerProtocolStaticRestart(t *testing.T) {
	for _, c := range []struct {
		name      string
		confluent bool
	}{{"kgo", false}, {"confluent", true}} {
		t.Run(c.name, func(t *testing.T) {
			if c.confluent {
				needConfluent(t)
			}
			t.Parallel()
			testStaticRestart848(t, c.confluent)
		})
	}
}

func testStaticRestart848(t *testing.T, confluent bool) {
	a := startServer(t, t.TempDir(), fastGroups, fastConsumerGroups)
	addr := a.Addr()
	const topic, group = "static848", "static848-group"
	createTopic(t, addr, topic, 6)
	pc := newClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	adm := kadm.NewClient(newClient(t, addr))
	tr := newOwnershipTracker(t, true)
	defer func() {
		if t.Failed() {
			t.Logf("callback log:\n%s", tr.dump())
		}
	}()
	start := func(inst string) groupMember {
		if confluent {
			return startConfluentMember(t, addr, topic, group, inst, inst, tr)
		}
		return startKgo848Member(kgo.StickyBalancer, kgo.InstanceID(inst))(t, addr, topic, group, inst, tr)
	}
	produceRange(t, pc, 0, 600)
	sa, sb := start("static-a"), start("static-b")
	settled := func(what string, want int) consumerGroupView {
		var v consumerGroupView
		waitFor(t, groupPhaseWait, what, func() (bool, string) {
			if ok, why := tr.settledOn([]string{"static-a", "static-b"}, 6, want); !ok {
				return false, why
			}
			v = describeConsumer(t, adm, group, topic)
			return v.state == "Stable" && len(v.ids) == 2, fmt.Sprintf("group %s with %v", v.state, v.ids)
		})
		return v
	}
	before := settled("two static members stable", 600)
	eventsB := tr.eventsOf("static-b")
	t.Logf("stable at epoch %d: %v", before.epoch, before.parts)

	// A static member's clean stop is a temporary leave (epoch -2): it
	// keeps its partitions, and nobody else gets them meanwhile.
	tr.startLeaving("static-a")
	sa.stop()
	tr.left("static-a")
	if v := describeConsumer(t, adm, group, topic); v.epoch != before.epoch || v.epochs["static-a"] != -2 ||
		!slices.Equal(v.parts["static-a"], before.parts["static-a"]) {
		t.Fatalf("after the static member stopped: epoch %d, members %v at epochs %v with %v; want epoch %d, static-a at -2 keeping %v",
			v.epoch, v.ids, v.epochs, v.parts, before.epoch, before.parts["static-a"])
	}
	tr.rejoin("static-a")
	sa = start("static-a")
	after := settled("restarted static member settled", 600)
	if after.epoch != before.epoch {
		t.Errorf("group epoch %d after the restart, want the unchanged %d", after.epoch, before.epoch)
	}
	if !slices.Equal(after.parts["static-a"], before.parts["static-a"]) || !slices.Equal(after.parts["static-b"], before.parts["static-b"]) {
		t.Errorf("assignments changed across the restart: %v, before %v", after.parts, before.parts)
	}
	if after.ids["static-b"] != before.ids["static-b"] || after.epochs["static-b"] != before.epochs["static-b"] {
		t.Errorf("the other member changed: %s at epoch %d, before %s at %d", after.ids["static-b"], after.epochs["static-b"],
			before.ids["static-b"], before.epochs["static-b"])
	}

	produceRange(t, pc, 600, 1200)
	settled("records after the restart consumed", 1200)
	// Past the old incarnation's session timeout nothing may happen.
	time.Sleep(groupSession + time.Second)
	if v := describeConsumer(t, adm, group, topic); v.epoch != before.epoch || v.state != "Stable" || len(v.ids) != 2 {
		t.Errorf("a session timeout later: %s at epoch %d with %v; want Stable at %d with 2", v.state, v.epoch, v.ids, before.epoch)
	}
	if ev := tr.eventsOf("static-b"); !slices.Equal(ev, eventsB) {
		t.Errorf("the other static member saw callbacks across the restart: %v", ev[len(eventsB):])
	}
	tr.mu.Lock()
	dups := tr.dups
	tr.mu.Unlock()
	if dups != 0 {
		t.Errorf("%d records consumed twice across a static restart", dups)
	}
	for _, m := range []struct {
		name string
		gm   groupMember
	}{{"static-a", sa}, {"static-b", sb}} {
		tr.startLeaving(m.name)
		m.gm.stop()
		tr.left(m.name)
	}
}

// TestConsumerProtocolRegexMatchesOffsetsTopic subscribes a consumer group
// by regular expressions, one naming __consumer_offsets: as in Kafka, the
// broker's resolution includes the internal topic, so the member is
// assigned all its partitions (which read as empty here).
func TestConsumerProtocolRegexMatchesOffsetsTopic(t *testing.T) {
	a := startServer(t, t.TempDir(), fastGroups, fastConsumerGroups)
	addr := a.Addr()
	const group = "regex848-group"
	adm := kadm.NewClient(newClient(t, addr))
	createTopic(t, addr, "regex848", 1)
	// The first coordinator lookup creates __consumer_offsets.
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	for _, r := range adm.FindGroupCoordinators(ctx, group) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	cl := newClient(t, addr, kgo.ConsumerGroup(group), kgo.ServerSideBalancer(), kgo.ConsumeRegex(),
		kgo.ConsumeTopics(`regex848`, `__consumer_offsets`), kgo.FetchMaxWait(100*time.Millisecond))
	go func() {
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	waitFor(t, 20*time.Second, "__consumer_offsets assigned", func() (bool, string) {
		state, n, err := describeConsumerGroup(ctx, adm, group)
		if err != nil {
			return false, err.Error()
		}
		v := describeConsumer(t, adm, group, "__consumer_offsets")
		n = 0
		for _, ps := range v.parts {
			n += len(ps)
		}
		return state == "Stable" && n == 50, fmt.Sprintf("group %s with %d partitions of __consumer_offsets assigned", state, n)
	})
}
