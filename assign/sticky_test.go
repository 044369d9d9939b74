package assign

import (
	"testing"
)

func owning(id string, gen int32, owned []TopicPartitions, topics ...string) Member {
	return Member{ID: id, Topics: topics, Owned: owned, Generation: gen}
}

// Cases ported from Kafka's AbstractStickyAssignorTest and
// CooperativeStickyAssignorTest where they pin exact behaviour.
func TestStickyKafkaCases(t *testing.T) {
	one := map[string]int32{"topic": 3}
	for _, a := range []Assignor{Sticky(), CooperativeSticky()} {
		t.Run(a.Name(), func(t *testing.T) {
			check(t, a.Assign([]Member{mem("c")}, nil), "c:")
			check(t, a.Assign([]Member{mem("c", "topic")}, nil), "c:")
			check(t, a.Assign([]Member{mem("c", "topic")}, one), "c: topic[0 1 2]")
			check(t, a.Assign([]Member{mem("c", "topic")}, map[string]int32{"topic": 3, "other": 3}), "c: topic[0 1 2]")
			check(t, a.Assign([]Member{mem("c", "topic1", "topic2")}, map[string]int32{"topic1": 1, "topic2": 2}), "c: topic1[0] topic2[0 1]")
			check(t, a.Assign([]Member{mem("c1", "topic"), mem("c2", "topic")}, map[string]int32{"topic": 1}), "c1: topic[0]; c2:")

			// testAddRemoveConsumerOneTopic
			all := []TopicPartitions{tp("topic", 0, 1, 2)}
			got := a.Assign([]Member{owning("c1", 1, all, "topic"), mem("c2", "topic")}, one)
			if a.Name() == "sticky" {
				check(t, got, "c1: topic[0 1]; c2: topic[2]")
			} else {
				// Round one withholds topic-2: c1 still owns it.
				check(t, got, "c1: topic[0 1]; c2:")
				got = a.Assign([]Member{owning("c1", 2, []TopicPartitions{tp("topic", 0, 1)}, "topic"), owning("c2", 2, nil, "topic")}, one)
				check(t, got, "c1: topic[0 1]; c2: topic[2]")
			}
			check(t, a.Assign([]Member{owning("c2", 3, []TopicPartitions{tp("topic", 2)}, "topic")}, one), "c2: topic[0 1 2]")

			// testOwnedPartitionsAreInvalidatedForConsumerWithStaleGeneration
			// and ...WithNoGeneration: the stale claims lose.
			two := map[string]int32{"topic": 3, "topic2": 3}
			claim := []TopicPartitions{tp("topic", 0, 2), tp("topic2", 1)}
			for _, stale := range []int32{9, -1} {
				got = a.Assign([]Member{owning("c1", 10, claim, "topic", "topic2"), owning("c2", stale, claim, "topic", "topic2")}, two)
				if a.Name() == "sticky" {
					check(t, got, "c1: topic[0 2] topic2[1]; c2: topic[1] topic2[0 2]")
				} else {
					// c2's stale claim is on c1's partitions, which c1
					// keeps: no transfer is involved.
					check(t, got, "c1: topic[0 2] topic2[1]; c2: topic[1] topic2[0 2]")
				}
			}

			// testAllConsumersReachExpectedQuotaAndAreConsideredFilled
			four := map[string]int32{"topic": 4}
			got = a.Assign([]Member{
				owning("c1", 1, []TopicPartitions{tp("topic", 0, 1)}, "topic"),
				owning("c2", 1, []TopicPartitions{tp("topic", 2)}, "topic"),
				owning("c3", 1, nil, "topic"),
			}, four)
			check(t, got, "c1: topic[0 1]; c2: topic[2]; c3: topic[3]")
		})
	}
}

// CooperativeStickyAssignorTest
// testPartitionsTransferringOwnershipIncludeThePartitionClaimedByMultipleConsumersInSameGeneration:
// a partition claimed twice in one generation has no trusted owner; it is
// reassigned, and withheld while either claimant still holds it.
func TestCooperativeDoubleClaimSameGeneration(t *testing.T) {
	one := map[string]int32{"topic": 3}
	ms := []Member{
		owning("c1", 1, []TopicPartitions{tp("topic", 0, 1)}, "topic"),
		owning("c2", 1, []TopicPartitions{tp("topic", 0, 2)}, "topic"),
		owning("c3", 1, nil, "topic"),
	}
	check(t, CooperativeSticky().Assign(ms, one), "c1: topic[1]; c2: topic[2]; c3:")
	check(t, Sticky().Assign(ms, one), "c1: topic[1]; c2: topic[2]; c3: topic[0]")
}

// The eager sticky assignor reads its previous assignment from
// StickyAssignor user data, as Java does (members have revoked everything
// before an eager join, so OwnedPartitions is empty).
func TestStickyReadsUserData(t *testing.T) {
	one := map[string]int32{"topic": 4}
	ud := func(gen int32, ps ...int32) []byte {
		return EncodeStickyUserData(StickyUserData{Owned: []TopicPartitions{tp("topic", ps...)}, Generation: gen})
	}
	ms := []Member{
		{ID: "a", Topics: []string{"topic"}, Generation: -1, UserData: ud(4, 3, 2)},
		{ID: "b", Topics: []string{"topic"}, Generation: -1, UserData: ud(4, 0, 1)},
	}
	check(t, Sticky().Assign(ms, one), "a: topic[2 3]; b: topic[0 1]")
	// KIP-341: a stale member's claim on b's partitions loses.
	ms[0].UserData = ud(3, 0, 1, 2, 3)
	check(t, Sticky().Assign(ms, one), "a: topic[2 3]; b: topic[0 1]")
}

// The general (uneven subscription) path: Kafka's
// testPoorRoundRobinAssignmentScenario shape, checked for balance.
func TestStickyUnevenBalance(t *testing.T) {
	topics := map[string]int32{"topic1": 2, "topic2": 1, "topic3": 2, "topic4": 1, "topic5": 2}
	ms := []Member{
		mem("c1", "topic1", "topic2", "topic3", "topic4", "topic5"),
		mem("c2", "topic1", "topic3", "topic5"),
		mem("c3", "topic1", "topic3", "topic5"),
		mem("c4", "topic1", "topic2", "topic3", "topic4", "topic5"),
	}
	a := Sticky().Assign(ms, topics)
	for id, ps := range flat(a) {
		if len(ps) != 2 {
			t.Errorf("%s got %d partitions, want 2: %v", id, len(ps), asString(a))
		}
	}
}
