package consumer

import (
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

// computeTarget runs the group's assignor for its current epoch, starting
// from the previous target so that the assignor can keep members' partitions
// where balance allows, and records only the members whose target changed,
// then the new target epoch (Kafka's TargetAssignmentBuilder).
func (m *Machine) computeTarget(g *group) {
	// The assignor orders members itself (by instance id, then member id),
	// so they go in in map order; only the changed ones are sorted, for the
	// order of their records.
	in := make([]assign.Member, 0, len(g.members))
	for _, mem := range g.members {
		in = append(in, assign.Member{
			ID:         mem.id,
			InstanceID: mem.meta.instanceID,
			Topics:     g.memberTopics(mem),
			Owned:      m.namedParts(g.target[mem.id]),
			Generation: -1,
			Rack:       mem.meta.rackID,
		})
	}
	topics := map[string]int32{}
	for _, n := range g.subscribedTopics() {
		if t, ok := m.topics.byName[n]; ok && t.Partitions > 0 {
			topics[n] = t.Partitions
		}
	}
	out := assignorNamed(g.preferredAssignor(m.cfg.Assignors)).Assign(in, topics)
	var changed []string
	for _, mem := range in {
		if prev, had := g.target[mem.ID]; !had || !m.sameTarget(prev, out[mem.ID]) {
			changed = append(changed, mem.ID)
		}
	}
	slices.Sort(changed)
	for _, id := range changed {
		m.emit(Record{Type: RecordTargetMember, Group: g.id, Member: id,
			Target: &TargetAssignment{Partitions: fromPartSet(m.idParts(out[id]))}})
	}
	m.emit(Record{Type: RecordTargetEpoch, Group: g.id, TargetEpoch: &TargetAssignmentEpoch{AssignmentEpoch: g.epoch}})
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
