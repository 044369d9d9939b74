package replica

import (
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// phase is where a follower is in its conversation with the leader.
type phase int8

const (
	phaseAsk        phase = iota // next: AskEpoch (OffsetForLeaderEpoch)
	phaseTruncate                // next: Truncate
	phaseFetch                   // next: Fetch
	phaseFenced                  // our epoch is old: wait for a newer SetState
	phaseOutOfRange              // next: AskEpoch for the leader's log end
)

func (p phase) String() string {
	return [...]string{"ask", "truncate", "fetch", "fenced", "out-of-range"}[p]
}

// followerState is what a follower keeps beside the partition state. It
// has at most one request (AskEpoch, Truncate or Fetch) in flight.
type followerState struct {
	phase      phase
	inFlight   bool
	retryAt    time.Time // no request before this (retry backoff)
	truncateTo int64
	fetchNext  bool // after the truncation: fetch (else ask again)
	// truncateFull: the truncation empties the log and restarts it at
	// truncateTo (TruncateFully).
	truncateFull bool
}

// becomeFollower starts the conversation with a new leader (or epoch):
// find the divergence point first, then fetch.
func (m *Machine) becomeFollower() {
	m.leader.peers = nil
	m.follower = followerState{phase: phaseAsk}
}

// followerSend sends the next request if none is in flight and nothing
// holds it back: a fence, the lease, the retry backoff.
func (m *Machine) followerSend() {
	f := &m.follower
	if f.inFlight || f.phase == phaseFenced || !m.live(m.now) || m.now.Before(f.retryAt) {
		return
	}
	f.inFlight = true
	switch f.phase {
	case phaseAsk:
		latest, ok := m.cfg.Epochs.Latest()
		if ok {
			m.emit(AskEpoch{Leader: m.p.Leader, LeaderEpoch: m.p.LeaderEpoch, Epoch: latest})
			return
		}
		// No epoch to ask about: truncate to the HW, as Kafka's fetcher
		// does for a replica without epochs (truncateToHighWatermark).
		f.phase, f.truncateTo, f.fetchNext = phaseTruncate, min(m.hw, m.leo), true
		fallthrough
	case phaseTruncate:
		if f.truncateFull {
			m.emit(TruncateFully{Offset: f.truncateTo})
			return
		}
		m.emit(Truncate{To: f.truncateTo})
	case phaseOutOfRange:
		// The leader's end offset for its own epoch is its log end.
		m.emit(AskEpoch{Leader: m.p.Leader, LeaderEpoch: m.p.LeaderEpoch, Epoch: m.p.LeaderEpoch})
	case phaseFetch:
		m.emit(Fetch{Leader: m.p.Leader, LeaderEpoch: m.p.LeaderEpoch, Offset: m.leo, LogStart: m.logStart})
	}
}

// awaiting reports whether a result sent under leaderEpoch is the answer
// to the request in flight in phase ph; anything else is stale.
func (m *Machine) awaiting(ph phase, leaderEpoch int32) bool {
	f := &m.follower
	return m.role == RoleFollower && f.inFlight && f.phase == ph && leaderEpoch == m.p.LeaderEpoch
}

func (m *Machine) epochAnswer(e EpochAnswer) {
	if !m.awaiting(phaseAsk, e.LeaderEpoch) && !m.awaiting(phaseOutOfRange, e.LeaderEpoch) {
		return
	}
	f := &m.follower
	f.inFlight = false
	if e.Err != nil {
		m.followerError(e.Err)
		return
	}
	if f.phase == phaseOutOfRange {
		m.outOfRange(e.End)
		return
	}
	f.phase = phaseTruncate
	f.truncateTo, f.fetchNext = m.truncationPoint(e.Epoch, e.End)
}

// outOfRange goes on after a fetch answered OFFSET_OUT_OF_RANGE, given the
// leader's log end, as Kafka's AbstractFetcherThread.fetchOffsetAndTruncate
// (handleOutOfRangeError) does. A leader whose log ends below ours (it
// lost its disk, or was elected uncleanly) makes us truncate to its log
// end and fetch from there: not to our HW, which may be above that end
// (then the fetch would be out of range again, forever), and not by
// asking OffsetForLeaderEpoch again, which would lead back to the HW.
// Records below that end may differ from the leader's; Kafka does not
// mend that either, and it only happens once acknowledged records are
// lost. A leader whose log reaches ours grew meanwhile (or moved its log
// start past our end without saying so in its answer; one that says so
// is handled at once, see fetchFailed): find the divergence again
// (OffsetForLeaderEpoch) after the backoff, then fetch.
func (m *Machine) outOfRange(leaderEnd int64) {
	f := &m.follower
	switch {
	case leaderEnd >= 0 && leaderEnd < m.leo:
		f.phase, f.truncateTo, f.fetchNext = phaseTruncate, leaderEnd, true
	default:
		// Ask again where our log diverges from the leader's before
		// fetching from our end: records at our end may have come from
		// an older leader.
		f.phase = phaseAsk
		f.retryAt = m.now.Add(m.cfg.RetryBackoff)
	}
}

// AwaitsFetch reports whether the answer to a fetch sent with leaderEpoch
// at offset is the one the follower waits for, so that the runtime may
// append its records: an answer to a fetch of an older leader epoch (a
// request parked at the old leader, answered after the leader changed) or
// from before a truncation must be dropped, records and all, as Kafka's
// AbstractFetcherThread drops the data of a partition whose fetch state
// changed while the request was out.
func (m *Machine) AwaitsFetch(leaderEpoch int32, offset int64) bool {
	return m.awaiting(phaseFetch, leaderEpoch) && offset == m.leo
}

// truncationPoint is Kafka's AbstractFetcherThread.getOffsetTruncationState
// (KIP-101, KIP-279): where to truncate given the leader's answer (epoch,
// end) to OffsetForLeaderEpoch(my latest epoch), and whether to fetch next
// (else ask again).
func (m *Machine) truncationPoint(epoch int32, end int64) (int64, bool) {
	switch {
	case end < 0:
		// The leader has no epoch as old as the one asked: it cannot say
		// where we diverge. Truncate to the HW, which it holds.
		return min(m.hw, m.leo), true
	case epoch < 0:
		// An answer without an epoch (OffsetForLeaderEpoch v0, KIP-101
		// alone): its end offset is all there is.
		return min(end, m.leo), true
	}
	mine, myEnd, ok := m.cfg.Epochs.EndOffsetFor(epoch)
	switch {
	case !ok:
		// Every epoch we have is newer than the leader's answer: our
		// whole log from its end offset on is unknown to the leader.
		return min(end, m.leo), true
	case mine != epoch:
		// KIP-279: the leader answered with an epoch we never had (it
		// lacks the one we asked for). Our largest epoch below it may
		// still diverge from the leader's log somewhere before the
		// leader's end offset, so truncate to where our own epoch ends
		// and ask again for that epoch: the next question names a
		// smaller epoch, so this ends.
		return min(myEnd, m.leo), false
	default:
		// Same epoch on both sides: the logs agree up to the smaller of
		// the two ends of it.
		return min(myEnd, end, m.leo), true
	}
}

// truncated takes the new LEO; a truncation below the HW lowers it (only
// an unclean election can make a leader ask for that).
func (m *Machine) truncated(e Truncated) {
	m.leo = e.LEO
	m.hw = min(m.hw, m.leo)
	if !m.awaiting(phaseTruncate, m.p.LeaderEpoch) {
		return
	}
	f := &m.follower
	f.inFlight = false
	if f.truncateFull {
		// The log restarted empty at LEO: its start and its HW (which
		// the log set itself) are there.
		m.logStart, m.hw, f.truncateFull = m.leo, m.leo, false
	}
	if f.fetchNext {
		f.phase = phaseFetch
	} else {
		f.phase = phaseAsk
	}
}

// fetched takes the LEO (the records are in the log, whoever sent them)
// and, from the current leader, its HW: min(leader's HW, LEO), never back.
func (m *Machine) fetched(e Fetched) {
	m.leo = e.LEO
	if !m.awaiting(phaseFetch, e.LeaderEpoch) {
		return
	}
	m.follower.inFlight = false
	if hw := min(e.HW, m.leo); hw > m.hw {
		m.hw = hw
		m.emit(SetHW{HW: hw})
	}
}

func (m *Machine) fetchFailed(e FetchFailed) {
	if !m.awaiting(phaseFetch, e.LeaderEpoch) {
		return
	}
	f := &m.follower
	f.inFlight = false
	if errors.Is(e.Err, kerr.OffsetOutOfRange) && e.LeaderLogStart > m.leo {
		// The leader's log start has moved past our log end (retention
		// or DeleteRecords while we were out of the ISR or away): the
		// records we lack are gone. Kafka's fetchOffsetAndTruncate
		// (handleOutOfRangeError) asks the leader's log end, finds it
		// at or past the leader's start, so past ours, asks its start
		// and truncates fully there. Here the leader's answer carries
		// its start, so the end need not be asked: it is at least the
		// start. Asking OffsetForLeaderEpoch instead would lead back to
		// our own end, and the fetch would be out of range for ever.
		f.phase, f.truncateTo, f.truncateFull, f.fetchNext = phaseTruncate, e.LeaderLogStart, true, true
		return
	}
	m.followerError(e.Err)
}

// followerError handles an error from the leader as Kafka's fetcher does.
// FENCED_LEADER_EPOCH: the leader has a newer epoch than ours, which etcd
// will bring; wait for it. UNKNOWN_LEADER_EPOCH (the leader has not learnt
// our epoch yet), NOT_LEADER_OR_FOLLOWER, a lost request and the rest:
// try again after the backoff; no new state may be coming. An offset out
// of range asks the leader for its log end (outOfRange).
func (m *Machine) followerError(err error) {
	f := &m.follower
	switch {
	case errors.Is(err, kerr.FencedLeaderEpoch):
		f.phase = phaseFenced
		return
	case errors.Is(err, kerr.OffsetOutOfRange):
		// Ask the leader where its log ends (outOfRange), at once.
		f.phase = phaseOutOfRange
		return
	}
	f.retryAt = m.now.Add(m.cfg.RetryBackoff)
}
