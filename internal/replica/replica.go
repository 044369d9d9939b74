package replica

import (
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Defaults of Config.
const (
	// DefaultLagTimeMax is Kafka's replica.lag.time.max.ms.
	DefaultLagTimeMax = 30 * time.Second
	// DefaultRetryBackoff is Kafka's replica.fetch.backoff.ms.
	DefaultRetryBackoff = time.Second
)

// errNotLeader is NOT_LEADER_OR_FOLLOWER (code 6, kerr's older name).
var errNotLeader = kerr.NotLeaderForPartition

// NoLeader is Partition.Leader when the partition has none (offline).
const NoLeader int32 = -1

// Config is what a machine is made with.
type Config struct {
	// Node is this node's id.
	Node int32
	// LagTimeMax is replica.lag.time.max: an ISR follower not caught up
	// for longer is removed. Zero means DefaultLagTimeMax.
	LagTimeMax time.Duration
	// LeaseMargin is subtracted from the lease deadline: the lease is live
	// while now < deadline - LeaseMargin. No default: the runtime passes
	// --node-session-timeout / 10.
	LeaseMargin time.Duration
	// RetryBackoff delays a follower's request after a retriable error.
	// Zero means DefaultRetryBackoff.
	RetryBackoff time.Duration
	// Epochs reads the local leader-epoch cache.
	Epochs EpochCache
}

// EpochCache is a read-only view of the local leader-epoch cache
// (leader-epoch-checkpoint: the start offset of every leader epoch). The
// runtime answers synchronously; the machine never writes it directly.
type EpochCache interface {
	// Latest is the largest epoch in the cache; ok is false if it is empty.
	Latest() (epoch int32, ok bool)
	// EndOffsetFor is Kafka's LeaderEpochFileCache.endOffsetFor: the
	// largest cached epoch <= epoch, and its end offset (the start offset
	// of the next cached epoch, or the LEO for the latest). ok is false if
	// every cached epoch is larger than epoch.
	EndOffsetFor(epoch int32) (found int32, end int64, ok bool)
}

// Partition is the partition state etcd holds, with the topic's
// min.insync.replicas.
type Partition struct {
	Replicas    []int32 // assignment order
	Leader      int32   // NoLeader if none
	LeaderEpoch int32
	ISR         []int32
	Revision    int64 // mod revision of the partition's key
	MinInsync   int
	// Registrations are, for each of Replicas, the etcd revision its
	// node's current process registered at (0: not registered; for this
	// node, its own registration). nil: not known, nothing is fenced.
	//
	// A replica registered after Revision, or not at all, is fenced: the
	// state speaks for an earlier process of it, whose log this one may
	// not have (a lost disk); Kafka's controller calls it a bounced
	// broker. This node does not lead by a state fenced for it; as leader
	// it takes fenced followers out of the ISR before any other change,
	// and adds only registered ones (KIP-841: a fenced broker is not
	// eligible); a follower whose registration changed is a new process,
	// whose earlier fetches count no more. The controller replaces a
	// fenced leader.
	Registrations []int64
}

// Local is what the local log holds when the machine is made.
type Local struct {
	LogStart int64
	LEO      int64
	HW       int64 // the checkpointed high watermark
}

// RequestID is the runtime's handle of a produce waiting for its
// acknowledgement; Ack carries it back.
type RequestID uint64

// Role is what this node is for the partition.
type Role int8

// Roles.
const (
	RoleNone Role = iota
	RoleLeader
	RoleFollower
)

func (r Role) String() string {
	switch r {
	case RoleLeader:
		return "leader"
	case RoleFollower:
		return "follower"
	}
	return "none"
}

// Event is an input to Step.
type Event interface{ isEvent() }

// SetState gives the partition state as etcd now holds it.
type SetState struct{ State Partition }

// Lease gives this node's lease deadline (the send time of the last
// answered keep-alive plus the TTL it gave).
type Lease struct{ Deadline time.Time }

// Tick lets time pass.
type Tick struct{}

// Appended reports the local log's LEO after an append the machine did not
// hear of through Produce (acks=0 produces, a coordinator's records...).
type Appended struct{ LEO int64 }

// LogStart reports the local log's start offset after retention or
// DeleteRecords moved it.
type LogStart struct{ Offset int64 }

// FollowerFetch is a Fetch from replica Node, asked of this node as
// leader. LeaderEpoch is the request's current leader epoch (-1: not
// given, as in Fetch before v9); Offset is its fetch offset, which is the
// follower's LEO; LogStart is the follower's log start offset, as Kafka's
// followers send it in each fetch (-1: not given). Step answers it with a
// FetchAnswer.
type FollowerFetch struct {
	Node        int32
	LeaderEpoch int32
	Offset      int64
	LogStart    int64
}

// Produce reports records appended by this node as leader, ending at End
// (exclusive: the LEO right after them). The machine answers with an Ack
// once they may be acknowledged: for acks=all once HW >= End; for
// LeaderOnly (acks=1) at once. Either way only while the lease is live,
// and at the latest by Deadline (REQUEST_TIMED_OUT).
type Produce struct {
	ID         RequestID
	End        int64
	Deadline   time.Time
	LeaderOnly bool
}

// ISRWritten reports that the last WriteISR succeeded at Revision.
type ISRWritten struct{ Revision int64 }

// ISRWriteFailed reports that the last WriteISR was refused; Current is the
// partition state etcd holds now.
type ISRWriteFailed struct{ Current Partition }

// EpochAnswer is the leader's answer to AskEpoch (OffsetForLeaderEpoch).
// LeaderEpoch is the one the question was sent with. Err is nil or the
// partition's error; otherwise Epoch and End are the leader's largest
// epoch <= the one asked and its end offset (-1 and -1: undefined).
type EpochAnswer struct {
	LeaderEpoch int32
	Err         error
	Epoch       int32
	End         int64
}

// Truncated reports that the last Truncate or TruncateFully was done; LEO
// is the log's end offset now.
type Truncated struct{ LEO int64 }

// Fetched reports a fetch from the leader, sent with LeaderEpoch, whose
// records were appended: LEO is the local log's end offset now, HW the
// leader's high watermark in the answer.
type Fetched struct {
	LeaderEpoch int32
	LEO         int64
	HW          int64
}

// FetchFailed reports a fetch from the leader, sent with LeaderEpoch, that
// was answered with the partition error Err, or not answered at all.
// LeaderLogStart is the leader's log start offset given with an
// OFFSET_OUT_OF_RANGE answer (0 or -1: not given).
type FetchFailed struct {
	LeaderEpoch    int32
	Err            error
	LeaderLogStart int64
}

func (SetState) isEvent()       {}
func (Lease) isEvent()          {}
func (Tick) isEvent()           {}
func (Appended) isEvent()       {}
func (LogStart) isEvent()       {}
func (FollowerFetch) isEvent()  {}
func (Produce) isEvent()        {}
func (ISRWritten) isEvent()     {}
func (ISRWriteFailed) isEvent() {}
func (EpochAnswer) isEvent()    {}
func (Truncated) isEvent()      {}
func (Fetched) isEvent()        {}
func (FetchFailed) isEvent()    {}

// Effect is an output of Step, for the runtime to perform in order.
type Effect interface{ isEffect() }

// StartEpoch asks the runtime to record, in the leader-epoch cache, that
// leader epoch Epoch starts at Offset, before it appends in that epoch.
type StartEpoch struct {
	Epoch  int32
	Offset int64
}

// SetHW gives the new high watermark. It only grows, except that a
// Truncate below the HW lowers it to the truncation offset.
type SetHW struct{ HW int64 }

// Ack answers a produce: Err is nil, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
// REQUEST_TIMED_OUT or NOT_LEADER_OR_FOLLOWER.
type Ack struct {
	ID  RequestID
	Err error
}

// WriteISR asks for a compare-and-swap of the partition state: set ISR,
// if the key's mod revision is still ExpectRevision (so its leader epoch
// is still LeaderEpoch). Report ISRWritten or ISRWriteFailed.
type WriteISR struct {
	ISR            []int32
	LeaderEpoch    int32
	ExpectRevision int64
}

// FetchAnswer answers a FollowerFetch: Err nil means read records from the
// fetch offset and answer with HW.
type FetchAnswer struct {
	Node int32
	Err  error
	HW   int64
}

// AskEpoch asks Leader OffsetForLeaderEpoch for Epoch, with the current
// leader epoch LeaderEpoch. Report EpochAnswer, or EpochAnswer with Err
// set if it could not be asked.
type AskEpoch struct {
	Leader      int32
	LeaderEpoch int32
	Epoch       int32
}

// Truncate asks the runtime to truncate the local log to To (drop offsets
// >= To), and its leader-epoch cache from the end (drop epochs starting at
// or after To, even when To >= LEO and no record goes). Do it before
// stepping any other event, then report Truncated.
type Truncate struct{ To int64 }

// TruncateFully asks the runtime to delete every record of the local log
// and restart it empty at Offset, its new log start and end, with an
// empty leader-epoch cache and the high watermark at Offset (Kafka's
// truncateFullyAndStartAt): the leader's log start has moved past this
// replica's log end. Do it before stepping any other event, then report
// Truncated.
type TruncateFully struct{ Offset int64 }

// Fetch asks the runtime to fetch from Leader at Offset with leader epoch
// LeaderEpoch, append what comes at the leader's offsets, and report
// Fetched or FetchFailed. LogStart is the local log's start offset, which
// the fetch tells the leader (Kafka's Fetch LogStartOffset): a leader
// waits for its followers' log starts to answer DeleteRecords.
type Fetch struct {
	Leader      int32
	LeaderEpoch int32
	Offset      int64
	LogStart    int64
}

func (StartEpoch) isEffect()    {}
func (SetHW) isEffect()         {}
func (Ack) isEffect()           {}
func (WriteISR) isEffect()      {}
func (FetchAnswer) isEffect()   {}
func (AskEpoch) isEffect()      {}
func (Truncate) isEffect()      {}
func (TruncateFully) isEffect() {}
func (Fetch) isEffect()         {}

// Machine is one partition's replica on one node.
type Machine struct {
	cfg      Config
	p        Partition // the last state applied; zero until hasState
	hasState bool
	role     Role
	lease    time.Time // lease deadline
	now      time.Time // of the Step running
	out      []Effect

	logStart, leo, hw int64

	leader   leaderState
	follower followerState
}

// New makes a machine with no partition state: it does nothing until a
// SetState gives it a role and a Lease makes its lease live.
func New(cfg Config, local Local) *Machine {
	if cfg.LagTimeMax == 0 {
		cfg.LagTimeMax = DefaultLagTimeMax
	}
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	return &Machine{cfg: cfg, logStart: local.LogStart, leo: local.LEO, hw: local.HW}
}

// Step applies one event at now and returns the effects to perform, in
// order. now must not go back between steps.
func (m *Machine) Step(now time.Time, ev Event) []Effect {
	m.now, m.out = now, nil
	// Deadlines first: a produce whose deadline has passed is answered
	// REQUEST_TIMED_OUT even if this event would have let it through.
	m.expireAcks()
	var answer *FetchAnswer
	switch e := ev.(type) {
	case SetState:
		m.setState(e.State)
	case Lease:
		m.lease = e.Deadline
	case Tick:
	case Appended:
		m.leo = max(m.leo, e.LEO)
	case LogStart:
		m.logStart = e.Offset
	case FollowerFetch:
		answer = m.followerFetch(e)
	case Produce:
		m.produce(e)
	case ISRWritten:
		m.isrWritten(e)
	case ISRWriteFailed:
		m.isrWriteFailed(e)
	case EpochAnswer:
		m.epochAnswer(e)
	case Truncated:
		m.truncated(e)
	case Fetched:
		m.fetched(e)
	case FetchFailed:
		m.fetchFailed(e)
	}
	switch m.role {
	case RoleLeader:
		m.leaderSettle()
	case RoleFollower:
		m.followerSend()
	}
	if answer != nil {
		// Answered last, with the HW this fetch may have moved.
		if answer.Err == nil {
			answer.HW = m.hw
		}
		m.emit(*answer)
	}
	return m.out
}

func (m *Machine) emit(e Effect) { m.out = append(m.out, e) }

// live reports whether the lease lets this node act at now.
func (m *Machine) live(now time.Time) bool {
	return now.Before(m.lease.Add(-m.cfg.LeaseMargin))
}

// setState applies a partition state from etcd (or from a failed ISR
// write) and changes role when it says so.
func (m *Machine) setState(p Partition) {
	if m.hasState && (p.Revision < m.p.Revision || p.LeaderEpoch < m.p.LeaderEpoch) {
		return // older than what we have
	}
	old, had := m.p, m.hasState
	p.Replicas = slices.Clone(p.Replicas)
	p.ISR = slices.Clone(p.ISR)
	p.Registrations = slices.Clone(p.Registrations)
	m.p, m.hasState = p, true

	role := RoleNone
	switch {
	case p.Leader == m.cfg.Node && m.fenced(m.cfg.Node):
		// A leadership given to an earlier process of this node (the
		// listing a restarted node reads, or a state older than the
		// lease it registered again under): not ours until the
		// controller elects this process, at a new leader epoch.
	case p.Leader == m.cfg.Node:
		role = RoleLeader
	case p.Leader != NoLeader && slices.Contains(p.Replicas, m.cfg.Node):
		role = RoleFollower
	}
	changed := !had || p.Leader != old.Leader || p.LeaderEpoch != old.LeaderEpoch
	if m.role == RoleLeader && (role != RoleLeader || changed) {
		// Produces accepted in another epoch are not ours to answer OK
		// any more: the client retries against the leader it finds.
		m.failAcks(errNotLeader)
	}
	prev := m.role
	m.role = role
	switch {
	case role == RoleLeader && (prev != RoleLeader || changed):
		m.becomeLeader(prev != RoleLeader)
	case role == RoleLeader:
		m.syncPeers()
		m.forgetBounced(old)
	case role == RoleFollower && (prev != RoleFollower || changed):
		m.becomeFollower()
	case role == RoleNone:
		m.leader.peers = nil
		m.follower = followerState{}
	}
}

// Role is this node's role for the partition.
func (m *Machine) Role() Role { return m.role }

// LeaderEpoch is the leader epoch of the partition state the machine
// has (-1 before it has one).
func (m *Machine) LeaderEpoch() int32 {
	if !m.hasState {
		return -1
	}
	return m.p.LeaderEpoch
}

// HW is the high watermark as this replica knows it.
func (m *Machine) HW() int64 { return m.hw }

// LEO is the local log end offset as the machine last heard of it.
func (m *Machine) LEO() int64 { return m.leo }

// Follower is what a leader knows of one of its followers, for the
// replica lag metrics.
type Follower struct {
	Node int32
	// LEO is the offset of the follower's last fetch from this leader
	// (its log end offset then), -1 before its first fetch of this
	// leadership.
	LEO int64
	// Lag is the leader's LEO less the follower's, -1 while LEO is.
	Lag   int64
	InISR bool
	// LastCaughtUp is the last time the follower had everything the
	// leader had (zero: never in this leadership).
	LastCaughtUp time.Time
}

// Followers returns a leader's followers in assignment order; nil unless
// this replica leads.
func (m *Machine) Followers() []Follower {
	if m.role != RoleLeader {
		return nil
	}
	out := make([]Follower, 0, len(m.leader.peers))
	for _, p := range m.leader.peers {
		f := Follower{Node: p.id, LEO: p.leo, Lag: -1, InISR: slices.Contains(m.p.ISR, p.id), LastCaughtUp: p.lastCaughtUp}
		if p.leo >= 0 {
			f.Lag = max(m.leo-p.leo, 0)
		}
		out = append(out, f)
	}
	return out
}

// registration is node's entry of p.Registrations; ok is false if the
// runtime gives none.
func registration(p Partition, node int32) (reg int64, ok bool) {
	i := slices.Index(p.Replicas, node)
	if p.Registrations == nil || i < 0 || i >= len(p.Registrations) {
		return 0, false
	}
	return p.Registrations[i], true
}

// fenced reports whether the state speaks for an earlier process of node
// (or for one that is not registered at all).
func (m *Machine) fenced(node int32) bool {
	reg, ok := registration(m.p, node)
	return ok && (reg == 0 || reg > m.p.Revision)
}

// eligible reports whether node may join the ISR: it is registered.
func (m *Machine) eligible(node int32) bool {
	reg, ok := registration(m.p, node)
	return !ok || reg != 0
}

// CheckLeaderEpoch checks a request's current leader epoch (-1: not given)
// against this node's at now, as Kafka's leader does for Fetch, ListOffsets
// and OffsetForLeaderEpoch: FENCED_LEADER_EPOCH if older,
// UNKNOWN_LEADER_EPOCH if newer, NOT_LEADER_OR_FOLLOWER if equal but this
// node does not lead, or leads without a live lease: it may already have
// been replaced, and its log may not be the one its leadership was given
// for (a process restarted on a lost disk).
func (m *Machine) CheckLeaderEpoch(now time.Time, epoch int32) error {
	if !m.hasState {
		return errNotLeader
	}
	switch {
	case epoch >= 0 && epoch < m.p.LeaderEpoch:
		return kerr.FencedLeaderEpoch
	case epoch > m.p.LeaderEpoch:
		return kerr.UnknownLeaderEpoch
	case m.role != RoleLeader || !m.live(now):
		return errNotLeader
	}
	return nil
}

// NextDeadline is the earliest time at which a Tick would do something: a
// produce's deadline, an ISR follower falling out of sync, a follower's
// retry. ok is false if nothing is due.
func (m *Machine) NextDeadline() (t time.Time, ok bool) {
	at := func(d time.Time) {
		if !d.IsZero() && (!ok || d.Before(t)) {
			t, ok = d, true
		}
	}
	for _, a := range m.leader.acks {
		at(a.deadline)
	}
	switch m.role {
	case RoleLeader:
		at(m.shrinkDeadline())
	case RoleFollower:
		if m.follower.retryAt.After(m.now) {
			at(m.follower.retryAt)
		}
	}
	return t, ok
}
