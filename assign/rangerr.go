package assign

// Range returns Kafka's RangeAssignor ("range"): for each topic, the sorted
// subscribers get contiguous ranges, the first (partitions % subscribers) of
// them one partition more. Members are ordered as Kafka orders them: static
// members by instance id first, then dynamic members by member id.
//
// Kafka's rack-aware variant needs partition replica racks, which the
// assignor input does not carry; without them Kafka's result is the plain
// range result, which is what this returns.
func Range() Assignor { return rangeAssignor{} }

type rangeAssignor struct{}

func (rangeAssignor) Name() string { return "range" }

func (rangeAssignor) Assign(members []Member, topics map[string]int32) Assignment {
	l := newLayout(members, topics)
	owner := make([]int32, l.nparts)
	for i := range owner {
		owner[i] = -1
	}
	nt := len(l.names)
	if l.homog {
		// Every member subscribes to every topic: ranges per topic
		// depend only on the partition count, no subscriber lists.
		nm := int32(len(l.members))
		for t := range nt {
			rangeFill(owner[l.base[t]:l.base[t+1]], nm, nil)
		}
		return l.build(owner)
	}
	subscribers := l.subscribersByTopic()
	for t := range nt {
		subs := subscribers.of(int32(t))
		rangeFill(owner[l.base[t]:l.base[t+1]], int32(len(subs)), subs)
	}
	return l.build(owner)
}

// rangeFill gives consumer i (subs[i], or i when subs is nil) the i-th
// contiguous range of parts.
func rangeFill(parts []int32, nc int32, subs []int32) {
	if nc == 0 {
		return
	}
	n := int32(len(parts))
	per, extra := n/nc, n%nc
	p := int32(0)
	for i := range nc {
		c := per
		if i < extra {
			c++
		}
		m := i
		if subs != nil {
			m = subs[i]
		}
		for end := p + c; p < end; p++ {
			parts[p] = m
		}
	}
}

// RoundRobin returns Kafka's RoundRobinAssignor ("roundrobin"): all
// subscribed partitions sorted by topic then partition are dealt to the
// sorted members in a circle, skipping members not subscribed to the
// partition's topic; the circle resumes where the last deal stopped.
func RoundRobin() Assignor { return roundRobinAssignor{} }

type roundRobinAssignor struct{}

func (roundRobinAssignor) Name() string { return "roundrobin" }

func (roundRobinAssignor) Assign(members []Member, topics map[string]int32) Assignment {
	l := newLayout(members, topics)
	owner := make([]int32, l.nparts)
	nm := int32(len(l.members))
	if nm == 0 {
		return l.build(owner[:0])
	}
	if l.homog {
		for p := range owner {
			owner[p] = int32(p) % nm
		}
		return l.build(owner)
	}
	// Subscription bitmap: member-major, one bit per topic, so the skip
	// test in the circle is a load and a mask.
	nt := len(l.names)
	words := (nt + 63) / 64
	bits := make([]uint64, int(nm)*words)
	for i, s := range l.subs {
		for _, t := range s {
			bits[i*words+int(t)/64] |= 1 << (uint(t) % 64)
		}
	}
	m := int32(0)
	for t := range nt {
		// A topic every subscriber skips is impossible here: the
		// layout only keeps subscribed topics.
		w, mask := t/64, uint64(1)<<(uint(t)%64)
		for p := l.base[t]; p < l.base[t+1]; p++ {
			for bits[int(m)*words+w]&mask == 0 {
				m++
				if m == nm {
					m = 0
				}
			}
			owner[p] = m
			m++
			if m == nm {
				m = 0
			}
		}
	}
	return l.build(owner)
}
