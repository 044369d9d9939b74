package assign

import (
	"math"
	"slices"
)

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
			free = lay.keysFrom(free, tm, keep[i])
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
	var lost []uint64
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
		lost = lay.keysFrom(lost[:0], tm, keep[i])
		tm.changed = true
		tm.next, tm.ntids = lay.patch(tm, lost, got)
	}
	return true
}

// keysFrom appends the keys of the partitions from position from on of
// tm's valid target.
func (lay *targetLayout) keysFrom(dst []uint64, tm *targetMember, from int32) []uint64 {
	pos := int32(0)
	for k, x := range tm.valid {
		ps := x.Partitions
		r := lay.rankOf[tm.vtids[k]]
		for _, p := range ps[min(max(from-pos, 0), int32(len(ps))):] {
			dst = append(dst, key(r, p))
		}
		pos += int32(len(ps))
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

// patch returns tm's valid target without the partitions in lost and with
// those in got, both sorted keys. Entries of topics neither touches are
// reused, a topic that only loses its highest partitions keeps a prefix of
// its list, and only the other touched topics get a new list. New lists
// are never shared between members, so an old target pins no other
// member's partitions.
func (lay *targetLayout) patch(tm *targetMember, lost, got []uint64) ([]TopicPartitions, []int32) {
	entries := len(tm.valid)
	for i := range got {
		if i == 0 || got[i]>>32 != got[i-1]>>32 {
			entries++
		}
	}
	out := make([]TopicPartitions, 0, entries)
	tids := make([]int32, 0, entries)
	emit := func(r int32, ps []int32) {
		if len(ps) > 0 {
			out = append(out, TopicPartitions{lay.names[r], ps})
			tids = append(tids, lay.idOf[r])
		}
	}
	// gained emits, as new entries, the topics below rank upto that only
	// gain.
	gained := func(upto int32) {
		for len(got) > 0 && int32(got[0]>>32) < upto {
			r, n := int32(got[0]>>32), runOf(got)
			ps := make([]int32, n)
			for j, k := range got[:n] {
				ps[j] = int32(uint32(k))
			}
			emit(r, ps)
			got = got[n:]
		}
	}
	for k, x := range tm.valid {
		r := lay.rankOf[tm.vtids[k]]
		gained(r)
		nl, ng := 0, 0
		if len(lost) > 0 && int32(lost[0]>>32) == r {
			nl = runOf(lost)
		}
		if len(got) > 0 && int32(got[0]>>32) == r {
			ng = runOf(got)
		}
		ps, cut := x.Partitions, len(x.Partitions)-nl
		switch {
		case nl == 0 && ng == 0:
			out, tids = append(out, x), append(tids, tm.vtids[k])
		case ng == 0 && cut >= 0 && int32(uint32(lost[0])) == ps[cut]:
			// The lost partitions are distinct members of ps, so
			// when the lowest is ps[cut] they are its last nl.
			emit(r, ps[:cut:cut])
		default:
			next := make([]int32, 0, len(ps)-nl+ng)
			drop, add := lost[:nl], got[:ng]
			for _, p := range ps {
				if len(drop) > 0 && int32(uint32(drop[0])) == p {
					drop = drop[1:]
					continue
				}
				for len(add) > 0 && int32(uint32(add[0])) < p {
					next, add = append(next, int32(uint32(add[0]))), add[1:]
				}
				next = append(next, p)
			}
			for _, k := range add {
				next = append(next, int32(uint32(k)))
			}
			emit(r, next)
		}
		lost, got = lost[nl:], got[ng:]
	}
	gained(math.MaxInt32)
	if len(out) == 0 {
		return nil, nil
	}
	return out, tids
}

// runOf is the number of leading keys of ks in the same topic.
func runOf(ks []uint64) int {
	n := 1
	for n < len(ks) && ks[n]>>32 == ks[0]>>32 {
		n++
	}
	return n
}

// assignRange is serverRange computed from the members' targets: per
// topic, the subscribers in member order and the partitions each holds are
// all it needs, and only members whose share of a topic changes are
// patched. A topic whose subscribers, their order and partition count are
// as at the last Assign, with no free partition, comes out as it was (range
// keeps a result it produced), so only the touched topics are computed.
// It reports false if the partitions do not add up.
func (t *Target) assignRange(lay *targetLayout, free []uint64) bool {
	nt := len(lay.names)
	redo := make([]bool, nt)
	some := false
	for r, id := range lay.idOf {
		redo[r] = t.touched[id] || int(id) >= len(t.laid) || t.laid[id] != lay.count[r]
	}
	for _, k := range free {
		redo[k>>32] = true
	}
	for _, x := range redo {
		some = some || x
	}
	if !some {
		return true
	}
	// Subscribers of the topics to redo, in member order, from the
	// members of the classes subscribing to any of them.
	classRedo := make([]bool, len(lay.classes))
	for c, cl := range lay.classes {
		for _, r := range cl.eff {
			classRedo[c] = classRedo[c] || redo[r]
		}
	}
	start := make([]int32, nt+1)
	for _, cl := range lay.classes {
		if classRedo[cl.id] {
			for _, r := range cl.eff {
				if redo[r] {
					start[r+1] += int32(cl.members)
				}
			}
		}
	}
	for r := range nt {
		start[r+1] += start[r]
	}
	who := make([]int32, start[nt])
	fill := slices.Clone(start[:nt])
	for i, tm := range t.order {
		if !classRedo[tm.class.id] {
			continue
		}
		for _, r := range tm.class.eff {
			if redo[r] {
				who[fill[r]] = int32(i)
				fill[r]++
			}
		}
	}
	// Topics are handled in rank order and each target is sorted by
	// rank, so a cursor per member finds its entry for the topic.
	cursor := make([]int32, len(t.order))
	var held [][]int32 // per subscriber of the current topic

	// A member's change in one topic: it gives up lost (its partitions of
	// the topic above what it keeps) and receives got.
	type change struct {
		i, r      int32
		lost, got []int32
	}
	var changes []change
	var topicFree, keep []int32
	fo := 0
	for r := range int32(nt) {
		if !redo[r] {
			continue
		}
		subs := who[start[r]:start[r+1]]
		n := lay.count[r]
		minQ, extra := n/int32(len(subs)), n%int32(len(subs))
		topicFree = topicFree[:0]
		for ; fo < len(free) && free[fo]>>32 == uint64(r); fo++ {
			topicFree = append(topicFree, int32(uint32(free[fo])))
		}
		held = held[:0]
		for _, i := range subs {
			var ps []int32
			tm := t.order[i]
			k := cursor[i]
			for int(k) < len(tm.vtids) && lay.rankOf[tm.vtids[k]] < r {
				k++
			}
			if int(k) < len(tm.vtids) && lay.rankOf[tm.vtids[k]] == r {
				ps = tm.valid[k].Partitions
				k++
			}
			cursor[i] = k
			held = append(held, ps)
		}
		// Keep the lowest min(have, quota) partitions, one more for
		// members that had more while extra slots remain, in member
		// order; the rest is free.
		keep = keep[:0]
		for _, ps := range held {
			h := int32(len(ps))
			k := min(h, minQ)
			if h > minQ && extra > 0 {
				k++
				extra--
			}
			keep = append(keep, k)
			topicFree = append(topicFree, ps[k:]...)
		}
		// The free list is read by the changes below: it must not be
		// reused for the next topic.
		topicFree = slices.Clip(topicFree)
		slices.Sort(topicFree)
		next := int32(0)
		for j, ps := range held {
			h, k := int32(len(ps)), keep[j]
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
			if k < h || len(recv) > 0 {
				changes = append(changes, change{subs[j], r, ps[k:], recv})
			}
		}
		if next != int32(len(topicFree)) {
			return false
		}
		topicFree = nil
	}
	slices.SortFunc(changes, func(a, b change) int {
		if a.i != b.i {
			return int(a.i - b.i)
		}
		return int(a.r - b.r)
	})
	var lost, got []uint64
	for c := 0; c < len(changes); {
		i := changes[c].i
		lost, got = lost[:0], got[:0]
		for ; c < len(changes) && changes[c].i == i; c++ {
			for _, p := range changes[c].lost {
				lost = append(lost, key(changes[c].r, p))
			}
			for _, p := range changes[c].got {
				got = append(got, key(changes[c].r, p))
			}
		}
		tm := t.order[i]
		tm.changed = true
		tm.next, tm.ntids = lay.patch(tm, lost, got)
	}
	return true
}

// assignGeneral runs the shared solver for differing subscriptions in
// sparse mode (see sparseSolve): it starts from the members' targets and
// the free partitions, and patches only the members it changed.
func (t *Target) assignGeneral(lay *targetLayout, free []uint64) {
	nm := len(t.order)
	if lay.n == 0 {
		return
	}
	l := &layout{
		names:  lay.names,
		base:   lay.base,
		subs:   make([][]int32, nm),
		sid:    make([]int32, nm),
		nsid:   int32(len(lay.classes)),
		nparts: lay.n,
	}
	sp := &sparseSolve{
		lists: make([][]TopicPartitions, nm),
		roff:  make([]int32, nm+1),
		free:  make([]int32, len(free)),
		at:    make([]int32, nm),
	}
	e := &engine{l: l, nm: nm, load: make([]int32, nm), sparse: sp}
	for i, tm := range t.order {
		l.subs[i], l.sid[i] = tm.class.eff, tm.class.id
	}
	e.cnt = newTopicCounts(l)
	for i, tm := range t.order {
		sp.lists[i], e.load[i] = tm.valid, tm.vcount
		for k, id := range tm.vtids {
			r := lay.rankOf[id]
			sp.rank = append(sp.rank, r)
			*e.cnt.at(int32(i), r) = int32(len(tm.valid[k].Partitions))
		}
		sp.roff[i+1] = int32(len(sp.rank))
	}
	for j, k := range free {
		sp.free[j] = lay.base[k>>32] + int32(uint32(k))
	}
	e.solveGeneral()
	slices.SortFunc(sp.deltas, func(a, b memberDelta) int { return int(a.m - b.m) })
	var lost, got []uint64
	for _, d := range sp.deltas {
		if len(d.got) == 0 && len(d.lost) == 0 {
			continue
		}
		lost = lay.keysOfGlobal(lost[:0], d.lost)
		got = got[:0]
		for _, g := range d.got {
			got = append(got, lay.keyOfGlobal(g.p))
		}
		slices.Sort(lost)
		slices.Sort(got)
		m := d.m
		tm := t.order[m]
		tm.changed = true
		tm.next, tm.ntids = lay.patch(tm, lost, got)
	}
}

// keyOfGlobal turns a global index into a key.
func (lay *targetLayout) keyOfGlobal(p int32) uint64 {
	r, _ := slices.BinarySearch(lay.base[1:], p+1)
	return key(int32(r), p-lay.base[r])
}

func (lay *targetLayout) keysOfGlobal(dst []uint64, ps []int32) []uint64 {
	for _, p := range ps {
		dst = append(dst, lay.keyOfGlobal(p))
	}
	return dst
}
