package inspect

import (
	"testing"
	"time"
)

func TestRebalanceSummary(t *testing.T) {
	start := time.UnixMilli(1_700_000_000_000).UTC()
	r := Rebalance{
		Seq: 7, Protocol: ProtocolEager, StartedAt: start, DurationMs: 900, Trigger: TriggerSessionTimeout,
		Member:     &MemberRef{MemberID: "m-1"},
		MembersIn:  []string{"m-3"},
		MembersOut: []string{"m-1", "m-2"},
		WaitedFor:  []Wait{{Member: "m-4", WaitedMs: 800, Rejoined: true}, {Member: "m-3", WaitedMs: 10, Rejoined: true}},
		Moved: []Move{
			{Topic: "t", Partition: 0, From: "m-1", To: "m-3", PauseMs: 4000, CommitGap: 12},
			{Topic: "t", Partition: 1, From: "m-4", To: "m-4", PauseMs: 800, CommitGap: -1},
			{Topic: "t", Partition: 2, From: "m-2", To: "m-4", PauseMs: 4100, CommitGap: 3},
		},
		Outcome: "stable", Storm: true, StormCause: "repeated",
	}
	s := r.Summary()
	want := RebalanceSummary{
		Seq: 7, Protocol: ProtocolEager, StartedAt: start, DurationMs: 900, Trigger: TriggerSessionTimeout, Member: r.Member,
		MembersInCount: 1, MembersOutCount: 2, Straggler: &Wait{Member: "m-4", WaitedMs: 800, Rejoined: true},
		MovedCount: 3, ChangedCount: 2, MaxPauseMs: 4100, CommitGap: 15,
		Outcome: "stable", Storm: true, StormCause: "repeated",
	}
	if s.Straggler == nil || *s.Straggler != *want.Straggler {
		t.Fatalf("straggler %+v, want %+v", s.Straggler, want.Straggler)
	}
	s.Straggler, want.Straggler = nil, nil
	if *s != want {
		t.Fatalf("summary\n%+v\nwant\n%+v", *s, want)
	}

	// Nothing waited for, nothing moved.
	empty := (&Rebalance{Trigger: TriggerMemberLeft}).Summary()
	if empty.Straggler != nil || empty.MovedCount != 0 || empty.MaxPauseMs != 0 || empty.CommitGap != 0 {
		t.Fatalf("summary of an empty rebalance %+v", *empty)
	}
}
