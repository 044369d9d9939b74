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
//   - A reassignment adds its target replicas to the assignment, waits
//     until every one of them is in the ISR, then gives the partition its
//     target assignment, moving leadership to a target replica if the
//     leader is not one, and removes the others from the ISR.
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
}

// View is the cluster as the controller decides on it.
type View struct {
	// Alive are the nodes registered under a live lease, with their rack.
	Alive map[int32]string
	// ShuttingDown are alive nodes that asked to give their leaderships
	// away before they stop.
	ShuttingDown map[int32]bool
	Topics       []Topic
	States       map[TP]PartitionState
	Reassign     map[TP]Reassignment
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
	Reason   string
}

// Reasons of a Write.
const (
	ReasonLeaderGone   = "leader-gone"
	ReasonShutdown     = "controlled-shutdown"
	ReasonOffline      = "offline"
	ReasonUnclean      = "unclean-election"
	ReasonIsrDead      = "isr-dead-replica"
	ReasonPreferred    = "preferred-leader"
	ReasonReassignAdd  = "reassignment-add"
	ReasonReassignDone = "reassignment-done"
	ReasonFirstLeader  = "first-leader"
	ReasonNewPartition = "new-partition"
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
			if w, ok := decidePartition(v, t, tp, replicas, st); ok {
				out = append(out, w)
			}
		}
	}
	return out
}

func decidePartition(v View, t Topic, tp TP, replicas []int32, st PartitionState) (Write, bool) {
	if r, ok := v.Reassign[tp]; ok {
		if w, ok := reassign(v, tp, replicas, st, r); ok {
			return w, true
		}
	}
	alive := func(n int32) bool { _, ok := v.Alive[n]; return ok && !v.ShuttingDown[n] }
	next := func(leader int32, isr []int32, reason string) Write {
		return Write{TP: tp, ExpectRevision: st.Revision, Reason: reason, State: PartitionState{
			Leader: leader, LeaderEpoch: st.LeaderEpoch + 1, ISR: isr, PartitionEpoch: st.PartitionEpoch + 1,
		}}
	}
	_, leaderAlive := v.Alive[st.Leader]
	if st.Leader == NoLeader || !leaderAlive || v.ShuttingDown[st.Leader] {
		for _, r := range replicas {
			if alive(r) && slices.Contains(st.ISR, r) {
				reason := ReasonLeaderGone
				switch {
				case st.Leader == NoLeader:
					reason = ReasonFirstLeader
				case leaderAlive:
					reason = ReasonShutdown
				}
				return next(r, liveISR(st.ISR, r, v.Alive), reason), true
			}
		}
		if t.UncleanLeaderElection {
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
