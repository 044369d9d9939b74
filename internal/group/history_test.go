package group

import (
	"reflect"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/inspect"
)

func sampleRebalance() *inspect.Rebalance {
	start := time.UnixMilli(1_700_000_000_123).UTC()
	end := start.Add(2500 * time.Millisecond)
	return &inspect.Rebalance{
		Group:            "orders",
		Seq:              42,
		Protocol:         inspect.ProtocolCooperative,
		GenerationBefore: 6,
		GenerationAfter:  7,
		StartedAt:        start,
		EndedAt:          &end,
		DurationMs:       2500,
		Trigger:          inspect.TriggerSessionTimeout,
		Member:           &inspect.MemberRef{MemberID: "c-1", InstanceID: "i", ClientID: "c", ClientHost: "/10.0.0.1"},
		MembersIn:        []string{},
		MembersOut:       []string{"c-1"},
		WaitedFor:        []inspect.Wait{{Member: "d-2", WaitedMs: 2400, Rejoined: true}, {Member: "e-3", WaitedMs: 0}},
		Moved: []inspect.Move{
			{Topic: "t", Partition: 0, From: "c-1", To: "d-2", PauseMs: 12000, ReleasedAt: start.Add(-9600 * time.Millisecond),
				AssignedAt: start.Add(2400 * time.Millisecond), Committed: 40, CommitGap: 7},
			{Topic: "t", Partition: 3, To: "e-3", PauseMs: 2500, ReleasedAt: start, AssignedAt: end, Committed: -1, CommitGap: -1},
		},
		Outcome:    "stable",
		Storm:      true,
		StormCause: StormSessionTimeout + ": session timeout 6000 ms",
	}
}

// TestRebalanceRecordRoundTrip checks that a stored rebalance reads back
// exactly as the machine keeps it, so that a restart changes nothing.
func TestRebalanceRecordRoundTrip(t *testing.T) {
	r := sampleRebalance()
	rec := Record{Type: RecordRebalance, Group: r.Group, Seq: r.Seq, Rebalance: r}
	back, err := DecodeRecord(rec.Key(), rec.Value())
	if err != nil {
		t.Fatal(err)
	}
	if back.Seq != r.Seq || back.Group != r.Group || !reflect.DeepEqual(back.Rebalance, r) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back.Rebalance, r)
	}
	// In progress and without a member: the optional parts are absent.
	r.EndedAt, r.Member = nil, nil
	rec = Record{Type: RecordRebalance, Group: r.Group, Seq: r.Seq, Rebalance: r}
	if back, err = DecodeRecord(rec.Key(), rec.Value()); err != nil || !reflect.DeepEqual(back.Rebalance, r) {
		t.Fatalf("round trip without end and member: %v\n got %+v\nwant %+v", err, back.Rebalance, r)
	}
	tomb := Record{Type: RecordRebalance, Group: "orders", Seq: 42}
	if back, err = DecodeRecord(tomb.Key(), nil); err != nil || !back.Tombstone() || back.Seq != 42 {
		t.Fatalf("tombstone: %+v %v", back, err)
	}
}

// TestRebalanceRecordRejectsCorruption checks that a truncated or bloated
// value is an error, not a panic or a half record.
func TestRebalanceRecordRejectsCorruption(t *testing.T) {
	r := sampleRebalance()
	rec := Record{Type: RecordRebalance, Group: r.Group, Seq: r.Seq, Rebalance: r}
	v := rec.Value()
	for n := 2; n < len(v); n++ {
		if _, err := DecodeRecord(rec.Key(), v[:n]); err == nil {
			t.Fatalf("value cut to %d of %d bytes decoded", n, len(v))
		}
	}
	if _, err := DecodeRecord(rec.Key(), append(v, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	if _, err := DecodeRecord(rec.Key()[:len(rec.Key())-1], v); err == nil {
		t.Fatal("short key accepted")
	}
}
