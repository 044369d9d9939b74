package assign

import (
	"math"
	"slices"
)

// Sticky returns Kafka's StickyAssignor ("sticky"), an eager assignor:
// members have revoked everything before they join, so the previous
// assignment comes from the StickyAssignor user data each member sends
// (falling back to the subscription's OwnedPartitions when set).
//
// The result is balanced — for identical subscriptions sizes differ by at
// most one; otherwise no chain of moves between eligible members can bring a
// member two or more partitions below another — and, subject to that, keeps
// as many partitions with their previous owner as it can.
//
// KIP-341: when several members claim the same partition, the claim with the
// highest generation wins; claims tied at the highest generation are all
// discarded, since none can be trusted.
func Sticky() Assignor { return stickyAssignor{cooperative: false} }

// CooperativeSticky returns KIP-429's CooperativeStickyAssignor
// ("cooperative-sticky"). It computes the sticky assignment from the owned
// partitions members report, then withholds every partition that would move
// to a member while another member still reports owning it. That member sees
// the partition missing from its assignment, revokes it, and rejoins; in the
// next round nobody claims it and it is handed over. A partition is never in
// one member's assignment while another still claims it, unless the
// recipient's own claim has a strictly higher generation (the other claim is
// stale and its holder will revoke it on receipt).
func CooperativeSticky() Assignor { return stickyAssignor{cooperative: true} }

type stickyAssignor struct{ cooperative bool }

func (s stickyAssignor) Name() string {
	if s.cooperative {
		return "cooperative-sticky"
	}
	return "sticky"
}

func (s stickyAssignor) Assign(members []Member, topics map[string]int32) Assignment {
	l := newLayout(members, topics)
	e := newEngine(l)
	claimFn := stickyClaims
	if s.cooperative {
		claimFn = cooperativeClaims
	}
	e.claim(claimFn)
	e.solve()
	if s.cooperative {
		e.withholdTransfers()
	}
	return l.build(e.owner)
}

// stickyClaims is what the eager sticky assignor believes a member owned:
// Java's StickyAssignor reads only its user data; members that also fill
// OwnedPartitions (or a caller that sets Owned directly) are honoured first.
func stickyClaims(m *Member) ([]TopicPartitions, int32) {
	owned, gen := m.Owned, m.Generation
	if len(owned) > 0 && gen >= 0 {
		return owned, gen
	}
	if sd, ok := DecodeStickyUserData(m.UserData); ok && len(m.UserData) > 0 {
		if len(owned) == 0 {
			owned = sd.Owned
		}
		if gen < 0 {
			gen = sd.Generation
		}
	}
	return owned, gen
}

// cooperativeClaims uses the subscription's OwnedPartitions; the generation
// comes from the v2+ subscription or, for v0/v1, from the cooperative-sticky
// user data (a bare int32).
func cooperativeClaims(m *Member) ([]TopicPartitions, int32) {
	gen := m.Generation
	if gen < 0 && len(m.UserData) == 4 {
		if sd, ok := DecodeStickyUserData(m.UserData); ok {
			gen = sd.Generation
		}
	}
	return m.Owned, gen
}

// exactClaims is for the server-side assignors: Owned is the current target
// assignment and generations do not apply.
func exactClaims(m *Member) ([]TopicPartitions, int32) { return m.Owned, 0 }

const (
	noOwner   = -1
	manyOwner = -2
)

// engine is the sticky/uniform solver over a layout.
type engine struct {
	l  *layout
	nm int
	// owner is the assignment being built: member index or noOwner.
	owner []int32
	// prev is the previous owner the solver tries to keep: the single
	// highest-generation claim from a subscribed member, else noOwner.
	prev []int32
	// claimer is every raw claim, subscribed or not: noOwner, one member
	// index, or manyOwner. Cooperative withholding consults it.
	claimer []int32
	load    []int32
}

func newEngine(l *layout) *engine {
	e := &engine{l: l, nm: len(l.members)}
	n := int(l.nparts)
	buf := make([]int32, 3*n)
	e.owner, e.prev, e.claimer = buf[:n:n], buf[n:2*n:2*n], buf[2*n:]
	for i := range buf {
		buf[i] = noOwner
	}
	e.load = make([]int32, e.nm)
	return e
}

// subscribed reports whether member m subscribes to topic t.
func (e *engine) subscribed(m int, t int32) bool {
	if e.l.homog {
		return true
	}
	_, ok := slices.BinarySearch(e.l.subs[m], t)
	return ok
}

// claim resolves previous ownership. Per partition the highest generation
// wins (KIP-341); a tie at the highest generation voids the partition's
// previous owner. Claims for topics the member no longer subscribes to are
// recorded as raw claims (the member still consumes them until it revokes)
// but never make it the previous owner.
func (e *engine) claim(claims func(*Member) ([]TopicPartitions, int32)) {
	l := e.l
	gen := make([]int32, l.nparts)
	for i := range gen {
		gen[i] = math.MinInt32
	}
	var idx []int32
	for mi, m := range l.members {
		owned, g := claims(m)
		if len(owned) == 0 {
			continue
		}
		idx = l.ownedIndexes(idx[:0], owned)
		lastT, lastSub := int32(-1), false
		for _, p := range idx {
			switch c := e.claimer[p]; c {
			case noOwner:
				e.claimer[p] = int32(mi)
			case int32(mi):
				continue // the member listed the partition twice
			default:
				e.claimer[p] = manyOwner
			}
			if t := l.topicOf(p); t != lastT {
				lastT, lastSub = t, e.subscribed(mi, t)
			}
			if !lastSub {
				continue
			}
			switch {
			case g > gen[p]:
				gen[p], e.prev[p] = g, int32(mi)
			case g == gen[p]:
				e.prev[p] = manyOwner
			}
		}
	}
	for p, o := range e.prev {
		if o == manyOwner {
			e.prev[p] = noOwner
		}
	}
}

// solve fills owner from prev: balance first, then stickiness.
func (e *engine) solve() {
	if e.nm == 0 || e.l.nparts == 0 {
		return
	}
	if e.l.homog {
		e.solveHomogeneous()
		return
	}
	e.solveGeneral()
}

// solveHomogeneous is the quota algorithm for identical subscriptions: with
// N partitions and M members everyone ends with N/M, and N%M members with one
// more. Each member keeps up to its quota of what it owned (the lowest
// partitions, so the choice is deterministic), and the rest are dealt in
// order to members below quota. Nothing is moved that the quotas do not
// force, so the moves are the minimum balance requires.
func (e *engine) solveHomogeneous() {
	l, nm := e.l, int32(e.nm)
	n := l.nparts
	minQ, extra := n/nm, n%nm
	// Members' previous partitions, in partition order.
	for p, o := range e.prev {
		if o >= 0 {
			if e.load[o] < minQ {
				e.owner[p] = o
				e.load[o]++
			}
		}
	}
	// Second pass: members holding more than minQ keep one extra while
	// extra slots remain, in partition order.
	if extra > 0 {
		hasExtra := make([]bool, nm)
		for p, o := range e.prev {
			if extra == 0 {
				break
			}
			if o >= 0 && e.owner[p] == noOwner && !hasExtra[o] {
				e.owner[p] = o
				e.load[o]++
				hasExtra[o] = true
				extra--
			}
		}
	}
	// Deal unassigned partitions: first fill every member to minQ, then
	// hand out the remaining extras one each to members at minQ.
	p := int32(0)
	next := func() int32 {
		for e.owner[p] != noOwner {
			p++
		}
		return p
	}
	for m := range nm {
		for e.load[m] < minQ {
			e.owner[next()] = m
			e.load[m]++
		}
	}
	for m := int32(0); m < nm && extra > 0; m++ {
		if e.load[m] == minQ {
			e.owner[next()] = m
			e.load[m]++
			extra--
		}
	}
}

// solveGeneral handles differing subscriptions.
//
//  1. Keep every valid previous owner.
//  2. Water-fill each topic's unassigned partitions onto its least-loaded
//     subscribers, topics with the fewest subscribers first (they have the
//     fewest choices), interleaving the topics in chunks.
//  3. Repair: repeatedly take the most-loaded member u and search for a
//     chain u → … → v along which each member hands the next one a
//     partition the next one subscribes to, with load(v) ≤ load(u)−2.
//     Shifting one partition along the chain lowers u and raises v by one.
//     When no such chain exists for any member the loads are optimal: no
//     maximum can go down without some minimum going down.
//
// A failed search from u proves that nobody u can reach is two below it;
// since u is the maximum, none of them can improve either, and no later
// chain can pass through them. They are marked dead and never searched or
// crossed again, which bounds the work.
func (e *engine) solveGeneral() {
	l := e.l
	nm, nt := e.nm, len(l.names)
	// Per-topic subscriber lists in member order, sharing one array.
	sstart := make([]int32, nt+1)
	for _, s := range l.subs {
		for _, t := range s {
			sstart[t+1]++
		}
	}
	for t := range nt {
		sstart[t+1] += sstart[t]
	}
	slist := make([]int32, sstart[nt])
	fill := append([]int32(nil), sstart[:nt]...)
	for m, s := range l.subs {
		for _, t := range s {
			slist[fill[t]] = int32(m)
			fill[t]++
		}
	}
	subsOf := func(t int32) []int32 { return slist[sstart[t]:sstart[t+1]] }

	// cnt[coff[m]+k] = partitions of topic subs[m][k] that m holds.
	coff := make([]int32, nm+1)
	for m, s := range l.subs {
		coff[m+1] = coff[m] + int32(len(s))
	}
	// The count lookup sits in the repair's inner loop: use a dense
	// member × topic matrix when it is small enough, else binary search
	// each member's sorted subscription.
	var cntAt func(m int, t int32) *int32
	if nm*nt <= 1<<22 {
		dense := make([]int32, nm*nt)
		cntAt = func(m int, t int32) *int32 { return &dense[m*nt+int(t)] }
	} else {
		cnt := make([]int32, coff[nm])
		cntAt = func(m int, t int32) *int32 {
			k, _ := slices.BinarySearch(l.subs[m], t)
			return &cnt[coff[m]+int32(k)]
		}
	}

	// 1. Keep previous owners.
	for p, o := range e.prev {
		if o >= 0 {
			e.owner[p] = o
			e.load[o]++
		}
	}
	for p, o := range e.owner {
		if o >= 0 {
			*cntAt(int(o), l.topicOf(int32(p)))++
		}
	}

	// 2. Water-fill, most constrained topics first. Each topic's free
	// partitions are dealt in chunks of about one per subscriber, and the
	// chunks of all topics are interleaved round by round, so every
	// member's load grows at a similar pace; filling one topic completely
	// before the next leaves members of late topics far behind and the
	// repair below with a great deal to do.
	order := make([]int32, nt)
	for t := range order {
		order[t] = int32(t)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		return int(sstart[a+1]-sstart[a]) - int(sstart[b+1]-sstart[b])
	})
	fstart := make([]int32, nt+1)
	free := make([]int32, 0, l.nparts)
	for t := range nt {
		for p := l.base[t]; p < l.base[t+1]; p++ {
			if e.owner[p] == noOwner {
				free = append(free, p)
			}
		}
		fstart[t+1] = int32(len(free))
	}
	fend := append([]int32(nil), fstart[1:]...)
	const maxRounds = 8
	chunk := make([]int32, nt)
	for t := range nt {
		n, s := fend[t]-fstart[t], sstart[t+1]-sstart[t]
		chunk[t] = max(s, (n+maxRounds-1)/maxRounds, 1)
	}
	var cand []int32
	for more := true; more; {
		more = false
		for _, t := range order {
			lo, hi := fstart[t], fend[t]
			if lo == hi {
				continue
			}
			end := min(hi, lo+chunk[t])
			e.waterFill(free[lo:end], subsOf(t), &cand, cntAt, t)
			fstart[t] = end
			more = more || end < hi
		}
	}

	// 3. Repair by chains, searched forward from the most-loaded member u:
	// u hands a partition to a subscriber of that topic, who hands one on,
	// until a member with load ≤ load(u)−2 is reached. Near the end of the
	// repair heavy members are rare and light ones common, so searching
	// from the heavy side finds a chain after a short walk.
	dead := make([]bool, nm)
	seenM := make([]int32, nm) // BFS epoch per member
	seenT := make([]int32, nt)
	via := make([]int32, nm)  // topic through which a member was reached
	from := make([]int32, nt) // member that gives the topic's partition
	queue := make([]int32, 0, nm)
	epoch := int32(0)
	h := &loadHeap{load: e.load, max: true}
	for m := range nm {
		h.push(int32(m))
	}
	for h.len() > 0 {
		u := h.pop()
		if u < 0 || dead[u] {
			continue
		}
		lu := e.load[u]
		epoch++
		queue = append(queue[:0], u)
		seenM[u] = epoch
		dst := int32(-1)
	search:
		for qi := 0; qi < len(queue); qi++ {
			x := queue[qi]
			for _, t := range l.subs[x] {
				if seenT[t] == epoch || *cntAt(int(x), t) == 0 {
					continue
				}
				seenT[t] = epoch
				from[t] = x
				for _, v := range subsOf(t) {
					if seenM[v] == epoch || dead[v] {
						continue
					}
					seenM[v] = epoch
					via[v] = t
					if e.load[v] <= lu-2 {
						dst = v
						break search
					}
					queue = append(queue, v)
				}
			}
		}
		if dst < 0 {
			// Nobody u can reach is two below it, and all of them
			// are at least load(u)−1 ≥ their own load−1: none can
			// improve, and no later chain can cross them.
			for _, x := range queue {
				dead[x] = true
			}
			continue
		}
		for cur := dst; cur != u; {
			t := via[cur]
			giver := from[t]
			e.movePartition(t, giver, cur)
			*cntAt(int(giver), t)--
			*cntAt(int(cur), t)++
			cur = giver
		}
		e.load[u]--
		e.load[dst]++
		h.push(u)
		h.push(dst)
	}
}

// waterFill gives the partitions in free to the least-loaded members of
// subs: the lowest are raised to a common level while partitions last,
// then the remainder goes one each in (load, index) order.
func (e *engine) waterFill(free, subs []int32, cand *[]int32, cntAt func(int, int32) *int32, t int32) {
	c := append((*cand)[:0], subs...)
	*cand = c
	slices.SortFunc(c, func(a, b int32) int {
		if d := e.load[a] - e.load[b]; d != 0 {
			return int(d)
		}
		return int(a - b)
	})
	rem := int32(len(free))
	j, level := 1, e.load[c[0]]
	for j < len(c) {
		need := (e.load[c[j]] - level) * int32(j)
		if need > rem {
			break
		}
		rem -= need
		level = e.load[c[j]]
		j++
	}
	add, extra := rem/int32(j), rem%int32(j)
	fi := 0
	for k := 0; k < j; k++ {
		m := c[k]
		target := level + add
		if int32(k) < extra {
			target++
		}
		cnt := cntAt(int(m), t)
		for e.load[m] < target {
			e.owner[free[fi]] = m
			fi++
			e.load[m]++
			*cnt++
		}
	}
}

// movePartition moves one partition of topic t from src to dst, choosing the
// one that costs least stickiness: preferably one dst owned before, else one
// src did not own before, else any.
func (e *engine) movePartition(t int32, src, dst int32) {
	best, bestScore := int32(-1), -1
	for p := e.l.base[t]; p < e.l.base[t+1]; p++ {
		if e.owner[p] != src {
			continue
		}
		score := 0
		switch e.prev[p] {
		case dst:
			score = 2
		case src:
			score = 0
		default:
			score = 1
		}
		if score > bestScore {
			best, bestScore = p, score
			if score == 2 {
				break
			}
		}
	}
	e.owner[best] = dst
}

// withholdTransfers implements the cooperative rule: a partition stays out
// of every assignment this round if it would go to a member while another
// member still claims it — unless the recipient is the partition's
// previous owner by strictly highest generation, in which case the other
// claims are stale and their holders drop them on receipt.
func (e *engine) withholdTransfers() {
	for p, o := range e.owner {
		if o < 0 {
			continue
		}
		if c := e.claimer[p]; c != noOwner && c != o && e.prev[p] != o {
			e.owner[p] = noOwner
		}
	}
}

// loadHeap is a min- (or max-) heap of members by (load, index) with lazy deletion:
// a member is pushed again whenever its load changes and stale entries are
// skipped on pop.
type loadHeap struct {
	load []int32
	ms   []int32
	at   []int32 // load at push time
	max  bool    // a max-heap by load (ties still by lower index)
}

func (h *loadHeap) len() int { return len(h.ms) }

func (h *loadHeap) less(i, j int) bool {
	if h.at[i] != h.at[j] {
		return (h.at[i] < h.at[j]) != h.max
	}
	return h.ms[i] < h.ms[j]
}

func (h *loadHeap) swap(i, j int) {
	h.ms[i], h.ms[j] = h.ms[j], h.ms[i]
	h.at[i], h.at[j] = h.at[j], h.at[i]
}

func (h *loadHeap) push(m int32) {
	h.ms = append(h.ms, m)
	h.at = append(h.at, h.load[m])
	for i := len(h.ms) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h.swap(i, parent)
		i = parent
	}
}

// pop returns the member with the smallest current load, skipping entries
// whose recorded load is out of date; -1 when empty.
func (h *loadHeap) pop() int32 {
	for len(h.ms) > 0 {
		m, at := h.ms[0], h.at[0]
		last := len(h.ms) - 1
		h.swap(0, last)
		h.ms, h.at = h.ms[:last], h.at[:last]
		for i := 0; ; {
			c := 2*i + 1
			if c >= last {
				break
			}
			if c+1 < last && h.less(c+1, c) {
				c++
			}
			if !h.less(c, i) {
				break
			}
			h.swap(i, c)
			i = c
		}
		if at == h.load[m] {
			return m
		}
	}
	return -1
}
