package assign

import "slices"

// sparseSolve lets the sticky/uniform solver run from the members'
// previous targets instead of from per-partition owner arrays.
//
// After a small change nearly every partition stays where it is, yet the
// dense solver spends most of its time filling, scanning and reading back
// arrays as long as the partition count. In sparse mode it starts from each
// member's load and per-topic counts, which the caller takes from the
// targets, and from the list of partitions nobody keeps; every decision (which class or
// member takes a free partition, which chain moves what) depends only on
// those, so the solver makes exactly the choices it makes in dense mode.
// What moves is recorded per member (deltas), and only the members that
// changed get a new target.
type sparseSolve struct {
	// lists is each member's previous target, restricted to what it may
	// keep; rank holds the topic index of each entry, member m's entries
	// at rank[roff[m]:roff[m+1]].
	lists [][]TopicPartitions
	rank  []int32
	roff  []int32
	// free holds the global indexes, ascending, of the partitions no
	// member keeps.
	free []int32
	// deltas[at[m]-1] is what member m gained and lost; at[m] is 0 while
	// it has neither.
	at     []int32
	deltas []memberDelta
}

// memberDelta is what a member gained and lost during one solve.
type memberDelta struct {
	m    int32
	got  []gotPartition
	lost []int32 // partitions of its previous target given away
}

type gotPartition struct{ p, prev int32 } // global index, previous owner

// freeByTopic is engine.freeByTopic's result, from the free list.
func (s *sparseSolve) freeByTopic(l *layout) (fstart, free []int32) {
	nt := len(l.names)
	fstart = make([]int32, nt+1)
	i := int32(0)
	for t := 1; t <= nt; t++ {
		for i < int32(len(s.free)) && s.free[i] < l.base[t] {
			i++
		}
		fstart[t] = i
	}
	return fstart, s.free
}

// find returns m's delta, nil if it has none.
func (s *sparseSolve) find(m int32) *memberDelta {
	if s.at[m] == 0 {
		return nil
	}
	return &s.deltas[s.at[m]-1]
}

// of returns m's delta, creating it.
func (s *sparseSolve) of(m int32) *memberDelta {
	if s.at[m] == 0 {
		s.deltas = append(s.deltas, memberDelta{m: m})
		s.at[m] = int32(len(s.deltas))
	}
	return &s.deltas[s.at[m]-1]
}

// add gives p, previously owned by prev, to m. A partition returning to
// its previous owner cancels the loss instead.
func (s *sparseSolve) add(m, p, prev int32) {
	d := s.of(m)
	if prev == m {
		d.lost = slices.DeleteFunc(d.lost, func(q int32) bool { return q == p })
		return
	}
	d.got = append(d.got, gotPartition{p, prev})
}

// take removes p from m and returns p's previous owner.
func (s *sparseSolve) take(m, p int32) int32 {
	d := s.of(m)
	for i, g := range d.got {
		if g.p == p {
			d.got = slices.Delete(d.got, i, i+1)
			return g.prev
		}
	}
	d.lost = append(d.lost, p)
	return m
}

// move is movePartition: among src's partitions of topic t, one dst owned
// before scores best, then one src did not own before, then one src did;
// the lowest of the best score moves. A partition src did not own before
// is one it got during this solve (one it got back cancelled a loss
// instead, see add), and every partition it kept scores lowest, so only
// the lowest of those is a candidate.
func (s *sparseSolve) move(l *layout, t, src, dst int32) {
	lo, hi := l.base[t], l.base[t+1]
	best, fromDst := int32(-1), false
	if d := s.find(src); d != nil {
		for _, g := range d.got {
			if g.p < lo || g.p >= hi {
				continue
			}
			if isDst := g.prev == dst; best < 0 || isDst && !fromDst || isDst == fromDst && g.p < best {
				best, fromDst = g.p, isDst
			}
		}
	}
	if best < 0 {
		best = s.lowestKept(src, t, lo)
	}
	s.add(dst, best, s.take(src, best))
}

// lowestKept returns the lowest partition of topic t (whose first global
// index is lo) in m's previous target that m has not given away. The
// solver only moves a partition of t from a member counted as holding one.
func (s *sparseSolve) lowestKept(m, t, lo int32) int32 {
	ranks := s.rank[s.roff[m]:s.roff[m+1]]
	if k, ok := slices.BinarySearch(ranks, t); ok {
		var lost []int32
		if d := s.find(m); d != nil {
			lost = d.lost
		}
		for _, p := range s.lists[m][k].Partitions {
			if q := lo + p; !slices.Contains(lost, q) {
				return q
			}
		}
	}
	panic("assign: solver moved a partition from a member holding none of the topic")
}
