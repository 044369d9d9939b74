// Package controller holds the decisions of the cluster's controller, as
// pure functions of the cluster as etcd holds it: which replica leads each
// partition, which dead replicas leave the ISR, when leadership goes back
// to the preferred replica, and how leadership moves off a node that is
// shutting down. It reads no clock and does no I/O; the node runtime
// (package cluster) gives it a View built from etcd and writes the
// decisions back by compare-and-swap on the revisions the View was read
// at, so that a decision taken on a stale view is refused by etcd and
// taken again on a fresh one.
//
// The rules are Kafka's controller's (of the ZooKeeper years):
//
//   - A new partition (a topic's key names it, and it has no state yet)
//     gets its first live replica as leader at epoch 0, with the live
//     replicas as ISR: the topic's creator writes only the topic.
//   - A partition whose leader is not alive, or is shutting down, gets as
//     leader the first replica, in assignment order, that is alive, not
//     shutting down and in the ISR, with the leader epoch bumped. With none
//     the partition goes offline (leader -1, epoch bumped so that the old
//     leader is fenced) and keeps its ISR, so that the last ISR member to
//     come back can lead again; with unclean.leader.election.enable it
//     takes the first alive replica instead, and the ISR shrinks to it.
//   - A replica that is not alive leaves the ISR of a partition whose
//     leader is alive (the leader would remove it after
//     replica.lag.time.max anyway; the controller does it at once, so that
//     min.insync.replicas sees the loss), but the ISR never becomes empty.
//   - When auto.leader.rebalance.enable is on and a check is due, a
//     partition whose preferred replica (the first of its assignment) is
//     alive, in the ISR, not shutting down and not the leader gets it back
//     as leader.
//   - A node that registered again (a new process, or the same one under a
//     new lease) after a partition's state was written is a "bounced
//     broker", as Kafka's controller calls a broker that re-registers
//     with a new epoch (KafkaController.processBrokerChange, then
//     onBrokerFailure and onBrokerStartup; KRaft's
//     ReplicationControlManager fences and unfences it): the state speaks
//     for its earlier process, whose log it may no longer have. For a
//     partition with a leader, it is handled as a failure first: a
//     bounced leader is replaced as if it were gone (the partition goes
//     offline if no other ISR member is eligible, so that it leads again
//     only at a new leader epoch), and a bounced replica leaves the ISR.
//     The bounced node is then an ordinary live replica. This comes
//     before any other decision on the partition: any write of its state
//     would make the bounce look older than the state.
//   - A node that registered with an empty disk (a new node, or one
//     whose disk was lost) after a partition's state was written has
//     none of the log the state counts it in sync with. It is not
//     elected from that ISR (without unclean.leader.election.enable), and
//     when a bounced leader takes its partition offline the empty-disk
//     members leave the ISR, unless none would be left: with every
//     in-sync copy lost there is nothing safer to elect. This is Kafka's
//     KIP-966 answer to an unclean start, narrowed to what a node can
//     tell at its start.
//   - A reassignment adds its target replicas to the assignment, waits
//     until every one of them is in the ISR, then gives the partition its
//     target assignment, moving leadership to a target replica if the
//     leader is not one, and removes the others from the ISR. Every write
//     of a reassignment compares the reassignment's revision, so that one
//     replaced or cancelled meanwhile is not carried on.
//   - A cancelled reassignment whose added replicas are already in the
//     assignment is a revert (Kafka's PartitionReassignmentRevert): the
//     partition gets its original replicas back at once, without waiting
//     for them to be in sync; the ISR loses the added replicas, and
//     leadership moves to an original replica in the ISR if an added one
//     led. If only added replicas are in the ISR, the revert waits until
//     the leader brings an original one back in sync (Kafka would make it
//     an unclean election; here no acknowledged record is given up). A
//     cancelled reassignment that added nothing yet is deleted by the node
//     that served the request; the controller never sees it.
//   - An election asked for by ElectLeaders (View.Elections) is answered
//     by the write that does it, which also deletes the request (and
//     compares its revision). A preferred election makes the first
//     replica of the assignment leader, at a new leader epoch, when it is
//     alive, in the ISR, not shutting down and not already leading, as
//     the periodic preferred-leader check does. An unclean election
//     applies to a partition with no live leader only: it elects as
//     unclean.leader.election.enable would (a live ISR member if there is
//     one, else the first live replica, the ISR shrinking to it). The
//     rules above come first: a partition with another decision to make
//     keeps its request for the next decision. A request that cannot be
//     done (the preferred replica not eligible or already leading; an
//     unclean election for a partition with a live leader, or with no
//     live replica) is deleted without a change (Write.DropElection):
//     the node that asked reads the outcome from the partition's state.
package controller

import (
	"cmp"
	"slices"
)

// NoLeader is the leader of a partition that has none (offline).
const NoLeader int32 = -1

// TopicID names a topic.
type TopicID [16]byte

// TP names one partition of a topic.
type TP struct {
	Topic     TopicID
	Partition int32
}

// Topic is a topic's assignment: the replicas of each partition, the
// first being its preferred leader.
type Topic struct {
	ID       TopicID
	Name     string
	Replicas [][]int32
	// UncleanLeaderElection is the topic's unclean.leader.election.enable.
	UncleanLeaderElection bool
}

// PartitionState is a partition's leadership as etcd holds it.
type PartitionState struct {
	Leader      int32
	LeaderEpoch int32
	ISR         []int32
	// PartitionEpoch counts every change of the state (leader or ISR).
	PartitionEpoch int32
	// Revision is the etcd mod revision the state was read at; a write
	// of a new state compares it.
	Revision int64
}

// Reassignment is a partition's move to a new set of replicas.
type Reassignment struct {
	Target []int32
	// Revert is a cancelled reassignment going back to its original
	// replicas, Target.
	Revert bool
	// Revision is the etcd mod revision of the reassignment; the writes
	// that carry it on compare it.
	Revision int64
}

// ElectionType is the kind of election an ElectLeaders request asks for.
type ElectionType int8

// The election types, numbered as ElectLeaders numbers them.
const (
	ElectPreferred ElectionType = 0
	ElectUnclean   ElectionType = 1
)

// Election is an election asked for on a partition.
type Election struct {
	Type ElectionType
	// Revision is the etcd mod revision of the request; the write that
	// answers it compares it and deletes the request.
	Revision int64
}

// View is the cluster as the controller decides on it.
type View struct {
	// Alive are the nodes registered under a live lease, with their rack.
	Alive map[int32]string
	// Registered is, per alive node, the etcd revision it registered at
	// (the create revision of its key). A node registered after a
	// partition state's Revision has bounced since that state.
	Registered map[int32]int64
	// EmptyDisk are the alive nodes that registered with an empty disk.
	EmptyDisk map[int32]bool
	// ShuttingDown are alive nodes that asked to give their leaderships
	// away before they stop.
	ShuttingDown map[int32]bool
	Topics       []Topic
	States       map[TP]PartitionState
	Reassign     map[TP]Reassignment
	// Elections are the elections asked for by ElectLeaders.
	Elections map[TP]Election
	// RebalanceDue says a preferred-leader check is due.
	RebalanceDue bool
	// AutoLeaderRebalance is auto.leader.rebalance.enable.
	AutoLeaderRebalance bool
}

// Write is one decision: the new state of a partition, to be written if
// its state is still at ExpectRevision, and for a reassignment the new
// replica list of the partition.
type Write struct {
	TP             TP
	State          PartitionState
	ExpectRevision int64
	// Replicas, if not nil, replaces the partition's assignment (a
	// reassignment completing or adding its target); the reassignment
	// is done when Finished is set.
	Replicas []int32
	Finished bool
	// ReassignRevision, if not 0, is the revision of the reassignment
	// the write carries on: the write holds only while the reassignment
	// is unchanged, and deletes it when Finished.
	ReassignRevision int64
	// ElectionRevision, if not 0, is the revision of the election
	// request the write answers: the write holds only while the request
	// is unchanged, and deletes it.
	ElectionRevision int64
	// DropElection says the write only deletes the election request at
	// ElectionRevision, which cannot be done: State is not written, but
	// the partition's state must still be at ExpectRevision.
	DropElection bool
	Reason       string
}

// Reasons of a Write.
const (
	ReasonLeaderGone   = "leader-gone"
	ReasonBounced      = "leader-bounced"
	ReasonIsrBounced   = "isr-bounced-replica"
	ReasonShutdown     = "controlled-shutdown"
	ReasonOffline      = "offline"
	ReasonUnclean      = "unclean-election"
	ReasonIsrDead      = "isr-dead-replica"
	ReasonPreferred    = "preferred-leader"
	ReasonReassignAdd  = "reassignment-add"
	ReasonReassignDone = "reassignment-done"
	ReasonFirstLeader  = "first-leader"
	ReasonNewPartition = "new-partition"
	// ReasonReassignRevert is a cancelled reassignment undone.
	ReasonReassignRevert = "reassignment-revert"
	// ReasonElectPreferred is a preferred election ElectLeaders asked for.
	ReasonElectPreferred = "requested-preferred-leader"
	// ReasonElectionDropped deletes an election request that cannot be
	// done (or is not needed).
	ReasonElectionDropped = "election-not-done"
)

// Decide returns the writes the controller makes on v, in a fixed order
// (topics by name, partitions in order), at most one per partition.
func Decide(v View) []Write {
	topics := slices.Clone(v.Topics)
	slices.SortFunc(topics, func(a, b Topic) int { return cmp.Compare(a.Name, b.Name) })
	var out []Write
	for _, t := range topics {
		for p, replicas := range t.Replicas {
			tp := TP{Topic: t.ID, Partition: int32(p)}
			st, ok := v.States[tp]
			if !ok {
				if w, ok := firstState(v, tp, replicas); ok {
					out = append(out, w)
				}
				continue
			}
			if w, ok := decideWithElection(v, t, tp, replicas, st); ok {
				out = append(out, w)
			}
		}
	}
	return out
}

// lostLog reports whether node n started on an empty disk after st was
// written, so that it has lost the log st counts it in sync with.
func lostLog(v View, st PartitionState, n int32) bool {
	return v.EmptyDisk[n] && v.Registered[n] > st.Revision
}

// bounced reports whether node n registered after st was written: the
// state speaks for an earlier process of it. An offline partition has
// nobody to fence; its last ISR member leads again whatever it restarted
// with, as in Kafka.
func bounced(v View, st PartitionState, n int32) bool {
	return st.Leader != NoLeader && v.Registered[n] > st.Revision
}

// decideWithElection is decidePartition, then the election asked for on
// the partition, if any: answered by the partition's decision when that
// elects as asked, else done or dropped when there is nothing else to do.
func decideWithElection(v View, t Topic, tp TP, replicas []int32, st PartitionState) (Write, bool) {
	e, asked := v.Elections[tp]
	unclean := t.UncleanLeaderElection || (asked && e.Type == ElectUnclean)
	w, ok := decidePartition(v, tp, replicas, st, unclean)
	if !asked {
		return w, ok
	}
	if ok {
		elected := w.State.Leader != NoLeader && w.State.LeaderEpoch > st.LeaderEpoch
		switch {
		case w.ReassignRevision != 0:
			// A reassignment's write carries its own condition; the
			// request waits for the next decision.
		case e.Type == ElectUnclean && elected,
			e.Type == ElectPreferred && elected && len(replicas) > 0 && w.State.Leader == replicas[0]:
			w.ElectionRevision = e.Revision
		}
		return w, true
	}
	drop := Write{TP: tp, ExpectRevision: st.Revision, ElectionRevision: e.Revision, DropElection: true, Reason: ReasonElectionDropped}
	if e.Type == ElectPreferred && len(replicas) > 0 {
		pref := replicas[0]
		_, ok := v.Alive[pref]
		if pref != st.Leader && ok && !v.ShuttingDown[pref] && !bounced(v, st, pref) && slices.Contains(st.ISR, pref) {
			return Write{TP: tp, ExpectRevision: st.Revision, ElectionRevision: e.Revision, Reason: ReasonElectPreferred,
				State: PartitionState{Leader: pref, LeaderEpoch: st.LeaderEpoch + 1, ISR: st.ISR, PartitionEpoch: st.PartitionEpoch + 1}}, true
		}
	}
	// Not eligible, already led as asked, or (unclean) led by a live
	// leader or without a live replica: decidePartition would have
	// elected otherwise.
	return drop, true
}

func decidePartition(v View, tp TP, replicas []int32, st PartitionState, unclean bool) (Write, bool) {
	next := func(leader int32, isr []int32, reason string) Write {
		return Write{TP: tp, ExpectRevision: st.Revision, Reason: reason, State: PartitionState{
			Leader: leader, LeaderEpoch: st.LeaderEpoch + 1, ISR: isr, PartitionEpoch: st.PartitionEpoch + 1,
		}}
	}
	// Bounced nodes first: any other write would hide the bounce.
	leaderBounced := bounced(v, st, st.Leader)
	if !leaderBounced {
		var isr []int32
		for _, r := range st.ISR {
			if r == st.Leader || !bounced(v, st, r) {
				isr = append(isr, r)
			}
		}
		if len(isr) < len(st.ISR) {
			w := next(st.Leader, isr, ReasonIsrBounced)
			w.State.LeaderEpoch = st.LeaderEpoch // the leader stays
			return w, true
		}
	}
	if r, ok := v.Reassign[tp]; ok && !leaderBounced {
		if w, ok := reassign(v, tp, replicas, st, r); ok {
			return w, true
		}
	}
	alive := func(n int32) bool { _, ok := v.Alive[n]; return ok && !v.ShuttingDown[n] && !bounced(v, st, n) }
	_, leaderAlive := v.Alive[st.Leader]
	if st.Leader == NoLeader || !leaderAlive || v.ShuttingDown[st.Leader] || leaderBounced {
		for _, r := range replicas {
			if alive(r) && slices.Contains(st.ISR, r) && !lostLog(v, st, r) {
				reason := ReasonLeaderGone
				switch {
				case st.Leader == NoLeader:
					reason = ReasonFirstLeader
				case leaderBounced:
					reason = ReasonBounced
				case leaderAlive:
					reason = ReasonShutdown
				}
				isr := slices.DeleteFunc(liveISR(st.ISR, r, v.Alive), func(x int32) bool { return x != r && bounced(v, st, x) })
				return next(r, isr, reason), true
			}
		}
		if leaderBounced {
			// No other replica may take over: the partition goes
			// offline, fencing the leader's old epoch, and its ISR
			// stays; the next decision elects the bounced node again
			// at a new epoch (Kafka's failure, then startup).
			isr := slices.DeleteFunc(slices.Clone(st.ISR), func(x int32) bool { return lostLog(v, st, x) })
			if len(isr) == 0 {
				isr = st.ISR
			}
			return next(NoLeader, isr, ReasonBounced), true
		}
		if unclean {
			for _, r := range replicas {
				if alive(r) {
					return next(r, []int32{r}, ReasonUnclean), true
				}
			}
		}
		if st.Leader == NoLeader || (leaderAlive && v.ShuttingDown[st.Leader]) {
			// Already offline, or a shutting-down leader with no one
			// to take over: it leads until it is gone.
			return Write{}, false
		}
		return next(NoLeader, st.ISR, ReasonOffline), true
	}
	if isr := liveISR(st.ISR, st.Leader, v.Alive); len(isr) < len(st.ISR) {
		w := next(st.Leader, isr, ReasonIsrDead)
		w.State.LeaderEpoch = st.LeaderEpoch // the leader stays
		return w, true
	}
	if v.AutoLeaderRebalance && v.RebalanceDue && len(replicas) > 0 {
		pref := replicas[0]
		if pref != st.Leader && alive(pref) && slices.Contains(st.ISR, pref) {
			return next(pref, st.ISR, ReasonPreferred), true
		}
	}
	return Write{}, false
}

// firstState is the state of a new partition: its first live replica
// leads at epoch 0, with the live replicas in sync (a new partition is
// empty, so every live replica has all of it).
func firstState(v View, tp TP, replicas []int32) (Write, bool) {
	var isr []int32
	for _, r := range replicas {
		if _, ok := v.Alive[r]; ok && !v.ShuttingDown[r] {
			isr = append(isr, r)
		}
	}
	if len(isr) == 0 {
		return Write{}, false // created when a replica is up
	}
	return Write{TP: tp, ExpectRevision: 0, Reason: ReasonNewPartition, State: PartitionState{Leader: isr[0], ISR: isr}}, true
}

// liveISR is isr without the replicas that are not alive, keeping leader
// (which is alive) in any case.
func liveISR(isr []int32, leader int32, alive map[int32]string) []int32 {
	out := make([]int32, 0, len(isr))
	for _, r := range isr {
		if _, ok := alive[r]; ok || r == leader {
			out = append(out, r)
		}
	}
	if !slices.Contains(out, leader) {
		out = append(out, leader)
	}
	return out
}

// reassign moves a partition toward its target replicas: first the
// assignment becomes current + target (new replicas start fetching), then,
// once every target replica is in the ISR, the target, with a leader among
// it and the others out of the ISR.
func reassign(v View, tp TP, replicas []int32, st PartitionState, r Reassignment) (Write, bool) {
	w, ok := reassignStep(v, tp, replicas, st, r)
	if ok {
		w.ReassignRevision = r.Revision
	}
	return w, ok
}

func reassignStep(v View, tp TP, replicas []int32, st PartitionState, r Reassignment) (Write, bool) {
	if r.Revert {
		return revert(v, tp, st, r)
	}
	union := slices.Clone(r.Target)
	for _, x := range replicas {
		if !slices.Contains(union, x) {
			union = append(union, x)
		}
	}
	if !sameSet(union, replicas) {
		return Write{TP: tp, ExpectRevision: st.Revision, Reason: ReasonReassignAdd, Replicas: union,
			State: PartitionState{Leader: st.Leader, LeaderEpoch: st.LeaderEpoch, ISR: st.ISR, PartitionEpoch: st.PartitionEpoch + 1}}, true
	}
	for _, x := range r.Target {
		if !slices.Contains(st.ISR, x) {
			return Write{}, false // still catching up
		}
	}
	isr := make([]int32, 0, len(r.Target))
	for _, x := range st.ISR {
		if slices.Contains(r.Target, x) {
			isr = append(isr, x)
		}
	}
	leader, epoch := st.Leader, st.LeaderEpoch
	if !slices.Contains(r.Target, leader) {
		leader, epoch = NoLeader, st.LeaderEpoch+1
		for _, x := range r.Target {
			if _, ok := v.Alive[x]; ok && !v.ShuttingDown[x] {
				leader = x
				break
			}
		}
	}
	return Write{TP: tp, ExpectRevision: st.Revision, Reason: ReasonReassignDone, Replicas: slices.Clone(r.Target), Finished: true,
		State: PartitionState{Leader: leader, LeaderEpoch: epoch, ISR: isr, PartitionEpoch: st.PartitionEpoch + 1}}, true
}

// revert gives a partition its original replicas, r.Target, back: the
// added replicas leave the ISR, and if one of them led, the first
// original replica in the ISR that is alive leads (none: offline, at a
// new epoch, with the original replicas of the ISR, so that one leads
// when it returns). With only added replicas in the ISR it waits.
func revert(v View, tp TP, st PartitionState, r Reassignment) (Write, bool) {
	var isr []int32
	for _, x := range st.ISR {
		if slices.Contains(r.Target, x) {
			isr = append(isr, x)
		}
	}
	if len(isr) == 0 {
		return Write{}, false
	}
	leader, epoch := st.Leader, st.LeaderEpoch
	if !slices.Contains(r.Target, leader) {
		leader, epoch = NoLeader, st.LeaderEpoch+1
		for _, x := range r.Target {
			if _, ok := v.Alive[x]; ok && !v.ShuttingDown[x] && slices.Contains(isr, x) && !bounced(v, st, x) {
				leader = x
				break
			}
		}
	}
	return Write{TP: tp, ExpectRevision: st.Revision, Reason: ReasonReassignRevert, Replicas: slices.Clone(r.Target), Finished: true,
		State: PartitionState{Leader: leader, LeaderEpoch: epoch, ISR: isr, PartitionEpoch: st.PartitionEpoch + 1}}, true
}

func sameSet(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
