package assign

import (
	"cmp"
	"math"
	"slices"
	"sync"
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
	e := newEngine(l, s.cooperative)
	claimFn := stickyClaims
	if s.cooperative {
		claimFn = cooperativeClaims
	}
	e.claim(claimFn)
	e.solve()
	if s.cooperative {
		e.withholdTransfers()
	}
	a := l.build(e.owner)
	e.release()
	return a
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
	// index, or manyOwner. Cooperative withholding consults it; nil for
	// the other assignors.
	claimer []int32
	load    []int32
	// claimed is set when some partition has a previous owner.
	claimed bool
	// sparse, when set, replaces owner and prev: the solver then works
	// from the members' previous targets and records only what moves
	// (see sparseSolve). Only solveGeneral runs in this mode, and the
	// caller fills load and cnt with what the members keep.
	sparse *sparseSolve
	cnt    *topicCounts
	// buf backs owner, prev and claimer; release returns it to engineBufs.
	buf []int32
}

// engineBufs keeps the per-partition arrays of finished solves: a
// coordinator runs the same assignor over the same group again and again,
// and these arrays are most of what one solve allocates.
var engineBufs sync.Pool // of *[]int32

// release hands the engine's arrays back for reuse; the engine must not be
// used afterwards. The built Assignment does not alias them.
func (e *engine) release() {
	b := e.buf[:0]
	e.buf, e.owner, e.prev, e.claimer = nil, nil, nil, nil
	engineBufs.Put(&b)
}

// newEngine allocates the solver; withClaimer keeps every raw claim, which
// only cooperative withholding needs.
func newEngine(l *layout, withClaimer bool) *engine {
	e := &engine{l: l, nm: len(l.members)}
	n := int(l.nparts)
	k := 2
	if withClaimer {
		k = 3
	}
	var buf []int32
	if p, ok := engineBufs.Get().(*[]int32); ok && cap(*p) >= k*n {
		buf = (*p)[:k*n]
	} else {
		buf = make([]int32, k*n)
	}
	e.buf = buf
	e.owner, e.prev = buf[:n:n], buf[n:2*n:2*n]
	if withClaimer {
		e.claimer = buf[2*n:]
	}
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
	var gen []int32
	voided := false
	for mi, m := range l.members {
		owned, g := claims(m)
		if len(owned) == 0 {
			continue
		}
		if gen == nil {
			gen = make([]int32, l.nparts)
			for i := range gen {
				gen[i] = math.MinInt32
			}
		}
		me := int32(mi)
		// Walk the claims topic by topic: one name lookup and one
		// subscription check per topic rather than per partition.
		guess := int32(0)
		for _, tp := range owned {
			t, ok := l.topicIndex(tp.Topic, guess)
			if !ok {
				continue
			}
			guess = t + 1
			lo, n := l.base[t], l.count(t)
			sub := e.subscribed(mi, t)
			if !sub && e.claimer == nil {
				continue
			}
			for _, q := range tp.Partitions {
				if q < 0 || q >= n {
					continue
				}
				p := lo + q
				if e.claimer != nil {
					switch c := e.claimer[p]; c {
					case noOwner:
						e.claimer[p] = me
					case me:
						continue // the member listed the partition twice
					default:
						e.claimer[p] = manyOwner
					}
				}
				if !sub || e.prev[p] == me {
					continue // unsubscribed, or listed twice
				}
				switch {
				case g > gen[p]:
					gen[p], e.prev[p] = g, me
					e.claimed = true
				case g == gen[p]:
					e.prev[p] = manyOwner
					voided = true
				}
			}
		}
	}
	if !voided {
		return
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
	e.keepQuota(minQ, &extra)
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

// keepQuota lets every member keep up to minQ of its previous partitions,
// and then, while extra slots remain, one more for members that had more.
// It consumes the extra slots it uses.
func (e *engine) keepQuota(minQ int32, extra *int32) {
	if !e.claimed {
		return
	}
	nm := int32(e.nm)
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
	if *extra > 0 {
		hasExtra := make([]bool, nm)
		for p, o := range e.prev {
			if *extra == 0 {
				break
			}
			if o >= 0 && e.owner[p] == noOwner && !hasExtra[o] {
				e.owner[p] = o
				e.load[o]++
				hasExtra[o] = true
				*extra--
			}
		}
	}
}

// solveGeneral handles differing subscriptions.
//
//  1. Keep every valid previous owner.
//  2. Place the partitions nobody keeps by subscription class (see
//     placeFree). The classes' shares are balanced in bulk, so the
//     member-level repair below usually has little or nothing left to do.
//     When subscriptions are mostly distinct, classes do not help and the
//     interleaved greedy fill is used instead (see fillGreedy).
//  3. Repair by chains until no chain of eligible members can bring a
//     member two or more below another (see repair).
func (e *engine) solveGeneral() {
	l := e.l
	// 1. Keep previous owners.
	var fstart, free []int32
	cnt := e.cnt
	if e.sparse != nil {
		fstart, free = e.sparse.freeByTopic(l)
	} else {
		cnt = newTopicCounts(l)
		for p, o := range e.prev {
			if o >= 0 {
				e.owner[p] = o
				e.load[o]++
			}
		}
		t := int32(0)
		for p, o := range e.owner {
			for int32(p) >= l.base[t+1] {
				t++
			}
			if o >= 0 {
				*cnt.at(o, t)++
			}
		}
		fstart, free = e.freeByTopic()
	}
	// The per-topic subscriber lists cost a pass over every subscription:
	// they are built only when the fill or the repair needs them.
	var subs topicSubscribers
	if !e.placeFree(cnt, fstart, free) {
		subs = l.subscribersByTopic()
		e.fillGreedy(subs, cnt, fstart, free)
	}
	// Every chain of the repair ends two below where it starts: when no
	// member is two below another there is none, and its searches would
	// only prove it, walking the whole group, before moving nothing.
	if slices.Max(e.load)-slices.Min(e.load) < 2 {
		return
	}
	if subs.list == nil {
		subs = l.subscribersByTopic()
	}
	e.repair(subs, cnt, len(free) == 0)
}

// freeByTopic lists the partitions nobody keeps, ascending: those of topic
// t are free[fstart[t]:fstart[t+1]].
func (e *engine) freeByTopic() (fstart, free []int32) {
	l := e.l
	nt := len(l.names)
	fstart = make([]int32, nt+1)
	free = make([]int32, 0, l.nparts)
	for t := range nt {
		for p := l.base[t]; p < l.base[t+1]; p++ {
			if e.owner[p] == noOwner {
				free = append(free, p)
			}
		}
		fstart[t+1] = int32(len(free))
	}
	return fstart, free
}

// give hands free partition p to member m.
func (e *engine) give(p, m int32) {
	if e.sparse != nil {
		e.sparse.add(m, p, noOwner)
		return
	}
	e.owner[p] = m
}

// topicCounts holds, per member and subscribed topic, how many of the
// topic's partitions the member has. The repair reads it in its inner
// loops: a dense member × topic matrix when that is small enough, else one
// slot per subscribed topic found by binary search.
type topicCounts struct {
	nt    int
	dense []int32
	subs  [][]int32
	off   []int32 // off[m]+k is the slot of m's k-th subscribed topic
	slots []int32
}

func newTopicCounts(l *layout) *topicCounts {
	nm, nt := len(l.subs), len(l.names)
	c := &topicCounts{nt: nt}
	if nm*nt <= 1<<22 {
		c.dense = make([]int32, nm*nt)
		return c
	}
	c.subs, c.off = l.subs, make([]int32, nm+1)
	for m, s := range l.subs {
		c.off[m+1] = c.off[m] + int32(len(s))
	}
	c.slots = make([]int32, c.off[nm])
	return c
}

// at returns the count of member m in topic t, which m subscribes to.
func (c *topicCounts) at(m, t int32) *int32 {
	if c.dense != nil {
		return &c.dense[int(m)*c.nt+int(t)]
	}
	return c.slot(m, t)
}

func (c *topicCounts) slot(m, t int32) *int32 {
	k, _ := slices.BinarySearch(c.subs[m], t)
	return &c.slots[c.off[m]+int32(k)]
}

// placeFree deals the partitions nobody keeps.
//
// Members with identical subscriptions are interchangeable, so the problem
// is solved first for subscription classes: each topic's free partitions
// are split among its subscribing classes in proportion to their sizes,
// which is already exact for symmetric patterns (sliding windows, buckets).
// Where it is not, whole batches are shifted along chains of classes — class
// u hands part of its share of a topic to another subscriber class, which
// hands part of another topic on, and so on — from the class with the
// highest average load to one far enough below it, until no chain helps.
// Moving batches keeps the number of chains near the number of classes
// instead of the number of partitions; a greedy per-topic fill instead
// leaves members of late topics behind and the member-level repair with
// tens of thousands of single-partition chains on large groups.
//
// Each class's share is then dealt round-robin to its members, lowest-loaded
// first, which balances the members of a class to within one.
//
// It reports false, placing nothing, when most classes would be single
// members; the caller then uses fillGreedy. fstart and free are
// freeByTopic's lists.
func (e *engine) placeFree(cnt *topicCounts, fstart, free []int32) bool {
	l := e.l
	nm, nt := e.nm, len(l.names)
	if len(free) == 0 {
		return true
	}

	// Classes, numbered in subscription order. Only the distinct interned
	// subscriptions are sorted (by content, then sid, so the numbering is
	// deterministic), equal neighbours merged, and the members then
	// bucketed by class in index order.
	first := make([]int32, l.nsid) // a member of each sid
	for m := nm - 1; m >= 0; m-- {
		first[l.sid[m]] = int32(m)
	}
	sids := make([]int32, l.nsid)
	for i := range sids {
		sids[i] = int32(i)
	}
	slices.SortFunc(sids, func(a, b int32) int {
		if c := slices.Compare(l.subs[first[a]], l.subs[first[b]]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	clsOf := make([]int32, l.nsid)
	nc0 := int32(0)
	for i, id := range sids {
		if i > 0 && !slices.Equal(l.subs[first[id]], l.subs[first[sids[i-1]]]) {
			nc0++
		}
		clsOf[id] = nc0
	}
	cstart := make([]int32, nc0+2)
	for m := range nm {
		cstart[clsOf[l.sid[m]]+1]++
	}
	for c := range nc0 + 1 {
		cstart[c+1] += cstart[c]
	}
	ord := make([]int32, nm)
	next := append([]int32(nil), cstart[:nc0+1]...)
	for m := range nm {
		c := clsOf[l.sid[m]]
		ord[next[c]] = int32(m)
		next[c]++
	}
	nc := int(nc0) + 1
	if 2*nc > nm {
		// Mostly distinct subscriptions: classes of one member gain
		// nothing, and from a proportional start on skewed topics the
		// chains are many and short; the greedy fill does better.
		return false
	}
	size := make([]int64, nc)
	tot := make([]int64, nc) // partitions held or dealt to the class
	csubs := make([][]int32, nc)
	for c := range nc {
		ms := ord[cstart[c]:cstart[c+1]]
		size[c] = int64(len(ms))
		csubs[c] = l.subs[ms[0]]
		for _, m := range ms {
			tot[c] += int64(e.load[m])
		}
	}

	// Subscriber classes per topic. share[j] is how many free partitions
	// of topic t the class ctList[j] gets, for j in ctStart[t]:ctStart[t+1];
	// slot[xoff[c]+k] is that j for class c's k-th topic.
	ctStart := make([]int32, nt+1)
	xoff := make([]int32, nc+1)
	for c, s := range csubs {
		xoff[c+1] = xoff[c] + int32(len(s))
		for _, t := range s {
			ctStart[t+1]++
		}
	}
	for t := range nt {
		ctStart[t+1] += ctStart[t]
	}
	ctList := make([]int32, ctStart[nt])
	share := make([]int64, ctStart[nt])
	slot := make([]int32, xoff[nc])
	next = append(next[:0], ctStart[:nt]...)
	for c, s := range csubs {
		for k, t := range s {
			ctList[next[t]] = int32(c)
			slot[xoff[c]+int32(k)] = next[t]
			next[t]++
		}
	}

	// Proportional split, topics with the fewest subscribers first; the
	// remainder goes one each to the classes with the lowest average.
	subsN := make([]int64, nt)
	for t := range nt {
		for _, c := range ctList[ctStart[t]:ctStart[t+1]] {
			subsN[t] += size[c]
		}
	}
	order := make([]int32, nt)
	for t := range order {
		order[t] = int32(t)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(subsN[a], subsN[b]) })
	var byAvg []int32
	for _, t := range order {
		f := int64(fstart[t+1] - fstart[t])
		if f == 0 {
			continue
		}
		lo, hi := ctStart[t], ctStart[t+1]
		rem := f
		for j := lo; j < hi; j++ {
			c := ctList[j]
			q := f * size[c] / subsN[t]
			share[j] = q
			tot[c] += q
			rem -= q
		}
		if rem == 0 {
			continue
		}
		byAvg = byAvg[:0]
		for j := lo; j < hi; j++ {
			byAvg = append(byAvg, j)
		}
		slices.SortFunc(byAvg, func(a, b int32) int {
			ca, cb := ctList[a], ctList[b]
			if d := cmp.Compare(tot[ca]*size[cb], tot[cb]*size[ca]); d != 0 {
				return d
			}
			return cmp.Compare(ca, cb)
		})
		for _, j := range byAvg[:rem] {
			share[j]++
			tot[ctList[j]]++
		}
	}

	e.balanceClasses(csubs, ctStart, ctList, share, slot, xoff, size, tot)

	// Deal each class's share to its members: water-fill targets by
	// current load, then hand out topic by topic, round-robin.
	cursor := fstart[:nt]
	need := make([]int32, nm)
	var byLoad, active []int32
	for c := range nc {
		ms := ord[cstart[c]:cstart[c+1]]
		x := int64(0)
		for k := range csubs[c] {
			x += share[slot[xoff[c]+int32(k)]]
		}
		if x == 0 {
			continue
		}
		byLoad = append(byLoad[:0], ms...)
		slices.SortFunc(byLoad, func(a, b int32) int {
			if d := cmp.Compare(e.load[a], e.load[b]); d != 0 {
				return d
			}
			return cmp.Compare(a, b)
		})
		rem := x
		j, level := 1, int64(e.load[byLoad[0]])
		for j < len(byLoad) {
			nd := (int64(e.load[byLoad[j]]) - level) * int64(j)
			if nd > rem {
				break
			}
			rem -= nd
			level = int64(e.load[byLoad[j]])
			j++
		}
		add, extra := rem/int64(j), rem%int64(j)
		for k, m := range byLoad[:j] {
			target := level + add
			if int64(k) < extra {
				target++
			}
			need[m] = int32(target) - e.load[m]
		}
		active = active[:0]
		for _, m := range ms {
			if need[m] > 0 {
				active = append(active, m)
			}
		}
		i := 0
		for k, t := range csubs[c] {
			for n := share[slot[xoff[c]+int32(k)]]; n > 0; n-- {
				var m int32
				for {
					if i == len(active) {
						active = slices.DeleteFunc(active, func(m int32) bool { return need[m] == 0 })
						i = 0
					}
					m = active[i]
					i++
					if need[m] > 0 {
						break
					}
				}
				p := free[cursor[t]]
				cursor[t]++
				e.give(p, m)
				e.load[m]++
				need[m]--
				*cnt.at(m, t)++
			}
		}
	}
	return true
}

// balanceClasses shifts batches of free partitions between subscription
// classes along chains, from the class with the highest average load u to a
// reachable class v where moving one partition would lower the members'
// sum of squared loads: 2·(T_u/k_u − T_v/k_v) > 1/k_u + 1/k_v. The batch is
// the amount that best evens the two averages, capped by the smallest share
// along the chain. Every step strictly lowers that sum, so it ends; a search
// that finds nothing retires every class it reached, and a work budget
// linear in the class graph bounds the rest, since the member-level repair
// guarantees the result either way — this only has to make that repair
// cheap.
func (e *engine) balanceClasses(csubs [][]int32, ctStart, ctList []int32, share []int64, slot, xoff []int32, size, tot []int64) {
	nc, nt := len(csubs), len(ctStart)-1
	dead := make([]bool, nc)
	seenC := make([]int32, nc)
	seenT := make([]int32, nt)
	viaJ := make([]int32, nc) // slot of the class in the topic it was reached by
	viaT := make([]int32, nc) // that topic
	from := make([]int32, nt) // slot of the class giving the topic
	queue := make([]int32, 0, nc)
	improves := func(u, v int32) bool {
		return 2*(tot[u]*size[v]-tot[v]*size[u]) > size[u]+size[v]
	}
	h := newClassHeap(tot, size)
	for c := range nc {
		h.push(int32(c))
	}
	// Work budget in edges scanned: a few dozen full sweeps of the class
	// graph, so this stays linear in the input whatever its shape.
	work := 32*(len(slot)+len(ctList)) + 1<<16
	epoch := int32(0)
	for work > 0 {
		u := h.pop()
		for u >= 0 && dead[u] {
			u = h.pop()
		}
		if u < 0 {
			return
		}
		epoch++
		queue = append(queue[:0], u)
		seenC[u] = epoch
		dst := int32(-1)
	search:
		for qi := 0; qi < len(queue); qi++ {
			x := queue[qi]
			work -= len(csubs[x])
			for k, t := range csubs[x] {
				s := slot[xoff[x]+int32(k)]
				if seenT[t] == epoch || share[s] == 0 {
					continue
				}
				seenT[t] = epoch
				from[t] = s
				work -= int(ctStart[t+1]-ctStart[t]) + 1
				for j := ctStart[t]; j < ctStart[t+1]; j++ {
					v := ctList[j]
					if seenC[v] == epoch || dead[v] {
						continue
					}
					seenC[v] = epoch
					viaJ[v], viaT[v] = j, t
					if improves(u, v) {
						dst = v
						break search
					}
					queue = append(queue, v)
				}
			}
		}
		if dst < 0 {
			for _, x := range queue {
				dead[x] = true
			}
			continue
		}
		num, den := tot[u]*size[dst]-tot[dst]*size[u], size[u]+size[dst]
		d := max((2*num+den)/(2*den), 1)
		for cur := dst; cur != u; {
			g := from[viaT[cur]]
			d = min(d, share[g])
			cur = ctList[g]
		}
		for cur := dst; cur != u; {
			g := from[viaT[cur]]
			share[g] -= d
			share[viaJ[cur]] += d
			cur = ctList[g]
		}
		tot[u] -= d
		tot[dst] += d
		h.push(u)
		h.push(dst)
	}
}

// repair moves partitions along chains until no chain u → … → v exists
// in which each member hands the next one a partition of a topic the next
// one subscribes to and load(v) ≤ load(u)−2. When none exists the loads
// are optimal: no maximum can go down without some minimum going down.
//
// When every partition kept its owner (a member joined, subscriptions
// changed) and while the lightest member is further below the mean than the
// heaviest is above it, the lightest takes directly from the heaviest
// member that holds a partition it subscribes to: every hop of a chain is a
// moved partition, so direct transfers keep moves low. Otherwise, and once
// no direct giver is left, chains are searched forward from the heaviest:
// near the end heavy members are rare and light ones common, so the walk is
// short, and a failed search proves
// that nobody the heaviest member can reach is two below it; since it is
// the maximum, none of them can improve either and no later chain can pass
// through them. They are marked dead and never searched or crossed again,
// which bounds the work.
func (e *engine) repair(subs topicSubscribers, cnt *topicCounts, direct bool) {
	l := e.l
	nm, nt := e.nm, len(l.names)
	dead := make([]bool, nm)
	seenM := make([]int32, nm) // BFS epoch per member
	seenT := make([]int32, nt)
	via := make([]int32, nm)  // topic through which a member was reached
	peer := make([]int32, nt) // member that gives (forward) or takes (backward) the topic
	queue := make([]int32, 0, nm)
	epoch := int32(0)
	hi := newLoadHeap(e.load, true)
	lo := newLoadHeap(e.load, false)
	hi.pushAll(nm)
	if direct {
		lo.pushAll(nm)
	}
	n, nm64 := int64(l.nparts), int64(nm)

	// Direct transfers to the lightest member.
	for direct {
		u, v := hi.top(), lo.top()
		lu, lv := e.load[u], e.load[v]
		if lu-lv < 2 {
			return // nobody is two below anybody: balanced
		}
		if n-int64(lv)*nm64 <= int64(lu)*nm64-n {
			break
		}
		// The heaviest direct giver, stopping early at one at the
		// maximum: taking merely the first would drain one member below
		// the others, and refilling it costs a move of its own.
		epoch++
		src, via := int32(-1), int32(-1)
	scan:
		for _, t := range l.subs[v] {
			for _, x := range subs.of(t) {
				if seenM[x] == epoch || *cnt.at(x, t) == 0 {
					continue
				}
				seenM[x] = epoch
				if lx := e.load[x]; lx >= lv+2 && (src < 0 || lx > e.load[src]) {
					src, via = x, t
					if lx == lu {
						break scan
					}
				}
			}
		}
		if src < 0 {
			break // longer chains are left to the forward search
		}
		e.movePartition(via, src, v)
		*cnt.at(src, via)--
		*cnt.at(v, via)++
		e.load[src]--
		e.load[v]++
		hi.push(src)
		lo.push(src)
		hi.push(v)
		lo.push(v)
	}

	// Forward from the heaviest member, until everyone is dead.
	ndead := 0
	for hi.len() > 0 && ndead < nm {
		u := hi.pop()
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
				if seenT[t] == epoch || *cnt.at(x, t) == 0 {
					continue
				}
				seenT[t] = epoch
				peer[t] = x
				for _, v := range subs.of(t) {
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
			ndead += len(queue)
			continue
		}
		for cur := dst; cur != u; {
			t := via[cur]
			giver := peer[t]
			e.movePartition(t, giver, cur)
			*cnt.at(giver, t)--
			*cnt.at(cur, t)++
			cur = giver
		}
		e.load[u]--
		e.load[dst]++
		hi.push(u)
		hi.push(dst)
	}
}

// fillGreedy water-fills each topic's free partitions onto its
// least-loaded subscribers, topics with the fewest subscribers first (they
// have the fewest choices). Each topic's free partitions are dealt in chunks
// of about one per subscriber, and the chunks of all topics are interleaved
// round by round, so every member's load grows at a similar pace; filling
// one topic completely before the next leaves members of late topics far
// behind and the repair with a great deal to do. It is the placement for
// groups whose subscriptions are mostly distinct, where placeFree's classes
// would be single members.
func (e *engine) fillGreedy(subs topicSubscribers, cnt *topicCounts, fstart, free []int32) {
	l := e.l
	nt := len(l.names)
	order := make([]int32, nt)
	for t := range order {
		order[t] = int32(t)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		return len(subs.of(a)) - len(subs.of(b))
	})
	fend := append([]int32(nil), fstart[1:]...)
	const maxRounds = 8
	chunk := make([]int32, nt)
	for t := range nt {
		n, s := fend[t]-fstart[t], int32(len(subs.of(int32(t))))
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
			e.waterFill(free[lo:end], subs.of(t), &cand, cnt, t)
			fstart[t] = end
			more = more || end < hi
		}
	}
}

// waterFill gives the partitions in free to the least-loaded members of
// subs: the lowest are raised to a common level while partitions last,
// then the remainder goes one each in (load, index) order.
func (e *engine) waterFill(free, subs []int32, cand *[]int32, cnt *topicCounts, t int32) {
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
		cnt := cnt.at(m, t)
		for e.load[m] < target {
			e.give(free[fi], m)
			fi++
			e.load[m]++
			*cnt++
		}
	}
}

// movePartition moves one partition of topic t from src to dst, choosing the
// one that costs least stickiness: preferably one dst owned before, else one
// src did not own before, else any; the lowest such.
func (e *engine) movePartition(t int32, src, dst int32) {
	if e.sparse != nil {
		e.sparse.move(e.l, t, src, dst)
		return
	}
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

// loadHeap is a min- (or max-) heap of members by (load, index) with lazy
// deletion: a member is pushed again whenever its load changes and stale
// entries are skipped on pop.
type loadHeap struct {
	load []int32
	h    lazyHeap[loadEntry]
}

type loadEntry struct{ m, at int32 } // member, its load at push time

func newLoadHeap(load []int32, max bool) *loadHeap {
	return &loadHeap{load: load, h: lazyHeap[loadEntry]{less: func(a, b loadEntry) bool {
		if a.at != b.at {
			return (a.at < b.at) != max // ties still by lower index
		}
		return a.m < b.m
	}}}
}

func (h *loadHeap) len() int { return h.h.len() }

func (h *loadHeap) push(m int32) { h.h.push(loadEntry{m, h.load[m]}) }

// pushAll pushes members 0..n-1 at once.
func (h *loadHeap) pushAll(n int) {
	es := make([]loadEntry, n)
	for m := range es {
		es[m] = loadEntry{int32(m), h.load[m]}
	}
	h.h.fill(es)
}

// top returns the member pop would return without removing it; -1 when
// empty.
func (h *loadHeap) top() int32 {
	m := h.pop()
	if m >= 0 {
		h.push(m)
	}
	return m
}

// pop returns the member with the smallest (largest, for a max-heap)
// current load, skipping entries whose recorded load is out of date; -1
// when empty.
func (h *loadHeap) pop() int32 {
	for {
		e, ok := h.h.pop()
		if !ok {
			return -1
		}
		if e.at == h.load[e.m] {
			return e.m
		}
	}
}

// classHeap is a max-heap of subscription classes by average load
// tot[c]/size[c] (ties by lower index), with lazy deletion like loadHeap.
type classHeap struct {
	tot []int64
	h   lazyHeap[classEntry]
}

type classEntry struct {
	c  int32
	at int64 // tot at push time
}

func newClassHeap(tot, size []int64) *classHeap {
	return &classHeap{tot: tot, h: lazyHeap[classEntry]{less: func(a, b classEntry) bool {
		if x, y := a.at*size[b.c], b.at*size[a.c]; x != y {
			return x > y
		}
		return a.c < b.c
	}}}
}

func (h *classHeap) push(c int32) { h.h.push(classEntry{c, h.tot[c]}) }

// pop returns the class with the highest current average, skipping stale
// entries; -1 when empty.
func (h *classHeap) pop() int32 {
	for {
		e, ok := h.h.pop()
		if !ok {
			return -1
		}
		if e.at == h.tot[e.c] {
			return e.c
		}
	}
}
