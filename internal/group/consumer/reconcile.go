package consumer

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// current is a member's current assignment: what a CurrentAssignment record
// holds.
type current struct {
	epoch, prev int32
	state       MemberState
	assigned    partSet // with assignment epochs
	pending     partSet // pending revocation, with assignment epochs
}

func (mem *member) current() current {
	return current{epoch: mem.epoch, prev: mem.prevEpoch, state: mem.state, assigned: mem.assigned, pending: mem.pending}
}

func (c current) equal(o current) bool {
	return c.epoch == o.epoch && c.prev == o.prev && c.state == o.state &&
		c.assigned.equal(o.assigned) && c.pending.equal(o.pending)
}

// withEpoch is Kafka's updateMemberEpoch: the previous epoch becomes the
// current one even when the epoch does not change.
func (c current) withEpoch(e int32) current {
	c.prev, c.epoch = c.epoch, e
	return c
}

// owned is the TopicPartitions of a heartbeat; nil means the member did not
// say (unchanged since its last heartbeat).
type owned []kmsg.ConsumerGroupHeartbeatRequestTopic

// ownsAny reports whether the member still owns any partition of s. A member
// that did not report what it owns is taken to still own everything.
func (o owned) ownsAny(s partSet) bool {
	if o == nil {
		return true
	}
	for _, t := range o {
		ps := s.partitions(t.TopicID)
		if ps == nil {
			continue
		}
		for _, p := range t.Partitions {
			if _, ok := slices.BinarySearch(ps, p); ok {
				return true
			}
		}
	}
	return false
}

// subsetOf reports whether every owned partition is in s; an unreported
// set is not a subset of anything (Kafka's isSubset).
func (o owned) subsetOf(s partSet) bool {
	if o == nil {
		return false
	}
	for _, t := range o {
		ps := s.partitions(t.TopicID)
		for _, p := range t.Partitions {
			if _, ok := slices.BinarySearch(ps, p); !ok {
				return false
			}
		}
	}
	return true
}

// reconciler is Kafka's CurrentAssignmentBuilder: given a member, the
// target assignment and what the member reports owning, it takes the next
// step towards the target. Partitions are revoked before any is assigned,
// and a partition still held by another member is never handed out.
type reconciler struct {
	m           *Machine
	g           *group
	mem         *member
	targetEpoch int32
	target      partSet
	// enforce strips topics the member no longer subscribes to even when
	// it is otherwise reconciled; set when its subscription just changed.
	enforce bool
	owned   owned
}

// next returns the member's next current assignment.
func (r *reconciler) next() current {
	cur := r.mem.current()
	switch cur.state {
	case MemberStable:
		if cur.epoch != r.targetEpoch {
			return r.computeNext(cur.epoch)
		}
		if r.enforce {
			return r.dropUnsubscribed(cur.epoch)
		}
		return cur
	case MemberUnrevokedPartitions:
		// Nothing moves until the member stops reporting the partitions
		// it was asked to give up.
		if r.owned.ownsAny(cur.pending) {
			if r.enforce {
				return r.dropUnsubscribed(cur.epoch)
			}
			return cur
		}
		return r.computeNext(cur.epoch)
	case MemberUnreleasedPartitions:
		return r.computeNext(cur.epoch)
	}
	// A state from a newer version: the caller has already fenced a
	// member that owns anything, so start afresh at the target epoch.
	return r.computeNext(r.targetEpoch)
}

// subscribed reports whether the member subscribes to topic id, by name or
// through its regex; a topic that no longer exists is not subscribed.
func (r *reconciler) subscribed(id TopicID) bool {
	name, ok := r.m.topics.name(id)
	if !ok {
		return false
	}
	if _, ok := slices.BinarySearch(r.mem.meta.names, name); ok {
		return true
	}
	if r.mem.meta.regex == "" {
		return false
	}
	rs := r.g.regexes[r.mem.meta.regex]
	if rs == nil {
		return false
	}
	_, ok = slices.BinarySearch(rs.topics, name)
	return ok
}

// computeNext is CurrentAssignmentBuilder.computeNextAssignment. Per topic:
// assigned = current ∩ target; pending revocation = current − assigned;
// to assign = target − assigned − partitions another member still holds.
func (r *reconciler) computeNext(memberEpoch int32) current {
	cur := r.mem.current()
	if r.keepsAll(cur.assigned) {
		// The target is what the member holds, the common case of an
		// epoch bump in a large group: the member moves to the target
		// epoch with its partitions and their epochs as they are, and
		// nothing is pending. This is what the general case below
		// computes, without building the sets again.
		next := cur.withEpoch(r.targetEpoch)
		next.state, next.pending = MemberStable, nil
		return next
	}
	assigned := newPartBuilder(true)
	pending := newPartBuilder(true)
	toAssign := newPartBuilder(true)
	unreleased := false
	mergeTopics(r.target, cur.assigned, func(id TopicID, tgt, have *topicParts) {
		var target []int32
		if tgt != nil && r.subscribed(id) {
			target = tgt.parts
		}
		if have != nil {
			for i, p := range have.parts {
				if _, ok := slices.BinarySearch(target, p); ok {
					assigned.add(id, p, epochAt(have.epochs, i))
				} else {
					pending.add(id, p, epochAt(have.epochs, i))
				}
			}
		}
		for _, p := range target {
			if have != nil {
				if _, ok := slices.BinarySearch(have.parts, p); ok {
					continue
				}
			}
			if o, held := r.g.owners[tp{id, p}]; held && o != r.mem.id {
				unreleased = true
				continue
			}
			toAssign.add(id, p, r.targetEpoch)
		}
	})
	newAssigned, newPending, add := assigned.done(), pending.done(), toAssign.done()
	switch {
	case len(newPending) > 0 && r.owned.ownsAny(newPending):
		// Revoke first: stay at the current epoch until the member has
		// let go of the partitions.
		next := cur.withEpoch(memberEpoch)
		next.state, next.assigned, next.pending = MemberUnrevokedPartitions, newAssigned, newPending
		return next
	case len(add) > 0:
		next := cur.withEpoch(r.targetEpoch)
		next.state = MemberStable
		if unreleased {
			next.state = MemberUnreleasedPartitions
		}
		next.assigned, next.pending = union(newAssigned, add), nil
		return next
	default:
		next := cur.withEpoch(r.targetEpoch)
		next.state = MemberStable
		if unreleased {
			next.state = MemberUnreleasedPartitions
		}
		next.assigned, next.pending = newAssigned, nil
		return next
	}
}

// keepsAll reports whether the member's target is exactly the partitions
// it holds (with their assignment epochs), every topic of it subscribed:
// then the member keeps them all, gives up none and is given none.
func (r *reconciler) keepsAll(held partSet) bool {
	if !r.target.samePartitions(held) {
		return false
	}
	for i, t := range held {
		if len(t.epochs) != len(t.parts) || !r.subscribed(r.target[i].id) {
			return false
		}
	}
	return true
}

// dropUnsubscribed is CurrentAssignmentBuilder.updateCurrentAssignment:
// after a subscription change, topics the member no longer subscribes to
// leave its assignment at once and must be revoked, without waiting for a
// new target.
func (r *reconciler) dropUnsubscribed(memberEpoch int32) current {
	cur := r.mem.current()
	var kept, removed partSet
	for _, t := range cur.assigned {
		if r.subscribed(t.id) {
			kept = append(kept, t)
		} else {
			removed = append(removed, t)
		}
	}
	if len(removed) == 0 {
		return cur
	}
	newPending := union(cur.pending, removed)
	next := cur.withEpoch(memberEpoch)
	next.assigned = kept
	if r.owned.ownsAny(newPending) {
		next.state, next.pending = MemberUnrevokedPartitions, newPending
	}
	return next
}
