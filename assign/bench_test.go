package assign

import (
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Benchmarks run groupd's assignor and franz-go's matching balancer on the
// same input in the same run. Both go through the same public kgo path the
// group leader uses: decode every member's JoinGroup metadata, balance,
// encode SyncGroup assignments. Sub-benchmarks are
// <Benchmark>/<shape>/groupd and <Benchmark>/<shape>/franz-go; each reports
// ns/op, allocations, partitions moved and imbalance (max−min partitions per
// member). They run only with -bench.

type benchShape struct {
	name    string
	topics  map[string]int32
	names   []string
	subs    [][]string // per member
	ids     []string
	prev    map[string]map[string][]int32 // balanced previous assignment, nil for full
	leaving string
}

func topicNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("topic-%04d", i)
	}
	return out
}

// classicShape builds nt topics × np partitions and nm members; uneven
// members subscribe to a sliding window of half the topics.
func classicShape(name string, nt, np, nm int, uneven bool) benchShape {
	s := benchShape{name: name, topics: map[string]int32{}, names: topicNames(nt)}
	for _, t := range s.names {
		s.topics[t] = int32(np)
	}
	for i := range nm {
		s.ids = append(s.ids, fmt.Sprintf("member-%05d", i))
		if !uneven {
			s.subs = append(s.subs, s.names)
			continue
		}
		w := make([]string, 0, nt/2)
		for k := range nt / 2 {
			w = append(w, s.names[(i*37+k)%nt])
		}
		slices.Sort(w)
		s.subs = append(s.subs, w)
	}
	return s
}

// withChange derives the join and leave variants: a balanced previous
// assignment (groupd's sticky result) plus one new member, or minus one.
func (s benchShape) variants() []benchShape {
	full := s
	full.name += "/full"
	var ms []Member
	for i, id := range s.ids {
		ms = append(ms, Member{ID: id, Topics: s.subs[i], Generation: -1})
	}
	prev := map[string]map[string][]int32{}
	for id, tps := range Sticky().Assign(ms, s.topics) {
		m := map[string][]int32{}
		for _, x := range tps {
			m[x.Topic] = x.Partitions
		}
		prev[id] = m
	}
	join := s
	join.name += "/join"
	join.prev = prev
	join.ids = append(slices.Clone(s.ids), "member-zzzzz")
	join.subs = append(slices.Clone(s.subs), s.subs[0])
	leave := s
	leave.name += "/leave"
	leave.prev = prev
	leave.leaving = s.ids[len(s.ids)/2]
	leave.ids = slices.Delete(slices.Clone(s.ids), len(s.ids)/2, len(s.ids)/2+1)
	leave.subs = slices.Delete(slices.Clone(s.subs), len(s.ids)/2, len(s.ids)/2+1)
	return []benchShape{full, join, leave}
}

func (s *benchShape) joinMembers(bal kgo.GroupBalancer) []kmsg.JoinGroupResponseMember {
	out := make([]kmsg.JoinGroupResponseMember, len(s.ids))
	for i, id := range s.ids {
		var cur map[string][]int32
		gen := int32(-1)
		if s.prev != nil {
			cur, gen = s.prev[id], 1
		}
		out[i] = kmsg.JoinGroupResponseMember{MemberID: id, ProtocolMetadata: bal.JoinGroupMetadata(s.subs[i], cur, gen)}
	}
	return out
}

// metrics: moves are previously owned partitions not kept by their owner
// (withheld cooperative partitions count: they are moving); imbalance is
// max−min partitions per member.
func (s *benchShape) metrics(sync []kmsg.SyncGroupRequestGroupAssignment) (moves, imbalance int) {
	lo, hi := 1<<62, -1
	got := map[string]map[string][]int32{}
	for _, a := range sync {
		m, err := kgo.ParseConsumerSyncAssignment(a.MemberAssignment)
		if err != nil {
			panic(err)
		}
		got[a.MemberID] = m
		n := 0
		for _, ps := range m {
			n += len(ps)
		}
		lo, hi = min(lo, n), max(hi, n)
	}
	for id, m := range s.prev {
		for t, ps := range m {
			now := got[id][t]
			set := make(map[int32]bool, len(now))
			for _, p := range now {
				set[p] = true
			}
			for _, p := range ps {
				if !set[p] {
					moves++
				}
			}
		}
	}
	return moves, hi - lo
}

func runKgo(b *testing.B, s *benchShape, bal kgo.GroupBalancer) {
	members := s.joinMembers(bal)
	var sync []kmsg.SyncGroupRequestGroupAssignment
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		mb, _, err := bal.MemberBalancer(members)
		if err != nil {
			b.Fatal(err)
		}
		plan, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(s.topics)
		if err != nil {
			b.Fatal(err)
		}
		sync = plan.IntoSyncAssignment()
	}
	b.StopTimer()
	moves, imb := s.metrics(sync)
	b.ReportMetric(float64(moves), "moves")
	b.ReportMetric(float64(imb), "imbalance")
}

var classicShapes []benchShape

func shapesForBench() []benchShape {
	if classicShapes == nil {
		for _, s := range []benchShape{
			classicShape("500x2000-2000m", 500, 2000, 2000, false),
			classicShape("50x1000-1000m", 50, 1000, 1000, false),
			classicShape("uneven-500x2000-2000m", 500, 2000, 2000, true),
		} {
			classicShapes = append(classicShapes, s.variants()...)
		}
	}
	return classicShapes
}

func benchClassic(b *testing.B, ours Assignor, theirs kgo.GroupBalancer) {
	for i := range shapesForBench() {
		s := &classicShapes[i]
		b.Run(s.name+"/groupd", func(b *testing.B) { runKgo(b, s, Balancer(ours)) })
		b.Run(s.name+"/franz-go", func(b *testing.B) { runKgo(b, s, theirs) })
	}
}

func BenchmarkRange(b *testing.B)      { benchClassic(b, Range(), kgo.RangeBalancer()) }
func BenchmarkRoundRobin(b *testing.B) { benchClassic(b, RoundRobin(), kgo.RoundRobinBalancer()) }
func BenchmarkSticky(b *testing.B)     { benchClassic(b, Sticky(), kgo.StickyBalancer()) }
func BenchmarkCooperativeSticky(b *testing.B) {
	benchClassic(b, CooperativeSticky(), kgo.CooperativeStickyBalancer())
}

// BenchmarkAssignPure times Assign alone, without the codecs.
func BenchmarkAssignPure(b *testing.B) {
	for i := range shapesForBench() {
		s := &classicShapes[i]
		for _, as := range []Assignor{Range(), RoundRobin(), Sticky()} {
			b.Run(s.name+"/"+as.Name(), func(b *testing.B) {
				ms := s.members()
				b.ReportAllocs()
				for b.Loop() {
					as.Assign(ms, s.topics)
				}
			})
		}
	}
}

func (s *benchShape) members() []Member {
	ms := make([]Member, len(s.ids))
	for i, id := range s.ids {
		ms[i] = Member{ID: id, Topics: s.subs[i], Generation: -1}
		if s.prev != nil {
			ms[i].Generation = 1
			for t, ps := range s.prev[id] {
				ms[i].Owned = append(ms[i].Owned, TopicPartitions{t, ps})
			}
			sortTopicPartitions(ms[i].Owned)
		}
	}
	return ms
}

// uniformShape follows Kafka's ServerSideAssignorBenchmark: nm members, ratio
// partitions per member over 10 topics; heterogeneous members fall into 5
// buckets that each subscribe to an overlapping window of 3 topics.
func uniformShape(name string, nm, ratio int, hetero bool) []benchShape {
	const nt = 10
	s := benchShape{name: name, topics: map[string]int32{}, names: topicNames(nt)}
	for _, t := range s.names {
		s.topics[t] = int32(nm * ratio / nt)
	}
	for i := range nm {
		s.ids = append(s.ids, fmt.Sprintf("member-%05d", i))
		if !hetero {
			s.subs = append(s.subs, s.names)
			continue
		}
		b := i % 5
		w := []string{s.names[2*b], s.names[2*b+1], s.names[(2*b+2)%nt]}
		slices.Sort(w)
		s.subs = append(s.subs, w)
	}
	full := s
	full.name += "/full"
	// Incremental, as Kafka's benchmark: assign N−1 members, then add one.
	inc := s
	inc.name += "/incremental"
	var ms []Member
	for i, id := range s.ids[:nm-1] {
		ms = append(ms, Member{ID: id, Topics: s.subs[i]})
	}
	inc.prev = map[string]map[string][]int32{}
	for id, tps := range Uniform().Assign(ms, s.topics) {
		m := map[string][]int32{}
		for _, x := range tps {
			m[x.Topic] = x.Partitions
		}
		inc.prev[id] = m
	}
	return []benchShape{full, inc}
}

// BenchmarkUniform: groupd's server-side uniform assignor (Assign alone,
// as a coordinator calls it) next to franz-go's client sticky balancer on
// the same shape — franz-go has no public server-side assignor, so the
// comparison is indicative; the absolute numbers are the point.
func BenchmarkUniform(b *testing.B) {
	var shapes []benchShape
	shapes = append(shapes, uniformShape("homogeneous-10000m-500k", 10000, 50, false)...)
	shapes = append(shapes, uniformShape("heterogeneous-10000m-100k", 10000, 10, true)...)
	for i := range shapes {
		s := &shapes[i]
		b.Run(s.name+"/groupd", func(b *testing.B) {
			ms := s.members()
			var a Assignment
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				a = Uniform().Assign(ms, s.topics)
			}
			b.StopTimer()
			moves, imb := s.metrics(syncPlan(a).IntoSyncAssignment())
			b.ReportMetric(float64(moves), "moves")
			b.ReportMetric(float64(imb), "imbalance")
		})
		b.Run(s.name+"/franz-go", func(b *testing.B) { runKgo(b, s, kgo.StickyBalancer()) })
	}
}
