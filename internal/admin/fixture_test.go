package admin

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/groupd/groupd/internal/inspect"
)

// fakeSource serves fixed groups and rebalance histories, or fails.
type fakeSource struct {
	groups     map[string]inspect.Group
	rebalances map[string][]inspect.Rebalance
	err        error
}

func (f *fakeSource) Groups(ctx context.Context) ([]inspect.GroupSummary, error) {
	if f.err != nil {
		return nil, f.err
	}
	var out []inspect.GroupSummary
	for _, g := range f.groups {
		out = append(out, f.summary(g))
	}
	// Newest-first order, so the API's own sort is what a test sees.
	sort.Slice(out, func(i, j int) bool { return out[i].Group > out[j].Group })
	return out, nil
}

func (f *fakeSource) summary(g inspect.Group) inspect.GroupSummary {
	s := g.GroupSummary
	rs := f.rebalances[g.Group]
	s.MemberCount = len(g.Members)
	s.Rebalances = len(rs)
	if len(rs) > 0 {
		s.LastRebalance = rs[len(rs)-1].Summary()
	}
	s.Lag = 0
	for _, o := range g.Offsets {
		if o.Lag >= 0 {
			s.Lag += o.Lag
		}
	}
	return s
}

func (f *fakeSource) Group(ctx context.Context, id string) (inspect.Group, bool, error) {
	if f.err != nil {
		return inspect.Group{}, false, f.err
	}
	g, ok := f.groups[id]
	if !ok {
		return inspect.Group{}, false, nil
	}
	g.GroupSummary = f.summary(g)
	return g, true, nil
}

func (f *fakeSource) Rebalances(ctx context.Context, id string) ([]inspect.Rebalance, bool, error) {
	if f.err != nil {
		return nil, false, f.err
	}
	if _, ok := f.groups[id]; !ok {
		return nil, false, nil
	}
	return append([]inspect.Rebalance(nil), f.rebalances[id]...), true, nil
}

func (f *fakeSource) add(g inspect.Group, rs ...inspect.Rebalance) {
	if f.groups == nil {
		f.groups = map[string]inspect.Group{}
		f.rebalances = map[string][]inspect.Rebalance{}
	}
	for i := range rs {
		rs[i].Group = g.Group
	}
	f.groups[g.Group] = g
	f.rebalances[g.Group] = rs
}

// The sample groups: a busy cooperative group with a storm and a
// straggler in its history, groups whose ids need escaping, an empty
// group and one in the middle of a rebalance.
const (
	busyGroup     = "orders-processor"
	busyLastTrig  = inspect.TriggerStaticReplaced
	slashGroup    = "billing/eu.west"
	spaceGroup    = "audit log ü"
	dotsGroup     = ".."
	emptyGroup    = "reports-nightly"
	joiningGroup  = "inventory-sync"
	joiningTrig   = inspect.TriggerMemberJoined
	stormClientID = "orders-3"
)

// member makes a member whose id starts with its client id, as Kafka's do.
func member(client, host string, now time.Time, hbAgo time.Duration, assignment ...inspect.TopicPartitions) inspect.Member {
	return inspect.Member{
		MemberID:           fmt.Sprintf("%s-%08x-4c1e-9b2f-7d0e5a61c3b8", client, len(client)*0x1f3a7+int(hbAgo/time.Millisecond)),
		ClientID:           client,
		ClientHost:         host,
		Assignment:         assignment,
		LastHeartbeat:      now.Add(-hbAgo),
		SessionTimeoutMs:   45000,
		RebalanceTimeoutMs: 60000,
	}
}

func tps(topic string, ps ...int32) inspect.TopicPartitions {
	return inspect.TopicPartitions{Topic: topic, Partitions: ps}
}

// offsets makes committed offsets of partitions 0..len(lags)-1 of topic,
// owned as owners says (partition -> member id).
func offsets(topic string, base int64, lags []int64, owners map[int32]string) []inspect.PartitionOffset {
	out := make([]inspect.PartitionOffset, len(lags))
	for i, lag := range lags {
		committed := base + int64(i)*7919
		out[i] = inspect.PartitionOffset{Topic: topic, Partition: int32(i), Committed: committed, HighWatermark: committed + lag, Lag: lag, Owner: owners[int32(i)]}
	}
	return out
}

func ownersOf(ms []inspect.Member) map[string]map[int32]string {
	out := map[string]map[int32]string{}
	for _, m := range ms {
		for _, tp := range m.Assignment {
			if out[tp.Topic] == nil {
				out[tp.Topic] = map[int32]string{}
			}
			for _, p := range tp.Partitions {
				out[tp.Topic][p] = m.MemberID
			}
		}
	}
	return out
}

func ref(m inspect.Member) *inspect.MemberRef {
	return &inspect.MemberRef{MemberID: m.MemberID, InstanceID: m.InstanceID, ClientID: m.ClientID, ClientHost: m.ClientHost}
}

// rebalance makes a finished rebalance that started ago before now. Its
// moves are received one after another, the last at its end, each
// released its pause before.
func rebalance(now time.Time, ago, took time.Duration, protocol, trigger string, by *inspect.MemberRef, gen int32, moved ...inspect.Move) inspect.Rebalance {
	start := now.Add(-ago)
	end := start.Add(took)
	if moved == nil {
		moved = []inspect.Move{}
	}
	for i := range moved {
		mv := &moved[i]
		mv.AssignedAt = start.Add(took * time.Duration(i+1) / time.Duration(len(moved)))
		mv.ReleasedAt = mv.AssignedAt.Add(-time.Duration(mv.PauseMs) * time.Millisecond)
	}
	return inspect.Rebalance{
		Protocol: protocol, GenerationBefore: gen, GenerationAfter: gen + 1,
		StartedAt: start, EndedAt: &end, DurationMs: took.Milliseconds(),
		Trigger: trigger, Member: by, MembersIn: []string{}, MembersOut: []string{},
		WaitedFor: []inspect.Wait{}, Moved: moved, Outcome: "stable",
	}
}

func sampleSource(now time.Time) *fakeSource {
	f := &fakeSource{}

	o1 := member("orders-1", "/10.0.3.11", now, 1200*time.Millisecond, tps("orders", 0, 1, 2), tps("payments", 0))
	o2 := member("orders-2", "/10.0.3.12", now, 800*time.Millisecond, tps("orders", 3, 4, 5), tps("payments", 1))
	o3 := member(stormClientID, "/10.0.3.13", now, 5400*time.Millisecond, tps("orders", 6, 7, 8), tps("payments", 2))
	o4 := member("orders-4", "/10.0.3.14", now, 300*time.Millisecond, tps("orders", 9, 10, 11), tps("payments", 3))
	o4.InstanceID = "orders-static-4"
	ms := []inspect.Member{o1, o2, o3, o4}
	own := ownersOf(ms)
	busy := inspect.Group{
		GroupSummary: inspect.GroupSummary{Group: busyGroup, Type: inspect.TypeClassic, State: "Stable", ProtocolType: "consumer", Protocol: "cooperative-sticky", Generation: 23},
		Members:      ms,
		Offsets: append(offsets("orders", 1_204_311, []int64{0, 12, 340, 4512, 88, 0, 1903, 2210, 1766, 7, 0, 95}, own["orders"]),
			offsets("payments", 88_410, []int64{3, 0, 41, 260}, own["payments"])...),
	}
	mv := func(topic string, p int32, from, to inspect.Member, pause time.Duration, gap int64) inspect.Move {
		return inspect.Move{Topic: topic, Partition: p, From: from.MemberID, To: to.MemberID, PauseMs: pause.Milliseconds(), CommitGap: gap}
	}
	coop := inspect.ProtocolCooperative
	joined := rebalance(now, 41*time.Minute, 3120*time.Millisecond, coop, inspect.TriggerMemberJoined, ref(o4), 14,
		mv("orders", 9, o1, o4, 3010*time.Millisecond, 41), mv("orders", 10, o2, o4, 2980*time.Millisecond, 18),
		mv("orders", 11, o3, o4, 3050*time.Millisecond, 77), mv("payments", 3, o2, o4, 2990*time.Millisecond, 3))
	joined.MembersIn = []string{o4.MemberID}
	joined.WaitedFor = []inspect.Wait{{Member: o3.MemberID, WaitedMs: 2870}, {Member: o1.MemberID, WaitedMs: 40}, {Member: o2.MemberID, WaitedMs: 35}}
	storm := func(ago time.Duration, gen int32, first bool) inspect.Rebalance {
		r := rebalance(now, ago, 1480*time.Millisecond, coop, inspect.TriggerSessionTimeout, ref(o3), gen,
			mv("orders", 6, o3, o1, 46200*time.Millisecond, 1290), mv("orders", 7, o3, o2, 46300*time.Millisecond, 1502),
			mv("orders", 8, o3, o4, 46250*time.Millisecond, 1333), mv("payments", 2, o3, o1, 46210*time.Millisecond, 58))
		r.MembersOut = []string{o3.MemberID}
		if !first {
			r.Storm = true
			r.StormCause = "session timeout 45s is shorter than orders-3's heartbeat gaps (up to 52s)"
		}
		return r
	}
	rejoin := func(ago time.Duration, gen int32) inspect.Rebalance {
		r := rebalance(now, ago, 2240*time.Millisecond, coop, inspect.TriggerMemberJoined, ref(o3), gen,
			mv("orders", 6, o1, o3, 1900*time.Millisecond, 22), mv("orders", 7, o2, o3, 1850*time.Millisecond, 0),
			mv("orders", 8, o4, o3, 1920*time.Millisecond, 9))
		r.MembersIn = []string{o3.MemberID}
		r.WaitedFor = []inspect.Wait{{Member: o2.MemberID, WaitedMs: 410}, {Member: o1.MemberID, WaitedMs: 120}}
		return r
	}
	slow := rebalance(now, 7*time.Minute, 60*time.Second, coop, inspect.TriggerRebalanceTimeout, ref(o2), 21,
		mv("orders", 3, o2, o1, 60100*time.Millisecond, 3801), mv("orders", 4, o2, o4, 60050*time.Millisecond, 2650))
	slow.WaitedFor = []inspect.Wait{{Member: o2.MemberID, WaitedMs: 60000}, {Member: o4.MemberID, WaitedMs: 210}, {Member: o1.MemberID, WaitedMs: 180}}
	slow.MembersOut = []string{o2.MemberID}
	back := rejoin(5*time.Minute, 22)
	back.Trigger, back.Member = inspect.TriggerMemberJoined, ref(o2)
	// orders-4 restarted: its static instance came back under a new
	// member id and took its partitions over from the old one.
	old4 := o4.MemberID[:len(o4.MemberID)-4] + "0aa1"
	last := rebalance(now, 95*time.Second, 860*time.Millisecond, coop, busyLastTrig, ref(o4), 23,
		inspect.Move{Topic: "orders", Partition: 9, From: old4, To: o4.MemberID, PauseMs: 7410, CommitGap: 96},
		inspect.Move{Topic: "orders", Partition: 10, From: old4, To: o4.MemberID, PauseMs: 7380, CommitGap: 0},
		inspect.Move{Topic: "orders", Partition: 11, From: old4, To: o4.MemberID, PauseMs: 7395, CommitGap: 112},
		inspect.Move{Topic: "payments", Partition: 3, From: old4, To: o4.MemberID, PauseMs: 7402, CommitGap: 260})
	last.WaitedFor = []inspect.Wait{{Member: o1.MemberID, WaitedMs: 610}, {Member: o2.MemberID, WaitedMs: 590}, {Member: o3.MemberID, WaitedMs: 35}}
	last.MembersIn, last.MembersOut = []string{o4.MemberID}, []string{old4}
	f.add(busy,
		rebalance(now, 48*time.Minute, 412*time.Millisecond, coop, inspect.TriggerCoordinatorLoaded, nil, 13),
		joined,
		storm(33*time.Minute, 15, true), rejoin(32*time.Minute, 16),
		storm(24*time.Minute, 17, false), rejoin(23*time.Minute, 18),
		storm(17*time.Minute+30*time.Second, 19, false), rejoin(16*time.Minute+30*time.Second, 20),
		slow, back, last)

	b1 := member("billing-eu-a", "/10.1.0.21", now, 2*time.Second, tps("invoices", 0, 1, 2))
	b2 := member("billing-eu-b", "/10.1.0.22", now, 900*time.Millisecond, tps("invoices", 3, 4, 5))
	bown := ownersOf([]inspect.Member{b1, b2})
	eager := rebalance(now, 12*time.Minute, 3400*time.Millisecond, inspect.ProtocolEager, inspect.TriggerMemberJoined, ref(b2), 4,
		mv("invoices", 3, b1, b2, 3400*time.Millisecond, 12), mv("invoices", 4, b1, b2, 3400*time.Millisecond, 0), mv("invoices", 5, b1, b2, 3400*time.Millisecond, 5))
	f.add(inspect.Group{
		GroupSummary: inspect.GroupSummary{Group: slashGroup, Type: inspect.TypeClassic, State: "Stable", ProtocolType: "consumer", Protocol: "range", Generation: 5},
		Members:      []inspect.Member{b1, b2},
		Offsets:      offsets("invoices", 40_112, []int64{0, 3, 0, 18, 2, 0}, bown["invoices"]),
	}, rebalance(now, 30*time.Minute, 150*time.Millisecond, inspect.ProtocolEager, inspect.TriggerMemberJoined, ref(b1), 3), eager)

	a1 := member("audit-writer", "/10.2.0.5", now, 3*time.Hour)
	left := rebalance(now, 3*time.Hour, 20*time.Millisecond, inspect.ProtocolEager, inspect.TriggerMemberLeft, ref(a1), 8)
	left.MembersOut = []string{a1.MemberID}
	left.Outcome = "empty"
	f.add(inspect.Group{
		GroupSummary: inspect.GroupSummary{Group: spaceGroup, Type: inspect.TypeClassic, State: "Empty", ProtocolType: "consumer", Generation: 9},
		Offsets:      offsets("audit", 902_114, []int64{12_004, 11_870}, nil),
	}, left)

	// A consumer group in the middle of a migration: a consumer-protocol
	// member beside a classic one.
	d1 := member("dots", "/127.0.0.1", now, 400*time.Millisecond, tps("dots", 0))
	d1.Protocol = inspect.TypeConsumer
	d2 := member("dots-classic", "/127.0.0.2", now, 900*time.Millisecond)
	d2.Protocol = inspect.TypeClassic
	f.add(inspect.Group{
		GroupSummary: inspect.GroupSummary{Group: dotsGroup, Type: inspect.TypeConsumer, State: "Stable", ProtocolType: "consumer", Protocol: "uniform", Generation: 2,
			CoordinatorMove: &inspect.CoordinatorMove{From: 3, To: 1, At: now.Add(-2 * time.Minute), LoadMs: 420}},
		Members: []inspect.Member{d1, d2},
		Offsets: offsets("dots", 10, []int64{1}, map[int32]string{0: d1.MemberID}),
	}, rebalance(now, 9*time.Minute, 30*time.Millisecond, inspect.ProtocolConsumer, inspect.TriggerMemberJoined, ref(d1), 1))

	f.add(inspect.Group{
		GroupSummary: inspect.GroupSummary{Group: emptyGroup, Type: inspect.TypeClassic, State: "Empty", ProtocolType: "consumer", Generation: 0},
		Offsets:      []inspect.PartitionOffset{{Topic: "reports", Partition: 0, Committed: 55, HighWatermark: -1, Lag: -1}},
	})

	i1 := member("inventory-1", "/10.4.0.8", now, 100*time.Millisecond, tps("inventory", 0, 1))
	i2 := member("inventory-2", "/10.4.0.9", now, 7*time.Second)
	start := now.Add(-8 * time.Second)
	f.add(inspect.Group{
		GroupSummary: inspect.GroupSummary{Group: joiningGroup, Type: inspect.TypeClassic, State: "PreparingRebalance", ProtocolType: "consumer", Protocol: "cooperative-sticky", Generation: 7},
		Members:      []inspect.Member{i1, i2},
		Offsets:      offsets("inventory", 3_300, []int64{0, 640}, map[int32]string{0: i1.MemberID, 1: i1.MemberID}),
	}, inspect.Rebalance{
		Protocol: coop, GenerationBefore: 7, StartedAt: start, Trigger: joiningTrig, Member: ref(i2),
		MembersIn: []string{i2.MemberID}, MembersOut: []string{}, WaitedFor: []inspect.Wait{}, Moved: []inspect.Move{},
	})
	return f
}
