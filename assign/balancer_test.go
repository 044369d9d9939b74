package assign

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinMembers builds a JoinGroup response member list with each member's
// metadata written by bal itself, as a real group would.
func joinMembers(bal kgo.GroupBalancer, ids []string, topics []string, current []map[string][]int32, gen int32) []kmsg.JoinGroupResponseMember {
	out := make([]kmsg.JoinGroupResponseMember, len(ids))
	for i, id := range ids {
		var cur map[string][]int32
		if current != nil {
			cur = current[i]
		}
		out[i] = kmsg.JoinGroupResponseMember{MemberID: id, ProtocolMetadata: bal.JoinGroupMetadata(slices.Clone(topics), cur, gen)}
	}
	return out
}

func balance(t *testing.T, bal kgo.GroupBalancer, members []kmsg.JoinGroupResponseMember, topics map[string]int32) map[string]map[string][]int32 {
	t.Helper()
	mb, interests, err := bal.MemberBalancer(members)
	if err != nil {
		t.Fatal(err)
	}
	for tpc := range topics {
		if _, ok := interests[tpc]; !ok {
			t.Fatalf("interest %s missing", tpc)
		}
	}
	plan, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(topics)
	if err != nil {
		t.Fatal(err)
	}
	sync := plan.IntoSyncAssignment()
	if !slices.IsSortedFunc(sync, func(a, b kmsg.SyncGroupRequestGroupAssignment) int {
		if a.MemberID < b.MemberID {
			return -1
		}
		return 1
	}) {
		t.Fatal("sync assignments not sorted by member")
	}
	out := map[string]map[string][]int32{}
	for _, s := range sync {
		// The bytes must be readable by kmsg and by kgo's own parser.
		var k kmsg.ConsumerMemberAssignment
		if err := k.ReadFrom(s.MemberAssignment); err != nil {
			t.Fatalf("kmsg cannot read assignment: %v", err)
		}
		m, err := kgo.ParseConsumerSyncAssignment(s.MemberAssignment)
		if err != nil {
			t.Fatal(err)
		}
		mine, err := bal.ParseSyncAssignment(s.MemberAssignment)
		if err != nil || len(mine) != len(m) {
			t.Fatalf("ParseSyncAssignment: %v %v", mine, err)
		}
		out[s.MemberID] = m
	}
	return out
}

func TestBalancerProducesValidSyncAssignments(t *testing.T) {
	topics := map[string]int32{"a": 7, "b": 3}
	ids := []string{"m1", "m2", "m3"}
	for _, as := range []Assignor{Range(), RoundRobin(), Sticky(), CooperativeSticky()} {
		t.Run(as.Name(), func(t *testing.T) {
			bal := Balancer(as)
			if bal.ProtocolName() != as.Name() || bal.IsCooperative() != (as.Name() == "cooperative-sticky") {
				t.Fatal("protocol name / cooperative flag")
			}
			got := balance(t, bal, joinMembers(bal, ids, []string{"a", "b"}, nil, -1), topics)
			seen := map[string]bool{}
			for _, m := range got {
				for tpc, ps := range m {
					for _, p := range ps {
						k := tpc + string(rune('0'+p))
						if seen[k] {
							t.Fatalf("%s/%d twice", tpc, p)
						}
						seen[k] = true
					}
				}
			}
			if len(seen) != 10 || len(got) != 3 {
				t.Fatalf("got %v", got)
			}
			// The same result as calling the assignor directly.
			var ms []Member
			for _, id := range ids {
				ms = append(ms, mem(id, "a", "b"))
			}
			direct := as.Assign(ms, topics)
			for id, tps := range direct {
				for _, x := range tps {
					if !slices.Equal(got[id][x.Topic], x.Partitions) {
						t.Fatalf("%s/%s: adapter %v, direct %v", id, x.Topic, got[id][x.Topic], x.Partitions)
					}
				}
			}
			// Second generation: members report what they got; a sticky
			// assignor must not move anything.
			cur := make([]map[string][]int32, len(ids))
			for i, id := range ids {
				cur[i] = got[id]
			}
			again := balance(t, bal, joinMembers(bal, ids, []string{"a", "b"}, cur, 1), topics)
			if as.Name() != "range" && as.Name() != "roundrobin" {
				for id := range got {
					for tpc := range got[id] {
						if !slices.Equal(got[id][tpc], again[id][tpc]) {
							t.Fatalf("sticky moved %s %s", id, tpc)
						}
					}
				}
			}
		})
	}
}

// A group can mix groupd members with franz-go's own balancer: each side
// must read the other's metadata.
func TestBalancerInteroperatesWithKgo(t *testing.T) {
	topics := map[string]int32{"a": 4}
	ours := Balancer(CooperativeSticky())
	theirs := kgo.CooperativeStickyBalancer()
	cur := map[string][]int32{"a": {0, 1}}
	members := []kmsg.JoinGroupResponseMember{
		{MemberID: "x", ProtocolMetadata: ours.JoinGroupMetadata([]string{"a"}, cur, 3)},
		{MemberID: "y", ProtocolMetadata: theirs.JoinGroupMetadata([]string{"a"}, map[string][]int32{"a": {2, 3}}, 3)},
	}
	for _, bal := range []kgo.GroupBalancer{ours, theirs} {
		got := balance(t, bal, slices.Clone(members), topics)
		if !slices.Equal(got["x"]["a"], []int32{0, 1}) || !slices.Equal(got["y"]["a"], []int32{2, 3}) {
			t.Fatalf("%T: %v", bal, got)
		}
	}
	// Sticky user data written by kgo's eager sticky balancer is read too.
	sb := kgo.StickyBalancer()
	md, err := DecodeMetadata(sb.JoinGroupMetadata([]string{"a"}, cur, 7))
	if err != nil {
		t.Fatal(err)
	}
	owned, gen := stickyClaims(&Member{Owned: md.Owned, Generation: -1, UserData: md.UserData})
	if gen != 7 || len(owned) != 1 || !slices.Equal(owned[0].Partitions, []int32{0, 1}) {
		t.Fatalf("sticky user data: %v %d", owned, gen)
	}
}
