package replica

import (
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

var (
	seedFlag  = flag.Int64("seed", -1, "run TestProperties with this seed only")
	seedsFlag = flag.Int("seeds", 150, "how many seeds TestProperties runs")
)

// TestProperties runs a leader (node 1) and two followers (2, 3), all real
// machines, over a model of etcd and of each node's log, with random
// fetches, appends, produces, ticks, stalled followers, refused ISR writes
// and lapsed leases, and checks after every step:
//
//   - the leader's HW never goes back, and is at most the true LEO of every
//     replica etcd has in the ISR (and of every one in the maximal ISR);
//   - an acks=all produce is acknowledged only once the HW has passed it
//     (and every replica etcd has in the ISR has it), and OK only if that
//     ISR (with the write in flight) has min.insync.replicas members;
//   - nothing is acknowledged unless now < lease deadline - margin;
//   - a produce is answered once: REQUEST_TIMED_OUT not before its
//     deadline, anything else before it; every produce is answered in the
//     end;
//   - a follower's HW never goes back, nor past its LEO or the leader's HW.
//
// A failure prints its seed; replay it with
// `go test ./internal/replica -run TestProperties -seed=N -v`.
func TestProperties(t *testing.T) {
	var total simStats
	run := func(seed int64) {
		s := newSim(seed)
		if err := s.run(1500); err != nil {
			t.Fatalf("seed %d: %v\nreplay: go test ./internal/replica -run TestProperties -seed=%d -v\nlast steps:\n%s",
				seed, err, seed, strings.Join(s.trace, "\n"))
		}
		total.add(s.stats)
	}
	if *seedFlag >= 0 {
		run(*seedFlag)
	} else {
		for seed := int64(0); seed < int64(*seedsFlag); seed++ {
			run(seed)
		}
	}
	t.Logf("%+v", total)
	// The run must have exercised what it checks.
	if total.ackedOK == 0 || total.afterAppend == 0 || total.timedOut == 0 || total.shrinks == 0 ||
		total.expands == 0 || total.casFailed == 0 || total.heldByLease == 0 {
		t.Fatalf("a property was never exercised: %+v", total)
	}
}

type simStats struct {
	ackedOK, afterAppend, timedOut, refused  int
	shrinks, expands, casFailed, heldByLease int
}

func (a *simStats) add(b simStats) {
	a.ackedOK += b.ackedOK
	a.afterAppend += b.afterAppend
	a.timedOut += b.timedOut
	a.refused += b.refused
	a.shrinks += b.shrinks
	a.expands += b.expands
	a.casFailed += b.casFailed
	a.heldByLease += b.heldByLease
}

type simNode struct {
	id      int32
	m       *Machine
	log     *testLog
	req     Effect // a follower's request in flight
	hw      int64  // the HW its SetHW effects said last
	stalled bool   // a follower that does not fetch for now
}

type simProduce struct {
	end        int64
	deadline   time.Time
	leaderOnly bool
}

type sim struct {
	r        *rand.Rand
	now      time.Time
	margin   time.Duration
	lease    time.Time // the leader's
	renewing bool
	etcd     Partition
	nodes    []*simNode // by id-1
	write    *WriteISR  // the leader's ISR write in flight
	produces map[RequestID]simProduce
	nextID   RequestID
	trace    []string
	stats    simStats
}

func newSim(seed int64) *sim {
	s := &sim{
		r:        rand.New(rand.NewSource(seed)),
		now:      t0,
		margin:   time.Second,
		renewing: true,
		etcd:     Partition{Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 1, ISR: []int32{1, 2, 3}, Revision: 1, MinInsync: 2},
		produces: map[RequestID]simProduce{},
	}
	for id := int32(1); id <= 3; id++ {
		log := &testLog{}
		n := &simNode{id: id, log: log}
		n.m = New(Config{Node: id, LagTimeMax: 5 * time.Second, LeaseMargin: s.margin, RetryBackoff: 100 * time.Millisecond, Epochs: log}, Local{})
		s.nodes = append(s.nodes, n)
	}
	s.lease = s.now.Add(9 * time.Second)
	return s
}

func (s *sim) leader() *simNode { return s.nodes[0] }

func (s *sim) logf(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf("%s: ", since(s.now))+fmt.Sprintf(format, args...))
	if len(s.trace) > 40 {
		s.trace = s.trace[1:]
	}
}

// fail is how a check reports; run turns the panic back into an error.
type simFailure struct{ err error }

func (s *sim) check(ok bool, format string, args ...any) {
	if !ok {
		panic(simFailure{fmt.Errorf(format, args...)})
	}
}

func (s *sim) run(steps int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(simFailure)
			if !ok {
				panic(r)
			}
			err = f.err
		}
	}()
	for _, n := range s.nodes {
		lease := s.lease
		if n.id != 1 {
			lease = s.now.Add(1000 * time.Hour) // followers' leases are not under test
		}
		s.step(n, Lease{Deadline: lease})
		s.step(n, SetState{State: s.etcd})
	}
	for i := 0; i < steps; i++ {
		s.randomStep()
		s.checkState()
	}
	// The end: a live lease, no stalls, everything delivered; then every
	// produce must have had its answer by the time its deadline passed.
	s.renewing = true
	for _, n := range s.nodes {
		n.stalled = false
	}
	for i := 0; i < 200; i++ {
		s.advance(100 * time.Millisecond)
		for _, n := range s.nodes[1:] {
			s.deliver(n)
		}
		s.deliverWrite()
		s.checkState()
	}
	s.advance(20 * time.Second)
	s.check(len(s.produces) == 0, "%d produces never answered", len(s.produces))
	return nil
}

func (s *sim) randomStep() {
	l := s.leader()
	switch x := s.r.Intn(100); {
	case x < 20:
		s.advance(time.Duration(s.r.Intn(1500)) * time.Millisecond)
	case x < 40:
		acksAll := s.r.Intn(10) > 0
		if err := l.m.CheckAppend(s.now, acksAll); err != nil {
			s.stats.refused++
			s.logf("produce refused: %v", err)
			return
		}
		l.log.leo += int64(1 + s.r.Intn(5))
		s.nextID++
		p := simProduce{end: l.log.leo, deadline: s.now.Add(time.Duration(1+s.r.Intn(10)) * time.Second), leaderOnly: !acksAll}
		s.produces[s.nextID] = p
		s.logf("produce %d end=%d acks-all=%v", s.nextID, p.end, acksAll)
		s.step(l, Produce{ID: s.nextID, End: p.end, Deadline: p.deadline, LeaderOnly: p.leaderOnly})
	case x < 45:
		if l.m.CheckAppend(s.now, false) == nil {
			l.log.leo += int64(1 + s.r.Intn(5))
			s.logf("append leo=%d", l.log.leo)
			s.step(l, Appended{LEO: l.log.leo})
		}
	case x < 85:
		s.deliver(s.nodes[1+s.r.Intn(2)])
	case x < 92:
		s.deliverWrite()
	case x < 95:
		// Someone else writes the key (same leader epoch): the leader's
		// next compare-and-swap fails on the revision.
		s.etcd.Revision++
		s.logf("etcd rev=%d by someone else", s.etcd.Revision)
		for _, n := range s.nodes {
			s.step(n, SetState{State: s.etcd})
		}
	case x < 98:
		n := s.nodes[1+s.r.Intn(2)]
		n.stalled = !n.stalled
		s.logf("node %d stalled=%v", n.id, n.stalled)
	default:
		s.renewing = !s.renewing
		s.logf("lease renewing=%v", s.renewing)
	}
}

// advance lets time pass; the leader's lease is renewed (keep-alives sent
// now, answered) unless renewals are off.
func (s *sim) advance(d time.Duration) {
	s.now = s.now.Add(d)
	s.logf("tick")
	if s.renewing {
		s.lease = s.now.Add(9 * time.Second)
		s.step(s.leader(), Lease{Deadline: s.lease})
	}
	for _, n := range s.nodes {
		s.step(n, Tick{})
	}
}

// deliver performs a follower's request in flight and reports its result.
func (s *sim) deliver(n *simNode) {
	if n.req == nil || n.stalled {
		return
	}
	req := n.req
	n.req = nil
	l := s.leader()
	switch e := req.(type) {
	case AskEpoch:
		var ans EpochAnswer
		ans.LeaderEpoch = e.LeaderEpoch
		if err := l.m.CheckLeaderEpoch(s.now, e.LeaderEpoch); err != nil {
			ans.Err = err
		} else if ep, end, ok := l.log.EndOffsetFor(e.Epoch); ok {
			ans.Epoch, ans.End = ep, end
		} else {
			ans.Epoch, ans.End = -1, -1
		}
		s.logf("node %d epoch-answer %+v", n.id, ans)
		s.step(n, ans)
	case Truncate:
		n.log.truncate(e.To)
		s.logf("node %d truncated to %d", n.id, e.To)
		s.step(n, Truncated{LEO: n.log.leo})
	case Fetch:
		if s.r.Intn(20) == 0 {
			s.logf("node %d fetch lost", n.id)
			s.step(n, FetchFailed{LeaderEpoch: e.LeaderEpoch, Err: errors.New("connection reset")})
			return
		}
		s.logf("node %d fetches at %d", n.id, e.Offset)
		var answer *FetchAnswer
		for _, eff := range s.step(l, FollowerFetch{Node: n.id, LeaderEpoch: e.LeaderEpoch, Offset: e.Offset}) {
			if a, ok := eff.(FetchAnswer); ok {
				answer = &a
			}
		}
		s.check(answer != nil, "no FetchAnswer")
		if answer.Err != nil {
			s.step(n, FetchFailed{LeaderEpoch: e.LeaderEpoch, Err: answer.Err})
			return
		}
		// Some of what the leader has, at the leader's offsets, with
		// the leader's epochs.
		s.check(n.log.leo == e.Offset, "node %d fetches at %d with LEO %d", n.id, e.Offset, n.log.leo)
		n.log.leo = e.Offset + s.r.Int63n(l.log.leo-e.Offset+1)
		for _, ep := range l.log.epochs {
			if ep.start < n.log.leo {
				n.log.assign(ep.epoch, ep.start)
			}
		}
		s.step(n, Fetched{LeaderEpoch: e.LeaderEpoch, LEO: n.log.leo, HW: answer.HW})
	}
}

// deliverWrite applies the leader's ISR write to etcd by compare-and-swap.
func (s *sim) deliverWrite() {
	w := s.write
	if w == nil {
		return
	}
	s.write = nil
	if w.ExpectRevision != s.etcd.Revision || w.LeaderEpoch != s.etcd.LeaderEpoch {
		s.stats.casFailed++
		s.logf("write-isr %v refused at rev %d", w.ISR, s.etcd.Revision)
		s.step(s.leader(), ISRWriteFailed{Current: s.etcd})
		return
	}
	if len(w.ISR) < len(s.etcd.ISR) {
		s.stats.shrinks++
	} else {
		s.stats.expands++
	}
	s.etcd.ISR = slices.Clone(w.ISR)
	s.etcd.Revision++
	s.logf("write-isr %v ok rev=%d", w.ISR, s.etcd.Revision)
	for _, n := range s.nodes[1:] {
		s.step(n, SetState{State: s.etcd})
	}
	s.step(s.leader(), ISRWritten{Revision: s.etcd.Revision})
}

// step runs one event on a node and checks its effects as they come.
func (s *sim) step(n *simNode, ev Event) []Effect {
	out := n.m.Step(s.now, ev)
	l := s.leader()
	for _, e := range out {
		switch e := e.(type) {
		case StartEpoch:
			n.log.assign(e.Epoch, e.Offset)
		case SetHW:
			s.check(e.HW > n.hw, "node %d: HW %d after %d", n.id, e.HW, n.hw)
			s.check(e.HW <= n.log.leo, "node %d: HW %d past its LEO %d", n.id, e.HW, n.log.leo)
			if n != l {
				s.check(e.HW <= l.hw, "node %d: HW %d past the leader's %d", n.id, e.HW, l.hw)
			}
			n.hw = e.HW
		case Ack:
			s.checkAck(n, e)
		case WriteISR:
			s.check(n == l && s.write == nil, "a second ISR write in flight")
			w := e
			s.write = &w
			s.logf("write-isr %v proposed", e.ISR)
		case AskEpoch, Truncate, Fetch:
			s.check(n != l && n.req == nil, "node %d: a second request in flight", n.id)
			n.req = e
		}
	}
	return out
}

func (s *sim) checkAck(n *simNode, a Ack) {
	p, ok := s.produces[a.ID]
	s.check(ok, "produce %d answered twice (or never made)", a.ID)
	delete(s.produces, a.ID)
	s.logf("ack %d %v", a.ID, a.Err)
	if errors.Is(a.Err, kerr.RequestTimedOut) {
		s.check(!s.now.Before(p.deadline), "produce %d timed out at %s before its deadline %s", a.ID, since(s.now), since(p.deadline))
		s.stats.timedOut++
		return
	}
	if a.Err != nil && !errors.Is(a.Err, kerr.NotEnoughReplicasAfterAppend) {
		s.check(false, "produce %d: unexpected %v", a.ID, a.Err)
	}
	// An answer other than a timeout: only before the deadline ...
	s.check(s.now.Before(p.deadline), "produce %d answered %v at %s, deadline %s", a.ID, a.Err, since(s.now), since(p.deadline))
	// ... only under a live lease ...
	s.check(s.now.Before(s.lease.Add(-s.margin)), "produce %d acknowledged at %s, lease deadline %s", a.ID, since(s.now), since(s.lease))
	if p.leaderOnly {
		return
	}
	// ... only once the HW has passed it, and every replica in etcd's ISR
	// has it.
	s.check(p.end <= n.hw, "produce %d (end %d) acknowledged with HW %d", a.ID, p.end, n.hw)
	for _, id := range s.etcd.ISR {
		s.check(p.end <= s.nodes[id-1].log.leo, "produce %d (end %d) acknowledged, ISR member %d has %d", a.ID, p.end, id, s.nodes[id-1].log.leo)
	}
	// ... and OK only if the ISR it counted (etcd's, with the write in
	// flight) has min.insync.replicas members.
	isr := slices.Clone(s.etcd.ISR)
	if s.write != nil {
		for _, id := range s.write.ISR {
			if !slices.Contains(isr, id) {
				isr = append(isr, id)
			}
		}
	}
	enough := len(isr) >= s.etcd.MinInsync
	s.check(enough == (a.Err == nil), "produce %d answered %v with ISR %v (min %d)", a.ID, a.Err, isr, s.etcd.MinInsync)
	if a.Err == nil {
		s.stats.ackedOK++
	} else {
		s.stats.afterAppend++
	}
}

// checkState checks what must hold between steps.
func (s *sim) checkState() {
	l := s.leader()
	s.check(l.m.HW() == l.hw, "leader HW %d, its effects said %d", l.m.HW(), l.hw)
	for _, id := range append(slices.Clone(s.etcd.ISR), l.m.maximalISR()...) {
		leo := s.nodes[id-1].log.leo
		s.check(l.hw <= leo, "leader HW %d past the LEO %d of ISR member %d", l.hw, leo, id)
	}
	for _, n := range s.nodes[1:] {
		s.check(n.m.HW() <= n.log.leo, "node %d: HW %d past its LEO %d", n.id, n.m.HW(), n.log.leo)
	}
	if len(l.m.leader.acks) > 0 && !l.m.live(s.now) {
		s.stats.heldByLease++
	}
}
