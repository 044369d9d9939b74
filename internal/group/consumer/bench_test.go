package consumer

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Benchmarks of the pure machine, no I/O. Run with
//
//	go test ./internal/group/consumer -run '^$' -bench . -benchtime 2s
//
// The comparison with kfake over the network belongs to the coordinator.

// stableGroup builds a stable group of n members over one topic of parts
// partitions, dealt round-robin, from records (joining members one by one
// would cost O(n²)), and returns the machine and the member ids.
func stableGroup(b testing.TB, n int, parts int32) (*Machine, []string, time.Time) {
	m := New(Config{})
	now := epoch0
	topic := TopicID{1}
	m.Step(now, TopicsChanged{Topics: []Topic{{Name: "t", ID: topic, Partitions: parts}}})
	ids := make([]string, n)
	held := make([][]int32, n)
	for p := range parts {
		held[int(p)%n] = append(held[int(p)%n], p)
	}
	const epoch = 1
	recs := []Record{{Type: RecordGroupEpoch, Group: "g", GroupEpoch: &GroupEpoch{Epoch: epoch, MetadataHash: m.topics.metadataHash([]string{"t"})}}}
	for i := range ids {
		ids[i] = memberName(i)
		var target, current []TopicPartitions
		if len(held[i]) > 0 {
			epochs := make([]int32, len(held[i]))
			for j := range epochs {
				epochs[j] = epoch
			}
			target = []TopicPartitions{{TopicID: topic, Partitions: held[i]}}
			current = []TopicPartitions{{TopicID: topic, Partitions: held[i], Epochs: epochs}}
		}
		recs = append(recs,
			Record{Type: RecordMemberMetadata, Group: "g", Member: ids[i], MemberMetadata: &MemberMetadata{
				ClientID: "c", ClientHost: "/h", SubscribedTopicNames: []string{"t"}, RebalanceTimeoutMs: 60000}},
			Record{Type: RecordTargetMember, Group: "g", Member: ids[i], Target: &TargetAssignment{Partitions: target}},
			Record{Type: RecordCurrentAssignment, Group: "g", Member: ids[i], Current: &CurrentAssignment{
				MemberEpoch: epoch, PreviousMemberEpoch: epoch - 1, Assigned: current}})
	}
	recs = append(recs, Record{Type: RecordTargetEpoch, Group: "g", TargetEpoch: &TargetAssignmentEpoch{AssignmentEpoch: epoch}})
	if _, err := m.Replay(now, recs); err != nil {
		b.Fatal(err)
	}
	if st := m.groups["g"].state(); st != Stable {
		b.Fatalf("built group is %s", st)
	}
	return m, ids, now
}

// settle heartbeats the members that are not reconciled (reporting exactly
// what they hold; everyone while the group waits for a new target) until
// the group is Stable, and returns the rounds it took.
func settle(b *testing.B, m *Machine, ids []string, now time.Time) int {
	g := m.groups["g"]
	for round := 1; ; round++ {
		assigning := g.state() == Assigning
		for _, id := range ids {
			mem := g.members[id]
			if mem == nil || (!assigning && mem.reconciledTo(g.assignmentEpoch)) {
				continue
			}
			m.Step(now, Request{ID: 1, ClientID: "c", ClientHost: "/h",
				Msg: heartbeatRequest(id, mem.epoch, ownedList(mem.assigned))})
			assigning = g.state() == Assigning
		}
		if g.state() == Stable {
			return round
		}
		if round > 10 {
			b.Fatalf("group not stable after %d rounds: %s", round, g.state())
		}
	}
}

// BenchmarkHeartbeat is the steady state: members of a stable group
// heartbeating with nothing to change, the request the coordinator serves
// most.
func BenchmarkHeartbeat(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			m, ids, now := stableGroup(b, n, int32(n*2))
			g := m.groups["g"]
			reqs := make([]*kmsg.ConsumerGroupHeartbeatRequest, len(ids))
			for i, id := range ids {
				reqs[i] = heartbeatRequest(id, g.members[id].epoch, nil)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				now = now.Add(time.Millisecond)
				out := m.Step(now, Request{ID: RequestID(i), ClientID: "c", ClientHost: "/h", Msg: reqs[i%len(reqs)]})
				if out.Replies[0].Msg.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode != 0 {
					b.Fatal("heartbeat failed")
				}
			}
		})
	}
}

// BenchmarkJoinConverge is one more member joining a stable group, until
// every member holds the new target at the new epoch: the join (which
// runs the assignor), the revocations, and the hand-over. Between
// iterations, untimed, the newcomer leaves and the group settles again.
func BenchmarkJoinConverge(b *testing.B) {
	for _, shape := range []struct {
		members int
		parts   int32
	}{{1000, 2000}, {10000, 20000}} {
		b.Run(fmt.Sprintf("members=%d/partitions=%d", shape.members, shape.parts), func(b *testing.B) {
			m, ids, now := stableGroup(b, shape.members, shape.parts)
			all := append(slices.Clip(ids), "newcomer")
			var rounds int
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				m.Step(now, Request{ID: 1, ClientID: "c", ClientHost: "/h", Msg: joinRequest("newcomer", "t")})
				rounds = settle(b, m, all, now)
				b.StopTimer()
				m.Step(now, Request{ID: 1, ClientID: "c", ClientHost: "/h", Msg: heartbeatRequest("newcomer", leaveEpoch, nil)})
				settle(b, m, ids, now)
				b.StartTimer()
			}
			b.ReportMetric(float64(rounds), "rounds")
		})
	}
}

// BenchmarkJoinTarget is the assignor's share of a join: one member joins a
// stable group and the step computes the new target. Between iterations,
// untimed, the newcomer leaves and another member's heartbeat computes the
// target without it, so every timed step starts from a settled target.
//
//	go test ./internal/group/consumer -run '^$' -bench JoinTarget -count 5
func BenchmarkJoinTarget(b *testing.B) {
	for _, shape := range []struct {
		members int
		parts   int32
	}{{1000, 50000}, {10000, 500000}} {
		b.Run(fmt.Sprintf("members=%d/partitions=%d", shape.members, shape.parts), func(b *testing.B) {
			m, ids, now := stableGroup(b, shape.members, shape.parts)
			g := m.groups["g"]
			cycle := func() {
				now = now.Add(time.Millisecond)
				m.Step(now, Request{ID: 1, ClientID: "c", ClientHost: "/h", Msg: joinRequest("newcomer", "t")})
				if g.assignmentEpoch != g.epoch {
					b.Fatal("join computed no target")
				}
			}
			back := func() {
				now = now.Add(time.Millisecond)
				m.Step(now, Request{ID: 1, ClientID: "c", ClientHost: "/h", Msg: heartbeatRequest("newcomer", leaveEpoch, nil)})
				m.Step(now, Request{ID: 1, ClientID: "c", ClientHost: "/h", Msg: heartbeatRequest(ids[0], g.members[ids[0]].epoch, nil)})
				if g.assignmentEpoch != g.epoch {
					b.Fatal("leave computed no target")
				}
			}
			cycle() // the first target of a loaded group is a full assignment
			back()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				cycle()
				b.StopTimer()
				back()
				b.StartTimer()
			}
		})
	}
}
