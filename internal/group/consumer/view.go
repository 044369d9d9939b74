package consumer

import (
	"cmp"
	"slices"

	"github.com/groupd/groupd/internal/inspect"
)

// Summary returns a group's line in the group list; ok is false for an
// unknown group. Lag is left at -1 for the coordinator, which knows
// offsets and high watermarks, to fill in, and the rebalance count and
// last rebalance for the caller, which keeps the history (the one in
// progress is InProgress).
func (m *Machine) Summary(id string) (s inspect.GroupSummary, ok bool) {
	g := m.groups[id]
	if g == nil {
		return s, false
	}
	s = inspect.GroupSummary{
		Group:        id,
		Type:         inspect.TypeConsumer,
		State:        g.state().String(),
		ProtocolType: "consumer",
		Protocol:     g.preferredAssignor(m.cfg.Assignors),
		Generation:   g.epoch,
		MemberCount:  len(g.members),
		Lag:          -1,
	}
	return s, true
}

// View returns a group's whole view: its summary and its members with the
// partitions they hold, sorted by member id. Offsets are left for the
// coordinator.
func (m *Machine) View(id string) (v inspect.Group, ok bool) {
	s, ok := m.Summary(id)
	if !ok {
		return v, false
	}
	g := m.groups[id]
	v = inspect.Group{GroupSummary: s, Members: []inspect.Member{}, Offsets: []inspect.PartitionOffset{}}
	for _, mem := range g.sortedMembers() {
		im := inspect.Member{
			MemberID:           mem.id,
			InstanceID:         mem.meta.instanceID,
			ClientID:           mem.meta.clientID,
			ClientHost:         mem.meta.clientHost,
			Assignment:         []inspect.TopicPartitions{},
			LastHeartbeat:      mem.lastHeartbeat,
			SessionTimeoutMs:   m.sessionTimeout(mem).Milliseconds(),
			RebalanceTimeoutMs: int64(mem.meta.rebalanceTimeout),
			Protocol:           inspect.TypeConsumer,
		}
		if mem.meta.classic != nil {
			im.Protocol = inspect.TypeClassic
		}
		for _, t := range mem.assigned {
			if name, ok := m.topics.name(t.id); ok {
				im.Assignment = append(im.Assignment, inspect.TopicPartitions{Topic: name, Partitions: slices.Clone(t.parts)})
			}
		}
		slices.SortFunc(im.Assignment, func(a, b inspect.TopicPartitions) int { return cmp.Compare(a.Topic, b.Topic) })
		v.Members = append(v.Members, im)
	}
	return v, true
}
