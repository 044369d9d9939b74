package group

import (
	"slices"
	"time"
)

// DeleteTopicOffsets removes every committed offset of the named topics
// from every group, with a tombstone record for each, as Kafka does when
// topics are deleted (so a topic re-created with the same name is not read
// from its predecessor's offsets). An Empty group left without offsets is
// removed too, as Kafka's cleanup of deleted partitions does.
func (m *Machine) DeleteTopicOffsets(now time.Time, topics []string) Output {
	m.begin(now)
	for _, id := range m.Groups() {
		g := m.groups[id]
		deleted := false
		for _, tp := range g.offsets.sorted() {
			if !slices.Contains(topics, tp.topic) {
				continue
			}
			g.offsets.delete(tp)
			m.record(offsetRecord(g.id, tp.topic, tp.partition, nil))
			deleted = true
		}
		if deleted && g.state == Empty && g.offsets.empty() {
			m.record(Record{Type: RecordGroupMetadata, Group: g.id})
			m.removeGroup(g)
		}
	}
	return m.end()
}

// HasTopicOffsets reports whether any group holds a committed offset of
// one of the named topics.
func (m *Machine) HasTopicOffsets(topics []string) bool {
	for _, g := range m.groups {
		for _, t := range topics {
			if len(g.offsets.topics[t]) > 0 {
				return true
			}
		}
	}
	return false
}
