package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestTransitions(t *testing.T) {
	states := []State{Empty, PreparingRebalance, CompletingRebalance, Stable, Dead}
	legal := 0
	for _, from := range states {
		for _, to := range states {
			if CanTransition(from, to) {
				legal++
				mustTransition(from, to)
				continue
			}
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s -> %s did not panic", from, to)
					}
				}()
				g := newGroup("g", time.Time{})
				g.state = from
				g.transition(time.Time{}, to)
			}()
		}
	}
	// Kafka's table: 1 + 3 + 1 + 1 + 5.
	if legal != 11 {
		t.Fatalf("legal transitions = %d, want 11", legal)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	recs := []Record{
		{Type: RecordGroupMetadata, Group: "g", Metadata: &GroupMetadata{
			ProtocolType: "consumer", Generation: 7, Protocol: "range", Leader: "a", StateTimestamp: 123,
			Members: []MemberMetadata{{MemberID: "a", InstanceID: "i", ClientID: "c", ClientHost: "h",
				RebalanceTimeout: 1, SessionTimeout: 2, Subscription: []byte{1}, Assignment: []byte{}}},
		}},
		{Type: RecordGroupMetadata, Group: "g"},
		{Type: RecordOffsetCommit, Group: "g", Topic: "t", Partition: -3, Offset: &OffsetCommit{
			Offset: 9, LeaderEpoch: -1, Metadata: "m", CommitTimestamp: 5, ExpireTimestamp: -1}},
		{Type: RecordOffsetCommit, Group: "g", Topic: "t", Partition: 4},
	}
	for _, r := range recs {
		got, err := DecodeRecord(r.Key(), r.Value())
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Key()) != string(r.Key()) || string(got.Value()) != string(r.Value()) {
			t.Fatalf("round trip changed %+v into %+v", r, got)
		}
	}
	// nil and empty assignments stay distinct.
	got, _ := DecodeRecord(recs[0].Key(), recs[0].Value())
	if a := got.Metadata.Members[0].Assignment; a == nil || len(a) != 0 {
		t.Fatalf("empty assignment decoded as %v", a)
	}
}

// TestDeterministic runs the same script twice with seeded ids and expects
// identical outputs.
func TestDeterministic(t *testing.T) {
	run := func() []Output {
		m := New(Config{NewMemberID: SeededMemberIDs(42)})
		now := time.UnixMilli(0)
		var outs []Output
		var ids []string
		for i := 0; i < 5; i++ {
			req := kmsg.NewPtrJoinGroupRequest()
			req.Version = 9
			req.Group = "g"
			req.SessionTimeoutMillis = 10000
			req.RebalanceTimeoutMillis = 10000
			req.ProtocolType = "consumer"
			req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}, {Name: "roundrobin"}}
			out := m.Step(now, Request{ID: RequestID(i), ClientID: "c", Msg: req})
			ids = append(ids, out.Replies[0].Msg.(*kmsg.JoinGroupResponse).MemberID)
			outs = append(outs, out)
			req2 := *req
			req2.MemberID = ids[i]
			outs = append(outs, m.Step(now, Request{ID: RequestID(100 + i), ClientID: "c", Msg: &req2}))
		}
		for _, d := range m.Deadlines() {
			outs = append(outs, m.Step(d.Deadline, Timer{Key: d.Key}))
		}
		return outs
	}
	a, b := run(), run()
	if len(a) != len(b) {
		t.Fatal("different lengths")
	}
	for i := range a {
		if len(a[i].Replies) != len(b[i].Replies) || len(a[i].Timers) != len(b[i].Timers) || len(a[i].Records) != len(b[i].Records) {
			t.Fatalf("step %d differs", i)
		}
		for j := range a[i].Replies {
			if a[i].Replies[j].ID != b[i].Replies[j].ID {
				t.Fatalf("step %d reply order differs", i)
			}
		}
	}
}
