package assign

// Uniform returns the KIP-848 server-side uniform assignor ("uniform").
// Member.Owned is each member's current target assignment.
//
// Balance comes first: with identical subscriptions (the homogeneous case)
// member sizes differ by at most one; with differing subscriptions
// (heterogeneous) no chain of moves between eligible members could bring a
// member two or more below another. Subject to that, every member keeps as
// much of its current assignment as it can. It shares the sticky solver; the
// only difference from [Sticky] is that targets carry no generations.
func Uniform() Assignor { return uniformAssignor{} }

type uniformAssignor struct{}

func (uniformAssignor) Name() string { return "uniform" }

func (uniformAssignor) Assign(members []Member, topics map[string]int32) Assignment {
	l := newLayout(members, topics)
	e := newEngine(l, false)
	e.claim(exactClaims)
	e.solve()
	a := l.build(e.owner)
	e.release()
	return a
}

// ServerRange returns the KIP-848 server-side range assignor ("range"),
// following Kafka's group-coordinator RangeAssignor. Member.Owned is each
// member's current target assignment.
//
// Per topic, the subscribers (in Kafka's member order: instance id, then
// member id) share the partitions in ranges, the first partitions%members
// getting one more. Each member first keeps the lowest partitions it already
// had, up to its quota; the partitions left over are then handed out in
// ascending runs. Keeping the lowest partitions means that for co-partitioned
// topics (same subscribers, same partition counts) a member ends up with the
// same partition numbers in every topic, which is what joins need.
func ServerRange() Assignor { return serverRangeAssignor{} }

type serverRangeAssignor struct{}

func (serverRangeAssignor) Name() string { return "range" }

func (serverRangeAssignor) Assign(members []Member, topics map[string]int32) Assignment {
	return serverRange(newLayout(members, topics))
}

func serverRange(l *layout) Assignment {
	nm, nt := len(l.members), len(l.names)
	owner := make([]int32, l.nparts)
	prev := make([]int32, l.nparts)
	for i := range owner {
		owner[i], prev[i] = noOwner, noOwner
	}
	// Current target per partition; a partition listed by two members
	// (which a consistent coordinator never produces) goes to the first.
	var idx []int32
	for mi, m := range l.members {
		idx = l.ownedIndexes(idx[:0], m.Owned)
		for _, p := range idx {
			if prev[p] == noOwner {
				prev[p] = int32(mi)
			}
		}
	}
	subscribers := l.subscribersByTopic()
	have := make([]int32, nm)   // partitions of the topic a member had
	remain := make([]int32, nm) // quota still to fill
	pending := make([]int32, 0, nm)
	for t := range nt {
		subs := subscribers.of(int32(t))
		if len(subs) == 0 {
			continue
		}
		lo, hi := l.base[t], l.base[t+1]
		n := hi - lo
		minQ, extra := n/int32(len(subs)), n%int32(len(subs))
		for _, m := range subs {
			have[m] = 0
		}
		for p := lo; p < hi; p++ {
			if o := prev[p]; o >= 0 && l.isSub(o, int32(t)) {
				have[o]++
			}
		}
		// Keep the lowest min(have, minQ) partitions, plus one more for
		// members that had more while extra slots remain — in member
		// order, exactly as Kafka does.
		keep := remain // reuse: keep[m] = partitions m retains
		for _, m := range subs {
			k := min(have[m], minQ)
			if have[m] > minQ && extra > 0 {
				k++
				extra--
			}
			keep[m] = k
		}
		for p := lo; p < hi; p++ {
			if o := prev[p]; o >= 0 && l.isSub(o, int32(t)) && keep[o] > 0 {
				owner[p] = o
				keep[o]--
			}
		}
		// Members still below quota, in member order; a member that had
		// exactly minQ (or fewer) may also take one of the extras.
		pending = pending[:0]
		for _, m := range subs {
			r := minQ - have[m]
			if have[m] > minQ {
				continue // kept minQ or minQ+1 already
			}
			if extra > 0 {
				r++
				extra--
			}
			remain[m] = r
			if r > 0 {
				pending = append(pending, m)
			}
		}
		p := lo
		for _, m := range pending {
			for r := remain[m]; r > 0; r-- {
				for owner[p] != noOwner {
					p++
				}
				owner[p] = m
			}
		}
	}
	return l.build(owner)
}

// isSub reports whether member m subscribes to topic t.
func (l *layout) isSub(m int32, t int32) bool {
	if l.homog {
		return true
	}
	for _, x := range l.subs[m] {
		if x == t {
			return true
		}
		if x > t {
			return false
		}
	}
	return false
}
