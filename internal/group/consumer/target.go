package consumer

import (
	"fmt"
	"slices"

	"github.com/groupd/groupd/assign"
)

// assignorNamed returns the server assignor of a configured name; Validate
// refuses any other name.
func assignorNamed(name string) assign.Assignor {
	if name == AssignorRange {
		return assign.ServerRange()
	}
	return assign.Uniform()
}

// assigner is a group's assign.Target: derived state, never persisted, kept
// in step with the group's members as their records apply, so that an epoch
// bump costs what changed rather than a whole assignment. It mirrors
// g.target between computations; anything it cannot mirror (a target
// written from elsewhere, a topic id that changed under a name) drops it,
// and the next computation builds it again from the group's state.
type assigner struct {
	target *assign.Target
	// assignor is the preferred assignor the Target was built for.
	assignor string
	// topicIDs are the ids of the topics last given to the Target, by
	// name: the Target knows topics by name, the group's targets by id.
	topicIDs map[string]TopicID
	// joined are the members added since the last computation. One whose
	// new target is empty is not changed for the Target, but has no
	// target record yet and gets one.
	joined []string
	// builds counts the Targets built for the group (tests).
	builds int
}

// computeTarget runs the group's assignor for its current epoch, starting
// from the previous target so that the assignor can keep members' partitions
// where balance allows, and records only the members whose target changed,
// then the new target epoch (Kafka's TargetAssignmentBuilder).
func (m *Machine) computeTarget(g *group) {
	topics := map[string]int32{}
	for _, n := range g.subscribedTopics() {
		if t, ok := m.topics.byName[n]; ok && t.Partitions > 0 {
			topics[n] = t.Partitions
		}
	}
	name := g.preferredAssignor(m.cfg.Assignors)
	a := g.assigner
	if a != nil && (a.assignor != name || m.topicIDsMoved(a, topics)) {
		a = nil
	}
	var changed []string
	if a == nil {
		a, changed = m.buildAssigner(g, name, topics)
	} else {
		a.target.SetTopics(topics)
		changed = a.target.Assign()
		for _, id := range a.joined {
			if _, had := g.target[id]; !had && g.members[id] != nil {
				changed = append(changed, id)
			}
		}
		// Assign lists members by instance id then member id; records go
		// by member id.
		slices.Sort(changed)
		changed = slices.Compact(changed)
	}
	if verifyTargets {
		m.verifyTarget(g, name, topics, a.target, changed)
	}
	a.joined = a.joined[:0]
	a.topicIDs = m.topicIDsOf(topics, a.topicIDs)
	// The target records below are the Target's own result: the assigner
	// stays while they apply.
	g.assigner = nil
	for _, id := range changed {
		next, _ := a.target.Member(id)
		m.emit(Record{Type: RecordTargetMember, Group: g.id, Member: id,
			Target: &TargetAssignment{Partitions: fromPartSet(m.idParts(next))}})
	}
	g.assigner = a
	m.emit(Record{Type: RecordTargetEpoch, Group: g.id, TargetEpoch: &TargetAssignmentEpoch{AssignmentEpoch: g.epoch}})
}

// verifyTargets makes every computation check the Target against the
// stateless assignor; the package's tests set it.
var verifyTargets = false

// verifyTarget panics unless the Target's result and changed members are
// what the stateless assignor gives for the group's members and targets.
func (m *Machine) verifyTarget(g *group, name string, topics map[string]int32, t *assign.Target, changed []string) {
	in := m.assignorInput(g)
	out := assignorNamed(name).Assign(in, topics)
	var want []string
	for _, mem := range in {
		got, ok := t.Member(mem.ID)
		if !ok || !m.idParts(got).equal(m.idParts(out[mem.ID])) {
			panic(fmt.Sprintf("consumer: group %s: the incremental target of %s differs from the assignor's", g.id, mem.ID))
		}
		if m.targetChanged(g, mem.ID, out[mem.ID]) {
			want = append(want, mem.ID)
		}
	}
	if !slices.Equal(want, changed) {
		panic(fmt.Sprintf("consumer: group %s: changed members %v, the assignor's %v", g.id, changed, want))
	}
}

// buildAssigner makes a group's Target from its members and their targets
// (after a load, or when the preferred assignor changed), runs its first,
// full assignment, and returns it with the members whose target changed,
// sorted. Here the members are compared with their stored targets, which
// may name topics the Target never sees (deleted or recreated ones).
func (m *Machine) buildAssigner(g *group, name string, topics map[string]int32) (*assigner, []string) {
	builds := 0
	if g.assigner != nil {
		builds = g.assigner.builds
	}
	in := m.assignorInput(g)
	t, err := assign.NewTarget(assignorNamed(name), in, topics)
	if err != nil {
		// Validate admits only the server assignors, and member ids are
		// map keys.
		panic("consumer: " + err.Error())
	}
	t.Assign()
	var changed []string
	for _, mem := range in {
		next, _ := t.Member(mem.ID)
		if m.targetChanged(g, mem.ID, next) {
			changed = append(changed, mem.ID)
		}
	}
	slices.Sort(changed)
	return &assigner{target: t, assignor: name, builds: builds + 1}, changed
}

// assignorInput is the group's members as an assignor takes them, each
// owning its current target, sorted by member id so that nothing a Target
// numbers internally depends on map order.
func (m *Machine) assignorInput(g *group) []assign.Member {
	in := make([]assign.Member, 0, len(g.members))
	for _, mem := range g.sortedMembers() {
		in = append(in, assign.Member{
			ID:         mem.id,
			InstanceID: mem.meta.instanceID,
			Topics:     g.memberTopics(mem),
			Owned:      m.namedParts(g.target[mem.id]),
			Generation: -1,
			Rack:       mem.meta.rackID,
		})
	}
	return in
}

// targetChanged reports whether a member needs a target record for next:
// it has none yet, or a different one.
func (m *Machine) targetChanged(g *group, member string, next []assign.TopicPartitions) bool {
	prev, had := g.target[member]
	return !had || !m.sameTarget(prev, next)
}

// topicIDsOf records the ids of the given topics, reusing ids.
func (m *Machine) topicIDsOf(topics map[string]int32, ids map[string]TopicID) map[string]TopicID {
	if ids == nil {
		ids = make(map[string]TopicID, len(topics))
	}
	clear(ids)
	for n := range topics {
		ids[n] = m.topics.byName[n].ID
	}
	return ids
}

// topicIDsMoved reports whether a topic the Target knew was recreated
// under its name with a new id: the group's targets hold the old id, which
// the Target cannot tell from the new one.
func (m *Machine) topicIDsMoved(a *assigner, topics map[string]int32) bool {
	for n := range topics {
		if id, ok := a.topicIDs[n]; ok && id != m.topics.byName[n].ID {
			return true
		}
	}
	return false
}

// syncMember tells a group's Target about a member whose metadata changed,
// or who appeared or went.
func (g *group) syncMember(id string) {
	a := g.assigner
	if a == nil {
		return
	}
	mem := g.members[id]
	if mem == nil {
		a.target.RemoveMember(id)
		return
	}
	if _, known := a.target.Member(id); !known {
		a.joined = append(a.joined, id)
	}
	a.target.SetMember(id, mem.meta.instanceID, g.memberTopics(mem))
}

// syncRegex tells a group's Target about the members subscribed through a
// regular expression whose resolution changed.
func (g *group) syncRegex(regex string) {
	if g.assigner == nil {
		return
	}
	for _, mem := range g.sortedMembers() {
		if mem.meta.regex == regex {
			g.syncMember(mem.id)
		}
	}
}

// targetWritten keeps a group's Target only if a target written outside
// computeTarget (a static member's replacement) is the one it holds.
func (m *Machine) targetWritten(g *group, member string, s partSet) {
	if a := g.assigner; a != nil {
		if held, ok := a.target.Member(member); !ok || !m.sameTarget(s, held) {
			g.assigner = nil
		}
	}
}

// sameTarget reports whether an assignor's result for a member equals its
// previous target, without building the new one: most members of an
// incremental assignment keep theirs.
func (m *Machine) sameTarget(prev partSet, next []assign.TopicPartitions) bool {
	n := 0
	for _, t := range next {
		if len(t.Partitions) == 0 {
			continue
		}
		n++
		topic, ok := m.topics.byName[t.Topic]
		if !ok || !slices.Equal(prev.partitions(topic.ID), t.Partitions) {
			return false
		}
	}
	return n == len(prev)
}

// namedParts turns a target into the assignor's form, skipping topics that
// no longer exist. The partition slices are shared: assignors do not modify
// their input.
func (m *Machine) namedParts(s partSet) []assign.TopicPartitions {
	if len(s) == 0 {
		return nil
	}
	out := make([]assign.TopicPartitions, 0, len(s))
	for _, t := range s {
		if name, ok := m.topics.name(t.id); ok {
			out = append(out, assign.TopicPartitions{Topic: name, Partitions: t.parts})
		}
	}
	return out
}

// idParts turns an assignor's result into a target sorted by topic id. The
// partitions are copied: the assignor's results share one large array per
// run, and keeping slices of it would keep every run's array alive.
func (m *Machine) idParts(ts []assign.TopicPartitions) partSet {
	if len(ts) == 0 {
		return nil
	}
	n := 0
	for _, t := range ts {
		n += len(t.Partitions)
	}
	back := make([]int32, 0, n)
	s := make(partSet, 0, len(ts))
	for _, t := range ts {
		topic, ok := m.topics.byName[t.Topic]
		if !ok || len(t.Partitions) == 0 {
			continue
		}
		start := len(back)
		back = append(back, t.Partitions...)
		s = append(s, topicParts{id: topic.ID, parts: back[start:len(back):len(back)]})
	}
	slices.SortFunc(s, func(a, b topicParts) int { return compareIDs(a.id, b.id) })
	return s
}
