package main

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The classic-protocol load: requests as a consumer subscribed to
// classicTopic sends them (JoinGroup v9, SyncGroup v5, Heartbeat v4,
// LeaveGroup v5, DescribeGroups v5, OffsetCommit v9).

const (
	classicTopic        = "grouped" // named in subscriptions, assignments and commits
	sessionMs           = 45000
	rebalanceMs         = 60000
	errMemberIDRequired = 79
)

var subscription = (&kmsg.ConsumerMemberMetadata{Version: 0, Topics: []string{classicTopic}}).AppendTo(nil)

func joinRequest(group, memberID string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 9
	req.Group, req.MemberID = group, memberID
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = sessionMs, rebalanceMs
	req.ProtocolType = "consumer"
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", subscription
	req.Protocols = []kmsg.JoinGroupRequestProtocol{p}
	return req
}

func syncRequest(group, memberID string, gen int32, assignments []kmsg.SyncGroupRequestGroupAssignment) *kmsg.SyncGroupRequest {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = 5
	req.Group, req.MemberID, req.Generation = group, memberID, gen
	req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	req.GroupAssignment = assignments
	return req
}

func heartbeatRequest(m member) *kmsg.HeartbeatRequest {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version = 4
	req.Group, req.MemberID, req.Generation = m.group, m.id, m.gen
	return req
}

// assignEach gives each member its own partition of classicTopic, numbered
// by position (a coordinator hands assignments out without reading them).
func assignEach(ids []string) []kmsg.SyncGroupRequestGroupAssignment {
	out := make([]kmsg.SyncGroupRequestGroupAssignment, len(ids))
	for i, id := range ids {
		t := kmsg.NewConsumerMemberAssignmentTopic()
		t.Topic, t.Partitions = classicTopic, []int32{int32(i)}
		a := kmsg.ConsumerMemberAssignment{Version: 0, Topics: []kmsg.ConsumerMemberAssignmentTopic{t}}
		out[i] = kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: a.AppendTo(nil)}
	}
	return out
}

type member struct {
	group string
	id    string
	gen   int32
}

// joinForID sends a new member's first JoinGroup and returns the id the
// coordinator hands out with MEMBER_ID_REQUIRED (KIP-394).
func joinForID(c *conn, group string) (string, error) {
	resp, err := c.do(joinRequest(group, ""))
	if err != nil {
		return "", err
	}
	jr := resp.(*kmsg.JoinGroupResponse)
	if jr.ErrorCode != errMemberIDRequired || jr.MemberID == "" {
		return "", fmt.Errorf("first join to %s: error %d, member id %q; want MEMBER_ID_REQUIRED with an id", group, jr.ErrorCode, jr.MemberID)
	}
	return jr.MemberID, nil
}

func describeMembers(ctl *conn, group string) (int, error) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Version = 5
	req.Groups = []string{group}
	resp, err := ctl.do(req)
	if err != nil {
		return 0, err
	}
	gs := resp.(*kmsg.DescribeGroupsResponse).Groups
	if len(gs) != 1 || gs[0].ErrorCode != 0 {
		return 0, fmt.Errorf("describe %s: %+v", group, gs)
	}
	return len(gs[0].Members), nil
}

// formGroup builds a stable group with one member per connection such
// that one join phase collects every member:
//
//  1. the first member joins (MEMBER_ID_REQUIRED, then again with its id)
//     and gets a generation alone; it does not sync;
//  2. every other member gets its id, then joins with it, which starts a
//     rebalance that parks all those joins, since the first member has
//     not rejoined; ctl polls DescribeGroups until all are in the group;
//  3. the first member rejoins: that last JoinGroup completes the join
//     phase, the leader syncs with an assignment for everyone, the
//     followers sync.
//
// Every request of step 3 is encoded before it starts: the last JoinGroup,
// the followers' SyncGroups at the next generation, and the leader's with
// every member's assignment (the leader is expected to be the first
// member; an answer that says otherwise has its SyncGroup encoded when it
// arrives, and is counted in misses). It returns the members, the time
// from sending the last JoinGroup to the last SyncGroup answer, and the
// misses.
func formGroup(ctl *conn, conns []*conn, group string) ([]member, time.Duration, int, error) {
	n := len(conns)
	ids := make([]string, n)
	first := conns[0]
	var err error
	if ids[0], err = joinForID(first, group); err != nil {
		return nil, 0, 0, err
	}
	resp, err := first.do(joinRequest(group, ids[0]))
	if err != nil {
		return nil, 0, 0, err
	}
	jr := resp.(*kmsg.JoinGroupResponse)
	if jr.ErrorCode != 0 {
		return nil, 0, 0, fmt.Errorf("first member's join to %s: error %d", group, jr.ErrorCode)
	}
	if n == 1 {
		sr, err := first.do(syncRequest(group, ids[0], jr.Generation, assignEach(ids)))
		if err != nil {
			return nil, 0, 0, err
		}
		if ec := sr.(*kmsg.SyncGroupResponse).ErrorCode; ec != 0 {
			return nil, 0, 0, fmt.Errorf("sync %s: error %d", group, ec)
		}
		return []member{{group, ids[0], jr.Generation}}, 0, 0, nil
	}
	if _, err := parallel(n-1, func(i int) error {
		id, err := joinForID(conns[i+1], group)
		ids[i+1] = id
		return err
	}); err != nil {
		return nil, 0, 0, err
	}
	next := jr.Generation + 1
	lastJoin := prepare(joinRequest(group, ids[0]))
	syncs := make([]prepared, n)
	syncs[0] = prepare(syncRequest(group, ids[0], next, assignEach(ids)))
	for i := 1; i < n; i++ {
		syncs[i] = prepare(syncRequest(group, ids[i], next, nil))
		if err := conns[i].send(prepare(joinRequest(group, ids[i]))); err != nil {
			return nil, 0, 0, err
		}
		if err := conns[i].flush(); err != nil {
			return nil, 0, 0, err
		}
	}
	gens := make([]int32, n)
	ends := make([]time.Time, n)
	errs := make([]error, n)
	var misses atomic.Int32
	// finish reads member i's JoinGroup answer and syncs.
	finish := func(i int) {
		c := conns[i]
		resp, err := c.recv()
		if err != nil {
			errs[i] = err
			return
		}
		jr := resp.(*kmsg.JoinGroupResponse)
		if jr.ErrorCode != 0 {
			errs[i] = fmt.Errorf("join %s: error %d", group, jr.ErrorCode)
			return
		}
		gens[i] = jr.Generation
		s := syncs[i]
		leads := jr.LeaderID == jr.MemberID
		if jr.Generation != next || leads != (i == 0) {
			misses.Add(1)
			var a []kmsg.SyncGroupRequestGroupAssignment
			if leads {
				all := make([]string, len(jr.Members))
				for k, m := range jr.Members {
					all[k] = m.MemberID
				}
				a = assignEach(all)
			}
			s = prepare(syncRequest(group, ids[i], jr.Generation, a))
		}
		if leads && len(jr.Members) != n {
			errs[i] = fmt.Errorf("join %s: the leader got %d members, want %d", group, len(jr.Members), n)
			return
		}
		resp, err = c.roundTrip(s)
		ends[i] = time.Now()
		if err != nil {
			errs[i] = err
			return
		}
		if ec := resp.(*kmsg.SyncGroupResponse).ErrorCode; ec != 0 {
			errs[i] = fmt.Errorf("sync %s: error %d", group, ec)
		}
	}
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Go(func() { finish(i) })
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Millisecond) {
		got, err := describeMembers(ctl, group)
		if err != nil {
			return nil, 0, 0, err // the parked goroutines end when the connections close
		}
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			return nil, 0, 0, fmt.Errorf("%s: only %d of %d members joined", group, got, n)
		}
	}
	start := time.Now()
	if err := first.send(lastJoin); err != nil {
		return nil, 0, 0, err
	}
	if err := first.flush(); err != nil {
		return nil, 0, 0, err
	}
	finish(0)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, 0, 0, err
	}
	var last time.Time
	members := make([]member, n)
	for i := range members {
		if ends[i].After(last) {
			last = ends[i]
		}
		if gens[i] != gens[0] {
			return nil, 0, 0, fmt.Errorf("%s: member %d synced generation %d, member 0 generation %d", group, i, gens[i], gens[0])
		}
		members[i] = member{group, ids[i], gens[i]}
	}
	return members, last.Sub(start), int(misses.Load()), nil
}

// leaveAll removes the members of one group in one LeaveGroup.
func leaveAll(ctl *conn, members []member) error {
	if len(members) == 0 {
		return nil
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version = 5
	req.Group = members[0].group
	for _, m := range members {
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID = m.id
		req.Members = append(req.Members, lm)
	}
	resp, err := ctl.do(req)
	if err != nil {
		return err
	}
	lr := resp.(*kmsg.LeaveGroupResponse)
	if lr.ErrorCode != 0 {
		return fmt.Errorf("leave %s: error %d", req.Group, lr.ErrorCode)
	}
	for _, m := range lr.Members {
		if m.ErrorCode != 0 {
			return fmt.Errorf("leave %s member %s: error %d", req.Group, m.MemberID, m.ErrorCode)
		}
	}
	return nil
}

// formGroups forms groups groups of size members each, member i on
// conns[i], workers groups at a time.
func formGroups(addr string, conns []*conn, prefix string, groups, size int) ([]member, error) {
	workers := min(20, groups)
	ctls, err := dialN(addr, workers)
	if err != nil {
		return nil, err
	}
	defer closeAll(ctls)
	armAll(ctls, ioTimeout)
	members := make([]member, len(conns))
	_, err = parallel(workers, func(w int) error {
		for g := w; g < groups; g += workers {
			ms, _, _, err := formGroup(ctls[w], conns[g*size:(g+1)*size], fmt.Sprintf("%s-%d", prefix, g))
			if err != nil {
				return err
			}
			copy(members[g*size:], ms)
		}
		return nil
	})
	return members, err
}

// runRebalance forms a group of o.members members, one connection each,
// o.rounds times (a new group each round, left at once after), and
// reports the median time from the last JoinGroup sent to the last
// SyncGroup answer.
func runRebalance(o *options) error {
	conns, err := dialN(o.target, o.members)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	ctl, err := dial(o.target)
	if err != nil {
		return err
	}
	defer ctl.nc.Close()
	m := meter{pid: o.serverPID}
	var took []float64
	misses := 0
	for round := range o.rounds {
		armAll(conns, ioTimeout)
		ctl.arm(ioTimeout)
		runtime.GC()
		m.start()
		members, d, miss, err := formGroup(ctl, conns, fmt.Sprintf("rebalance-%d", round))
		if err != nil {
			return err
		}
		m.add(d) // the window's length; the CPU times are the round's
		took = append(took, millis(d))
		misses += miss
		if err := leaveAll(ctl, members); err != nil {
			return err
		}
	}
	r := result{Scenario: o.scenario, Metric: fmt.Sprintf("rebalance of %d members", o.members), Unit: "ms"}
	extra := map[string]float64{"rounds": float64(len(took)), "min_ms": minOf(took), "max_ms": maxOf(took), "misses": float64(misses)}
	r.Value = median(took)
	m.fill(&r, int64(o.rounds))
	// CPU times are a whole round's (forming included), not the
	// window's: the ticks of /proc are too coarse for 50 ms.
	r.ServerCPUusPerOp, r.LoadgenCPUusPerOp = 0, 0
	extra["server_cpu_ms_per_round"] = float64(m.serverCPU.Microseconds()) / 1000 / float64(o.rounds)
	r.Extra = extra
	r.print()
	return nil
}

func minOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// beat sends member i's prepared heartbeat and checks its answer.
func beat(c *conn, hb prepared) error {
	resp, err := c.roundTrip(hb)
	if err != nil {
		return err
	}
	if ec := resp.(*kmsg.HeartbeatResponse).ErrorCode; ec != 0 {
		req := hb.req.(*kmsg.HeartbeatRequest)
		return fmt.Errorf("heartbeat of %s in %s: error %d", req.MemberID, req.Group, ec)
	}
	return nil
}

// runHeartbeat forms o.groups groups of o.size members, each member on its
// own connection, and has every member heartbeat back to back, one in
// flight each: o.warm heartbeats each unmeasured, then o.beats each
// measured. It reports heartbeats per second and their latencies.
func runHeartbeat(o *options) error {
	n := o.groups * o.size
	conns, err := dialN(o.target, n)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	armAll(conns, ioTimeout)
	members, err := formGroups(o.target, conns, "hb", o.groups, o.size)
	if err != nil {
		return err
	}
	beats := make([]prepared, n)
	for i, m := range members {
		beats[i] = prepare(heartbeatRequest(m))
	}
	lat := make([][]time.Duration, n)
	for i := range lat {
		lat[i] = make([]time.Duration, 0, o.beats)
	}
	armAll(conns, ioTimeout)
	if _, err := parallel(n, func(i int) error {
		for range o.warm {
			if err := beat(conns[i], beats[i]); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	runtime.GC()
	m := meter{pid: o.serverPID}
	m.start()
	d, err := parallel(n, func(i int) error {
		c, hb := conns[i], beats[i]
		for range o.beats {
			t := time.Now()
			if err := beat(c, hb); err != nil {
				return err
			}
			lat[i] = append(lat[i], time.Since(t))
		}
		return nil
	})
	m.add(d)
	if err != nil {
		return err
	}
	all := latencies(lat)
	ops := int64(n * o.beats)
	r := result{Scenario: o.scenario, Metric: "heartbeats", Unit: "hb/s", HigherIsBetter: true,
		Value: float64(ops) / d.Seconds(), P50ms: millis(percentile(all, 50)), P99ms: millis(percentile(all, 99))}
	m.fill(&r, ops)
	r.print()
	return nil
}
