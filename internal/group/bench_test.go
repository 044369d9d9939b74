package group

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// BenchmarkRebalanceSteps measures the machine's share of a rebalance of
// 1,000 members, from the step that ends the join phase to the leader's
// SyncGroup that hands out every assignment (the window the e2e
// BenchmarkRebalance1000 times over the network); the joins before it are
// not timed. Run the same benchmark on two revisions to compare them:
//
//	go test ./internal/group -run '^$' -bench RebalanceSteps -count 10
func BenchmarkRebalanceSteps(b *testing.B) {
	const members = 1000
	subscription := (&kmsg.ConsumerMemberMetadata{Topics: []string{"t"}}).AppendTo(nil)
	now := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	b.StopTimer()
	for range b.N {
		m := New(Config{InitialRebalanceDelay: -1, NewMemberID: SequentialMemberIDs()})
		var id RequestID
		step := func(ev Event) Output {
			return m.Step(now, ev)
		}
		request := func(msg kmsg.Request) Output {
			id++
			return step(Request{ID: id, ClientID: "c", ClientHost: "/127.0.0.1", Msg: msg})
		}
		for range members {
			req := kmsg.NewPtrJoinGroupRequest()
			req.Version = 3
			req.Group = "g"
			req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 45000, 60000
			req.ProtocolType = "consumer"
			req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: subscription}}
			request(req)
		}
		var ids []string
		assignments := make([]kmsg.SyncGroupRequestGroupAssignment, 0, members)
		for i := range members {
			mid := fmt.Sprintf("c-%d", i+1)
			ids = append(ids, mid)
			a := kmsg.ConsumerMemberAssignment{Topics: []kmsg.ConsumerMemberAssignmentTopic{{Topic: "t", Partitions: []int32{int32(i)}}}}
			assignments = append(assignments, kmsg.SyncGroupRequestGroupAssignment{MemberID: mid, MemberAssignment: a.AppendTo(nil)})
		}
		sync := func(mid string, as []kmsg.SyncGroupRequestGroupAssignment) Output {
			req := kmsg.NewPtrSyncGroupRequest()
			req.Version = 5
			req.Group, req.MemberID, req.Generation = "g", mid, 1
			req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
			req.GroupAssignment = as
			return request(req)
		}

		// The initial delay (zero) is extended once, as members arrived
		// during it; its second expiry ends the join phase.
		step(Timer{Key: TimerKey{Group: "g", Kind: TimerJoin}})
		b.StartTimer()
		if out := step(Timer{Key: TimerKey{Group: "g", Kind: TimerJoin}}); len(out.Replies) != members {
			b.Fatalf("join phase answered %d joins", len(out.Replies))
		}
		for _, mid := range ids[1:] {
			sync(mid, nil)
		}
		out := sync(ids[0], assignments)
		b.StopTimer()
		if len(out.Replies) != members {
			b.Fatalf("leader's sync released %d replies", len(out.Replies))
		}
		// What a store would write, for the record.
		n := 0
		for _, r := range out.Records {
			n += len(r.Value())
		}
		b.ReportMetric(float64(n), "record-bytes")
	}
}
