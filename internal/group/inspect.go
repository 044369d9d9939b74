package group

import (
	"slices"
	"strings"
	"time"

	"github.com/groupd/groupd/assign"
	"github.com/groupd/groupd/internal/inspect"
)

// HighWatermarks looks up the high watermark of a partition; ok is false
// when the partition does not exist.
type HighWatermarks func(topic string, partition int32) (hw int64, ok bool)

// Summaries returns the list view of every group, sorted by id, as it
// stands at now. Lag is computed with hwm (-1 everywhere when hwm is nil).
// It decodes no assignment, so that a list of many groups stays cheap.
func (m *Machine) Summaries(now time.Time, hwm HighWatermarks) []inspect.GroupSummary {
	ids := m.Groups()
	out := make([]inspect.GroupSummary, len(ids))
	for i, id := range ids {
		g := m.groups[id]
		out[i] = m.summary(g, now)
		if hwm != nil {
			out[i].Lag = groupLag(g, hwm)
		}
	}
	return out
}

func (m *Machine) summary(g *group, now time.Time) inspect.GroupSummary {
	n := len(g.history)
	if g.cur != nil {
		n++
	}
	return inspect.GroupSummary{
		Group:         g.id,
		Type:          inspect.TypeClassic,
		State:         g.state.String(),
		ProtocolType:  g.protocolType,
		Protocol:      g.protocol,
		Generation:    g.generation,
		MemberCount:   len(g.members),
		Lag:           -1,
		Rebalances:    n,
		LastRebalance: m.lastRebalance(g, now),
	}
}

// groupLag sums high watermark minus committed offset over the partitions
// the group committed that still exist.
func groupLag(g *group, hwm HighWatermarks) int64 {
	var lag int64
	for topic, ps := range g.offsets.topics {
		for p, v := range ps {
			if hw, ok := hwm(topic, p); ok {
				lag += max(hw-v.offset, 0)
			}
		}
	}
	return lag
}

// Describe returns a group's whole view as it stands at now: its members
// with their decoded assignments and its committed offsets with their
// owners. High watermarks and lag are left unknown (-1), for the caller to
// fill in off the shard. ok is false for an unknown group.
func (m *Machine) Describe(groupID string, now time.Time) (inspect.Group, bool) {
	g := m.groups[groupID]
	if g == nil {
		return inspect.Group{}, false
	}
	v := inspect.Group{GroupSummary: m.summary(g, now), Members: []inspect.Member{}, Offsets: []inspect.PartitionOffset{}}
	owners := map[topicPartition]string{}
	for _, mem := range g.sortedMembers() {
		im := inspect.Member{
			MemberID:           mem.id,
			InstanceID:         mem.instanceID,
			ClientID:           mem.clientID,
			ClientHost:         mem.clientHost,
			Assignment:         []inspect.TopicPartitions{},
			LastHeartbeat:      mem.lastSeen.UTC(),
			SessionTimeoutMs:   mem.session.Milliseconds(),
			RebalanceTimeoutMs: mem.rebalance.Milliseconds(),
		}
		if g.protocolType == consumerProtocolType && len(mem.received) > 0 {
			if _, tps, _, err := assign.DecodeAssignment(mem.received); err == nil {
				for _, t := range tps {
					ps := slices.Sorted(slices.Values(t.Partitions))
					im.Assignment = append(im.Assignment, inspect.TopicPartitions{Topic: t.Topic, Partitions: ps})
					for _, p := range ps {
						owners[topicPartition{t.Topic, p}] = mem.id
					}
				}
				slices.SortFunc(im.Assignment, func(a, b inspect.TopicPartitions) int { return strings.Compare(a.Topic, b.Topic) })
			}
		}
		v.Members = append(v.Members, im)
	}
	for _, tp := range g.offsets.sorted() {
		o, _ := g.offsets.get(tp)
		v.Offsets = append(v.Offsets, inspect.PartitionOffset{
			Topic:         tp.topic,
			Partition:     tp.partition,
			Committed:     o.offset,
			HighWatermark: -1,
			Lag:           -1,
			Owner:         owners[tp],
		})
	}
	return v, true
}
