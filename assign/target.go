package assign

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Target is a consumer group's target assignment under one server-side
// assignor ([Uniform] or [ServerRange]), kept between group epochs.
//
// A coordinator runs the assignor on every epoch bump, and most bumps change
// little: a member joins or leaves, a topic gains partitions. The stateless
// Assign still reads every member's current target and builds every
// member's new one, so each bump costs as much as a first assignment of the
// whole group. A Target keeps the previous result and is told what changed
// (SetMember, RemoveMember, RenameMember, SetTopic, SetTopics); its Assign
// then touches only what the change can affect and hands back the members
// whose target changed.
//
// Assign returns exactly what the assignor's own Assign returns for the
// Target's current members, each with Owned set to its target from the
// previous Assign (for the first Assign, the Owned given to NewTarget), and
// the current topics. How much work that takes depends on the shape:
//
//   - uniform with identical subscriptions: proportional to the members plus
//     the partitions that move, with no pass over all partitions;
//   - range: proportional to the members' target entries and subscriptions
//     plus the partitions that move;
//   - uniform with differing subscriptions: the shared solver run from the
//     members' targets and loads, touching only the partitions it moves;
//   - the first Assign after NewTarget: a full assignment.
//
// The targets it hands out (Member, Assignment) are shared with the Target
// and with later results: callers must not modify them. A Target is not safe
// for concurrent use; it belongs to the one owner of the group's state.
type Target struct {
	ranged  bool
	byID    map[string]*targetMember
	order   []*targetMember // memberLess order
	topics  map[string]int32
	classes map[string]*subClass
	// Every topic name a subscription ever named gets an id, so that a
	// target entry's topic is found by index rather than by name.
	tid   map[string]int32
	tname []string // by id
	// laid is the layout of the last Assign, by topic id: the partition
	// count of every subscribed, existing topic then, 0 for the others.
	// After an Assign every one of those partitions is in exactly one
	// member's target, which is what lets the next Assign find the
	// unowned ones without a full pass.
	laid []int32
	// gone holds the targets of members removed since the last Assign:
	// their partitions are free for the next one.
	gone []heldTarget
	// touched marks, by topic id, the topics whose subscribers, their
	// order or partition count may have changed since the last Assign.
	// Range leaves the others as they are.
	touched []bool
	// full is set until the first Assign, whose claims come from outside
	// and may be anything.
	full  bool
	stamp uint32
	// paths counts the Assign calls per path taken.
	paths pathCounts
}

type pathCounts struct{ full, homogeneous, ranged, general, fallback int }

// heldTarget is a target with the topic id of each entry.
type heldTarget struct {
	owned []TopicPartitions
	tids  []int32
}

// targetMember is a member as the Target keeps it: Topics is the sorted,
// de-duplicated subscription (shared with its class) and Owned the current
// target, tids its entries' topic ids.
type targetMember struct {
	Member
	tids  []int32
	class *subClass
	count int32 // partitions in Owned
	// resub is set when the subscription changed since the last Assign;
	// the member's target must then be checked against the new one.
	resub bool

	// Scratch of one Assign. valid is the target restricted to what the
	// member may keep now (usually Owned itself), with vtids and vcount;
	// next and ntids are its new target when changed.
	valid   []TopicPartitions
	vtids   []int32
	vcount  int32
	next    []TopicPartitions
	ntids   []int32
	changed bool
}

// subClass is the set of members with one subscription. Groups have few
// distinct subscriptions, so per-topic questions are asked per class.
type subClass struct {
	key     string
	topics  []string // sorted, de-duplicated
	tids    []int32  // their topic ids
	members int
	// Set by each Assign for the classes present:
	eff   []int32 // layout ranks of the subscribed topics that exist, ascending
	id    int32
	stamp uint32
}

// NewTarget returns a Target for as, which must be [Uniform] or
// [ServerRange], holding members (Owned is each member's current target;
// Generation, Rack and UserData are ignored) and topics (name to partition
// count). Member ids must be unique. Nothing is computed until Assign.
func NewTarget(as Assignor, members []Member, topics map[string]int32) (*Target, error) {
	t := &Target{
		byID:    make(map[string]*targetMember, len(members)),
		topics:  make(map[string]int32, len(topics)),
		classes: make(map[string]*subClass),
		tid:     make(map[string]int32),
		full:    true,
	}
	switch as.(type) {
	case uniformAssignor:
	case serverRangeAssignor:
		t.ranged = true
	default:
		return nil, fmt.Errorf("assign: %q is not a server-side assignor", as.Name())
	}
	t.SetTopics(topics)
	t.order = make([]*targetMember, 0, len(members))
	for _, m := range members {
		if _, dup := t.byID[m.ID]; dup {
			return nil, fmt.Errorf("assign: duplicate member id %q", m.ID)
		}
		tm := &targetMember{Member: Member{ID: m.ID, InstanceID: m.InstanceID, Owned: m.Owned}}
		t.subscribe(tm, m.Topics)
		t.byID[m.ID] = tm
		t.order = append(t.order, tm)
	}
	slices.SortFunc(t.order, orderLess)
	return t, nil
}

func orderLess(a, b *targetMember) int { return memberLess(&a.Member, &b.Member) }

// SetMember adds a member with an empty target, or updates an existing
// member's instance id and subscription (topics, in any order, duplicates
// allowed); an existing member keeps its target until the next Assign
// decides.
func (t *Target) SetMember(id, instanceID string, topics []string) {
	tm := t.byID[id]
	if tm == nil {
		tm = &targetMember{Member: Member{ID: id, InstanceID: instanceID}}
		t.subscribe(tm, topics)
		t.byID[id] = tm
		t.insert(tm)
		t.touch(tm.class)
		return
	}
	if tm.InstanceID != instanceID {
		t.touch(tm.class)
		t.unlink(tm)
		tm.InstanceID = instanceID
		t.insert(tm)
	}
	t.subscribe(tm, topics)
}

// RemoveMember removes a member; its partitions are free at the next
// Assign. It reports whether the member was present.
func (t *Target) RemoveMember(id string) bool {
	tm := t.byID[id]
	if tm == nil {
		return false
	}
	delete(t.byID, id)
	t.unlink(tm)
	t.touch(tm.class)
	t.leaveClass(tm)
	if len(tm.Owned) > 0 {
		t.gone = append(t.gone, heldTarget{tm.Owned, tm.tids})
	}
	return true
}

// ErrUnknownMember and ErrMemberExists are returned by RenameMember.
var (
	ErrUnknownMember = errors.New("assign: unknown member")
	ErrMemberExists  = errors.New("assign: member id already present")
)

// RenameMember gives member from the id to, keeping its instance id,
// subscription and target: the replacement of a static member by a new
// member id with the same instance id.
func (t *Target) RenameMember(from, to string) error {
	tm := t.byID[from]
	switch {
	case tm == nil:
		return fmt.Errorf("%w %q", ErrUnknownMember, from)
	case from == to:
		return nil
	case t.byID[to] != nil:
		return fmt.Errorf("%w: %q", ErrMemberExists, to)
	}
	t.unlink(tm)
	t.touch(tm.class)
	delete(t.byID, from)
	tm.ID = to
	t.byID[to] = tm
	t.insert(tm)
	return nil
}

// SetTopic sets a topic's partition count; a count ≤ 0 removes the topic.
func (t *Target) SetTopic(name string, partitions int32) {
	if t.topics[name] == max(partitions, 0) {
		return
	}
	if id, ok := t.tid[name]; ok {
		t.touched[id] = true
	}
	if partitions <= 0 {
		delete(t.topics, name)
		return
	}
	t.topics[name] = partitions
}

// SetTopics replaces all topic metadata (name to partition count; counts
// ≤ 0 mean the topic does not exist).
func (t *Target) SetTopics(topics map[string]int32) {
	for name := range t.topics {
		if topics[name] <= 0 {
			t.SetTopic(name, 0)
		}
	}
	for name, n := range topics {
		t.SetTopic(name, n)
	}
}

// Member returns a member's current target, sorted by topic then
// partition, and whether the member is present.
func (t *Target) Member(id string) ([]TopicPartitions, bool) {
	tm := t.byID[id]
	if tm == nil {
		return nil, false
	}
	return tm.Owned, true
}

// Assignment returns every member's current target, as Assign on the
// stateless assignor would: every member has an entry.
func (t *Target) Assignment() Assignment {
	out := make(Assignment, len(t.order))
	for _, tm := range t.order {
		out[tm.ID] = tm.Owned
	}
	return out
}

// insert places tm in member order.
func (t *Target) insert(tm *targetMember) {
	i, _ := slices.BinarySearchFunc(t.order, tm, orderLess)
	t.order = slices.Insert(t.order, i, tm)
}

func (t *Target) unlink(tm *targetMember) {
	if i, ok := slices.BinarySearchFunc(t.order, tm, orderLess); ok {
		t.order = slices.Delete(t.order, i, i+1)
	}
}

// subscribe sets tm's subscription; a different one marks it for checking
// at the next Assign.
func (t *Target) subscribe(tm *targetMember, topics []string) {
	sorted := slices.Compact(slices.Sorted(slices.Values(topics)))
	var key []byte
	for _, name := range sorted {
		key = binary.AppendUvarint(key, uint64(len(name)))
		key = append(key, name...)
	}
	if tm.class != nil && tm.class.key == string(key) {
		return
	}
	if tm.class != nil {
		t.touch(tm.class)
		t.leaveClass(tm)
		tm.resub = true
	}
	c := t.classes[string(key)]
	if c == nil {
		c = &subClass{key: string(key), topics: slices.Clip(sorted), tids: make([]int32, len(sorted))}
		for k, name := range sorted {
			c.tids[k] = t.topicID(name)
		}
		t.classes[c.key] = c
	}
	c.members++
	tm.class, tm.Topics = c, c.topics
	if tm.resub {
		t.touch(c)
	}
}

// touch marks the topics of a class as touched.
func (t *Target) touch(c *subClass) {
	for _, id := range c.tids {
		t.touched[id] = true
	}
}

func (t *Target) topicID(name string) int32 {
	id, ok := t.tid[name]
	if !ok {
		id = int32(len(t.tname))
		t.tid[name] = id
		t.tname = append(t.tname, name)
		t.touched = append(t.touched, true)
	}
	return id
}

func (t *Target) leaveClass(tm *targetMember) {
	if c := tm.class; c != nil {
		if c.members--; c.members == 0 {
			delete(t.classes, c.key)
		}
	}
}

// targetLayout is the current problem's topic numbering: the subscribed
// topics that exist, sorted by name and numbered by rank, as the stateless
// assignors number them. A partition's key, rank<<32 | partition, sorts as
// the solver's global index does.
type targetLayout struct {
	names  []string
	idOf   []int32 // topic id by rank
	rankOf []int32 // rank by topic id, -1 outside the layout
	count  []int32
	base   []int32 // len(names)+1; global index of partition p of rank r is base[r]+p
	n      int32   // partitions in all
	// classes present, in the order of their first member.
	classes []*subClass
	homog   bool // every member has the same non-empty effective subscription
}

func key(r, p int32) uint64 { return uint64(r)<<32 | uint64(uint32(p)) }

// layoutNow numbers the topics the present members subscribe to and
// resolves each present class's subscription to ranks.
func (t *Target) layoutNow() *targetLayout {
	t.stamp++
	lay := &targetLayout{rankOf: make([]int32, len(t.tname))}
	for _, tm := range t.order {
		if c := tm.class; c.stamp != t.stamp {
			c.stamp, c.id = t.stamp, int32(len(lay.classes))
			lay.classes = append(lay.classes, c)
		}
	}
	for id := range lay.rankOf {
		lay.rankOf[id] = -1
	}
	for _, c := range lay.classes {
		for k, id := range c.tids {
			if lay.rankOf[id] == -1 && t.topics[c.topics[k]] > 0 {
				lay.rankOf[id] = 0
				lay.idOf = append(lay.idOf, id)
			}
		}
	}
	slices.SortFunc(lay.idOf, func(a, b int32) int { return cmp.Compare(t.tname[a], t.tname[b]) })
	nt := len(lay.idOf)
	lay.names = make([]string, nt)
	lay.count = make([]int32, nt)
	lay.base = make([]int32, nt+1)
	for r, id := range lay.idOf {
		lay.rankOf[id] = int32(r)
		lay.names[r] = t.tname[id]
		lay.count[r] = t.topics[lay.names[r]]
		lay.base[r+1] = lay.base[r] + lay.count[r]
	}
	lay.n = lay.base[nt]
	for _, c := range lay.classes {
		c.eff = c.eff[:0]
		for _, id := range c.tids {
			if r := lay.rankOf[id]; r >= 0 {
				c.eff = append(c.eff, r)
			}
		}
	}
	lay.homog = len(lay.classes) > 0 && len(lay.classes[0].eff) > 0
	for _, c := range lay.classes[min(1, len(lay.classes)):] {
		lay.homog = lay.homog && slices.Equal(c.eff, lay.classes[0].eff)
	}
	return lay
}

// Assign computes the new target and returns the ids of the members whose
// target changed, in member order.
func (t *Target) Assign() []string {
	if t.full || len(t.order) == 0 {
		return t.assignFull()
	}
	lay := t.layoutNow()
	free, ok := t.prepare(lay)
	switch {
	case !ok:
	case t.ranged:
		t.paths.ranged++
		ok = t.assignRange(lay, free)
	case lay.homog:
		t.paths.homogeneous++
		ok = t.assignHomogeneous(lay, free)
	default:
		t.paths.general++
		t.assignGeneral(lay, free)
	}
	if !ok {
		t.paths.fallback++
		return t.assignFull()
	}
	return t.commit(lay)
}

// prepare checks every member's previous target against the current
// members and topics (see targetMember.valid) and returns the keys, sorted,
// of the layout's partitions that no member may keep. It reports false if
// the partitions do not add up, which would mean the kept state is
// inconsistent; Assign then recomputes from scratch.
func (t *Target) prepare(lay *targetLayout) ([]uint64, bool) {
	// A topic that lost partitions (or was deleted) invalidates targets
	// anywhere; otherwise only members whose subscription changed need a
	// look, since a target only ever holds subscribed partitions.
	shrunk := false
	for id, was := range t.laid {
		shrunk = shrunk || was > 0 && t.topics[t.tname[id]] < was
	}
	var free []uint64
	total := int64(0)
	for _, tm := range t.order {
		tm.changed, tm.next, tm.ntids = false, nil, nil
		if !shrunk && !tm.resub {
			tm.valid, tm.vtids, tm.vcount = tm.Owned, tm.tids, tm.count
		} else {
			free = lay.restrict(tm, free)
			if tm.vcount != tm.count {
				tm.changed, tm.next, tm.ntids = true, tm.valid, tm.vtids
			}
		}
		total += int64(tm.vcount)
	}
	for _, g := range t.gone {
		for k, x := range g.owned {
			r := lay.rankOf[g.tids[k]]
			if r < 0 {
				continue
			}
			for _, p := range x.Partitions[:cutAt(x.Partitions, lay.count[r])] {
				free = append(free, key(r, p))
			}
		}
	}
	for r, id := range lay.idOf {
		was := int32(0) // new to the layout
		if int(id) < len(t.laid) {
			was = t.laid[id]
		}
		for p := was; p < lay.count[r]; p++ {
			free = append(free, key(int32(r), p))
		}
	}
	if total+int64(len(free)) != int64(lay.n) {
		return nil, false
	}
	slices.Sort(free)
	return free, true
}

// restrict sets tm.valid (with vtids and vcount) to tm's target without
// the partitions it may no longer keep, and returns free with the dropped
// partitions that are still in the layout appended.
func (lay *targetLayout) restrict(tm *targetMember, free []uint64) []uint64 {
	var out []TopicPartitions
	var tids []int32
	n := int32(0)
	for k, x := range tm.Owned {
		r := lay.rankOf[tm.tids[k]]
		_, sub := slices.BinarySearch(tm.class.eff, r)
		ps := x.Partitions
		if r >= 0 {
			ps = ps[:cutAt(ps, lay.count[r])]
		}
		if r >= 0 && sub && len(ps) == len(x.Partitions) {
			if out != nil {
				out, tids = append(out, x), append(tids, tm.tids[k])
			}
			n += int32(len(ps))
			continue
		}
		if out == nil {
			out = append(make([]TopicPartitions, 0, len(tm.Owned)), tm.Owned[:k]...)
			tids = append(make([]int32, 0, len(tm.Owned)), tm.tids[:k]...)
		}
		switch {
		case r < 0:
		case sub && len(ps) > 0:
			out, tids = append(out, TopicPartitions{x.Topic, ps}), append(tids, tm.tids[k])
			n += int32(len(ps))
		case !sub:
			for _, p := range ps {
				free = append(free, key(r, p))
			}
		}
	}
	if out == nil {
		tm.valid, tm.vtids = tm.Owned, tm.tids
	} else {
		tm.valid, tm.vtids = slices.Clip(out), slices.Clip(tids)
	}
	tm.vcount = n
	return free
}

// cutAt is the number of leading elements of the sorted ps below n.
func cutAt(ps []int32, n int32) int {
	i, _ := slices.BinarySearch(ps, n)
	return i
}

// commit installs the new targets and remembers the layout.
func (t *Target) commit(lay *targetLayout) []string {
	var changed []string
	for _, tm := range t.order {
		tm.resub = false
		if tm.changed {
			tm.Owned, tm.tids, tm.count = tm.next, tm.ntids, 0
			for _, x := range tm.Owned {
				tm.count += int32(len(x.Partitions))
			}
			changed = append(changed, tm.ID)
		}
		tm.valid, tm.vtids, tm.next, tm.ntids = nil, nil, nil, nil
	}
	t.remember(lay.idOf, lay.count)
	return changed
}

func (t *Target) remember(idOf, count []int32) {
	t.laid = slices.Grow(t.laid[:0], len(t.tname))[:len(t.tname)]
	clear(t.laid)
	for r, id := range idOf {
		t.laid[id] = count[r]
	}
	t.gone = nil
	clear(t.touched)
}

// assignFull runs the stateless assignor's path on the kept members and
// adopts its result.
func (t *Target) assignFull() []string {
	t.paths.full++
	ms := make([]*Member, len(t.order))
	for i, tm := range t.order {
		ms[i] = &tm.Member
	}
	l := layoutOf(ms, t.topics)
	var a Assignment
	if t.ranged {
		a = serverRange(l)
	} else {
		e := newEngine(l, false)
		e.claim(exactClaims)
		e.solve()
		a = l.build(e.owner)
		e.release()
	}
	var changed []string
	for _, tm := range t.order {
		next := a[tm.ID]
		if !sameTarget(tm.Owned, next) {
			changed = append(changed, tm.ID)
		}
		tm.Owned, tm.tids, tm.count, tm.resub = next, make([]int32, len(next)), 0, false
		tm.valid, tm.vtids, tm.next, tm.ntids, tm.changed = nil, nil, nil, nil, false
		for k, x := range next {
			tm.tids[k] = t.tid[x.Topic]
			tm.count += int32(len(x.Partitions))
		}
	}
	t.full = false
	idOf := make([]int32, len(l.names))
	counts := make([]int32, len(l.names))
	for r, name := range l.names {
		idOf[r], counts[r] = t.tid[name], l.count(int32(r))
	}
	t.remember(idOf, counts)
	return changed
}

// sameTarget reports whether an owned list given from outside (in any
// order, possibly with empty or repeated entries) holds exactly the
// partitions of the canonical target next.
func sameTarget(owned, next []TopicPartitions) bool {
	if len(owned) == len(next) {
		same := true
		for i := range owned {
			if owned[i].Topic != next[i].Topic || !slices.Equal(owned[i].Partitions, next[i].Partitions) {
				same = false
				break
			}
		}
		if same {
			return true
		}
	}
	have := map[string][]int32{}
	for _, x := range owned {
		have[x.Topic] = append(have[x.Topic], x.Partitions...)
	}
	for name, ps := range have {
		slices.Sort(ps)
		have[name] = slices.Compact(ps)
		if len(have[name]) == 0 {
			delete(have, name)
		}
	}
	if len(have) != len(next) {
		return false
	}
	for _, x := range next {
		if !slices.Equal(have[x.Topic], x.Partitions) {
			return false
		}
	}
	return true
}
