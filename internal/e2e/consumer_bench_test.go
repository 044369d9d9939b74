package e2e

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/partition"
)

// The consumer-protocol (KIP-848) benchmarks drive groupd and franz-go's
// kfake, which serves ConsumerGroupHeartbeat too, with the same raw
// ConsumerGroupHeartbeat v1 requests in the same run, and report each side
// and their ratio (groupd / kfake):
//
//	go test ./internal/e2e -run '^$' -bench 'Consumer(HeartbeatRate|Converge)' -count 5
//
// Each side holds one group of cgMembers members subscribed to one topic
// of cgPartitions partitions, formed before anything is measured. The
// members behave as a client does: each has one heartbeat in flight at a
// time, on its own connection among cgConns; a heartbeat carries the
// member's epoch and, only when it changed since the last one sent, the
// partitions it owns; a member given a smaller assignment drops the
// partitions at once (revoke first), reports what it still owns, and takes
// new partitions when an assignment adds them. Both servers run their
// default assignor, uniform, which kfake also keeps sticky.
//
// Each measured window starts after a garbage collection, so that no side
// pays for the garbage of the other (they share this process), and each
// round another side goes first.

const (
	cgMembers    = 1000 // members of each side's group
	cgPartitions = 2000 // partitions of the topic they subscribe to
	cgTopic      = "consumed"
	cgGroup      = "consumers"
	cgConns      = 32 // connections carrying the members
	cgWindow     = 8  // heartbeats in flight per connection in the rate benchmark
	cgBeatsPerOp = 50000

	// cgConvergeLimit bounds one convergence: a group that has not
	// converged by then fails the benchmark instead of hanging it.
	cgConvergeLimit = time.Minute
)

// consumerBenchTargets starts groupd and a one-broker kfake, each with
// cgTopic created.
func consumerBenchTargets(b *testing.B) []benchTarget {
	b.Helper()
	a := startServer(b, b.TempDir(), func(c *app.Config) { c.Log.Sync = partition.SyncNever })
	// Creating cgPartitions partitions takes groupd's data plane a while
	// (a directory and a segment per partition): more than createTopic
	// waits on a busy machine.
	adm := kadm.NewClient(newClient(b, a.Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	begin := time.Now()
	if resp, err := adm.CreateTopic(ctx, cgPartitions, 1, nil, cgTopic); err != nil || resp.Err != nil {
		b.Fatalf("create topic %s: %v %v", cgTopic, err, resp.Err)
	}
	b.Logf("groupd created %d partitions in %v", cgPartitions, time.Since(begin).Round(time.Millisecond))
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(cgPartitions, cgTopic))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kf.Close)
	return []benchTarget{{"groupd", a.Addr()}, {"kfake", kf.ListenAddrs()[0]}}
}

// cgMember is one consumer-protocol member as the load generator keeps it.
// Only the goroutine of its connection touches it while a convergence runs.
type cgMember struct {
	id     string
	conn   int // index of its connection
	joined bool
	epoch  int32
	owned  []int32 // partitions of cgTopic, sorted
	tell   bool    // owned changed since the last heartbeat sent

	sentEpoch  int32 // the epoch of the heartbeat in flight
	acked      bool  // acknowledged the target epoch (see ack)
	ackedParts int   // len(owned) when it acknowledged

	beat prepared // plain heartbeat at beat's epoch, encoded once per epoch
}

// cgSide is one server's group and the connections its members use.
type cgSide struct {
	ctl     *benchConn
	conns   []*benchConn
	topicID [16]byte
	members []*cgMember
	epoch   int32 // the group epoch every member last acknowledged
}

func newCGMember(id string, conn int) *cgMember {
	return &cgMember{id: id, conn: conn, sentEpoch: -1}
}

// request returns the member's next request: a join until it has joined,
// a heartbeat with its owned partitions if they changed, or else the plain
// heartbeat at its epoch, encoded once per epoch.
func (m *cgMember) request(topicID [16]byte) prepared {
	if !m.joined {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Version = 1
		req.Group, req.MemberID, req.MemberEpoch = cgGroup, m.id, 0
		req.RebalanceTimeoutMillis = benchRebalanceMs
		req.SubscribedTopicNames = []string{cgTopic}
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		return prepared{req, requestFrame(req, 0)}
	}
	if m.tell {
		req := cgHeartbeat(m.id, m.epoch)
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{} // owns nothing
		if len(m.owned) > 0 {
			t := kmsg.NewConsumerGroupHeartbeatRequestTopic()
			t.TopicID, t.Partitions = topicID, slices.Clone(m.owned)
			req.Topics = append(req.Topics, t)
		}
		return prepared{req, requestFrame(req, 0)}
	}
	if m.beat.req == nil || m.beat.req.(*kmsg.ConsumerGroupHeartbeatRequest).MemberEpoch != m.epoch {
		req := cgHeartbeat(m.id, m.epoch)
		m.beat = prepared{req, requestFrame(req, 0)}
	}
	return m.beat
}

// cgHeartbeat is a heartbeat that changes nothing: every optional field
// null ("unchanged"), as clients send between changes.
func cgHeartbeat(memberID string, epoch int32) *kmsg.ConsumerGroupHeartbeatRequest {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group, req.MemberID, req.MemberEpoch = cgGroup, memberID, epoch
	return req
}

// sent notes what the request in flight tells the server.
func (m *cgMember) sent() {
	m.sentEpoch = m.epoch
	if !m.joined {
		m.sentEpoch = 0
	}
	m.tell = false
}

// apply takes a heartbeat response as a client does and reports whether
// the member's assignment changed and how many partitions it gave up.
func (m *cgMember) apply(resp *kmsg.ConsumerGroupHeartbeatResponse, topicID [16]byte) (changed bool, revoked int, err error) {
	if resp.ErrorCode != 0 {
		msg := ""
		if resp.ErrorMessage != nil {
			msg = *resp.ErrorMessage
		}
		return false, 0, fmt.Errorf("member %s at epoch %d: error %d %s", m.id, m.sentEpoch, resp.ErrorCode, msg)
	}
	if !m.joined {
		if resp.MemberID == nil || *resp.MemberID != m.id {
			return false, 0, fmt.Errorf("member %s joined as %v", m.id, resp.MemberID)
		}
		m.joined = true
	}
	if resp.MemberEpoch < m.epoch {
		return false, 0, fmt.Errorf("member %s: epoch went back from %d to %d", m.id, m.epoch, resp.MemberEpoch)
	}
	m.epoch = resp.MemberEpoch
	if resp.Assignment == nil {
		return false, 0, nil
	}
	parts := []int32{}
	for _, t := range resp.Assignment.Topics {
		if t.TopicID != topicID {
			return false, 0, fmt.Errorf("member %s assigned topic id %x, want %x", m.id, t.TopicID, topicID)
		}
		parts = append(parts, t.Partitions...)
	}
	slices.Sort(parts)
	if slices.Equal(parts, m.owned) {
		return false, 0, nil
	}
	// Revoke what is gone, take what is new, and tell the server on the
	// next heartbeat.
	for _, p := range m.owned {
		if _, kept := slices.BinarySearch(parts, p); !kept {
			revoked++
		}
	}
	m.owned, m.tell = parts, true
	return true, revoked, nil
}

// ack updates whether the member has acknowledged the target epoch: it
// sent a heartbeat at that epoch, with its partitions as they are, and the
// answer changed nothing. It returns the change of the acknowledged
// members and partitions.
func (m *cgMember) ack(target int32, changed bool) (members, parts int) {
	now := !changed && m.sentEpoch == target && m.epoch == target
	switch {
	case now && !m.acked:
		m.acked, m.ackedParts = true, len(m.owned)
		return 1, m.ackedParts
	case !now && m.acked:
		m.acked = false
		return -1, -m.ackedParts
	}
	return 0, 0
}

// progress counts the members that acknowledged the target epoch (high 32
// bits) and the partitions they own (low 32 bits) in one word, so that the
// goroutine whose update completes the convergence sees both at once.
type progress struct{ v atomic.Uint64 }

func (p *progress) add(members, parts int) uint64 {
	return p.v.Add(uint64(int64(members)<<32 + int64(parts)))
}

func progressOf(members, parts int) uint64 { return uint64(members)<<32 | uint64(parts) }

// convergence is what one convergence took.
type convergence struct {
	took  time.Duration // from the first join to the answer that completed it
	beats int           // requests sent in that time
	moved int           // partitions members gave up
}

// converge drives every member, each with one heartbeat in flight, until
// all have acknowledged target with every partition owned. Members that
// have not joined join once the others are heartbeating (every joined
// member has sent a heartbeat, on average), as a newcomer joins a group
// that is already running; the convergence is timed from the first join,
// or from the start if everyone is joined or joining.
func (s *cgSide) converge(target int32) (convergence, error) {
	var (
		prog         progress
		done         atomic.Bool
		start, end   time.Time
		beats, moved atomic.Int64
		startOnce    sync.Once
		startBeats   int64 // requests sent before the clock started
	)
	want := progressOf(len(s.members), cgPartitions)
	byConn := make([][]*cgMember, len(s.conns))
	joinedCount := 0
	for _, m := range s.members {
		m.acked, m.ackedParts = false, 0
		byConn[m.conn] = append(byConn[m.conn], m)
		if m.joined {
			joinedCount++
		}
	}
	warm := int64(joinedCount)
	if joinedCount == len(s.members) {
		warm = 0
	}
	armAll(s.conns)
	begin := time.Now()
	_, err := parallel(s.conns, func(ci int, c *benchConn) error {
		var inflight, joining []*cgMember
		send := func(m *cgMember) error {
			err := c.sendPrepared(m.request(s.topicID))
			m.sent()
			inflight = append(inflight, m)
			beats.Add(1)
			return err
		}
		// join sends the joins held back, once the group is warm, and
		// starts the clock.
		join := func() error {
			if len(joining) == 0 || (len(inflight) > 0 && beats.Load() < warm) {
				return nil
			}
			startOnce.Do(func() { start, startBeats = time.Now(), beats.Load() })
			for _, m := range joining {
				if err := send(m); err != nil {
					return err
				}
			}
			joining = nil
			return c.flush()
		}
		for _, m := range byConn[ci] {
			if !m.joined && warm > 0 {
				joining = append(joining, m)
				continue
			}
			if err := send(m); err != nil {
				return err
			}
		}
		if warm == 0 {
			startOnce.Do(func() { start = begin })
		}
		if err := join(); err != nil {
			return err
		}
		for len(inflight) > 0 {
			if c.r.Buffered() == 0 {
				if err := c.flush(); err != nil {
					return err
				}
			}
			resp, err := c.recv()
			if err != nil {
				return err
			}
			m := inflight[0]
			inflight = inflight[1:]
			changed, revoked, err := m.apply(resp.(*kmsg.ConsumerGroupHeartbeatResponse), s.topicID)
			if err != nil {
				return err
			}
			if revoked > 0 {
				moved.Add(int64(revoked))
			}
			if dm, dp := m.ack(target, changed); (dm != 0 || dp != 0) && prog.add(dm, dp) == want {
				if done.CompareAndSwap(false, true) {
					end = time.Now()
				}
			}
			if done.Load() {
				continue // drain what is in flight
			}
			if time.Since(begin) > cgConvergeLimit {
				v := prog.v.Load()
				return fmt.Errorf("not converged to epoch %d after %v: %d of %d members acknowledged, owning %d partitions",
					target, cgConvergeLimit, v>>32, len(s.members), uint32(v))
			}
			if err := send(m); err != nil {
				return err
			}
			if err := join(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return convergence{}, err
	}
	s.epoch = target
	return convergence{end.Sub(start), int(beats.Load() - startBeats), int(moved.Load())}, s.checkConverged()
}

// checkConverged checks what the members own (every partition, once) and
// what the server says: the group Stable at the members' epoch.
func (s *cgSide) checkConverged() error {
	seen := make([]string, cgPartitions)
	for _, m := range s.members {
		if m.epoch != s.epoch {
			return fmt.Errorf("member %s at epoch %d, group at %d", m.id, m.epoch, s.epoch)
		}
		for _, p := range m.owned {
			if p < 0 || p >= cgPartitions || seen[p] != "" {
				return fmt.Errorf("partition %d owned by %s and %q", p, m.id, seen[p])
			}
			seen[p] = m.id
		}
	}
	if i := slices.Index(seen, ""); i >= 0 {
		return fmt.Errorf("partition %d owned by no member", i)
	}
	g, err := s.describe()
	if err != nil {
		return err
	}
	if g.State != "Stable" || g.Epoch != s.epoch || g.AssignmentEpoch != s.epoch || len(g.Members) != len(s.members) {
		return fmt.Errorf("group %s %s at epoch %d (target %d) with %d members; want Stable at %d with %d",
			cgGroup, g.State, g.Epoch, g.AssignmentEpoch, len(g.Members), s.epoch, len(s.members))
	}
	for _, m := range g.Members {
		if m.MemberEpoch != s.epoch {
			return fmt.Errorf("server has member %s at epoch %d, group at %d", m.MemberID, m.MemberEpoch, s.epoch)
		}
	}
	return nil
}

// describe asks the server about the group.
func (s *cgSide) describe() (kmsg.ConsumerGroupDescribeResponseGroup, error) {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{cgGroup}
	resp, err := s.ctl.do(req)
	if err != nil {
		return kmsg.ConsumerGroupDescribeResponseGroup{}, err
	}
	gs := resp.(*kmsg.ConsumerGroupDescribeResponse).Groups
	if len(gs) != 1 || gs[0].ErrorCode != 0 {
		return kmsg.ConsumerGroupDescribeResponseGroup{}, fmt.Errorf("describe %s: %+v", cgGroup, gs)
	}
	return gs[0], nil
}

// formConsumerGroup joins cgMembers members to the server's group and
// drives them until the group is stable.
func formConsumerGroup(b *testing.B, t benchTarget) *cgSide {
	b.Helper()
	s := &cgSide{ctl: dialBench(b, t.addr), conns: dialBenchN(b, t.addr, cgConns)}
	s.ctl.arm()
	s.topicID = topicIDOf(b, t.addr, cgTopic)
	for i := range cgMembers {
		s.members = append(s.members, newCGMember(fmt.Sprintf("member-%04d", i), i%cgConns))
	}
	// Everyone joins first; the group's epoch is then the last join's.
	armAll(s.conns)
	if _, err := parallel(s.conns, func(ci int, c *benchConn) error {
		var mine []*cgMember
		for _, m := range s.members {
			if m.conn == ci {
				mine = append(mine, m)
			}
		}
		for _, m := range mine {
			if err := c.sendPrepared(m.request(s.topicID)); err != nil {
				return err
			}
			m.sent()
		}
		if err := c.flush(); err != nil {
			return err
		}
		for _, m := range mine {
			resp, err := c.recv()
			if err != nil {
				return err
			}
			if _, _, err := m.apply(resp.(*kmsg.ConsumerGroupHeartbeatResponse), s.topicID); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatalf("%s: %v", t.name, err)
	}
	g, err := s.describe()
	if err != nil {
		b.Fatalf("%s: %v", t.name, err)
	}
	if _, err := s.converge(g.Epoch); err != nil {
		b.Fatalf("%s: forming the group: %v", t.name, err)
	}
	return s
}

// BenchmarkConsumerHeartbeatRate measures ConsumerGroupHeartbeat v1
// throughput over the members of a stable group: plain heartbeats at the
// member's epoch, cgWindow in flight per connection, each member on its own
// connection. It reports heartbeats per second on each side and
// groupd/kfake (above 1 means groupd is faster).
func BenchmarkConsumerHeartbeatRate(b *testing.B) {
	targets := consumerBenchTargets(b)
	sides := make(map[string]*cgSide)
	for _, t := range targets {
		sides[t.name] = formConsumerGroup(b, t)
	}
	perConn := cgBeatsPerOp / benchRounds / cgConns
	run := func(name string) time.Duration {
		s := sides[name]
		byConn := make([][]*cgMember, cgConns)
		for _, m := range s.members {
			byConn[m.conn] = append(byConn[m.conn], m)
		}
		reqs := prepare(cgConns, perConn, func(ci, i int) kmsg.Request {
			ms := byConn[ci]
			return cgHeartbeat(ms[i%len(ms)].id, s.epoch)
		})
		armAll(s.conns)
		d, err := parallel(s.conns, func(ci int, c *benchConn) error {
			return c.pipeline(reqs[ci], cgWindow, func(resp kmsg.Response) error {
				r := resp.(*kmsg.ConsumerGroupHeartbeatResponse)
				if r.ErrorCode != 0 || r.MemberEpoch != s.epoch || r.Assignment != nil {
					return fmt.Errorf("heartbeat at epoch %d: error %d, epoch %d, assignment %v",
						s.epoch, r.ErrorCode, r.MemberEpoch, r.Assignment)
				}
				return nil
			})
		})
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		return d
	}
	for _, t := range targets {
		run(t.name) // warm up
	}
	elapsed := make(map[string]time.Duration)
	b.ResetTimer()
	for round := range b.N * benchRounds {
		for _, t := range inTurn(targets, round) {
			runtime.GC()
			elapsed[t.name] += run(t.name)
		}
	}
	b.StopTimer()
	reportRate(b, targets[0].name, elapsed, float64(b.N*benchRounds*perConn*cgConns), "hb/s")
}

// BenchmarkConsumerConverge measures how long a stable group of cgMembers
// takes to converge after one more member joins: from the join, sent once
// the others are heartbeating, until every member, the new one included,
// has acknowledged the new target at the new epoch (see cgMember.ack),
// with every member heartbeating as fast as the load generator drives it.
// The new member then leaves and the group
// converges again, unmeasured, before the next round; each operation is
// benchRounds rounds. It reports milliseconds per convergence on each side
// and groupd/kfake (below 1 means groupd is faster), and per convergence
// the requests each side took (-hb) and the partitions that changed owner
// (-moved).
func BenchmarkConsumerConverge(b *testing.B) {
	targets := consumerBenchTargets(b)
	sides := make(map[string]*cgSide)
	for _, t := range targets {
		sides[t.name] = formConsumerGroup(b, t)
	}
	total := make(map[string]convergence)
	b.ResetTimer()
	b.StopTimer()
	rounds := b.N * benchRounds
	for round := range rounds {
		for _, t := range inTurn(targets, round) {
			s := sides[t.name]
			joiner := newCGMember(fmt.Sprintf("joiner-%04d", round), round%cgConns)
			s.members = append(s.members, joiner)
			runtime.GC()
			b.StartTimer()
			c, err := s.converge(s.epoch + 1)
			b.StopTimer()
			if err != nil {
				b.Fatalf("%s: after a join: %v", t.name, err)
			}
			sum := total[t.name]
			sum.took += c.took
			sum.beats += c.beats
			sum.moved += c.moved
			total[t.name] = sum
			if err := s.leave(joiner); err != nil {
				b.Fatalf("%s: %v", t.name, err)
			}
			if _, err := s.converge(s.epoch + 1); err != nil {
				b.Fatalf("%s: after a leave: %v", t.name, err)
			}
		}
	}
	per := func(v float64) float64 { return v / float64(rounds) }
	g, k := total["groupd"], total["kfake"]
	b.ReportMetric(per(g.took.Seconds()*1000), "groupd-ms")
	b.ReportMetric(per(k.took.Seconds()*1000), "kfake-ms")
	b.ReportMetric(g.took.Seconds()/k.took.Seconds(), "ratio")
	b.ReportMetric(per(float64(g.beats)), "groupd-hb")
	b.ReportMetric(per(float64(k.beats)), "kfake-hb")
	b.ReportMetric(per(float64(g.moved)), "groupd-moved")
	b.ReportMetric(per(float64(k.moved)), "kfake-moved")
}

// leave takes a member out of the group with epoch -1 and drops it.
func (s *cgSide) leave(m *cgMember) error {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group, req.MemberID, req.MemberEpoch = cgGroup, m.id, -1
	resp, err := s.conns[m.conn].do(req)
	if err != nil {
		return err
	}
	if r := resp.(*kmsg.ConsumerGroupHeartbeatResponse); r.ErrorCode != 0 || r.MemberEpoch != -1 {
		return fmt.Errorf("leave of %s: error %d, epoch %d", m.id, r.ErrorCode, r.MemberEpoch)
	}
	s.members = slices.DeleteFunc(s.members, func(o *cgMember) bool { return o == m })
	return nil
}
