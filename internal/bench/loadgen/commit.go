package main

import (
	"fmt"
	"runtime"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitRequests encodes perConn OffsetCommits for each of conns
// connections, spread over groups groups ("commit-N", no members:
// generation -1), each of parts partitions of classicTopic at offset base+i.
func commitRequests(conns, perConn, groups, parts int, base int64) [][]prepared {
	out := make([][]prepared, conns)
	for ci := range out {
		out[ci] = make([]prepared, perConn)
		for i := range out[ci] {
			req := kmsg.NewPtrOffsetCommitRequest()
			req.Version = 9
			req.Group = fmt.Sprintf("commit-%d", (ci+i*conns)%groups)
			req.Generation = -1
			t := kmsg.NewOffsetCommitRequestTopic()
			t.Topic = classicTopic
			for p := range int32(parts) {
				rp := kmsg.NewOffsetCommitRequestTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch = p, base+int64(i), -1
				t.Partitions = append(t.Partitions, rp)
			}
			req.Topics = []kmsg.OffsetCommitRequestTopic{t}
			out[ci][i] = prepare(req)
		}
	}
	return out
}

func checkCommit(parts int) func(kmsg.Response) error {
	return func(resp kmsg.Response) error {
		cr := resp.(*kmsg.OffsetCommitResponse)
		n := 0
		for _, t := range cr.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					return fmt.Errorf("commit %s[%d]: error %d", t.Topic, p.Partition, p.ErrorCode)
				}
				n++
			}
		}
		if n != parts {
			return fmt.Errorf("commit answered %d partitions, want %d", n, parts)
		}
		return nil
	}
}

// commitRound sends perConn commits on each connection, window in flight
// per connection, and returns how long that took.
func commitRound(conns []*conn, reqs [][]prepared, window, parts int) (time.Duration, error) {
	armAll(conns, ioTimeout)
	check := checkCommit(parts)
	return parallel(len(conns), func(ci int) error {
		return conns[ci].pipeline(reqs[ci], window, check)
	})
}

// runCommit commits to o.groups groups over o.conns connections with
// o.inflight commits in flight on each, o.partitions partitions per
// commit: one unmeasured round that creates every group, then o.commits
// commits measured. It reports committed partitions per second.
func runCommit(o *options) error {
	conns, err := dialN(o.target, o.conns)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	if _, err := ensureTopic(o.target, classicTopic, int32(o.partitions)); err != nil {
		return err
	}
	warm := commitRequests(o.conns, o.groups/o.conns+1, o.groups, o.partitions, 0)
	if _, err := commitRound(conns, warm, o.inflight, o.partitions); err != nil {
		return err
	}
	perConn := o.commits / o.conns
	reqs := commitRequests(o.conns, perConn, o.groups, o.partitions, 1000)
	runtime.GC()
	m := meter{pid: o.serverPID}
	m.start()
	d, err := commitRound(conns, reqs, o.inflight, o.partitions)
	m.add(d)
	if err != nil {
		return err
	}
	ops := int64(perConn * o.conns * o.partitions)
	r := result{Scenario: o.scenario, Metric: fmt.Sprintf("committed partitions, %d in flight", o.inflight),
		Unit: "partitions/s", HigherIsBetter: true, Value: float64(ops) / d.Seconds()}
	m.fill(&r, ops)
	r.Extra = map[string]float64{"commits": float64(perConn * o.conns)}
	r.print()
	return nil
}

// runWork is the other work a server does before it is measured "after
// work": commits over o.groups groups (o.commits commits of o.partitions
// partitions, 16 in flight on each of o.conns connections), then a
// rebalance of o.members members, who then leave. It reports nothing but
// a line on stderr.
func runWork(o *options) error {
	begin := time.Now()
	conns, err := dialN(o.target, o.conns)
	if err != nil {
		return err
	}
	if _, err := ensureTopic(o.target, classicTopic, int32(o.partitions)); err != nil {
		return err
	}
	reqs := commitRequests(o.conns, o.commits/o.conns, o.groups, o.partitions, 1)
	if _, err := commitRound(conns, reqs, 16, o.partitions); err != nil {
		return err
	}
	closeAll(conns)
	committed := time.Since(begin)
	if conns, err = dialN(o.target, o.members); err != nil {
		return err
	}
	defer closeAll(conns)
	armAll(conns, ioTimeout)
	ctl, err := dial(o.target)
	if err != nil {
		return err
	}
	defer ctl.nc.Close()
	ctl.arm(ioTimeout)
	members, took, _, err := formGroup(ctl, conns, "work-rebalance")
	if err != nil {
		return err
	}
	if err := leaveAll(ctl, members); err != nil {
		return err
	}
	logf("work: %d commits over %d groups in %v, a rebalance of %d members in %v (%v in all)",
		len(reqs)*len(reqs[0]), o.groups, committed.Round(time.Millisecond), o.members,
		took.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	return nil
}
