package consumer

import (
	"bytes"
	"encoding/hex"
	"slices"
)

// TopicID is a Kafka topic id (a UUID). The consumer protocol names topics
// by id, so a topic that is deleted and created again under the same name is
// a different topic.
type TopicID [16]byte

func (id TopicID) String() string { return hex.EncodeToString(id[:]) }

func compareIDs(a, b TopicID) int { return bytes.Compare(a[:], b[:]) }

// topicParts is one topic's share of a partition set: partitions ascending
// and distinct. epochs is nil for target assignments; for current
// assignments it holds, per partition, the epoch at which the member was
// given it (KIP-1251 assignment epochs), which later lets an offset commit
// from an older epoch be checked partition by partition.
type topicParts struct {
	id     TopicID
	parts  []int32
	epochs []int32
}

// partSet is a set of partitions, sorted by topic id, with no empty topic.
// Values are never modified in place once built: a change builds a new set,
// so a set can be shared (between the state and a record, or with the
// previous state of a member) without copying.
type partSet []topicParts

// find returns the index of topic id, or -1.
func (s partSet) find(id TopicID) int {
	i, ok := slices.BinarySearchFunc(s, id, func(tp topicParts, id TopicID) int { return compareIDs(tp.id, id) })
	if !ok {
		return -1
	}
	return i
}

// partitions returns the partitions of topic id (nil if none).
func (s partSet) partitions(id TopicID) []int32 {
	if i := s.find(id); i >= 0 {
		return s[i].parts
	}
	return nil
}

func (s partSet) contains(id TopicID, p int32) bool {
	_, ok := slices.BinarySearch(s.partitions(id), p)
	return ok
}

// samePartitions reports whether s and o hold the same partitions; epochs
// are not compared.
func (s partSet) samePartitions(o partSet) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i].id != o[i].id || !slices.Equal(s[i].parts, o[i].parts) {
			return false
		}
	}
	return true
}

// equal compares partitions and epochs.
func (s partSet) equal(o partSet) bool {
	if !s.samePartitions(o) {
		return false
	}
	for i := range s {
		if !slices.Equal(s[i].epochs, o[i].epochs) {
			return false
		}
	}
	return true
}

// each calls fn for every partition in order; epoch is -1 when s has none.
func (s partSet) each(fn func(id TopicID, p, epoch int32)) {
	for _, tp := range s {
		for i, p := range tp.parts {
			e := int32(-1)
			if tp.epochs != nil {
				e = tp.epochs[i]
			}
			fn(tp.id, p, e)
		}
	}
}

// partBuilder accumulates one topic at a time, in ascending topic order.
type partBuilder struct {
	set       partSet
	cur       topicParts
	open      bool
	hasEpochs bool
}

func newPartBuilder(withEpochs bool) partBuilder { return partBuilder{hasEpochs: withEpochs} }

func (b *partBuilder) add(id TopicID, p, epoch int32) {
	if !b.open || b.cur.id != id {
		b.flush()
		b.cur, b.open = topicParts{id: id}, true
	}
	b.cur.parts = append(b.cur.parts, p)
	if b.hasEpochs {
		b.cur.epochs = append(b.cur.epochs, epoch)
	}
}

func (b *partBuilder) flush() {
	if b.open && len(b.cur.parts) > 0 {
		b.set = append(b.set, b.cur)
	}
	b.open = false
}

func (b *partBuilder) done() partSet {
	b.flush()
	return b.set
}

// mergeTopics walks the topics of a and b in ascending id order, calling fn
// with each id and the matching entries (nil when absent on one side).
func mergeTopics(a, b partSet, fn func(id TopicID, x, y *topicParts)) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && compareIDs(a[i].id, b[j].id) < 0):
			fn(a[i].id, &a[i], nil)
			i++
		case i == len(a) || compareIDs(a[i].id, b[j].id) > 0:
			fn(b[j].id, nil, &b[j])
			j++
		default:
			fn(a[i].id, &a[i], &b[j])
			i++
			j++
		}
	}
}

// walk merges two sets partition by partition in order, calling fn with
// each partition of either and its epoch on each side (ok false where it is
// absent).
func walk(a, b partSet, fn func(id TopicID, p int32, ea, eb int32, inA, inB bool)) {
	mergeTopics(a, b, func(id TopicID, x, y *topicParts) {
		var xp, xe, yp, ye []int32
		if x != nil {
			xp, xe = x.parts, x.epochs
		}
		if y != nil {
			yp, ye = y.parts, y.epochs
		}
		i, j := 0, 0
		for i < len(xp) || j < len(yp) {
			switch {
			case j == len(yp) || (i < len(xp) && xp[i] < yp[j]):
				fn(id, xp[i], epochAt(xe, i), -1, true, false)
				i++
			case i == len(xp) || xp[i] > yp[j]:
				fn(id, yp[j], -1, epochAt(ye, j), false, true)
				j++
			default:
				fn(id, xp[i], epochAt(xe, i), epochAt(ye, j), true, true)
				i++
				j++
			}
		}
	})
}

// union merges two sets that both carry epochs; where both hold a
// partition, a's epoch wins.
func union(a, b partSet) partSet {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := newPartBuilder(true)
	walk(a, b, func(id TopicID, p, ea, eb int32, inA, _ bool) {
		if inA {
			out.add(id, p, ea)
		} else {
			out.add(id, p, eb)
		}
	})
	return out.done()
}

// diff calls removed for every partition of a not in b and added for every
// partition of b not in a, in order.
func diff(a, b partSet, removed, added func(id TopicID, p, epoch int32)) {
	walk(a, b, func(id TopicID, p, ea, eb int32, inA, inB bool) {
		switch {
		case inA && !inB && removed != nil:
			removed(id, p, ea)
		case inB && !inA && added != nil:
			added(id, p, eb)
		}
	})
}

func epochAt(epochs []int32, i int) int32 {
	if epochs == nil {
		return -1
	}
	return epochs[i]
}
