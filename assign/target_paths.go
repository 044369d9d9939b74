package assign

import "slices"

// The Target's incremental paths. Each computes, for the members in
// t.order with their valid targets (targetMember.valid) and the free
// partitions, exactly what the stateless assignor computes, and sets next
// and changed on the members whose target changes.

// assignHomogeneous is solveHomogeneous computed from the members' targets
// rather than from per-partition arrays; it makes the same choices:
//
//   - every member keeps its lowest min(count, N/M) partitions;
//   - of the members that hold more, the N%M whose next partition comes
//     first keep one more (keepQuota's second pass meets them in that
//     order);
//   - the free partitions, ascending, fill the members below N/M in
//     member order, then go one each to members at N/M, in member order,
//     while extra slots remain.
//
// Beyond a few counters per member, only the members that hold more than
// N/M, the free partitions and the members that receive some are touched.
// It reports false if the partitions do not add up.
func (t *Target) assignHomogeneous(lay *targetLayout, free []uint64) bool {
	nm := int32(len(t.order))
	minQ, extra := lay.n/nm, lay.n%nm
	keep := make([]int32, nm)
	type cand struct {
		key uint64
		i   int32
	}
	var cands []cand
	for i, tm := range t.order {
		keep[i] = min(tm.vcount, minQ)
		if tm.vcount > minQ && extra > 0 {
			cands = append(cands, cand{lay.kth(tm, minQ), int32(i)})
		}
	}
	if int32(len(cands)) > extra {
		// Keys are distinct: the extra smallest are those up to the
		// extra-th smallest.
		keys := make([]uint64, len(cands))
		for j, c := range cands {
			keys[j] = c.key
		}
		slices.Sort(keys)
		last := keys[extra-1]
		cands = slices.DeleteFunc(cands, func(c cand) bool { return c.key > last })
	}
	for _, c := range cands {
		keep[c.i]++
	}
	extra -= int32(len(cands))

	for i, tm := range t.order {
		if keep[i] < tm.vcount {
			free = lay.keysOf(free, tm, keep[i], tm.vcount)
		}
	}
	slices.Sort(free)

	// Deal: members below quota take the next runs of free partitions in
	// member order, then members at quota take one extra each, in member
	// order, from what follows all the runs. A member's received keys are
	// therefore ascending: its run, then its extra.
	runs := int32(0)
	for i := range nm {
		runs += max(minQ-keep[i], 0)
	}
	if runs+extra != int32(len(free)) {
		return false
	}
	run, more := int32(0), runs
	var kept, merged []uint64
	for i, tm := range t.order {
		take := max(minQ-keep[i], 0)
		got := free[run : run+take : run+take]
		run += take
		if more < int32(len(free)) && keep[i] <= minQ {
			got = append(got, free[more])
			more++
		}
		if keep[i] == tm.vcount && len(got) == 0 {
			continue
		}
		kept = lay.keysOf(kept[:0], tm, 0, keep[i])
		merged = mergeKeys(merged, kept, got)
		tm.changed = true
		tm.next, tm.ntids = lay.targetOf(merged)
	}
	return true
}

// keysOf appends the keys of the partitions at positions [from, to) of
// tm's valid target.
func (lay *targetLayout) keysOf(dst []uint64, tm *targetMember, from, to int32) []uint64 {
	pos := int32(0)
	for k, x := range tm.valid {
		ps := x.Partitions
		n := int32(len(ps))
		lo, hi := min(max(from-pos, 0), n), min(max(to-pos, 0), n)
		r := lay.rankOf[tm.vtids[k]]
		for _, p := range ps[lo:max(lo, hi)] {
			dst = append(dst, key(r, p))
		}
		if pos += n; pos >= to {
			break
		}
	}
	return dst
}

// kth returns the key of the partition at position k of tm's valid target.
func (lay *targetLayout) kth(tm *targetMember, k int32) uint64 {
	for j, x := range tm.valid {
		if n := int32(len(x.Partitions)); k >= n {
			k -= n
			continue
		}
		return key(lay.rankOf[tm.vtids[j]], x.Partitions[k])
	}
	panic("assign: position beyond the target")
}

// targetOf builds a target from sorted keys, in one allocation for the
// partitions and one for the entries: a member's target must not share
// backing arrays with other members', or one member's old target would
// keep every target built alongside it alive.
func (lay *targetLayout) targetOf(keys []uint64) ([]TopicPartitions, []int32) {
	if len(keys) == 0 {
		return nil, nil
	}
	runs := 1
	for i := 1; i < len(keys); i++ {
		if keys[i]>>32 != keys[i-1]>>32 {
			runs++
		}
	}
	ps := make([]int32, len(keys))
	out := make([]TopicPartitions, 0, runs)
	tids := make([]int32, 0, runs)
	start := 0
	for i, k := range keys {
		ps[i] = int32(uint32(k))
		if i+1 == len(keys) || keys[i+1]>>32 != k>>32 {
			out = append(out, TopicPartitions{Topic: lay.names[k>>32], Partitions: ps[start : i+1 : i+1]})
			tids = append(tids, lay.idOf[k>>32])
			start = i + 1
		}
	}
	return out, tids
}

// mergeKeys merges two sorted key lists into dst.
func mergeKeys(dst, a, b []uint64) []uint64 {
	dst = dst[:0]
	for len(a) > 0 && len(b) > 0 {
		if a[0] < b[0] {
			dst, a = append(dst, a[0]), a[1:]
		} else {
			dst, b = append(dst, b[0]), b[1:]
		}
	}
	return append(append(dst, a...), b...)
}

// assignRange is serverRange computed from the members' targets: per
// topic, the subscribers in member order and the partitions each holds are
// all it needs, and only members whose share of a topic changes get a new
// entry for it. It reports false if the partitions do not add up.
func (t *Target) assignRange(lay *targetLayout, free []uint64) bool {
	nt := len(lay.names)
	start := make([]int32, nt+1)
	for _, tm := range t.order {
		for _, r := range tm.class.eff {
			start[r+1]++
		}
	}
	for r := range nt {
		start[r+1] += start[r]
	}
	who := make([]int32, start[nt])
	held := make([][]int32, start[nt])
	fill := slices.Clone(start[:nt])
	for i, tm := range t.order {
		k := 0
		for _, r := range tm.class.eff {
			var ps []int32
			if k < len(tm.valid) && lay.rankOf[tm.vtids[k]] == r {
				ps = tm.valid[k].Partitions
				k++
			}
			who[fill[r]], held[fill[r]] = int32(i), ps
			fill[r]++
		}
	}

	type change struct {
		i, r int32
		ps   []int32
	}
	var changes []change
	var topicFree, keep []int32
	fo := 0
	for r := range int32(nt) {
		lo, hi := start[r], start[r+1]
		n := lay.count[r]
		minQ, extra := n/(hi-lo), n%(hi-lo)
		topicFree = topicFree[:0]
		for ; fo < len(free) && free[fo]>>32 == uint64(r); fo++ {
			topicFree = append(topicFree, int32(uint32(free[fo])))
		}
		// Keep the lowest min(have, quota) partitions, one more for
		// members that had more while extra slots remain, in member
		// order; the rest is free.
		keep = keep[:0]
		for j := lo; j < hi; j++ {
			h := int32(len(held[j]))
			k := min(h, minQ)
			if h > minQ && extra > 0 {
				k++
				extra--
			}
			keep = append(keep, k)
			topicFree = append(topicFree, held[j][k:]...)
		}
		slices.Sort(topicFree)
		next := int32(0)
		for j := lo; j < hi; j++ {
			h, k := int32(len(held[j])), keep[j-lo]
			var recv []int32
			if h <= minQ {
				take := minQ - h
				if extra > 0 {
					take++
					extra--
				}
				if next+take > int32(len(topicFree)) {
					return false
				}
				recv = topicFree[next : next+take]
				next += take
			}
			if k == h && len(recv) == 0 {
				continue
			}
			ps := held[j][:k:k]
			if len(recv) > 0 {
				ps = mergeInt32(ps, recv)
			}
			changes = append(changes, change{who[j], r, ps})
		}
		if next != int32(len(topicFree)) {
			return false
		}
	}
	slices.SortStableFunc(changes, func(a, b change) int { return int(a.i - b.i) })
	for c := 0; c < len(changes); {
		i := changes[c].i
		end := c + 1
		for end < len(changes) && changes[end].i == i {
			end++
		}
		tm := t.order[i]
		out := make([]TopicPartitions, 0, len(tm.valid)+end-c)
		tids := make([]int32, 0, len(tm.valid)+end-c)
		k := 0
		for _, ch := range changes[c:end] {
			for ; k < len(tm.valid) && lay.rankOf[tm.vtids[k]] < ch.r; k++ {
				out, tids = append(out, tm.valid[k]), append(tids, tm.vtids[k])
			}
			if k < len(tm.valid) && lay.rankOf[tm.vtids[k]] == ch.r {
				k++
			}
			if len(ch.ps) > 0 {
				out, tids = append(out, TopicPartitions{lay.names[ch.r], ch.ps}), append(tids, lay.idOf[ch.r])
			}
		}
		out, tids = append(out, tm.valid[k:]...), append(tids, tm.vtids[k:]...)
		if len(out) == 0 {
			out, tids = nil, nil
		}
		tm.changed, tm.next, tm.ntids = true, out, tids
		c = end
	}
	return true
}

// mergeInt32 returns the sorted merge of two sorted lists in a new slice.
func mergeInt32(a, b []int32) []int32 {
	out := make([]int32, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0] < b[0] {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// assignGeneral runs the shared solver for differing subscriptions in
// sparse mode (see sparseSolve): it starts from the members' targets and
// the free partitions, and builds targets only for the members it changed.
func (t *Target) assignGeneral(lay *targetLayout, free []uint64) {
	nm := len(t.order)
	if lay.n == 0 {
		return
	}
	l := &layout{
		members: make([]*Member, nm),
		names:   lay.names,
		base:    lay.base,
		subs:    make([][]int32, nm),
		sid:     make([]int32, nm),
		nsid:    int32(len(lay.classes)),
		nparts:  lay.n,
	}
	sp := &sparseSolve{
		lists: make([][]TopicPartitions, nm),
		roff:  make([]int32, nm+1),
		free:  make([]int32, len(free)),
		delta: make(map[int32]*memberDelta),
	}
	for i, tm := range t.order {
		l.members[i], l.subs[i], l.sid[i] = &tm.Member, tm.class.eff, tm.class.id
		sp.lists[i] = tm.valid
		for _, id := range tm.vtids {
			sp.rank = append(sp.rank, lay.rankOf[id])
		}
		sp.roff[i+1] = int32(len(sp.rank))
	}
	for j, k := range free {
		sp.free[j] = lay.base[k>>32] + int32(uint32(k))
	}
	e := &engine{l: l, nm: nm, load: make([]int32, nm), sparse: sp}
	e.solveGeneral()
	moved := make([]int32, 0, len(sp.delta))
	for m := range sp.delta {
		moved = append(moved, m)
	}
	slices.Sort(moved)
	for _, m := range moved {
		if ps, ok := sp.result(m, lay.base); ok {
			tm := t.order[m]
			tm.changed = true
			tm.next, tm.ntids = lay.targetOfGlobal(ps)
		}
	}
}

// targetOfGlobal turns ascending global indexes into a target, rewriting
// ps in place to partition numbers.
func (lay *targetLayout) targetOfGlobal(ps []int32) ([]TopicPartitions, []int32) {
	if len(ps) == 0 {
		return nil, nil
	}
	var out []TopicPartitions
	var tids []int32
	r, start := int32(0), 0
	for i := range ps {
		if ps[i] >= lay.base[r+1] {
			if i > start {
				out, tids = append(out, TopicPartitions{lay.names[r], ps[start:i:i]}), append(tids, lay.idOf[r])
			}
			for ps[i] >= lay.base[r+1] {
				r++
			}
			start = i
		}
		ps[i] -= lay.base[r]
	}
	out = append(out, TopicPartitions{lay.names[r], ps[start:len(ps):len(ps)]})
	return out, append(tids, lay.idOf[r])
}
