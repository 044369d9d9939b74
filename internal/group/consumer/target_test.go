package consumer

import (
	"flag"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMain has every target computation of the tests checked against the
// stateless assignor; benchmarks measure the machine without the check.
func TestMain(m *testing.M) {
	flag.Parse()
	verifyTargets = flag.Lookup("test.bench").Value.String() == ""
	os.Exit(m.Run())
}

// TestJoinTargetIsIncremental joins a member to a stable group that was
// loaded from records: the first computation builds the group's Target from
// its state, and the join after it reuses that Target instead of building
// another, with records only for the members whose target moved.
func TestJoinTargetIsIncremental(t *testing.T) {
	m, ids, now := stableGroup(t, 20, 60)
	g := m.groups["g"]
	if g.assigner != nil {
		t.Fatal("a loaded group has a Target before any computation")
	}
	step := func(member string, epoch int32) Output {
		now = now.Add(time.Millisecond)
		req := heartbeatRequest(member, epoch, nil)
		if epoch == 0 {
			req = joinRequest(member, "t")
		}
		return m.Step(now, Request{ID: 1, ClientID: "c", ClientHost: "/h", Msg: req})
	}
	step("first", 0)
	a := g.assigner
	if a == nil || a.builds != 1 {
		t.Fatalf("after the first join: assigner %+v, want one built", a)
	}
	out := step("second", 0)
	if g.assigner != a || a.builds != 1 {
		t.Fatalf("the second join built a new Target (builds %d)", g.assigner.builds)
	}
	// 22 members over 60 partitions: the newcomer takes 2 partitions from
	// members that held 3, so besides its own record only those change.
	var targets []string
	for _, r := range out.Records {
		if r.Type == RecordTargetMember {
			targets = append(targets, r.Member)
		}
	}
	if len(targets) != 3 || len(targets) >= len(ids) {
		t.Fatalf("target records for %v, want the newcomer and the two members that gave up a partition", targets)
	}
	if held, _ := a.target.Member("second"); len(held) != 1 || len(held[0].Partitions) != 2 {
		t.Fatalf("the newcomer's target is %v, want 2 partitions", held)
	}
	// A leave keeps the Target too.
	step("second", leaveEpoch)
	step(ids[0], g.members[ids[0]].epoch)
	if g.assigner != a || a.builds != 1 {
		t.Fatal("a leave built a new Target")
	}
}

// TestTargetFollowsPreferredAssignor switches a group's preferred assignor
// by the members' votes: the Target of the old assignor is dropped and one
// of the new assignor built, and every computation agrees with the
// stateless assignor (verifyTargets).
func TestTargetFollowsPreferredAssignor(t *testing.T) {
	m := New(Config{Assignors: []string{AssignorUniform, AssignorRange}})
	now := epoch0
	m.Step(now, TopicsChanged{Topics: []Topic{{Name: "t", ID: TopicID{1}, Partitions: 12}, {Name: "u", ID: TopicID{2}, Partitions: 5}}})
	join := func(member, assignor string) {
		now = now.Add(time.Millisecond)
		req := joinRequest(member, "t", "u")
		if assignor != "" {
			req.ServerAssignor = &assignor
		}
		out := m.Step(now, Request{ID: 1, ClientID: "c", ClientHost: "/h", Msg: req})
		if code := out.Replies[0].Msg.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode; code != 0 {
			t.Fatalf("join of %s failed: %d", member, code)
		}
	}
	join("a", "")
	join("b", "")
	g := m.groups["g"]
	if a := g.assigner; a == nil || a.assignor != AssignorUniform || a.builds != 1 {
		t.Fatalf("after two uniform joins: %+v", a)
	}
	join("c", AssignorRange)
	join("d", AssignorRange)
	if a := g.assigner; a.assignor != AssignorRange || a.builds != 2 {
		t.Fatalf("after the range majority: assignor %s, builds %d", a.assignor, a.builds)
	}
}
