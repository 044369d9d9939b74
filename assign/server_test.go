package assign

import "testing"

// Cases from Kafka's group-coordinator RangeAssignorTest (server side).
func TestServerRangeKafkaCases(t *testing.T) {
	r := ServerRange()
	both := []string{"topic1", "topic3"}
	topics := map[string]int32{"topic1": 3, "topic3": 2}
	// testFirstAssignmentTwoMembersTwoTopicsSameSubscriptions
	check(t, r.Assign([]Member{mem("A", both...), mem("B", both...)}, topics),
		"A: topic1[0 1] topic3[0]; B: topic1[2] topic3[1]")
	// testFirstAssignmentThreeMembersThreeTopicsDifferentSubscriptions
	check(t, r.Assign([]Member{mem("A", "topic1", "topic2"), mem("B", "topic3"), mem("C", "topic2", "topic3")},
		map[string]int32{"topic1": 3, "topic2": 3, "topic3": 2}),
		"A: topic1[0 1 2] topic2[0 1]; B: topic3[0]; C: topic2[2] topic3[1]")
	// testFirstAssignmentNumMembersGreaterThanNumPartitions
	check(t, r.Assign([]Member{mem("A", "topic1", "topic3"), mem("B", "topic3"), mem("C", "topic1", "topic3")},
		map[string]int32{"topic1": 3, "topic3": 2}),
		"A: topic1[0 1] topic3[0]; B: topic3[1]; C: topic1[2]")
	// testReassignmentNumMembersGreaterThanNumPartitionsWhenOneMemberAdded
	prev := func(id string, tps ...TopicPartitions) Member {
		return Member{ID: id, Topics: []string{"topic1", "topic2"}, Owned: tps}
	}
	tt := map[string]int32{"topic1": 2, "topic2": 2}
	check(t, r.Assign([]Member{
		prev("A", tp("topic1", 0), tp("topic2", 0)),
		prev("B", tp("topic1", 1), tp("topic2", 1)),
		prev("C"),
	}, tt), "A: topic1[0] topic2[0]; B: topic1[1] topic2[1]; C:")
	// testReassignmentWhenOneMemberAddedAfterInitialAssignmentWithTwoMembersTwoTopics
	t3 := map[string]int32{"topic1": 3, "topic2": 3}
	check(t, r.Assign([]Member{
		prev("A", tp("topic1", 0, 1), tp("topic2", 0, 1)),
		prev("B", tp("topic1", 2), tp("topic2", 2)),
		prev("C"),
	}, t3), "A: topic1[0] topic2[0]; B: topic1[2] topic2[2]; C: topic1[1] topic2[1]")
	// testReassignmentWhenOneMemberRemovedAfterInitialAssignmentWithTwoMembersTwoTopics
	check(t, r.Assign([]Member{
		prev("B", tp("topic1", 2), tp("topic2", 2)),
	}, t3), "B: topic1[0 1 2] topic2[0 1 2]")
	// Co-partitioning survives a reassignment: same numbers per topic.
	a := r.Assign([]Member{prev("A"), prev("B"), prev("C"), prev("D")}, map[string]int32{"topic1": 7, "topic2": 7})
	for id, tps := range a {
		if len(tps) == 2 && len(tps[0].Partitions) != len(tps[1].Partitions) {
			t.Errorf("%s not co-partitioned: %v", id, tps)
		}
	}
}

// UniformHomogeneous/HeterogeneousAssignmentBuilderTest pin sizes and
// stickiness; which exact partition fills a slot is an implementation
// detail there, so these check sizes and kept partitions.
func TestUniformKafkaCases(t *testing.T) {
	u := Uniform()
	check(t, u.Assign([]Member{mem("A")}, map[string]int32{"topic1": 3}), "A:")
	// testFirstAssignmentTwoMembersTwoTopicsNoMemberRacks: 5 partitions
	// over 2 members → sizes 3 and 2.
	a := u.Assign([]Member{mem("A", "topic1", "topic3"), mem("B", "topic1", "topic3")}, map[string]int32{"topic1": 3, "topic3": 2})
	sizes := flat(a)
	if len(sizes["A"])+len(sizes["B"]) != 5 || abs(len(sizes["A"])-len(sizes["B"])) > 1 {
		t.Errorf("unbalanced: %s", asString(a))
	}
	// testReassignmentWhenOnePartitionAddedForTwoMembersTwoTopics: the
	// members keep everything they had and one takes the new partition.
	prev := []Member{
		{ID: "A", Topics: []string{"topic1", "topic2"}, Owned: []TopicPartitions{tp("topic1", 0, 2), tp("topic2", 0)}},
		{ID: "B", Topics: []string{"topic1", "topic2"}, Owned: []TopicPartitions{tp("topic1", 1), tp("topic2", 1, 2)}},
	}
	a = u.Assign(prev, map[string]int32{"topic1": 4, "topic2": 3})
	f := flat(a)
	if len(f["A"])+len(f["B"]) != 7 || abs(len(f["A"])-len(f["B"])) > 1 {
		t.Errorf("unbalanced: %s", asString(a))
	}
	for _, m := range prev {
		for _, x := range m.Owned {
			for _, p := range x.Partitions {
				if !contains(a[m.ID], x.Topic, p) {
					t.Errorf("%s lost %s/%d: %s", m.ID, x.Topic, p, asString(a))
				}
			}
		}
	}
	// Heterogeneous: testFirstAssignmentThreeMembersThreeTopicsDifferentSubscriptions
	a = u.Assign([]Member{mem("A", "topic1", "topic2"), mem("B", "topic3"), mem("C", "topic2", "topic3")},
		map[string]int32{"topic1": 3, "topic2": 3, "topic3": 2})
	f = flat(a)
	if len(f["A"]) != 3 || len(f["B"])+len(f["C"]) != 5 || abs(len(f["B"])-len(f["C"])) > 1 {
		t.Errorf("unexpected sizes: %s", asString(a))
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func contains(tps []TopicPartitions, topic string, p int32) bool {
	for _, x := range tps {
		if x.Topic == topic {
			for _, q := range x.Partitions {
				if q == p {
					return true
				}
			}
		}
	}
	return false
}
