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
		// What a store would write before the replies go out, for the
		// record (the rebalance's own record comes in a later step).
		n := 0
		for _, r := range out.Records {
			n += len(r.Value())
		}
		b.ReportMetric(float64(n), "record-bytes")
	}
}

// BenchmarkRebalance1001 measures the machine's share of the window the
// load generator's rebalance scenario times (internal/bench/loadgen,
// formGroup): a group whose first member got generation 1 alone and whose
// 1,000 other members have their JoinGroups (v9) parked; the leader's
// JoinGroup completes the join phase, half the followers' SyncGroups
// park, the leader's SyncGroup hands out every assignment, and the other
// half are answered at once, the last of them ending the rebalance. Every
// step goes through StepRequest, as in the coordinator, and the records
// are encoded as the store would encode them. The forming before the
// leader's JoinGroup is not timed, nor the step after the window that
// keeps the rebalance's record (TimerHistory, off the replies' path),
// which history-ns/op reports:
//
//	go test ./internal/group -run '^$' -bench Rebalance1001 -benchmem -count 10
func BenchmarkRebalance1001(b *testing.B) {
	const members = 1001
	subscription := (&kmsg.ConsumerMemberMetadata{Topics: []string{"grouped"}}).AppendTo(nil)
	now := time.Unix(1_700_000_000, 0)
	join := func(memberID string) *kmsg.JoinGroupRequest {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Version = 9
		req.Group, req.MemberID = "g", memberID
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 45000, 60000
		req.ProtocolType = "consumer"
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: subscription}}
		return req
	}
	sync := func(memberID string, gen int32, as []kmsg.SyncGroupRequestGroupAssignment) *kmsg.SyncGroupRequest {
		req := kmsg.NewPtrSyncGroupRequest()
		req.Version = 5
		req.Group, req.MemberID, req.Generation = "g", memberID, gen
		req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
		req.GroupAssignment = as
		return req
	}
	var key, val []byte
	var history time.Duration
	b.ReportAllocs()
	b.StopTimer()
	for range b.N {
		// Ids as the coordinator makes them: the client id and 32
		// random hex digits.
		m := New(Config{InitialRebalanceDelay: -1, NewMemberID: SeededMemberIDs(1)})
		var id RequestID
		request := func(msg kmsg.Request) Output {
			id++
			return m.StepRequest(now, Request{ID: id, ClientID: "loadgen", ClientHost: "/127.0.0.1", Msg: msg})
		}
		ids := make([]string, members)
		for i := range ids {
			out := request(join(""))
			ids[i] = out.Replies[0].Msg.(*kmsg.JoinGroupResponse).MemberID
			if i == 0 {
				request(join(ids[0]))
				m.Step(now, Timer{Key: TimerKey{Group: "g", Kind: TimerJoin}})
			}
		}
		for _, mid := range ids[1:] {
			request(join(mid))
		}
		assignments := make([]kmsg.SyncGroupRequestGroupAssignment, members)
		for i, mid := range ids {
			a := kmsg.ConsumerMemberAssignment{Topics: []kmsg.ConsumerMemberAssignmentTopic{{Topic: "grouped", Partitions: []int32{int32(i)}}}}
			assignments[i] = kmsg.SyncGroupRequestGroupAssignment{MemberID: mid, MemberAssignment: a.AppendTo(nil)}
		}
		leaderSync := sync(ids[0], 2, assignments)
		syncs := make([]*kmsg.SyncGroupRequest, members)
		for i, mid := range ids[1:] {
			syncs[i] = sync(mid, 2, nil)
		}
		lastJoin := join(ids[0])

		b.StartTimer()
		replies := rebalanceWindow(request, lastJoin, leaderSync, syncs[:members-1], &key, &val)
		b.StopTimer()
		if want := 2 * members; replies != want {
			b.Fatalf("%d replies, want %d", replies, want)
		}
		start := time.Now()
		out := m.Step(now, Timer{Key: TimerKey{Group: "g", Kind: TimerHistory}})
		for _, r := range out.Records {
			key, val = r.AppendKey(key[:0]), r.AppendValue(val[:0])
		}
		history += time.Since(start)
		if len(out.Rebalances) != 1 {
			b.Fatalf("the history step kept %d rebalances, want 1", len(out.Rebalances))
		}
		if st, gen := m.GroupState("g"); st != Stable || gen != 2 {
			b.Fatalf("group %v generation %d, want Stable 2", st, gen)
		}
		if rs, _ := m.Rebalances("g", now); len(rs) != 2 || rs[1].EndedAt == nil {
			b.Fatalf("rebalances %+v, want two finished", rs)
		}
	}
	b.ReportMetric(float64(history.Nanoseconds())/float64(b.N), "history-ns/op")
}

// rebalanceWindow steps BenchmarkRebalance1001's timed requests and
// encodes their records; it returns how many replies they released. A
// function of its own so that a profiler can be pointed at it, e.g.
//
//	valgrind --tool=callgrind --toggle-collect='*rebalanceWindow*' ./group.test -test.bench Rebalance1001 -test.benchtime 3x
func rebalanceWindow(request func(kmsg.Request) Output, lastJoin *kmsg.JoinGroupRequest, leaderSync *kmsg.SyncGroupRequest, syncs []*kmsg.SyncGroupRequest, key, val *[]byte) int {
	replies := 0
	encode := func(out Output) {
		replies += len(out.Replies)
		for _, r := range out.Records {
			*key, *val = r.AppendKey((*key)[:0]), r.AppendValue((*val)[:0])
		}
	}
	encode(request(lastJoin))
	for i, s := range syncs {
		if i == len(syncs)/2 {
			encode(request(leaderSync))
		}
		encode(request(s))
	}
	return replies
}
