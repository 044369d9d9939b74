package replica

import (
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// leaderState is what a leader keeps beside the partition state.
type leaderState struct {
	epochStart int64        // the LEO when this leader epoch started
	peers      []*peer      // the other replicas, in assignment order
	write      *isrWrite    // the ISR write in flight, nil if none
	acks       []pendingAck // produces waiting, in arrival order
}

// isrWrite is a WriteISR whose result has not come back. It outlives a
// change of role so that there is never more than one in flight.
type isrWrite struct {
	isr   []int32
	epoch int32
}

type pendingAck struct {
	id         RequestID
	end        int64
	deadline   time.Time
	leaderOnly bool
}

// peer is the leader's view of a follower, as Kafka's ReplicaState.
type peer struct {
	id  int32
	leo int64 // its last fetch offset; -1 until it fetches from this leader
	// logStart is the log start offset its last fetch gave, -1 until
	// then (or if it gave none).
	logStart int64
	// lastFetchLeaderLEO and lastFetchTime are the leader's LEO and the
	// time at its previous fetch; lastCaughtUp is the last time it was
	// caught up (zero: never).
	lastFetchLeaderLEO int64
	lastFetchTime      time.Time
	lastCaughtUp       time.Time
}

// fetched records a fetch at offset (the follower's LEO), received at now
// while the leader's LEO was leaderLEO, as Kafka's
// Replica.updateFetchStateOrThrow does.
//
// A follower is caught up at the time of a fetch whose offset reaches the
// leader's LEO of that moment. It was also caught up at the time of its
// previous fetch if this fetch reaches the leader's LEO as of that
// previous fetch: it has now read everything the leader had then. Without
// the second rule, a follower fetching as fast as it can behind a steady
// stream of small produces would never reach the LEO of the moment and
// would be dropped from the ISR although it is never more than one fetch
// behind. lastCaughtUp never goes back.
func (p *peer) fetched(offset, leaderLEO int64, now time.Time) {
	switch {
	case offset >= leaderLEO:
		p.lastCaughtUp = later(p.lastCaughtUp, now)
	case offset >= p.lastFetchLeaderLEO:
		p.lastCaughtUp = later(p.lastCaughtUp, p.lastFetchTime)
	}
	p.leo = offset
	p.lastFetchLeaderLEO = max(leaderLEO, p.lastFetchLeaderLEO)
	p.lastFetchTime = now
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// becomeLeader starts a leader epoch at the LEO, as Kafka's
// Partition.makeLeader: the epoch's start goes to the epoch cache (so that
// a follower asking OffsetForLeaderEpoch for an older epoch learns where
// it ended here), and each follower's fetch state is reset. A follower in
// the ISR counts as caught up now, so that it has replica.lag.time.max to
// fetch from its new leader; one outside it never was. A node that was not
// leader before forgets the LEOs it may remember from an older leadership.
func (m *Machine) becomeLeader(wasNotLeader bool) {
	m.follower = followerState{}
	start := m.leo
	m.leader.epochStart = start
	m.emit(StartEpoch{Epoch: m.p.LeaderEpoch, Offset: start})
	if wasNotLeader {
		m.leader.peers = nil
	}
	m.syncPeers()
	for _, p := range m.leader.peers {
		var caught time.Time
		if slices.Contains(m.p.ISR, p.id) {
			caught = m.now
		}
		if wasNotLeader {
			*p = peer{id: p.id, leo: -1, logStart: -1, lastFetchLeaderLEO: -1, lastCaughtUp: caught}
		} else {
			p.lastFetchLeaderLEO, p.lastFetchTime, p.lastCaughtUp = start, caught, caught
		}
	}
}

// syncPeers keeps one peer per other replica, in assignment order.
func (m *Machine) syncPeers() {
	peers := make([]*peer, 0, len(m.p.Replicas))
	for _, id := range m.p.Replicas {
		if id == m.cfg.Node {
			continue
		}
		p := m.peer(id)
		if p == nil {
			p = &peer{id: id, leo: -1, logStart: -1, lastFetchLeaderLEO: -1}
		}
		peers = append(peers, p)
	}
	m.leader.peers = peers
}

// forgetBounced resets the fetch state of the followers whose
// registration changed since the state old: a new process, whose log is
// not the one its predecessor's fetches showed.
func (m *Machine) forgetBounced(old Partition) {
	for _, p := range m.leader.peers {
		was, ok1 := registration(old, p.id)
		now, ok2 := registration(m.p, p.id)
		if ok1 && ok2 && was != now {
			*p = peer{id: p.id, leo: -1, logStart: -1, lastFetchLeaderLEO: -1}
		}
	}
}

func (m *Machine) peer(id int32) *peer {
	for _, p := range m.leader.peers {
		if p.id == id {
			return p
		}
	}
	return nil
}

// followerFetch checks and records a follower's fetch. The answer's HW is
// filled in by Step once the fetch has had its effect.
func (m *Machine) followerFetch(e FollowerFetch) *FetchAnswer {
	a := &FetchAnswer{Node: e.Node}
	if err := m.CheckLeaderEpoch(m.now, e.LeaderEpoch); err != nil {
		a.Err = err
		return a
	}
	p := m.peer(e.Node)
	if p == nil {
		// As Kafka's followerReplicaOrThrow: the epoch matches but the
		// node is not a replica (yet: a reassignment may be adding it).
		// UNKNOWN_LEADER_EPOCH makes it retry.
		a.Err = errNotLeader
		if e.LeaderEpoch >= 0 {
			a.Err = kerr.UnknownLeaderEpoch
		}
		return a
	}
	if e.Offset < m.logStart || e.Offset > m.leo {
		a.Err = kerr.OffsetOutOfRange
		return a
	}
	p.fetched(e.Offset, m.leo, m.now)
	p.logStart = e.LogStart
	return a
}

// produce registers records appended as leader.
func (m *Machine) produce(e Produce) {
	if m.role != RoleLeader {
		m.emit(Ack{ID: e.ID, Err: errNotLeader})
		return
	}
	m.leo = max(m.leo, e.End)
	m.leader.acks = append(m.leader.acks, pendingAck{id: e.ID, end: e.End, deadline: e.Deadline, leaderOnly: e.LeaderOnly})
}

// expireAcks answers REQUEST_TIMED_OUT to the produces whose deadline has
// come.
func (m *Machine) expireAcks() {
	kept := m.leader.acks[:0]
	for _, a := range m.leader.acks {
		if !a.deadline.IsZero() && !m.now.Before(a.deadline) {
			m.emit(Ack{ID: a.id, Err: kerr.RequestTimedOut})
			continue
		}
		kept = append(kept, a)
	}
	m.leader.acks = kept
}

func (m *Machine) failAcks(err error) {
	for _, a := range m.leader.acks {
		m.emit(Ack{ID: a.id, Err: err})
	}
	m.leader.acks = nil
}

// leaderSettle runs after every event while leading: HW, acks, ISR. A
// leader whose lease is not live does none of it: it may already have
// been replaced.
func (m *Machine) leaderSettle() {
	if !m.live(m.now) {
		return
	}
	m.updateHW()
	m.releaseAcks()
	m.maybeChangeISR()
}

// maximalISR is the ISR the HW waits for (KIP-497): the committed one
// united with the one being written. An addition counts from the moment it
// is proposed, a removal only once it is written, so the HW never counts a
// replica out before etcd does.
func (m *Machine) maximalISR() []int32 {
	isr := slices.Clone(m.p.ISR)
	if w := m.leader.write; w != nil && w.epoch == m.p.LeaderEpoch {
		for _, id := range w.isr {
			if !slices.Contains(isr, id) {
				isr = append(isr, id)
			}
		}
	}
	return isr
}

// updateHW raises the HW to the minimum LEO over the maximal ISR, leader
// included; a follower that has not fetched yet holds it where it is.
// (Newer Kafka also lets a caught-up follower outside the ISR hold the HW,
// so that it can join an ISR of one, and with KIP-966 does not advance the
// HW below min.insync.replicas; neither is done here.)
func (m *Machine) updateHW() {
	hw := m.leo
	for _, id := range m.maximalISR() {
		if id == m.cfg.Node {
			continue
		}
		leo := int64(-1)
		if p := m.peer(id); p != nil {
			leo = p.leo
		}
		hw = min(hw, leo)
	}
	if hw > m.hw {
		m.hw = hw
		m.emit(SetHW{HW: hw})
	}
}

// releaseAcks answers the produces the HW has passed, as Kafka's
// Partition.checkEnoughReplicasReachOffset: if the ISR shrank below
// min.insync.replicas meanwhile, the records are there but the answer says
// NOT_ENOUGH_REPLICAS_AFTER_APPEND.
func (m *Machine) releaseAcks() {
	kept := m.leader.acks[:0]
	for _, a := range m.leader.acks {
		switch {
		case a.leaderOnly:
			m.emit(Ack{ID: a.id})
		case m.hw >= a.end:
			var err error
			if len(m.maximalISR()) < m.p.MinInsync {
				err = kerr.NotEnoughReplicasAfterAppend
			}
			m.emit(Ack{ID: a.id, Err: err})
		default:
			kept = append(kept, a)
		}
	}
	m.leader.acks = kept
}

// caughtUp is Kafka's ReplicaState.isCaughtUp: at the leader's LEO, or
// caught up within replica.lag.time.max.
func (m *Machine) caughtUp(p *peer) bool {
	return p.leo == m.leo || m.now.Sub(p.lastCaughtUp) <= m.cfg.LagTimeMax
}

// maybeChangeISR proposes at most one ISR change at a time: first the
// removal of ISR followers out of sync (Kafka's maybeShrinkIsr), else the
// addition of followers that reached both the HW and the start of this
// leader epoch (maybeExpandIsr): a follower that has only the previous
// leader's records must not count as in sync with this one.
func (m *Machine) maybeChangeISR() {
	if m.leader.write != nil {
		return
	}
	var isr []int32
	shrink := false
	for _, id := range m.p.ISR {
		if id != m.cfg.Node {
			// A fenced follower (a new process, whose log the ISR
			// does not speak for, or none at all) goes out at once,
			// as Kafka's controller takes a bounced or fenced broker
			// out of every ISR.
			if p := m.peer(id); p == nil || !m.caughtUp(p) || m.fenced(id) {
				shrink = true
				continue
			}
		}
		isr = append(isr, id)
	}
	if !shrink {
		grow := false
		for _, p := range m.leader.peers {
			if !slices.Contains(isr, p.id) && m.eligible(p.id) && p.leo >= 0 && p.leo >= m.hw && p.leo >= m.leader.epochStart {
				isr = append(isr, p.id)
				grow = true
			}
		}
		if !grow {
			return
		}
	}
	m.leader.write = &isrWrite{isr: isr, epoch: m.p.LeaderEpoch}
	m.emit(WriteISR{ISR: slices.Clone(isr), LeaderEpoch: m.p.LeaderEpoch, ExpectRevision: m.p.Revision})
}

// isrWritten commits the ISR write in flight, unless this node has
// meanwhile changed epoch or role.
func (m *Machine) isrWritten(e ISRWritten) {
	w := m.leader.write
	if w == nil {
		return
	}
	m.leader.write = nil
	if m.role != RoleLeader || w.epoch != m.p.LeaderEpoch || e.Revision < m.p.Revision {
		return
	}
	m.p.ISR, m.p.Revision = w.isr, e.Revision
}

// isrWriteFailed drops the write in flight and takes the state etcd holds:
// the same leader epoch means try again from it; another one means this
// node no longer leads (setState fails the waiting produces).
func (m *Machine) isrWriteFailed(e ISRWriteFailed) {
	if m.leader.write == nil {
		return
	}
	m.leader.write = nil
	m.setState(e.Current)
}

// shrinkDeadline is when the first ISR follower not at the leader's LEO
// falls out of sync: the first millisecond (Kafka's clock) at which its
// lag exceeds replica.lag.time.max.
func (m *Machine) shrinkDeadline() time.Time {
	var t time.Time
	if m.leader.write != nil || !m.live(m.now) {
		return t
	}
	for _, id := range m.p.ISR {
		p := m.peer(id)
		if p == nil || p.leo == m.leo || p.lastCaughtUp.IsZero() {
			continue
		}
		d := p.lastCaughtUp.Add(m.cfg.LagTimeMax + time.Millisecond)
		if t.IsZero() || d.Before(t) {
			t = d
		}
	}
	return t
}

// CheckAppend says whether a produce may be appended at now: only by the
// leader while its lease is live (else NOT_LEADER_OR_FOLLOWER), and with
// acks=all only while the ISR has min.insync.replicas members (else
// NOT_ENOUGH_REPLICAS, as Kafka's Partition.appendRecordsToLeader).
func (m *Machine) CheckAppend(now time.Time, acksAll bool) error {
	if m.role != RoleLeader || !m.live(now) {
		return errNotLeader
	}
	if acksAll && len(m.p.ISR) < m.p.MinInsync {
		return kerr.NotEnoughReplicas
	}
	return nil
}

// ClientHW is the HW to show clients (Fetch, ListOffsets) at now. A new
// leader's HW may lag behind the offset its epoch started at, below the
// HW the previous leader already showed; until it catches up the answer
// is OFFSET_NOT_AVAILABLE (KIP-207), so that no client sees the HW go
// back: ListOffsets answers that error, a consumer's Fetch an empty
// answer. A leader without a live lease answers NOT_LEADER_OR_FOLLOWER,
// as it refuses appends: it may already have been replaced, and what it
// would show may be older than what its successor showed.
func (m *Machine) ClientHW(now time.Time) (int64, error) {
	if m.role != RoleLeader || !m.live(now) {
		return -1, errNotLeader
	}
	if m.hw < m.leader.epochStart {
		return m.hw, kerr.OffsetNotAvailable
	}
	return m.hw, nil
}

// LowWatermark is the partition's low watermark as its leader knows it at
// now, as Kafka's Partition.lowWatermarkIfLeader: the smallest log start
// offset over this leader and the followers whose node is registered
// (alive), each as its last fetch of this leadership gave it (-1 for a
// follower that has not fetched yet). DeleteRecords waits for it to
// reach its offset. NOT_LEADER_OR_FOLLOWER unless this node leads under
// a live lease.
func (m *Machine) LowWatermark(now time.Time) (int64, error) {
	if m.role != RoleLeader || !m.live(now) {
		return -1, errNotLeader
	}
	low := m.logStart
	for _, p := range m.leader.peers {
		if reg, ok := registration(m.p, p.id); ok && reg == 0 {
			continue // not alive: Kafka's metadataCache.hasAliveBroker
		}
		low = min(low, p.logStart)
	}
	return low, nil
}
