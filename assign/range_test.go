package assign

import "testing"

// Cases ported from Kafka's clients RangeAssignorTest and
// RoundRobinAssignorTest; the expected results are Kafka's.

func TestRangeKafkaCases(t *testing.T) {
	cases := []struct {
		name    string
		members []Member
		topics  map[string]int32
		want    string
	}{
		{"OneConsumerNoTopic", []Member{mem("c")}, map[string]int32{}, "c:"},
		{"OneConsumerNonexistentTopic", []Member{mem("c", "topic")}, map[string]int32{}, "c:"},
		{"OneConsumerOneTopic", []Member{mem("c", "topic")}, map[string]int32{"topic": 3}, "c: topic[0 1 2]"},
		{"OnlyAssignsPartitionsFromSubscribedTopics", []Member{mem("c", "topic")}, map[string]int32{"topic": 3, "other": 3}, "c: topic[0 1 2]"},
		{"OneConsumerMultipleTopics", []Member{mem("c", "topic1", "topic2")}, map[string]int32{"topic1": 1, "topic2": 2}, "c: topic1[0] topic2[0 1]"},
		{"TwoConsumersOneTopicOnePartition", []Member{mem("c1", "topic"), mem("c2", "topic")}, map[string]int32{"topic": 1}, "c1: topic[0]; c2:"},
		{"TwoConsumersOneTopicTwoPartitions", []Member{mem("c1", "topic"), mem("c2", "topic")}, map[string]int32{"topic": 2}, "c1: topic[0]; c2: topic[1]"},
		{"MultipleConsumersMixedTopics",
			[]Member{mem("c1", "topic1"), mem("c2", "topic1", "topic2"), mem("c3", "topic1")},
			map[string]int32{"topic1": 3, "topic2": 2}, "c1: topic1[0]; c2: topic1[1] topic2[0 1]; c3: topic1[2]"},
		{"TwoConsumersTwoTopicsSixPartitions",
			[]Member{mem("c1", "topic1", "topic2"), mem("c2", "topic1", "topic2")},
			map[string]int32{"topic1": 3, "topic2": 3}, "c1: topic1[0 1] topic2[0 1]; c2: topic1[2] topic2[2]"},
		{"TwoStaticConsumersTwoTopicsSixPartitions (instance ids order members)",
			[]Member{{ID: "a", InstanceID: "instance2", Topics: []string{"topic1", "topic2"}}, {ID: "b", InstanceID: "instance1", Topics: []string{"topic1", "topic2"}}},
			map[string]int32{"topic1": 3, "topic2": 3}, "a: topic1[2] topic2[2]; b: topic1[0 1] topic2[0 1]"},
		{"StaticBeforeDynamic",
			[]Member{mem("a", "t"), {ID: "z", InstanceID: "i", Topics: []string{"t"}}},
			map[string]int32{"t": 3}, "a: t[2]; z: t[0 1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { check(t, Range().Assign(c.members, c.topics), c.want) })
	}
}

func TestRangeStaticMemberPersistentAfterMemberIDChange(t *testing.T) {
	// Kafka's testStaticMemberRangeAssignmentPersistentAfterMemberIdChanges:
	// the same instance ids keep the same ranges whatever the member ids.
	topics := map[string]int32{"topic1": 5, "topic2": 5}
	mk := func(ids ...string) []Member {
		var ms []Member
		for i, id := range ids {
			ms = append(ms, Member{ID: id, InstanceID: []string{"i1", "i2", "i3"}[i], Topics: []string{"topic1", "topic2"}})
		}
		return ms
	}
	a := Range().Assign(mk("m1", "m2", "m3"), topics)
	b := Range().Assign(mk("z9", "a0", "q5"), topics)
	for i, ids := range [][2]string{{"m1", "z9"}, {"m2", "a0"}, {"m3", "q5"}} {
		if asString(Assignment{"x": a[ids[0]]}) != asString(Assignment{"x": b[ids[1]]}) {
			t.Errorf("instance %d moved: %v vs %v", i, a[ids[0]], b[ids[1]])
		}
	}
}

func TestRoundRobinKafkaCases(t *testing.T) {
	cases := []struct {
		name    string
		members []Member
		topics  map[string]int32
		want    string
	}{
		{"OneConsumerNoTopic", []Member{mem("c")}, map[string]int32{}, "c:"},
		{"OneConsumerNonexistentTopic", []Member{mem("c", "topic")}, map[string]int32{}, "c:"},
		{"OneConsumerOneTopic", []Member{mem("c", "topic")}, map[string]int32{"topic": 3}, "c: topic[0 1 2]"},
		{"OnlyAssignsPartitionsFromSubscribedTopics", []Member{mem("c", "topic")}, map[string]int32{"topic": 3, "other": 3}, "c: topic[0 1 2]"},
		{"OneConsumerMultipleTopics", []Member{mem("c", "topic1", "topic2")}, map[string]int32{"topic1": 1, "topic2": 2}, "c: topic1[0] topic2[0 1]"},
		{"TwoConsumersOneTopicOnePartition", []Member{mem("c1", "topic"), mem("c2", "topic")}, map[string]int32{"topic": 1}, "c1: topic[0]; c2:"},
		{"TwoConsumersOneTopicTwoPartitions", []Member{mem("c1", "topic"), mem("c2", "topic")}, map[string]int32{"topic": 2}, "c1: topic[0]; c2: topic[1]"},
		{"MultipleConsumersMixedTopics",
			[]Member{mem("c1", "topic1"), mem("c2", "topic1", "topic2"), mem("c3", "topic1")},
			map[string]int32{"topic1": 3, "topic2": 2}, "c1: topic1[0]; c2: topic1[1] topic2[0 1]; c3: topic1[2]"},
		{"TwoConsumersTwoTopicsSixPartitions",
			[]Member{mem("c1", "topic1", "topic2"), mem("c2", "topic1", "topic2")},
			map[string]int32{"topic1": 3, "topic2": 3}, "c1: topic1[0 2] topic2[1]; c2: topic1[1] topic2[0 2]"},
		{"OneStaticConsumerAndOneDynamicConsumerTwoTopicsSixPartitions",
			[]Member{mem("consumer1", "topic1", "topic2"), {ID: "consumer2", InstanceID: "instance1", Topics: []string{"topic1", "topic2"}}},
			map[string]int32{"topic1": 3, "topic2": 3}, "consumer1: topic1[1] topic2[0 2]; consumer2: topic1[0 2] topic2[1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { check(t, RoundRobin().Assign(c.members, c.topics), c.want) })
	}
}
