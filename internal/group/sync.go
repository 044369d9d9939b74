package group

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/group/core"
	"github.com/groupd/groupd/internal/inspect"
)

// emptyConsumerAssignment is a serialized ConsumerMemberAssignment with no
// partitions. franz-go cannot parse a zero-length assignment, so members of a
// "consumer" group that the leader left out get this instead of Kafka's empty
// bytes.
var emptyConsumerAssignment = func() []byte {
	a := kmsg.NewConsumerMemberAssignment()
	return a.AppendTo(nil)
}()

func (m *Machine) syncGroup(r Request, req *kmsg.SyncGroupRequest) {
	// Answered at once unless parked, when it moves to the member.
	p := &parked{id: r.ID, version: req.Version}
	if req.Version >= 5 && (req.ProtocolType == nil || req.Protocol == nil) {
		m.replySyncError(p, errInconsistentProtocol)
		return
	}
	if req.Group == "" {
		m.replySyncError(p, errInvalidGroupID)
		return
	}
	instanceID := ""
	if req.Version >= 3 && req.InstanceID != nil {
		instanceID = *req.InstanceID
	}
	g := m.groups[req.Group]
	if g == nil {
		m.replySyncError(p, errUnknownMemberID)
		return
	}
	if g.consumer {
		m.classicToConsumerGroup(r)
		return
	}
	if code := g.validateMember(req.MemberID, instanceID); code != 0 {
		if code == errUnknownMemberID {
			m.heardFromDeparted(g, req.MemberID)
		}
		m.replySyncError(p, code)
		return
	}
	if req.Generation != g.generation {
		m.replySyncError(p, errIllegalGeneration)
		return
	}
	// Only compared once the group has chosen; before that Kafka's
	// group-side values are null.
	if (req.ProtocolType != nil && g.protocolType != "" && *req.ProtocolType != g.protocolType) ||
		(req.Protocol != nil && g.protocol != "" && *req.Protocol != g.protocol && !g.toldOtherProtocol()) {
		m.replySyncError(p, errInconsistentProtocol)
		return
	}
	mem := g.members[req.MemberID]
	mem.lastSeen = m.now
	switch g.state {
	case PreparingRebalance:
		m.replySyncError(p, errRebalanceInProgress)
	case CompletingRebalance:
		if mem.sync != nil {
			// Superseded by a retry; free the old handle.
			m.replySyncError(mem.sync, errRebalanceInProgress)
		}
		mem.syncSlot = *p
		mem.sync = &mem.syncSlot
		delete(g.pendingSync, mem.id)
		if g.leader != mem.id {
			return
		}
		// Members the leader left out get an empty assignment; the
		// last entry for a member wins.
		ms := g.sortedMembers()
		for _, mem := range ms {
			mem.assignment = []byte{}
		}
		for _, a := range req.GroupAssignment {
			if mem := g.members[a.MemberID]; mem != nil {
				mem.assignment = a.MemberAssignment
			}
		}
		if g.protocolType == consumerProtocolType {
			for _, mem := range ms {
				if len(mem.assignment) == 0 {
					mem.assignment = emptyConsumerAssignment
				}
			}
		}
		// The record carries the assignment; every reply below waits for
		// it, which is Kafka's "propagate on append success".
		m.record(m.metadataRecord(g))
		m.assignmentAccepted(g)
		m.propagateAssignment(g, 0)
		g.transition(m.now, Stable)
		m.maybeEndRebalance(g)
	case Stable:
		delete(g.pendingSync, mem.id)
		resp := kmsg.NewPtrSyncGroupResponse()
		resp.Version = req.Version
		resp.ProtocolType = g.ptype.get(g.protocolType)
		resp.Protocol = g.pname.get(g.protocol)
		resp.MemberAssignment = mem.assignment
		m.reply(r.ID, resp)
		m.delivered(g, mem)
		m.maybeEndRebalance(g)
	default:
		m.replySyncError(p, errUnknownMemberID)
	}
}

func (m *Machine) heartbeat(r Request, req *kmsg.HeartbeatRequest) {
	// One lookup of the group and one of the member serve the whole
	// step: a heartbeat is the most frequent request by far.
	g := m.groups[req.Group]
	m.resumeGroupRebalance(g)
	if g != nil && g.consumer {
		m.classicToConsumerGroup(r)
		return
	}
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.Version = req.Version
	defer m.reply(r.ID, resp)
	if req.Group == "" {
		resp.ErrorCode = errInvalidGroupID
		return
	}
	instanceID := ""
	if req.Version >= 3 && req.InstanceID != nil {
		instanceID = *req.InstanceID
	}
	if g == nil {
		resp.ErrorCode = errUnknownMemberID
		return
	}
	mem, code := g.validMember(req.MemberID, instanceID)
	if code != 0 {
		if code == errUnknownMemberID {
			m.heardFromDeparted(g, req.MemberID)
		}
		resp.ErrorCode = code
		return
	}
	if req.Generation != g.generation {
		resp.ErrorCode = errIllegalGeneration
		return
	}
	switch g.state {
	case Empty:
		resp.ErrorCode = errUnknownMemberID
	case PreparingRebalance:
		m.schedule(TimerKey{Group: g.id, Kind: TimerHeartbeat, Member: mem.id}, mem.session)
		mem.lastSeen = m.now
		if mem.gaveUp.IsZero() && g.eager(mem) {
			// An eager member revokes everything as it learns this;
			// a cooperative one goes on consuming until it rejoins.
			mem.gaveUp = m.now
		}
		resp.ErrorCode = errRebalanceInProgress
	default:
		// CompletingRebalance answers NONE, not REBALANCE_IN_PROGRESS as
		// the old Javadoc says (Kafka PR #8834).
		m.schedule(TimerKey{Group: g.id, Kind: TimerHeartbeat, Member: mem.id}, mem.session)
		mem.lastSeen = m.now
	}
}

func (m *Machine) leaveGroup(r Request, req *kmsg.LeaveGroupRequest) {
	if g := m.groups[req.Group]; g != nil && g.consumer {
		m.classicToConsumerGroup(r)
		return
	}
	resp := kmsg.NewPtrLeaveGroupResponse()
	resp.Version = req.Version
	defer m.reply(r.ID, resp)
	if req.Group == "" {
		resp.ErrorCode = errInvalidGroupID
		return
	}

	members := core.LeaveMembers(req)
	g := m.groups[req.Group]
	// As in Kafka's classicGroupLeave, each entry is answered against the
	// group as the entries before it left it (a member named twice is
	// unknown the second time), and echoes the ids it was given: an
	// admin client matches the answer to a removal by instance id on its
	// empty member id.
	results := make([]kmsg.LeaveGroupResponseMember, 0, len(members))
	why := reason{trigger: inspect.TriggerMemberLeft}
	var pendingWho *member // the first pending id that left
	left := false
	for _, lm := range members {
		res := kmsg.NewLeaveGroupResponseMember()
		res.MemberID = lm.MemberID
		res.InstanceID = lm.InstanceID
		instanceID := ""
		if lm.InstanceID != nil {
			instanceID = *lm.InstanceID
		}
		var leaving *member
		byAdmin := false
		switch {
		case g == nil:
			res.ErrorCode = errUnknownMemberID
		case lm.MemberID == "" && instanceID != "":
			// Admin removal of a static member by instance id.
			if id, ok := g.static[instanceID]; ok {
				leaving, byAdmin = g.members[id], true
			} else {
				res.ErrorCode = errUnknownMemberID
			}
		case g.pending[lm.MemberID]:
			m.removePending(g, lm.MemberID)
			left = true
			if pendingWho == nil {
				pendingWho = &member{id: lm.MemberID, clientID: r.ClientID, clientHost: r.ClientHost}
			}
		default:
			if code := g.validateMember(lm.MemberID, instanceID); code != 0 {
				res.ErrorCode = code
			} else {
				leaving = g.members[lm.MemberID]
				byAdmin = lm.Reason != nil && strings.Contains(*lm.Reason, adminLeaveReason)
			}
		}
		if leaving != nil {
			left = true
			if why.who == nil {
				why.who = leaving
				if byAdmin {
					why.trigger = inspect.TriggerAdminRemoved
				}
			}
			why.removed = append(why.removed, leaving.id)
			m.removeMember(g, leaving, errUnknownMemberID, m.now)
		}
		results = append(results, res)
	}
	if req.Version < 3 {
		resp.ErrorCode = results[0].ErrorCode
	} else {
		resp.Members = results
	}
	if !left {
		return
	}
	// Any successful entry counts, a pending member's included: Kafka
	// rebalances a Stable group even when only a pending id left it.
	// Such a rebalance is credited to the client that held the id.
	if why.who == nil {
		why.who = pendingWho
	}
	switch g.state {
	case Stable, CompletingRebalance:
		m.prepareRebalance(g, why)
	case PreparingRebalance:
		m.maybeCompleteJoinPhase(g)
	}
}

// adminLeaveReason is in the reason (KIP-800) of every LeaveGroup that
// Kafka's admin client sends to remove members, whether it names them by
// instance id or by member id. A member leaving by itself says otherwise.
const adminLeaveReason = "removed by an admin"

// toldOtherProtocol reports whether a SyncGroup naming a protocol other
// than the group's may come from a member that did nothing wrong: inside a
// consumer group each classic member is told its own first protocol (as in
// Kafka), and the classic group a downgrade rebuilds chooses one by vote,
// then rebalances. While the group rebalances the member is sent to rejoin
// (REBALANCE_IN_PROGRESS, which the state switch answers), where its
// protocols are checked again, instead of being refused for a choice it
// never saw; Kafka refuses it with INCONSISTENT_GROUP_PROTOCOL. What the
// member offered is not asked: a group loaded from its records knows only
// the protocol it chose.
func (g *group) toldOtherProtocol() bool {
	return g.state == PreparingRebalance
}
