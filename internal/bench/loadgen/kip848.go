package main

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The consumer-protocol (KIP-848) load: ConsumerGroupHeartbeat v1 from
// members that behave as a client does. Each member has its own
// connection and one heartbeat in flight; a heartbeat carries the
// member's epoch and, only when they changed since the last one sent, the
// partitions it owns; given a new assignment, a member gives up the
// partitions no longer in it before it takes the new ones (revoke first,
// then take) and reports what it owns on its next heartbeat.

// cgMember is one member as the load generator keeps it. Only the
// goroutine driving it touches it while a drive runs.
type cgMember struct {
	id    string
	group *cgGroup
	c     *conn

	joined bool
	epoch  int32
	owned  []int32 // partitions of the group's topic, sorted
	tell   bool    // owned changed since the last heartbeat sent

	sentEpoch int32 // the epoch of the heartbeat in flight (0 for a join)
	ackEpoch  int32 // the epoch it acknowledged (see ack), -1 if none
	ackParts  int   // len(owned) when it acknowledged

	join  prepared
	plain map[int32]prepared // heartbeats that change nothing, by epoch
}

// cgGroup is one group and what its members acknowledged.
type cgGroup struct {
	name    string
	topic   string
	topicID [16]byte
	// partitions of the topic: a settled group's members own all of
	// them; 0 for a server that assigns nothing (the naive floor).
	partitions int
	members    []*cgMember

	mu      sync.Mutex
	above   int32            // settles only at an epoch above this
	acks    map[int32][2]int // by epoch: members acknowledged, partitions they own
	settled bool
}

func newGroup(name string, topic string, topicID [16]byte, partitions int) *cgGroup {
	return &cgGroup{name: name, topic: topic, topicID: topicID, partitions: partitions, acks: map[int32][2]int{}, above: -1}
}

func (g *cgGroup) add(id string, c *conn) *cgMember {
	m := &cgMember{id: id, group: g, c: c, sentEpoch: -1, ackEpoch: -1, plain: map[int32]prepared{}}
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group, req.MemberID, req.MemberEpoch = g.name, id, 0
	req.RebalanceTimeoutMillis = rebalanceMs
	req.SubscribedTopicNames = []string{g.topic}
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{} // owns nothing
	m.join = prepare(req)
	g.members = append(g.members, m)
	return m
}

func plainHeartbeat(group, id string, epoch int32) *kmsg.ConsumerGroupHeartbeatRequest {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group, req.MemberID, req.MemberEpoch = group, id, epoch
	return req // every optional field null: unchanged
}

// preparePlain encodes the member's plain heartbeats at the given epochs.
func (m *cgMember) preparePlain(epochs ...int32) {
	for _, e := range epochs {
		if _, ok := m.plain[e]; !ok {
			m.plain[e] = prepare(plainHeartbeat(m.group.name, m.id, e))
		}
	}
}

// request returns the member's next request and whether it had to be
// encoded now (it was not prepared before).
func (m *cgMember) request() (prepared, bool) {
	if !m.joined {
		return m.join, false
	}
	if m.tell {
		req := plainHeartbeat(m.group.name, m.id, m.epoch)
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		if len(m.owned) > 0 {
			t := kmsg.NewConsumerGroupHeartbeatRequestTopic()
			t.TopicID, t.Partitions = m.group.topicID, slices.Clone(m.owned)
			req.Topics = append(req.Topics, t)
		}
		return prepare(req), true
	}
	if p, ok := m.plain[m.epoch]; ok {
		return p, false
	}
	m.preparePlain(m.epoch)
	return m.plain[m.epoch], true
}

// sent notes what the request in flight tells the server.
func (m *cgMember) sent() {
	m.sentEpoch = m.epoch
	if !m.joined {
		m.sentEpoch = 0
	}
	m.tell = false
}

// apply takes an answer as a client does and reports whether the
// member's assignment changed and how many partitions it gave up.
func (m *cgMember) apply(resp *kmsg.ConsumerGroupHeartbeatResponse) (changed bool, revoked int, err error) {
	if resp.ErrorCode != 0 {
		msg := ""
		if resp.ErrorMessage != nil {
			msg = *resp.ErrorMessage
		}
		return false, 0, fmt.Errorf("%s member %s at epoch %d: error %d %s", m.group.name, m.id, m.sentEpoch, resp.ErrorCode, msg)
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
		if t.TopicID != m.group.topicID {
			return false, 0, fmt.Errorf("member %s assigned topic id %x, want %x", m.id, t.TopicID, m.group.topicID)
		}
		parts = append(parts, t.Partitions...)
	}
	slices.Sort(parts)
	if slices.Equal(parts, m.owned) {
		return false, 0, nil
	}
	// Revoke first: drop what is gone; then take what is new.
	kept := m.owned[:0:0]
	for _, p := range m.owned {
		if _, in := slices.BinarySearch(parts, p); in {
			kept = append(kept, p)
		} else {
			revoked++
		}
	}
	m.owned = kept
	for _, p := range parts {
		if _, in := slices.BinarySearch(kept, p); !in {
			m.owned = append(m.owned, p)
		}
	}
	slices.Sort(m.owned)
	m.tell = true
	return true, revoked, nil
}

// ack records whether the member has now acknowledged its epoch: it sent
// a heartbeat at that epoch, with its partitions as they are, and the
// answer changed nothing. It returns the change (-1, 0, +1) of the
// member's group's settledness.
func (m *cgMember) ack(changed bool) int {
	epoch, parts := int32(-1), 0
	if !changed && !m.tell && m.sentEpoch == m.epoch {
		epoch, parts = m.epoch, len(m.owned)
	}
	if epoch == m.ackEpoch && parts == m.ackParts {
		return 0
	}
	g := m.group
	g.mu.Lock()
	defer g.mu.Unlock()
	if m.ackEpoch >= 0 {
		a := g.acks[m.ackEpoch]
		a[0]--
		a[1] -= m.ackParts
		g.acks[m.ackEpoch] = a
	}
	m.ackEpoch, m.ackParts = epoch, parts
	if epoch >= 0 {
		a := g.acks[epoch]
		a[0]++
		a[1] += parts
		g.acks[epoch] = a
	}
	// Every member must have acknowledged the same epoch, so only the
	// one this member acknowledged now can be it.
	settled := false
	if epoch > g.above {
		a := g.acks[epoch]
		settled = a[0] == len(g.members) && (g.partitions == 0 || a[1] == g.partitions)
	}
	switch {
	case settled && !g.settled:
		g.settled = true
		return 1
	case !settled && g.settled:
		g.settled = false
		return -1
	}
	return 0
}

// reset prepares a group for a drive that settles above epoch above.
func (g *cgGroup) reset(above int32) {
	g.above, g.settled = above, false
	g.acks = map[int32][2]int{}
	for _, m := range g.members {
		m.ackEpoch, m.ackParts = -1, 0
	}
}

// driveStats is what one drive took.
type driveStats struct {
	took  time.Duration // from the start (or the first held-back join) to the answer that settled the last group
	beats int64         // requests sent in that time
	moved int64         // partitions given up in that time
	lazy  int64         // requests encoded in that time (not prepared before)
}

// drive runs every member of groups, one heartbeat in flight each, until
// every group has settled: every member acknowledged the same epoch, above
// the group's floor, and (unless the server assigns nothing) they own all
// the topic's partitions between them. A member not yet joined joins at
// once, or, if holdJoins, once the members that have joined have sent a
// heartbeat each on average (as a newcomer joins a group that is already
// running); the time is taken from that join.
func drive(groups []*cgGroup, holdJoins bool, limit time.Duration) (driveStats, error) {
	var (
		members     []*cgMember
		joined      int64
		settled     atomic.Int64
		done        atomic.Bool
		beats       atomic.Int64
		moved, lazy atomic.Int64
		start, end  time.Time
		startOnce   sync.Once
		startBeats  int64
		warm        = make(chan struct{})
		warmOnce    sync.Once
	)
	for _, g := range groups {
		members = append(members, g.members...)
		for _, m := range g.members {
			if m.joined {
				joined++
			}
			m.c.arm(limit + time.Minute)
		}
	}
	if !holdJoins || joined == 0 {
		warmOnce.Do(func() { close(warm) })
	}
	begin := time.Now()
	_, err := parallel(len(members), func(i int) error {
		m := members[i]
		if !m.joined && holdJoins {
			<-warm
			startOnce.Do(func() { start, startBeats = time.Now(), beats.Load() })
		}
		for !done.Load() {
			p, encoded := m.request()
			m.sent()
			if n := beats.Add(1); n >= joined {
				warmOnce.Do(func() { close(warm) })
			}
			if encoded {
				lazy.Add(1)
			}
			resp, err := m.c.roundTrip(p)
			if err != nil {
				return fmt.Errorf("member %s: %w", m.id, err)
			}
			changed, revoked, err := m.apply(resp.(*kmsg.ConsumerGroupHeartbeatResponse))
			if err != nil {
				return err
			}
			if revoked > 0 {
				moved.Add(int64(revoked))
			}
			if d := m.ack(changed); d != 0 {
				if settled.Add(int64(d)) == int64(len(groups)) && done.CompareAndSwap(false, true) {
					end = time.Now()
				}
			}
			if time.Since(begin) > limit {
				return fmt.Errorf("%d of %d groups not settled after %v", int64(len(groups))-settled.Load(), len(groups), limit)
			}
		}
		return nil
	})
	if err != nil {
		return driveStats{}, err
	}
	if start.IsZero() {
		start = begin
	}
	return driveStats{end.Sub(start), beats.Load() - startBeats, moved.Load(), lazy.Load()}, nil
}

// check checks a settled group: every member at the same epoch and, if the
// server assigns, every partition owned by exactly one member. It returns
// the epoch.
func (g *cgGroup) check() (int32, error) {
	epoch := g.members[0].epoch
	owner := make(map[int32]string)
	for _, m := range g.members {
		if m.epoch != epoch {
			return 0, fmt.Errorf("%s: member %s at epoch %d, %s at %d", g.name, m.id, m.epoch, g.members[0].id, epoch)
		}
		for _, p := range m.owned {
			if o, ok := owner[p]; ok || p < 0 || (g.partitions > 0 && int(p) >= g.partitions) {
				return 0, fmt.Errorf("%s: partition %d owned by %s and %q", g.name, p, m.id, o)
			}
			owner[p] = m.id
		}
	}
	if g.partitions > 0 && len(owner) != g.partitions {
		return 0, fmt.Errorf("%s: %d of %d partitions owned", g.name, len(owner), g.partitions)
	}
	return epoch, nil
}

// cgSetup creates the topic and forms groups groups of size members, each
// member on its own connection, and drives them until they settle.
func cgSetup(o *options, topic string, prefix string, groups, size int) ([]*cgGroup, []*conn, error) {
	id, err := ensureTopic(o.target, topic, int32(o.partitions))
	if err != nil {
		return nil, nil, err
	}
	conns, err := dialN(o.target, groups*size)
	if err != nil {
		return nil, nil, err
	}
	parts := o.partitions
	if o.floor {
		parts = 0
	}
	gs := make([]*cgGroup, groups)
	for g := range gs {
		gs[g] = newGroup(fmt.Sprintf("%s-%d", prefix, g), topic, id, parts)
		for k := range size {
			gs[g].add(fmt.Sprintf("%s-%d-member-%04d", prefix, g, k), conns[g*size+k])
		}
	}
	if _, err := drive(gs, false, o.limit); err != nil {
		closeAll(conns)
		return nil, nil, fmt.Errorf("forming the groups: %w", err)
	}
	for _, g := range gs {
		if _, err := g.check(); err != nil {
			closeAll(conns)
			return nil, nil, err
		}
	}
	return gs, conns, nil
}

// runCGHeartbeat forms o.groups groups of o.size members subscribed to a
// topic of o.partitions partitions and, once they have settled, has every
// member send plain heartbeats back to back, one in flight each: o.warm
// each unmeasured, then o.beats each measured. It reports heartbeats per
// second and their latencies.
func runCGHeartbeat(o *options) error {
	gs, conns, err := cgSetup(o, "cg-small", "cg", o.groups, o.size)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	var members []*cgMember
	for _, g := range gs {
		members = append(members, g.members...)
	}
	n := len(members)
	beats := make([]prepared, n)
	for i, m := range members {
		beats[i] = prepare(plainHeartbeat(m.group.name, m.id, m.epoch))
	}
	beat := func(i int) error {
		m := members[i]
		resp, err := m.c.roundTrip(beats[i])
		if err != nil {
			return err
		}
		r := resp.(*kmsg.ConsumerGroupHeartbeatResponse)
		if r.ErrorCode != 0 || r.MemberEpoch != m.epoch || r.Assignment != nil {
			return fmt.Errorf("heartbeat of %s at epoch %d: error %d, epoch %d, assignment %v",
				m.id, m.epoch, r.ErrorCode, r.MemberEpoch, r.Assignment)
		}
		return nil
	}
	armAll(conns, ioTimeout)
	if _, err := parallel(n, func(i int) error {
		for range o.warm {
			if err := beat(i); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	lat := make([][]time.Duration, n)
	for i := range lat {
		lat[i] = make([]time.Duration, 0, o.beats)
	}
	runtime.GC()
	m := meter{pid: o.serverPID}
	m.start()
	d, err := parallel(n, func(i int) error {
		for range o.beats {
			t := time.Now()
			if err := beat(i); err != nil {
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
	r := result{Scenario: o.scenario, Metric: "consumer heartbeats", Unit: "hb/s", HigherIsBetter: true,
		Value: float64(ops) / d.Seconds(), P50ms: millis(percentile(all, 50)), P99ms: millis(percentile(all, 99))}
	m.fill(&r, ops)
	r.print()
	return nil
}

// runCGConverge forms one group of o.members members subscribed to a
// topic of o.partitions partitions, then o.rounds times: one more member
// joins while the others heartbeat, and the time is taken from its join
// until every member has acknowledged one epoch, the new member included,
// and they own every partition between them; the newcomer then leaves and
// the group settles again, unmeasured. It reports the median time.
func runCGConverge(o *options) error {
	gs, conns, err := cgSetup(o, "cg-big", "cg-big", 1, o.members)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	spare, err := dial(o.target)
	if err != nil {
		return err
	}
	defer spare.nc.Close()
	g := gs[0]
	var took, hb, moved, lazy []float64
	m := meter{pid: o.serverPID}
	for round := range o.rounds {
		epoch, err := g.check()
		if err != nil {
			return err
		}
		joiner := g.add(fmt.Sprintf("joiner-%04d", round), spare)
		for _, mm := range g.members {
			mm.preparePlain(epoch, epoch+1)
		}
		g.reset(epoch)
		runtime.GC()
		m.start()
		st, err := drive(gs, true, o.limit)
		m.add(st.took)
		if err != nil {
			return fmt.Errorf("round %d, after a join: %w", round, err)
		}
		if _, err := g.check(); err != nil {
			return fmt.Errorf("round %d, after a join: %w", round, err)
		}
		took = append(took, millis(st.took))
		hb = append(hb, float64(st.beats))
		moved = append(moved, float64(st.moved))
		lazy = append(lazy, float64(st.lazy))
		if err := g.leave(joiner); err != nil {
			return err
		}
		g.reset(joiner.epoch)
		if _, err := drive(gs, false, o.limit); err != nil {
			return fmt.Errorf("round %d, after a leave: %w", round, err)
		}
	}
	r := result{Scenario: o.scenario, Metric: fmt.Sprintf("convergence after a join, %d members", o.members+1), Unit: "ms",
		Value: median(slices.Clone(took))}
	m.fill(&r, int64(o.rounds))
	// CPU times are the rounds' windows' (from the first plain heartbeat
	// sent, a little before the join), per round.
	r.Extra = map[string]float64{"rounds": float64(o.rounds), "min_ms": minOf(took), "max_ms": maxOf(took),
		"hb": median(hb), "moved": median(moved), "encoded_in_window": median(lazy)}
	r.print()
	return nil
}

// leave takes a member out of its group with epoch -1.
func (g *cgGroup) leave(m *cgMember) error {
	req := plainHeartbeat(g.name, m.id, -1)
	m.c.arm(ioTimeout)
	resp, err := m.c.do(req)
	if err != nil {
		return err
	}
	if r := resp.(*kmsg.ConsumerGroupHeartbeatResponse); r.ErrorCode != 0 || r.MemberEpoch != -1 {
		return fmt.Errorf("leave of %s: error %d, epoch %d", m.id, r.ErrorCode, r.MemberEpoch)
	}
	g.members = slices.DeleteFunc(g.members, func(o *cgMember) bool { return o == m })
	return nil
}
