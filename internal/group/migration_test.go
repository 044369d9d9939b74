package group

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/inspect"
)

// newMigrationHarness is a machine without an initial rebalance delay that
// knows one topic t of 4 partitions.
func newMigrationHarness() (*harness, migrationClient) {
	h := newHarness(Config{InitialRebalanceDelay: -1})
	h.buf = &bytes.Buffer{}
	h.topics = []Topic{{Name: "t", ID: topicID("t"), Partitions: 4}}
	h.applyNoT(h.m.Step(h.now, TopicsChanged{Topics: h.topics}))
	return h, migrationClient{h}
}

// migrationClient builds the requests of the migration scenarios.
type migrationClient struct{ h *harness }

func (c migrationClient) join(client, member string, version int16, owned ...int32) {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = version
	req.Group, req.MemberID, req.ProtocolType = "g1", member, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 60000
	md := kmsg.NewConsumerMemberMetadata()
	md.Topics = []string{"t"}
	if owned != nil {
		md.Version = 1
		md.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "t", Partitions: owned}}
	}
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "cooperative-sticky", Metadata: md.AppendTo(nil)}}
	c.h.send(client, req)
}

func (c migrationClient) sync(member string, gen int32, assign map[string][]int32) {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = 3
	req.Group, req.MemberID, req.Generation = "g1", member, gen
	ids := make([]string, 0, len(assign))
	for id := range assign {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		a := kmsg.NewConsumerMemberAssignment()
		a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "t", Partitions: assign[id]}}
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: a.AppendTo(nil)})
	}
	c.h.send("c", req)
}

func (c migrationClient) cgHeartbeat(member string, epoch int32, owned ...int32) {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group, req.MemberID, req.MemberEpoch = "g1", member, epoch
	req.RebalanceTimeoutMillis = -1
	if epoch == 0 {
		req.RebalanceTimeoutMillis = 300000
		req.SubscribedTopicNames = []string{"t"}
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	} else if epoch > 0 {
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: topicID("t"), Partitions: owned}}
	}
	c.h.send("x", req)
}

func (c migrationClient) commit(member string, gen int32, offset int64) {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 7
	req.Group, req.MemberID, req.Generation = "g1", member, gen
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: offset}}}}
	c.h.send("c", req)
}

// durableView is what of a group must survive a restart: its type, its
// generation (epoch), members with their assignments, and its offsets. A
// consumer group's state and assignments are all durable. A classic
// group's members and assignments are those of its last generation (its
// own, not what the members were last told), and its state is left out: a
// rebalance in progress is not durable, in Kafka either, and a group comes
// back Stable at its last generation.
func durableView(m *Machine, id string) string {
	g := m.groups[id]
	if g == nil {
		return "absent"
	}
	var b strings.Builder
	if g.consumer {
		v, _ := m.Describe(id, epoch)
		fmt.Fprintf(&b, "consumer %s epoch=%d members=%d\n", v.State, v.Generation, v.MemberCount)
		for _, mem := range v.Members {
			fmt.Fprintf(&b, "  %s %s %v session=%d rebalance=%d\n", mem.MemberID, mem.InstanceID, mem.Assignment,
				mem.SessionTimeoutMs, mem.RebalanceTimeoutMs)
		}
	} else {
		fmt.Fprintf(&b, "classic gen=%d protocol=%s\n", g.generation, g.protocol)
		for _, mem := range g.sortedMembers() {
			fmt.Fprintf(&b, "  %s %s %s\n", mem.id, mem.instanceID, fmtAssignment(mem.assignment))
		}
	}
	for _, tp := range g.offsets.sorted() {
		v, _ := g.offsets.get(tp)
		fmt.Fprintf(&b, "  offset %s.%d=%d\n", tp.topic, tp.partition, v.offset)
	}
	return b.String()
}

// replayStore loads a copy of the harness's store into a new machine.
func replayStore(h *harness, store map[string][]byte) (*Machine, error) {
	keys := make([]string, 0, len(store))
	for k := range store {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	recs := make([]Record, 0, len(keys))
	for _, k := range keys {
		r, err := DecodeRecord([]byte(k), store[k])
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	m := New(h.cfg)
	m.Step(h.now, TopicsChanged{Topics: h.topics})
	_, err := m.Replay(h.now, recs)
	return m, err
}

func copyStore(s map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(s))
	for k, v := range s {
		out[k] = v
	}
	return out
}

// TestMigrationReplay drives a group through an upgrade, classic members
// working inside the consumer group, and a downgrade. After every step the
// store (each step's records are made durable together) must load into
// exactly the group the live machine holds: a restart at any point finds
// the old type or the new one, never both, and never a different group.
func TestMigrationReplay(t *testing.T) {
	h, c := newMigrationHarness()

	check := func(step string) {
		t.Helper()
		m, err := replayStore(h, h.store)
		if err != nil {
			t.Fatalf("after %s: replay: %v\n%s", step, err, h.buf)
		}
		if got, want := durableView(m, "g1"), durableView(h.m, "g1"); got != want {
			t.Fatalf("after %s: replayed\n%s\nlive\n%s", step, got, want)
		}
	}
	// The classic join phase is not durable until the leader's
	// assignment is; the checks start from there.
	c.join("a", "", 3, []int32{}...)
	c.join("b", "", 3, []int32{}...)
	h.advance(t, h.now)
	steps := []struct {
		name string
		do   func()
	}{
		{"leader syncs", func() { c.sync("a-1", 1, map[string][]int32{"a-1": {0, 1}, "b-2": {2, 3}}) }},
		{"follower syncs", func() { c.sync("b-2", 1, nil) }},
		{"a commits", func() { c.commit("a-1", 1, 7) }},
		{"upgrade", func() { c.cgHeartbeat("x", 0) }},
		{"a rejoins owning t0,t1", func() { c.join("a", "a-1", 9, 0, 1) }},
		{"a rejoins owning t0", func() { c.join("a", "a-1", 9, 0) }},
		{"b rejoins owning t2,t3", func() { c.join("b", "b-2", 9, 2, 3) }},
		{"b rejoins owning t2", func() { c.join("b", "b-2", 9, 2) }},
		{"x takes its partitions", func() { c.cgHeartbeat("x", 2) }},
		{"a commits at its epoch", func() { c.commit("a-1", 2, 9) }},
		{"downgrade", func() { c.cgHeartbeat("x", -1) }},
	}
	types := map[string]bool{}
	for _, s := range steps {
		s.do()
		check(s.name)
		types[h.m.GroupType("g1")] = true
	}
	if !types[inspect.TypeClassic] || !types[inspect.TypeConsumer] {
		t.Fatalf("the scenario did not visit both types: %v\n%s", types, h.buf)
	}
}

// TestMigrationSplitBatch shows what a restart finds around an upgrade.
// The upgrade's records are made durable together (one Output, one store
// batch), so a restart finds the classic group (before) or the consumer
// group (after). Were the batch split, no prefix of it loads as anything
// but one type (or the ids' offsets alone), and records of both types
// together are refused (ReplayError) rather than served.
func TestMigrationSplitBatch(t *testing.T) {
	h, c := newMigrationHarness()
	c.join("a", "", 3)
	h.advance(t, h.now)
	c.sync("a-1", 1, map[string][]int32{"a-1": {0, 1, 2, 3}})
	before := copyStore(h.store)

	h.nextID++
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version, req.Group, req.MemberID = 1, "g1", "x"
	req.RebalanceTimeoutMillis, req.SubscribedTopicNames = 300000, []string{"t"}
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	out := h.m.Step(h.now, Request{ID: h.nextID, ClientID: "x", ClientHost: "/h", Msg: req})
	if h.m.GroupType("g1") != inspect.TypeConsumer || len(out.Records) < 2 {
		t.Fatalf("no upgrade: %+v", out)
	}
	apply := func(store map[string][]byte, recs []Record) {
		for _, r := range recs {
			if r.Tombstone() {
				delete(store, string(r.Key()))
			} else {
				store[string(r.Key())] = r.Value()
			}
		}
	}
	for k := 0; k <= len(out.Records); k++ {
		store := copyStore(before)
		apply(store, out.Records[:k])
		m, err := replayStore(h, store)
		if err != nil {
			t.Fatalf("prefix %d of %d: %v", k, len(out.Records), err)
		}
		typ := m.GroupType("g1")
		switch {
		case k == 0 && typ != inspect.TypeClassic:
			t.Fatalf("before the batch the group loads as %q", typ)
		case k == len(out.Records) && typ != inspect.TypeConsumer:
			t.Fatalf("the whole batch loads as %q", typ)
		}
	}
	// The consumer group's records without the classic tombstone: both
	// types at once are refused.
	store := copyStore(before)
	var consumerOnly []Record
	for _, r := range out.Records {
		if r.Type.Consumer() {
			consumerOnly = append(consumerOnly, r)
		}
	}
	apply(store, consumerOnly)
	var rerr *ReplayError
	if _, err := replayStore(h, store); !errors.As(err, &rerr) {
		t.Fatalf("records of both types loaded: %v", err)
	}
}

// TestMigrationViewNamesProtocols shows the status view of a group in the
// middle of a migration: the classic members and the consumer-protocol one
// side by side, each named by the protocol it speaks.
func TestMigrationViewNamesProtocols(t *testing.T) {
	h, c := newMigrationHarness()
	c.join("a", "", 3, []int32{}...)
	c.join("b", "", 3, []int32{}...)
	h.advance(t, h.now)
	c.sync("a-1", 1, map[string][]int32{"a-1": {0, 1}, "b-2": {2, 3}})
	c.sync("b-2", 1, nil)
	view := func() map[string]string {
		v, ok := h.m.Describe("g1", h.now)
		if !ok {
			t.Fatalf("no view of g1\n%s", h.buf)
		}
		got := map[string]string{}
		for _, mem := range v.Members {
			got[mem.MemberID] = mem.Protocol
		}
		return got
	}
	// A classic group leaves the member protocol out: all are classic.
	if got := view(); got["a-1"] != "" || got["b-2"] != "" || len(got) != 2 {
		t.Fatalf("classic group members: %v\n%s", got, h.buf)
	}
	c.cgHeartbeat("x", 0)
	got := view()
	want := map[string]string{"a-1": inspect.TypeClassic, "b-2": inspect.TypeClassic, "x": inspect.TypeConsumer}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("upgraded group members: got %v, want %v\n%s", got, want, h.buf)
	}
}
