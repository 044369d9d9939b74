package group

import (
	"cmp"
	"slices"
)

// offsetTable holds a group's committed offsets by topic, then partition.
// A commit names a few topics with many partitions each: the topic is
// hashed once per topic rather than once per partition, and partitions are
// looked up by integer, which made commits markedly cheaper than a map
// keyed by (topic, partition). A topic is in the table only while it has
// an offset.
type offsetTable struct {
	topics map[string]map[int32]offsetValue
}

func newOffsetTable() offsetTable {
	return offsetTable{topics: map[string]map[int32]offsetValue{}}
}

func (t *offsetTable) empty() bool { return len(t.topics) == 0 }

func (t *offsetTable) get(tp topicPartition) (offsetValue, bool) {
	v, ok := t.topics[tp.topic][tp.partition]
	return v, ok
}

// partitions returns a topic's partitions, for a caller that sets several
// of them. The topic is added to the table on the first set.
func (t *offsetTable) partitions(topic string) *offsetPartitions {
	return &offsetPartitions{t: t, topic: topic, ps: t.topics[topic]}
}

func (t *offsetTable) set(tp topicPartition, v offsetValue) {
	t.partitions(tp.topic).set(tp.partition, v)
}

// delete removes an offset and reports whether there was one.
func (t *offsetTable) delete(tp topicPartition) bool {
	ps := t.topics[tp.topic]
	if _, ok := ps[tp.partition]; !ok {
		return false
	}
	delete(ps, tp.partition)
	if len(ps) == 0 {
		delete(t.topics, tp.topic)
	}
	return true
}

// sorted returns every topic and partition, by topic then partition.
func (t *offsetTable) sorted() []topicPartition {
	var tps []topicPartition
	for topic, ps := range t.topics {
		for p := range ps {
			tps = append(tps, topicPartition{topic, p})
		}
	}
	slices.SortFunc(tps, func(a, b topicPartition) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	return tps
}

// offsetPartitions is one topic's offsets within a table.
type offsetPartitions struct {
	t     *offsetTable
	topic string
	ps    map[int32]offsetValue // nil until the topic has an offset
}

func (o *offsetPartitions) set(partition int32, v offsetValue) {
	if o.ps == nil {
		o.ps = map[int32]offsetValue{}
		o.t.topics[o.topic] = o.ps
	}
	o.ps[partition] = v
}
