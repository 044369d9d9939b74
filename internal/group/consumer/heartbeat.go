package consumer

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// apiError is a Kafka error code with the message Kafka would send.
type apiError struct {
	code int16
	msg  string
}

func errorf(e *kerr.Error, format string, args ...any) *apiError {
	return &apiError{code: e.Code, msg: fmt.Sprintf(format, args...)}
}

// heartbeat serves ConsumerGroupHeartbeat (key 68) v0-v1.
func (m *Machine) heartbeat(r Request, req *kmsg.ConsumerGroupHeartbeatRequest) {
	resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	resp.Version = req.Version
	var err *apiError
	if err = m.validateHeartbeat(req); err == nil {
		if req.MemberEpoch == leaveEpoch || req.MemberEpoch == staticLeaveEpoch {
			err = m.leave(r, req, resp)
		} else {
			err = m.memberHeartbeat(r, req, resp)
		}
	}
	if err != nil {
		// An error answer carries nothing else, as Kafka's does.
		resp = kmsg.NewPtrConsumerGroupHeartbeatResponse()
		resp.Version = req.Version
		resp.ErrorCode = err.code
		resp.ErrorMessage = &err.msg
	}
	m.reply(r.ID, resp)
}

// regex returns the request's SubscribedTopicRegex; v0 has no such field.
func regex(req *kmsg.ConsumerGroupHeartbeatRequest) *string {
	if req.Version < 1 {
		return nil
	}
	return req.SubscribedTopicRegex
}

// validateHeartbeat is Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid.
func (m *Machine) validateHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest) *apiError {
	invalid := func(msg string) *apiError { return &apiError{code: kerr.InvalidRequest.Code, msg: msg} }
	// From v1 (KIP-1082) the client generates its member id, so it is
	// required even to join; v0 joins with an empty id and gets one.
	if (req.Version >= 1 || req.MemberEpoch > 0 || req.MemberEpoch == leaveEpoch) && req.MemberID == "" {
		return invalid("MemberId can't be empty.")
	}
	if req.Group == "" {
		return invalid("GroupId can't be empty.")
	}
	if req.InstanceID != nil && *req.InstanceID == "" {
		return invalid("InstanceId can't be empty.")
	}
	if req.RackID != nil && *req.RackID == "" {
		return invalid("RackId can't be empty.")
	}
	switch {
	case req.MemberEpoch == joinEpoch:
		if req.RebalanceTimeoutMillis == -1 {
			return invalid("RebalanceTimeoutMs must be provided in first request.")
		}
		if req.Topics == nil || len(req.Topics) != 0 {
			return invalid("TopicPartitions must be empty when (re-)joining.")
		}
		// An empty list or an empty regex is accepted: a member subscribed
		// to nothing is still a member.
		if req.SubscribedTopicNames == nil && regex(req) == nil {
			return invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
		}
	case req.MemberEpoch == staticLeaveEpoch:
		// Kafka requires the instance id here. franz-go (v1.22) leaves
		// with -2 and its member id alone, so a static member that
		// the member id names is taken to leave for now (see leave);
		// only a request naming no such member is refused.
		if req.InstanceID == nil && m.staticByMemberID(req) == "" {
			return invalid("InstanceId can't be null.")
		}
	case req.MemberEpoch < staticLeaveEpoch:
		return invalid("MemberEpoch is invalid.")
	}
	if a := req.ServerAssignor; a != nil && !slices.Contains(m.cfg.Assignors, *a) {
		return errorf(kerr.UnsupportedAssignor, "ServerAssignor %s is not supported. Supported assignors: %s.",
			*a, strings.Join(m.cfg.Assignors, ", "))
	}
	return nil
}

// validateEpoch is Kafka's throwIfConsumerGroupMemberEpochIsInvalid. An
// epoch ahead of the member's is fenced. One behind is accepted only if it
// is the member's previous epoch and the member owns nothing it was not
// given: the response that carried the new epoch may have been lost. Epoch
// 0 is a rejoin and always accepted (KAFKA-19233, Kafka 4.3).
func validateEpoch(mem *member, epoch int32, o owned) *apiError {
	if epoch == joinEpoch {
		return nil
	}
	if epoch > mem.epoch {
		return errorf(kerr.FencedMemberEpoch, "The consumer group member has a greater member epoch (%d) than the one known by the group coordinator (%d). The member must abandon all its partitions and rejoin.", epoch, mem.epoch)
	}
	if epoch < mem.epoch && (epoch != mem.prevEpoch || !o.subsetOf(mem.assigned)) {
		return errorf(kerr.FencedMemberEpoch, "The consumer group member has a smaller member epoch (%d) than the one known by the group coordinator (%d). The member must abandon all its partitions and rejoin.", epoch, mem.epoch)
	}
	return nil
}

// memberHeartbeat handles a join (epoch 0) or a heartbeat (epoch > 0):
// update the member, bump the group epoch if its subscription changed,
// compute a new target if the group epoch is ahead, and take the member one
// step towards its target. Every check that can fail runs before the first
// record, so a refused request changes nothing.
func (m *Machine) memberHeartbeat(r Request, req *kmsg.ConsumerGroupHeartbeatRequest, resp *kmsg.ConsumerGroupHeartbeatResponse) *apiError {
	joining := req.MemberEpoch == joinEpoch
	g := m.groups[req.Group]
	fresh := g == nil
	if fresh {
		if !joining {
			return errorf(kerr.GroupIDNotFound, "Consumer group %s not found.", req.Group)
		}
		// Materialized by the first record it gets.
		g = newGroup(req.Group)
	}
	memberID := req.MemberID
	if len(g.members) >= m.cfg.MaxSize && (memberID == "" || g.members[memberID] == nil) {
		return errorf(kerr.GroupMaxSizeReached, "The consumer group has reached its maximum capacity of %d members.", m.cfg.MaxSize)
	}
	if memberID == "" {
		memberID = m.newMemberID(g)
	}
	o := owned(req.Topics)

	// Find the member, or the departed static member it replaces.
	var mem, replaced *member
	if req.InstanceID == nil {
		mem = g.members[memberID]
		if mem == nil && !joining {
			return errorf(kerr.UnknownMemberID, "Member %s is not a member of group %s.", memberID, g.id)
		}
		if mem != nil {
			if err := validateEpoch(mem, req.MemberEpoch, o); err != nil {
				return err
			}
		}
	} else {
		inst := *req.InstanceID
		existing := g.staticMember(inst)
		switch {
		case joining && existing == nil:
			mem = g.members[memberID]
		case joining:
			// A new incarnation may take over only once the previous
			// one left with -2; otherwise it could steal partitions from
			// a live member (the classic protocol's fencing ping-pong).
			// A classic member is replaced at once, as Kafka does.
			if existing.epoch != staticLeaveEpoch && existing.meta.classic == nil {
				return errorf(kerr.UnreleasedInstanceID, "Static member %s with instance id %s cannot join the group because the instance id is owned by %s member.", memberID, inst, existing.id)
			}
			replaced = existing
		case existing == nil:
			return errorf(kerr.UnknownMemberID, "Instance id %s is unknown.", inst)
		case existing.id != memberID:
			return errorf(kerr.FencedInstanceID, "Static member %s with instance id %s was fenced by member %s.", memberID, inst, existing.id)
		default:
			if err := validateEpoch(existing, req.MemberEpoch, o); err != nil {
				return err
			}
			mem = existing
		}
	}

	// The member's metadata after this request: null fields keep their
	// value. Most heartbeats change none of it, and skip building it.
	unchanged := mem != nil && replaced == nil && metaUnchanged(r, req, &mem.meta)
	var prev, upd memberMeta
	var namesChanged, regexChanged bool
	if !unchanged {
		prev, upd, namesChanged, regexChanged = nextMeta(r, req, mem, replaced, memberID)
	}

	// A regex new to the group must compile (Kafka checks it only then:
	// one already in use was checked when it arrived).
	if regexChanged && upd.regex != "" && g.regexes[upd.regex] == nil {
		if _, err := compileRegex(upd.regex); err != nil {
			return errorf(kerr.InvalidRegularExpression, "SubscribedTopicRegex `%s` is not a valid regular expression: %v.", upd.regex, err)
		}
	}
	if mem != nil && mem.state != MemberStable && mem.state != MemberUnrevokedPartitions &&
		mem.state != MemberUnreleasedPartitions && (o == nil || len(o) != 0) {
		return errorf(kerr.FencedMemberEpoch, "The consumer group member is in a unknown state. The member must abandon all its partitions and rejoin.")
	}

	// From here on nothing fails; every change is a record.
	if fresh {
		m.groups[g.id] = g
	}
	trigger := triggerSubscriptionChanged
	if !unchanged {
		mem, trigger = m.putMember(g, mem, replaced, memberID, &upd)
	}
	before := mem.current()
	mem.lastHeartbeat = m.now

	// Kafka resolves a regex new to the group in the background and bumps
	// the epoch when the resolution lands (and not at all if it matches
	// nothing); here topics are already known, so the regex is resolved
	// as the record applies and any change of subscription bumps at once.
	subscriptionChanged := namesChanged || regexChanged
	// A group just converted from a classic one moves to a new epoch if
	// the classic assignments it starts from leave a subscribed partition
	// to nobody (a rebalance without a departed member was under way):
	// a static member's replacement changes no subscription, so nothing
	// else would compute a target that hands those partitions out.
	if g.epoch == 0 || subscriptionChanged || (g.upgraded && !m.targetCovers(g)) {
		// A new group moves off epoch 0 at once so it is fully set up.
		m.setCause(cause{trigger: trigger, member: mem})
		m.bumpEpoch(g)
	}
	if g.epoch > g.assignmentEpoch {
		m.computeTarget(g)
	}
	m.reconcile(g, mem, subscriptionChanged, o)
	m.schedule(g, mem, TimerSession, m.cfg.SessionTimeout)
	if prev.classic != nil {
		// A classic member replaced by this one leaves no classic
		// deadlines.
		m.cancel(g, mem, TimerClassicJoin)
		m.cancel(g, mem, TimerClassicSync)
	}

	resp.MemberID = &mem.id
	resp.MemberEpoch = mem.epoch
	resp.HeartbeatIntervalMillis = int32(m.cfg.HeartbeatInterval.Milliseconds())
	// The assignment goes only to a member that joined, sent a full
	// request (as clients do after an error, so a lost response is made
	// good), or whose assignment changed.
	full := req.RebalanceTimeoutMillis != -1 && (req.SubscribedTopicNames != nil || regex(req) != nil) && req.Topics != nil
	if joining || full || !before.assigned.samePartitions(mem.assigned) {
		resp.Assignment = assignmentOf(mem.assigned)
	}
	return nil
}

// metaUnchanged reports whether a heartbeat leaves a consumer-protocol
// member's metadata as it is: every field it sends is the member's value
// already (a null field keeps it), and it comes from the same client.
// Subscribed topic names, which would need sorting to compare, must be
// null.
func metaUnchanged(r Request, req *kmsg.ConsumerGroupHeartbeatRequest, meta *memberMeta) bool {
	return meta.classic == nil && meta.clientID == r.ClientID && meta.clientHost == r.ClientHost &&
		req.SubscribedTopicNames == nil &&
		(req.InstanceID == nil || *req.InstanceID == meta.instanceID) &&
		(req.RackID == nil || *req.RackID == meta.rackID) &&
		(req.RebalanceTimeoutMillis == -1 || req.RebalanceTimeoutMillis == meta.rebalanceTimeout) &&
		(req.ServerAssignor == nil || *req.ServerAssignor == meta.serverAssignor) &&
		(regex(req) == nil || *regex(req) == meta.regex)
}

// nextMeta returns a joining or heartbeating member's metadata before and
// after its request, and whether its subscribed names and regex change.
func nextMeta(r Request, req *kmsg.ConsumerGroupHeartbeatRequest, mem, replaced *member, memberID string) (prev, upd memberMeta, namesChanged, regexChanged bool) {
	prev = priorMeta(mem, replaced, memberID)
	upd = prev
	if req.InstanceID != nil {
		upd.instanceID = *req.InstanceID
	}
	if req.RackID != nil {
		upd.rackID = *req.RackID
	}
	if req.RebalanceTimeoutMillis != -1 {
		upd.rebalanceTimeout = req.RebalanceTimeoutMillis
	}
	if req.ServerAssignor != nil {
		upd.serverAssignor = *req.ServerAssignor
	}
	if req.SubscribedTopicNames != nil {
		upd.names = sortedNames(req.SubscribedTopicNames)
	}
	if re := regex(req); re != nil {
		upd.regex = *re
	}
	upd.clientID, upd.clientHost = r.ClientID, r.ClientHost
	// A member heartbeating speaks the consumer protocol, whatever the
	// member it replaces spoke.
	upd.classic = nil
	return prev, upd, !slices.Equal(prev.names, upd.names), prev.regex != upd.regex
}

// priorMeta is a joining or heartbeating member's metadata before its
// request: the departed static member's it replaces, its own, or a new
// member's defaults.
func priorMeta(mem, replaced *member, memberID string) memberMeta {
	switch {
	case replaced != nil:
		return replaced.meta
	case mem != nil:
		return mem.meta
	}
	return newMember(memberID).meta
}

// putMember writes a member's metadata for a join or heartbeat, first
// giving a departed static member's place to the new id. It returns the
// member and what an epoch bump it causes is triggered by: a newcomer
// joining, or a member's subscription changing.
func (m *Machine) putMember(g *group, mem, replaced *member, memberID string, upd *memberMeta) (*member, string) {
	trigger := triggerSubscriptionChanged
	if replaced != nil {
		m.replaceStatic(g, replaced, memberID)
		mem = g.members[memberID]
	}
	if mem == nil {
		trigger = triggerMemberJoined
	}
	if mem == nil || !upd.equal(&mem.meta) {
		m.emit(memberMetadataRecord(g.id, memberID, upd))
		mem = g.members[memberID]
	}
	return mem, trigger
}

// newMemberID draws a member id unused in g (v0 joins).
func (m *Machine) newMemberID(g *group) string {
	for {
		id := m.cfg.NewMemberID()
		if id != "" && g.members[id] == nil {
			return id
		}
	}
}

func sortedNames(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	out = slices.Compact(out)
	if out == nil {
		out = []string{}
	}
	return slices.Clip(out)
}

func memberMetadataRecord(groupID, memberID string, v *memberMeta) Record {
	return Record{Type: RecordMemberMetadata, Group: groupID, Member: memberID, MemberMetadata: &MemberMetadata{
		InstanceID:           v.instanceID,
		RackID:               v.rackID,
		ClientID:             v.clientID,
		ClientHost:           v.clientHost,
		SubscribedTopicNames: v.names,
		SubscribedTopicRegex: v.regex,
		RebalanceTimeoutMs:   v.rebalanceTimeout,
		ServerAssignor:       v.serverAssignor,
		Classic:              v.classic,
	}}
}

func currentRecord(groupID, memberID string, c current) Record {
	return Record{Type: RecordCurrentAssignment, Group: groupID, Member: memberID, Current: &CurrentAssignment{
		MemberEpoch:         c.epoch,
		PreviousMemberEpoch: c.prev,
		State:               c.state,
		Assigned:            fromPartSet(c.assigned),
		PendingRevocation:   fromPartSet(c.pending),
	}}
}

// targetCovers reports whether every partition of the topics the group
// subscribes to is in some member's target.
func (m *Machine) targetCovers(g *group) bool {
	targeted := map[tp]bool{}
	for _, t := range g.target {
		t.each(func(id TopicID, p, _ int32) { targeted[tp{id, p}] = true })
	}
	for _, name := range g.subscribedTopics() {
		topic, ok := m.topics.byName[name]
		if !ok {
			continue
		}
		for p := range topic.Partitions {
			if !targeted[tp{topic.ID, p}] {
				return false
			}
		}
	}
	return true
}

// bumpEpoch moves the group to its next epoch, recording the metadata hash
// of what it now subscribes to.
func (m *Machine) bumpEpoch(g *group) {
	m.emit(Record{Type: RecordGroupEpoch, Group: g.id, GroupEpoch: &GroupEpoch{
		Epoch:        g.epoch + 1,
		MetadataHash: m.topics.metadataHash(g.subscribedTopics()),
	}})
}

// replaceStatic hands a departed static member's place to its new
// incarnation: same subscription, target and partitions, new member id,
// epoch 0. The group epoch does not move, so the other members see no
// rebalance.
func (m *Machine) replaceStatic(g *group, old *member, newID string) {
	meta := old.meta
	cur := old.current()
	cur.epoch, cur.prev = 0, 0
	target := g.target[old.id]
	if a := g.assigner; a != nil && a.target.RenameMember(old.id, newID) != nil {
		g.assigner = nil
	}
	m.removeMember(g, old)
	m.cancelMemberTimers(g, old)
	m.emit(memberMetadataRecord(g.id, newID, &meta))
	m.emit(Record{Type: RecordTargetMember, Group: g.id, Member: newID, Target: &TargetAssignment{Partitions: fromPartSet(target)}})
	m.emit(currentRecord(g.id, newID, cur))
}

// removeMember deletes a member's records, current assignment first as
// Kafka orders them.
func (m *Machine) removeMember(g *group, mem *member) {
	m.emit(Record{Type: RecordCurrentAssignment, Group: g.id, Member: mem.id})
	m.emit(Record{Type: RecordTargetMember, Group: g.id, Member: mem.id})
	m.emit(Record{Type: RecordMemberMetadata, Group: g.id, Member: mem.id})
}

// reconcile takes the member one step towards its target and keeps its
// rebalance deadline: set while it holds partitions it must give up.
// Unsubscribed topics are stripped from a reconciled member only when its
// subscription changed in this heartbeat (Kafka 4.0-4.2); Kafka 4.3 also
// checks it as a state fact after loading, which matters there because a
// load can split what one heartbeat wrote, and cannot here: one Output's
// records are made durable together.
func (m *Machine) reconcile(g *group, mem *member, subscriptionChanged bool, o owned) {
	if !subscriptionChanged && mem.reconciledTo(g.assignmentEpoch) {
		return
	}
	rc := reconciler{m: m, g: g, mem: mem, targetEpoch: g.assignmentEpoch, target: g.target[mem.id],
		enforce: subscriptionChanged, owned: o}
	next := rc.next()
	if next.equal(mem.current()) {
		return
	}
	m.emit(currentRecord(g.id, mem.id, next))
	if next.state == MemberUnrevokedPartitions {
		mem.rebalanceEpoch = next.epoch
		m.schedule(g, mem, TimerRebalance, time.Duration(max(mem.meta.rebalanceTimeout, 0))*time.Millisecond)
	} else {
		m.cancel(g, mem, TimerRebalance)
	}
}

// leave handles epoch -1 (leave) and -2 (static member leaving for now).
func (m *Machine) leave(r Request, req *kmsg.ConsumerGroupHeartbeatRequest, resp *kmsg.ConsumerGroupHeartbeatResponse) *apiError {
	g := m.groups[req.Group]
	if g == nil {
		return errorf(kerr.GroupIDNotFound, "Group %s not found.", req.Group)
	}
	resp.MemberID = &req.MemberID
	resp.MemberEpoch = req.MemberEpoch
	if req.InstanceID == nil && req.MemberEpoch == leaveEpoch {
		mem := g.members[req.MemberID]
		if mem == nil {
			return errorf(kerr.UnknownMemberID, "Member %s is not a member of group %s.", req.MemberID, g.id)
		}
		m.fence(g, mem, cause{trigger: triggerMemberLeft, member: mem})
		return nil
	}
	inst := m.staticByMemberID(req)
	if req.InstanceID != nil {
		inst = *req.InstanceID
	}
	mem := g.staticMember(inst)
	if mem == nil {
		return errorf(kerr.UnknownMemberID, "Instance id %s is unknown.", inst)
	}
	if mem.id != req.MemberID {
		return errorf(kerr.FencedInstanceID, "Static member %s with instance id %s was fenced by member %s.", req.MemberID, inst, mem.id)
	}
	if req.MemberEpoch == leaveEpoch {
		m.fence(g, mem, cause{trigger: triggerMemberLeft, member: mem})
		return nil
	}
	// -2: the member keeps its partitions and target (nobody else gets
	// them) until it rejoins or its session runs out; what it was asked
	// to revoke is released now, since it no longer consumes anything.
	cur := mem.current()
	cur.epoch, cur.pending = staticLeaveEpoch, nil
	m.emit(currentRecord(g.id, mem.id, cur))
	resp.MemberID = &mem.id
	resp.MemberEpoch = staticLeaveEpoch
	return nil
}

// staticByMemberID returns the instance id of the static member a request
// names by member id, or "".
func (m *Machine) staticByMemberID(req *kmsg.ConsumerGroupHeartbeatRequest) string {
	if g := m.groups[req.Group]; g != nil {
		if mem := g.members[req.MemberID]; mem != nil {
			return mem.meta.instanceID
		}
	}
	return ""
}

// fence removes a member and bumps the group epoch; the next heartbeat of
// any member computes the target without it.
func (m *Machine) fence(g *group, mem *member, c cause) {
	if m.downgradeOnFence(g, mem, c) {
		return
	}
	m.setCause(c)
	m.removeMember(g, mem)
	m.bumpEpoch(g)
	m.cancelMemberTimers(g, mem)
}

// assignmentOf is the heartbeat response's Assignment.
func assignmentOf(s partSet) *kmsg.ConsumerGroupHeartbeatResponseAssignment {
	a := &kmsg.ConsumerGroupHeartbeatResponseAssignment{}
	a.Default()
	a.Topics = make([]kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic, 0, len(s))
	for _, t := range s {
		at := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
		at.TopicID = t.id
		at.Partitions = slices.Clone(t.parts)
		a.Topics = append(a.Topics, at)
	}
	return a
}
