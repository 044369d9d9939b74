package assign

import (
	"cmp"
	"slices"
	"sort"
)

// TopicPartitions is a set of partitions of one topic. Assignors return the
// partitions sorted ascending.
type TopicPartitions struct {
	Topic      string
	Partitions []int32
}

// Member is one group member as an assignor sees it.
//
// For the classic assignors the fields come from the member's
// ConsumerProtocolSubscription (see [Metadata.Member]). For the KIP-848
// assignors Owned is the member's current target assignment and Generation,
// UserData are ignored.
type Member struct {
	// ID is the member id; the key of the returned [Assignment].
	ID string
	// InstanceID is the static member id (KIP-345), empty when dynamic.
	// Range and round-robin order members by it first, as Kafka does, so
	// that a static member keeps its slot when its member id changes.
	InstanceID string
	// Topics is the subscription. Order and duplicates do not matter.
	Topics []string
	// Owned is what the member reports owning (subscription v1+), or its
	// current target assignment for the server-side assignors.
	Owned []TopicPartitions
	// Generation is the generation Owned belongs to (subscription v2+);
	// -1 when unknown. The sticky assignors use it to drop stale claims.
	Generation int32
	// Rack is the member's rack (subscription v3+); informational here.
	Rack string
	// UserData is the opaque assignor user data. The eager sticky
	// assignor reads its StickyMemberMetadata from here when Owned is
	// empty, as Java's StickyAssignor does.
	UserData []byte
}

// Assignment maps member id to that member's partitions, sorted by topic and
// then partition. Every input member has an entry, possibly empty.
type Assignment map[string][]TopicPartitions

// Assignor computes an assignment for a group.
//
// topics maps topic name to partition count; topics absent from it (or with
// a count ≤ 0) are treated as not existing and are never assigned.
// Implementations are pure and safe for concurrent use.
type Assignor interface {
	// Name is the protocol name used in JoinGroup ("range", "sticky", ...).
	Name() string
	// Assign returns the new assignment. Members with duplicate ids are
	// collapsed to the first occurrence after sorting.
	Assign(members []Member, topics map[string]int32) Assignment
}

// memberLess is Kafka's MemberInfo ordering: members with an instance id
// first, by instance id; then the rest by member id. The member id breaks
// ties so the order is total.
func memberLess(a, b *Member) int {
	ai, bi := a.InstanceID != "", b.InstanceID != ""
	switch {
	case ai && bi:
		if c := cmp.Compare(a.InstanceID, b.InstanceID); c != 0 {
			return c
		}
	case ai:
		return -1
	case bi:
		return 1
	}
	return cmp.Compare(a.ID, b.ID)
}

// layout is the dense form of one assignment problem. Topics that exist and
// that at least one member subscribes to are sorted by name and numbered;
// partition p of topic t becomes the global index base[t]+p, so sorting
// global indexes sorts by (topic, partition).
type layout struct {
	members []*Member // sorted with memberLess, duplicates dropped
	names   []string  // sorted topic names
	base    []int32   // len(names)+1; base[t] is the first global index of t
	subs    [][]int32 // per member: sorted, deduplicated topic indexes
	index   map[string]int32
	// sid numbers the interned subscription slices: members with equal
	// sid have equal subs. Equal subs may still have different sids
	// (the interning cache is small); nsid is the number of sids.
	sid     []int32
	nsid    int32
	homog   bool // every member has the same non-empty subscription
	nparts  int32
	scratch []int32
}

func (l *layout) topicOf(p int32) int32 {
	// base is sorted; the topic is the last base <= p.
	return int32(sort.Search(len(l.names), func(i int) bool { return l.base[i+1] > p }))
}

func (l *layout) count(t int32) int32 { return l.base[t+1] - l.base[t] }

// newLayout interns the problem. Topic names are looked up once per member
// subscription; everything after works on integers.
func newLayout(members []Member, topics map[string]int32) *layout {
	ms := make([]*Member, len(members))
	for i := range members {
		ms[i] = &members[i]
	}
	return layoutOf(ms, topics)
}

// layoutOf is newLayout over member pointers; it may reorder ms.
func layoutOf(ms []*Member, topics map[string]int32) *layout {
	l := &layout{}
	if !slices.IsSortedFunc(ms, memberLess) {
		slices.SortStableFunc(ms, memberLess)
	}
	// Drop duplicate member ids, keeping the first in sorted order. Without
	// instance ids the order is by member id, so duplicates are adjacent
	// and no map is needed.
	static := false
	for _, m := range ms {
		static = static || m.InstanceID != ""
	}
	if len(ms) > 1 && !static {
		out := ms[:1]
		for _, m := range ms[1:] {
			if m.ID != out[len(out)-1].ID {
				out = append(out, m)
			}
		}
		ms = out
	} else if len(ms) > 1 {
		seen := make(map[string]struct{}, len(ms))
		out := ms[:0]
		for _, m := range ms {
			if _, dup := seen[m.ID]; dup {
				continue
			}
			seen[m.ID] = struct{}{}
			out = append(out, m)
		}
		ms = out
	}
	l.members = ms

	// Collect subscribed, existing topics. A map keyed by name does the
	// de-duplication; the names are sorted afterwards so indexes do not
	// depend on map order.
	// Groups usually have a handful of distinct subscriptions: members
	// equal to one of the last few seen skip the name lookups here and
	// below, which otherwise dominate on large homogeneous groups.
	var recent subsCache
	l.index = make(map[string]int32)
	for _, m := range ms {
		if s, _ := recent.get(m.Topics); s != nil {
			continue
		}
		recent.put(m.Topics, []int32{}, 0)
		for _, t := range m.Topics {
			if _, ok := l.index[t]; ok {
				continue
			}
			if n := topics[t]; n > 0 {
				l.index[t] = 0
			}
		}
	}
	l.names = make([]string, 0, len(l.index))
	for t := range l.index {
		l.names = append(l.names, t)
	}
	slices.Sort(l.names)
	l.base = make([]int32, len(l.names)+1)
	for i, t := range l.names {
		l.index[t] = int32(i)
		l.base[i+1] = l.base[i] + topics[t]
	}
	l.nparts = l.base[len(l.names)]

	// Per-member subscriptions share one backing array.
	total := 0
	for _, m := range ms {
		total += len(m.Topics)
	}
	back := make([]int32, 0, total)
	l.subs = make([][]int32, len(ms))
	l.homog = len(ms) > 0
	recent = subsCache{}
	l.sid = make([]int32, len(ms))
	for i, m := range ms {
		if s, id := recent.get(m.Topics); s != nil {
			l.subs[i], l.sid[i] = s, id
			if i > 0 && !slices.Equal(s, l.subs[0]) {
				l.homog = false
			}
			continue
		}
		start := len(back)
		for _, t := range m.Topics {
			if ti, ok := l.index[t]; ok {
				back = append(back, ti)
			}
		}
		s := back[start:len(back):len(back)]
		if !slices.IsSorted(s) {
			slices.Sort(s)
		}
		s = slices.Compact(s)
		back = back[:start+len(s)]
		l.subs[i], l.sid[i] = s[:len(s):len(s)], l.nsid
		recent.put(m.Topics, l.subs[i], l.nsid)
		l.nsid++
		if i > 0 && !slices.Equal(l.subs[i], l.subs[0]) {
			l.homog = false
		}
	}
	if l.homog && len(l.subs[0]) == 0 {
		l.homog = false
	}
	return l
}

// subsCache remembers the last few distinct subscriptions (as given, and
// interned, with their sid); subs is never nil for a hit.
type subsCache struct {
	topics [8][]string
	subs   [8][]int32
	sid    [8]int32
	next   int
}

func (c *subsCache) get(topics []string) ([]int32, int32) {
	for i, t := range c.topics {
		if c.subs[i] == nil || len(t) != len(topics) {
			continue
		}
		// Callers that build members from one subscription list share
		// the slice itself; comparing pointers skips the strings.
		if len(t) == 0 || &t[0] == &topics[0] || slices.Equal(t, topics) {
			return c.subs[i], c.sid[i]
		}
	}
	return nil, 0
}

func (c *subsCache) put(topics []string, subs []int32, sid int32) {
	if subs == nil {
		subs = []int32{}
	}
	c.topics[c.next], c.subs[c.next], c.sid[c.next] = topics, subs, sid
	c.next = (c.next + 1) % len(c.topics)
}

// topicIndex is index[name], trying guess first: claims are usually
// sorted by topic like names, so the next topic is often guess, which saves
// hashing the name.
func (l *layout) topicIndex(name string, guess int32) (int32, bool) {
	if guess >= 0 && int(guess) < len(l.names) && l.names[guess] == name {
		return guess, true
	}
	t, ok := l.index[name]
	return t, ok
}

// ownedIndexes appends the global indexes of m's owned partitions that still
// exist, skipping unknown topics and out-of-range partitions.
func (l *layout) ownedIndexes(dst []int32, owned []TopicPartitions) []int32 {
	for _, tp := range owned {
		t, ok := l.index[tp.Topic]
		if !ok {
			continue
		}
		n := l.count(t)
		for _, p := range tp.Partitions {
			if p >= 0 && p < n {
				dst = append(dst, l.base[t]+p)
			}
		}
	}
	return dst
}

// build turns owner[p] (member index or -1) into an Assignment. It is a
// counting sort: one pass counts, one pass places, so each member's list
// comes out sorted by global index, i.e. by topic then partition. All
// partition lists share one backing array and all TopicPartitions share
// another, which keeps allocations constant in the number of partitions.
func (l *layout) build(owner []int32) Assignment {
	nm := len(l.members)
	start := make([]int32, nm+1)
	for _, o := range owner {
		if o >= 0 {
			start[o+1]++
		}
	}
	for i := 0; i < nm; i++ {
		start[i+1] += start[i]
	}
	parts := make([]int32, start[nm])
	fill := make([]int32, nm)
	copy(fill, start[:nm])
	for p, o := range owner {
		if o >= 0 {
			parts[fill[o]] = int32(p)
			fill[o]++
		}
	}
	return l.buildSorted(parts, start)
}

// subscribersByTopic returns, per topic index, the indexes of its
// subscribing members in member order. A counting pass lets every list
// share one array.
func (l *layout) subscribersByTopic() topicSubscribers {
	nt := len(l.names)
	start := make([]int32, nt+1)
	for _, s := range l.subs {
		for _, t := range s {
			start[t+1]++
		}
	}
	for t := range nt {
		start[t+1] += start[t]
	}
	list := make([]int32, start[nt])
	fill := append([]int32(nil), start[:nt]...)
	for i, s := range l.subs {
		for _, t := range s {
			list[fill[t]] = int32(i)
			fill[t]++
		}
	}
	return topicSubscribers{start, list}
}

// topicSubscribers holds the subscribers of topic t at
// list[start[t]:start[t+1]].
type topicSubscribers struct{ start, list []int32 }

func (s topicSubscribers) of(t int32) []int32 { return s.list[s.start[t]:s.start[t+1]] }

// buildSorted builds the Assignment from member-major sorted global indexes:
// member i owns parts[start[i]:start[i+1]]. parts is rewritten in place to
// hold partition numbers.
func (l *layout) buildSorted(parts []int32, start []int32) Assignment {
	nm := len(l.members)
	// Count topic runs to size the shared TopicPartitions array.
	runs := 0
	for i := 0; i < nm; i++ {
		prevT := int32(-1)
		for _, p := range parts[start[i]:start[i+1]] {
			if prevT < 0 || p >= l.base[prevT+1] {
				prevT = l.topicOf(p)
				runs++
			}
		}
	}
	tps := make([]TopicPartitions, 0, runs)
	out := make(Assignment, nm)
	for i, m := range l.members {
		first := len(tps)
		ps := parts[start[i]:start[i+1]]
		j := 0
		for j < len(ps) {
			t := l.topicOf(ps[j])
			end, b := l.base[t+1], l.base[t]
			k := j
			for k < len(ps) && ps[k] < end {
				ps[k] -= b
				k++
			}
			tps = append(tps, TopicPartitions{Topic: l.names[t], Partitions: ps[j:k:k]})
			j = k
		}
		out[m.ID] = tps[first:len(tps):len(tps)]
	}
	return out
}
