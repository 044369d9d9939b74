package assign

import (
	"fmt"
	"maps"
	"runtime"
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

// A targetChange is one epoch's worth of change to a group.
type targetChange struct {
	name  string
	apply func(*Target)
}

// targetBench is a balanced group held by a Target, the changes measured
// on it, and the same group as the stateless assignor's input.
type targetBench struct {
	base    *Target
	ids     []string
	subs    [][]string
	topics  map[string]int32
	changes []targetChange
}

// newTargetBench builds one of the uniform benchmark's shapes (see
// uniformShape) as a Target settled under as: nm members, ratio partitions
// per member over 10 topics. The changes: one member joins (subscribed as
// the first member), the middle member leaves, and one topic gains a tenth
// more partitions.
func newTargetBench(as Assignor, name string, nm, ratio int, hetero bool) targetBench {
	s := uniformShape(name, nm, ratio, hetero)[0]
	tb := targetBench{ids: s.ids, subs: s.subs, topics: s.topics}
	var ms []Member
	for i, id := range s.ids {
		ms = append(ms, Member{ID: id, Topics: s.subs[i]})
	}
	var err error
	if tb.base, err = NewTarget(as, ms, s.topics); err != nil {
		panic(err)
	}
	tb.base.Assign()
	grown := s.names[len(s.names)/2]
	more := s.topics[grown] / 10
	tb.changes = []targetChange{
		{"join", func(t *Target) { t.SetMember("member-zzzzz", "", s.subs[0]) }},
		{"leave", func(t *Target) { t.RemoveMember(s.ids[nm/2]) }},
		{"grow", func(t *Target) { t.SetTopic(grown, s.topics[grown]+more) }},
	}
	return tb
}

// clone copies the Target's own state; the targets themselves are
// immutable and shared.
func (t *Target) clone() *Target {
	c := *t
	c.paths = pathCounts{}
	c.byID = make(map[string]*targetMember, len(t.byID))
	c.order = make([]*targetMember, len(t.order))
	c.classes = make(map[string]*subClass, len(t.classes))
	for k, cl := range t.classes {
		cp := *cl
		cp.eff = slices.Clone(cl.eff)
		c.classes[k] = &cp
	}
	for i, tm := range t.order {
		cp := *tm
		cp.class = c.classes[tm.class.key]
		c.order[i], c.byID[tm.ID] = &cp, &cp
	}
	c.topics = maps.Clone(t.topics)
	c.tid = maps.Clone(t.tid)
	c.tname = slices.Clone(t.tname)
	c.laid = slices.Clone(t.laid)
	c.touched = slices.Clone(t.touched)
	c.gone = slices.Clone(t.gone)
	return &c
}

// statelessInput is the stateless assignor's input after change: the
// changed group, each member with its target as Owned.
func (tb *targetBench) statelessInput(change targetChange) ([]Member, map[string]int32) {
	t := tb.base.clone()
	change.apply(t)
	ms := make([]Member, 0, len(t.order))
	for _, tm := range t.order {
		ms = append(ms, Member{ID: tm.ID, InstanceID: tm.InstanceID, Topics: tm.Topics, Owned: tm.Owned})
	}
	return ms, maps.Clone(t.topics)
}

// reportChange reports moves (partitions taken from a member that stays in
// the group: revocations; a departed member's partitions do not count),
// imbalance (max−min partitions per member) and the members whose target
// changed.
func reportChange(b *testing.B, prev, next Assignment, changed int) {
	stayed := Assignment{}
	for id, tps := range prev {
		if _, ok := next[id]; ok {
			stayed[id] = tps
		}
	}
	moves := countMoves(stayed, next)
	lo, hi := 1<<62, -1
	for _, tps := range next {
		n := 0
		for _, x := range tps {
			n += len(x.Partitions)
		}
		lo, hi = min(lo, n), max(hi, n)
	}
	b.ReportMetric(float64(moves), "moves")
	b.ReportMetric(float64(hi-lo), "imbalance")
	b.ReportMetric(float64(changed), "changed")
}

// BenchmarkTarget times a group's next target after one change: the
// incremental Target (<assignor>/<shape>/<change>/target) beside the
// stateless assignor on the same input (.../<change>/assign), and a first
// assignment of the whole group from nothing (.../full/assign). The target
// timing includes applying the change. Before each timed step, untimed, the
// settled Target is copied and the heap collected, in every sub-benchmark
// alike, so that no step pays for collecting an earlier one's garbage;
// B/op shows what each step leaves to collect. For instruction counts, which
// the machine's load does not disturb, run one sub-benchmark under callgrind
// with --toggle-collect on stepTarget or stepAssign (see README.md).
func BenchmarkTarget(b *testing.B) {
	type shape struct {
		name      string
		nm, ratio int
		hetero    bool
	}
	for _, as := range []Assignor{Uniform(), ServerRange()} {
		for _, sh := range []shape{
			{"homogeneous-10000m-500k", 10000, 50, false},
			{"heterogeneous-10000m-100k", 10000, 10, true},
		} {
			prefix := as.Name() + "/" + sh.name + "/"
			var tb *targetBench // built by the first sub-benchmark that runs
			bench := func() *targetBench {
				if tb == nil {
					x := newTargetBench(as, sh.name, sh.nm, sh.ratio, sh.hetero)
					tb = &x
				}
				return tb
			}
			b.Run(prefix+"full/assign", func(b *testing.B) {
				tb := bench()
				ms := make([]Member, len(tb.ids))
				for i, id := range tb.ids {
					ms[i] = Member{ID: id, Topics: tb.subs[i]}
				}
				var a Assignment
				b.ReportAllocs()
				for b.Loop() {
					untimed(b, nil)
					a = stepAssign(as, ms, tb.topics)
				}
				reportChange(b, Assignment{}, a, len(a))
			})
			for _, change := range []string{"join", "leave", "grow"} {
				b.Run(prefix+change+"/target", func(b *testing.B) {
					tb := bench()
					ch := tb.change(change)
					var t *Target
					var changed []string
					b.ReportAllocs()
					for b.Loop() {
						untimed(b, func() { t = tb.base.clone() })
						changed = stepTarget(t, ch)
					}
					if t.paths.fallback+t.paths.full > 0 {
						b.Fatalf("not incremental: %+v", t.paths)
					}
					reportChange(b, tb.base.Assignment(), t.Assignment(), len(changed))
				})
				b.Run(prefix+change+"/assign", func(b *testing.B) {
					tb := bench()
					ms, topics := tb.statelessInput(tb.change(change))
					var a Assignment
					b.ReportAllocs()
					for b.Loop() {
						untimed(b, nil)
						a = stepAssign(as, ms, topics)
					}
					changed := 0
					for _, m := range ms {
						if !sameTarget(m.Owned, a[m.ID]) {
							changed++
						}
					}
					reportChange(b, tb.base.Assignment(), a, changed)
				})
			}
		}
	}
}

// untimed runs prepare, if any, and a collection with the timer stopped.
func untimed(b *testing.B, prepare func()) {
	b.StopTimer()
	if prepare != nil {
		prepare()
	}
	runtime.GC()
	b.StartTimer()
}

// stepTarget and stepAssign are the timed steps, kept out of line so that
// callgrind can count their instructions alone.
//
//go:noinline
func stepTarget(t *Target, ch targetChange) []string {
	ch.apply(t)
	return t.Assign()
}

//go:noinline
func stepAssign(as Assignor, ms []Member, topics map[string]int32) Assignment {
	return as.Assign(ms, topics)
}

func (tb *targetBench) change(name string) targetChange {
	for _, ch := range tb.changes {
		if ch.name == name {
			return ch
		}
	}
	panic("no change " + name)
}
