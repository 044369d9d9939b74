package consumer_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/group/consumer"
)

// Benchmarks of a consumer group served through package group's machine,
// as the coordinator steps it (StepRequest): the router's share of a
// ConsumerGroupHeartbeat on top of the consumer machine's. Deterministic
// enough for valgrind --tool=callgrind:
//
//	go test ./internal/group/consumer -run '^$' -bench 'Router' -count 5

// routerMember is one member as a client keeps it.
type routerMember struct {
	id    string
	epoch int32
	owned []int32
	tell  bool // owned changed since the last heartbeat
}

// routerGroup is one group of members on a group.Machine.
type routerGroup struct {
	m       *group.Machine
	group   string
	topicID consumer.TopicID
	members []*routerMember
	now     time.Time
	id      group.RequestID
}

func (g *routerGroup) step(req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	g.id++
	out := g.m.StepRequest(g.now, group.Request{ID: g.id, ClientID: "c", ClientHost: "/127.0.0.1", Msg: req})
	if len(out.Replies) != 1 {
		panic(fmt.Sprintf("%d replies", len(out.Replies)))
	}
	return out.Replies[0].Msg.(*kmsg.ConsumerGroupHeartbeatResponse)
}

// beat sends one member's next heartbeat as a client does (its owned
// partitions only when they changed) and takes the answer; it reports
// whether the member is settled at the group's epoch.
func (g *routerGroup) beat(mem *routerMember, join bool) {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group, req.MemberID, req.MemberEpoch = g.group, mem.id, mem.epoch
	if join {
		req.MemberEpoch = 0
		req.RebalanceTimeoutMillis = 60000
		req.SubscribedTopicNames = []string{"t"}
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	} else if mem.tell {
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		if len(mem.owned) > 0 {
			req.Topics = append(req.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: g.topicID, Partitions: slices.Clone(mem.owned)})
		}
	}
	mem.tell = false
	resp := g.step(req)
	if resp.ErrorCode != 0 {
		panic(fmt.Sprintf("member %s: error %d %v", mem.id, resp.ErrorCode, resp.ErrorMessage))
	}
	mem.epoch = resp.MemberEpoch
	if resp.Assignment != nil {
		var parts []int32
		for _, t := range resp.Assignment.Topics {
			parts = append(parts, t.Partitions...)
		}
		slices.Sort(parts)
		if !slices.Equal(parts, mem.owned) {
			mem.owned, mem.tell = parts, true
		}
	}
}

// settled reports whether every member is Stable at the group epoch.
func (g *routerGroup) settled() bool {
	st, _ := g.m.ConsumerGroupState(g.group)
	if st != consumer.Stable {
		return false
	}
	for _, mem := range g.members {
		if mem.tell {
			return false
		}
	}
	return true
}

// drive heartbeats every member in turn until the group settles and every
// member has heard its epoch; it returns the heartbeats sent.
func (g *routerGroup) drive(b testing.TB) int {
	n := 0
	for round := 0; ; round++ {
		for _, mem := range g.members {
			g.beat(mem, false)
			n++
		}
		if g.settled() {
			_, epoch := g.m.ConsumerGroupState(g.group)
			ok := true
			for _, mem := range g.members {
				ok = ok && mem.epoch == epoch
			}
			if ok {
				return n
			}
		}
		if round > 20 {
			b.Fatalf("group %s not settled", g.group)
		}
	}
}

// newRouterGroups forms groups of size members each over one topic of
// parts partitions, joining them one by one.
func newRouterGroups(b testing.TB, m *group.Machine, groups, size int) []*routerGroup {
	now := time.Unix(1_700_000_000, 0)
	gs := make([]*routerGroup, groups)
	for i := range gs {
		g := &routerGroup{m: m, group: fmt.Sprintf("cg-%d", i), topicID: consumer.TopicID{1}, now: now}
		for k := range size {
			mem := &routerMember{id: fmt.Sprintf("cg-%d-member-%04d", i, k)}
			g.members = append(g.members, mem)
			g.beat(mem, true)
		}
		g.drive(b)
		gs[i] = g
	}
	return gs
}

func newRouterMachine(parts int32) *group.Machine {
	m := group.New(group.Config{InitialRebalanceDelay: -1})
	m.Step(time.Unix(1_700_000_000, 0), group.TopicsChanged{Topics: []group.Topic{{Name: "t", ID: consumer.TopicID{1}, Partitions: parts}}})
	return m
}

// BenchmarkRouterHeartbeat is the load generator's cg-heartbeat through
// the router: settled groups of 10 members over 20 partitions, plain
// heartbeats that change nothing.
func BenchmarkRouterHeartbeat(b *testing.B) {
	m := newRouterMachine(20)
	gs := newRouterGroups(b, m, 100, 10)
	var reqs []*kmsg.ConsumerGroupHeartbeatRequest
	for _, g := range gs {
		for _, mem := range g.members {
			req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			req.Version = 1
			req.Group, req.MemberID, req.MemberEpoch = g.group, mem.id, mem.epoch
			reqs = append(reqs, req)
		}
	}
	now := gs[0].now
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%len(reqs) == 0 {
			now = now.Add(time.Millisecond)
		}
		out := m.StepRequest(now, group.Request{ID: group.RequestID(i), ClientID: "c", ClientHost: "/127.0.0.1", Msg: reqs[i%len(reqs)]})
		if r := out.Replies[0].Msg.(*kmsg.ConsumerGroupHeartbeatResponse); r.ErrorCode != 0 || r.Assignment != nil {
			b.Fatal("heartbeat changed something")
		}
	}
}

// BenchmarkRouterConverge is the load generator's cg-converge through the
// router: one member joins a settled group of 1,000 over 2,000
// partitions, and every member heartbeats in turn until all hold the new
// target at the new epoch. Untimed between iterations, the newcomer
// leaves and the group settles again. It reports the heartbeats taken.
func BenchmarkRouterConverge(b *testing.B) {
	m := newRouterMachine(2000)
	g := newRouterGroups(b, m, 1, 1000)[0]
	base := g.members
	var hbs int
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		joiner := &routerMember{id: fmt.Sprintf("joiner-%04d", i)}
		g.members = append(slices.Clip(base), joiner)
		g.beat(joiner, true)
		hbs = 1 + g.drive(b)
		b.StopTimer()
		g.step(&kmsg.ConsumerGroupHeartbeatRequest{Version: 1, Group: g.group, MemberID: joiner.id, MemberEpoch: -1,
			RebalanceTimeoutMillis: -1})
		g.members = base
		g.drive(b)
		b.StartTimer()
	}
	b.ReportMetric(float64(hbs), "hb/op")
}
