package assign

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
)

// tp builds TopicPartitions in tests.
func tp(topic string, ps ...int32) TopicPartitions {
	return TopicPartitions{Topic: topic, Partitions: ps}
}

// asString renders an assignment compactly and deterministically, e.g.
// "c1: t1[0 1] t2[0]; c2: t1[2]".
func asString(a Assignment) string {
	ids := make([]string, 0, len(a))
	for id := range a {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var sb strings.Builder
	for i, id := range ids {
		if i > 0 {
			sb.WriteString("; ")
		}
		sb.WriteString(id + ":")
		for _, t := range a[id] {
			fmt.Fprintf(&sb, " %s%v", t.Topic, t.Partitions)
		}
	}
	return sb.String()
}

func mem(id string, topics ...string) Member {
	return Member{ID: id, Topics: topics, Generation: -1}
}

func check(t *testing.T, a Assignment, want string) {
	t.Helper()
	if got := asString(a); got != want {
		t.Errorf("assignment\n got: %s\nwant: %s", got, want)
	}
}

// flat returns member → sorted "topic/partition" keys.
func flat(a Assignment) map[string][]string {
	out := make(map[string][]string, len(a))
	for id, tps := range a {
		var ks []string
		for _, t := range tps {
			for _, p := range t.Partitions {
				ks = append(ks, fmt.Sprintf("%s/%d", t.Topic, p))
			}
		}
		slices.Sort(ks)
		out[id] = ks
	}
	return out
}

// sortTopicPartitions sorts by topic and each partition list ascending; used
// to normalise inputs before comparing.
func sortTopicPartitions(tps []TopicPartitions) {
	slices.SortFunc(tps, func(a, b TopicPartitions) int {
		if a.Topic < b.Topic {
			return -1
		}
		if a.Topic > b.Topic {
			return 1
		}
		return 0
	})
	for _, tp := range tps {
		slices.Sort(tp.Partitions)
	}
}
