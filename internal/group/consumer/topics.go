package consumer

import (
	"encoding/binary"
	"hash/fnv"
	"regexp"
	"slices"
	"sort"
)

// Topic is one topic of the broker's metadata as the coordinator sees it.
type Topic struct {
	Name       string
	ID         TopicID
	Partitions int32
}

// topicImage is the machine's copy of the broker's topic metadata.
type topicImage struct {
	byName map[string]Topic
	byID   map[TopicID]Topic
	names  []string // sorted
}

func newTopicImage(ts []Topic) topicImage {
	img := topicImage{byName: make(map[string]Topic, len(ts)), byID: make(map[TopicID]Topic, len(ts))}
	for _, t := range ts {
		if t.Name == "" || t.Partitions < 0 {
			continue
		}
		img.byName[t.Name] = t
		img.byID[t.ID] = t
	}
	img.names = make([]string, 0, len(img.byName))
	for n := range img.byName {
		img.names = append(img.names, n)
	}
	sort.Strings(img.names)
	return img
}

func (img *topicImage) name(id TopicID) (string, bool) {
	t, ok := img.byID[id]
	return t.Name, ok
}

// compileRegex compiles a SubscribedTopicRegex. Kafka compiles it with RE2/J
// and requires the whole topic name to match; Go's regexp is RE2 too, and
// anchoring gives the whole-name match. The pattern is checked on its own
// first so that anchoring cannot make an invalid pattern valid ("a)(b").
func compileRegex(s string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(s); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + s + `)$`)
}

// resolveRegex returns the sorted names of the topics re matches; a nil re
// (a pattern that did not compile) matches nothing.
func (img *topicImage) resolveRegex(re *regexp.Regexp) []string {
	if re == nil {
		return nil
	}
	var out []string
	for _, n := range img.names {
		if re.MatchString(n) {
			out = append(out, n)
		}
	}
	return out
}

// metadataHash summarizes the metadata of the subscribed topics that exist:
// name, id and partition count. A group stores the hash its target was
// computed against (Kafka 4.1's metadata hash), so a change while the
// coordinator was down is still noticed when the topics are next given.
// FNV-1a keeps it stable across processes and versions.
func (img *topicImage) metadataHash(subscribed []string) uint64 {
	h := fnv.New64a()
	var buf [4]byte
	n := 0
	for _, name := range subscribed {
		t, ok := img.byName[name]
		if !ok {
			continue
		}
		n++
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write(t.ID[:])
		binary.BigEndian.PutUint32(buf[:], uint32(t.Partitions))
		h.Write(buf[:])
	}
	if n == 0 {
		return 0 // Kafka's value for "no topic"
	}
	return h.Sum64()
}

// namesDiffer reports whether a topic came or went between old and new,
// which is all regular expressions depend on.
func namesDiffer(old, new *topicImage) bool {
	if len(old.names) != len(new.names) {
		return true
	}
	return !slices.Equal(old.names, new.names)
}

// topicsChanged takes the broker's new topic metadata. Regular expressions
// are resolved again when topics came or went, and every group whose
// subscribed topics now hash differently gets a new epoch, so the next
// heartbeat computes a target with the new partitions (Kafka notices on a
// member's next heartbeat instead).
func (m *Machine) topicsChanged(ts []Topic) {
	old := m.topics
	m.topics = newTopicImage(ts)
	namesChanged := namesDiffer(&old, &m.topics)
	for _, id := range m.Groups() {
		g := m.groups[id]
		if namesChanged {
			for _, regex := range sortedKeys(g.regexes) {
				rs := g.regexes[regex]
				was := rs.topics
				rs.topics = m.topics.resolveRegex(rs.re)
				if !slices.Equal(was, rs.topics) {
					g.syncRegex(regex)
				}
			}
		}
		// An empty group is brought up to date by its next join.
		if len(g.members) == 0 {
			continue
		}
		if m.topics.metadataHash(g.subscribedTopics()) != g.metadataHash {
			m.setCause(cause{trigger: triggerTopicMetadataChanged})
			m.bumpEpoch(g)
		}
	}
}
