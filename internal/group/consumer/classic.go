package consumer

import (
	"bytes"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/group/core"
	"github.com/groupd/groupd/internal/inspect"
)

// Classic members of a consumer group, and the online migration between
// the protocols (Kafka's group.consumer.migration.policy).
//
// A member that speaks the classic protocol keeps doing so inside a
// consumer group: its JoinGroup is a heartbeat that may change its
// subscription and reports what it owns, its SyncGroup collects its current
// assignment, and its Heartbeat tells it to rejoin whenever the
// reconciliation needs it to. The server-side assignor computes its target
// as any other member's. Its metadata record carries what it sent in its
// JoinGroup (ClassicMemberMetadata), which is what turns the group back into
// a classic one when the last consumer-protocol member leaves.

// Rebalance triggers of the migration. They extend the inspect.Trigger
// values: the first rebalance of a group converted from a classic one, and
// the classic rebalance that follows the conversion back.
const (
	TriggerUpgrade   = "upgrade"
	TriggerDowngrade = "downgrade"
)

// ClassicMember is a classic group member as the conversion to a consumer
// group needs it.
type ClassicMember struct {
	ID, InstanceID, ClientID, ClientHost string
	RebalanceTimeoutMs, SessionTimeoutMs int32
	Protocols                            []ClassicProtocol
	// Assignment is the member's latest assignment (ConsumerProtocol
	// bytes); empty for none.
	Assignment []byte
}

// Upgrade converts a non-empty classic group to a consumer group and then
// serves Heartbeat, the ConsumerGroupHeartbeat (epoch 0) that asked for it,
// in one step: Kafka's convertToConsumerGroup. The caller has checked the
// migration policy, the protocol type and the group size, and writes the
// classic group's tombstone if the group exists afterwards (Has). If a
// member's embedded protocol cannot be parsed, the heartbeat is refused and
// nothing changes.
type Upgrade struct {
	Group      string
	Generation int32
	// Protocol is the classic group's selected protocol, "" before the
	// first generation (then each member's first protocol is read).
	Protocol  string
	Members   []ClassicMember
	Heartbeat Request
}

func (Upgrade) isEvent() {}

// Downgrade is a consumer group turned back into a classic one, for the
// caller to rebuild as a classic group (Output.Downgrades). The consumer
// group's records are deleted in the same Output.
type Downgrade struct {
	Group      string
	Generation int32
	// Members are the remaining classic members, in member id order; each
	// Assignment is its current assignment, serialized with the version of
	// its first protocol's subscription. Kafka serializes the target
	// assignment instead; the current one is what each member was told
	// and holds, so no partition is in two classic assignments while
	// some member still revokes it, and the rebalance that follows moves
	// the rest.
	Members []ClassicMember
	// Rebalance is false when the downgrade came from a static member's
	// replacement, which Kafka does not follow with a rebalance, and the
	// members held their whole targets.
	Rebalance bool
	// Cause is the member whose departure (or replacement) made the group
	// classic.
	Cause *inspect.MemberRef
	// Joined is the member whose JoinGroup replaced the last
	// consumer-protocol member (the static case), "" otherwise. Its
	// answer, in the same Output, names the member's first protocol; the
	// caller makes it the classic group's (see group.downgrade).
	Joined string
}

// classicEqual compares two members' classic metadata.
func classicEqual(a, b *ClassicMemberMetadata) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.SessionTimeoutMs == b.SessionTimeoutMs && slices.EqualFunc(a.SupportedProtocols, b.SupportedProtocols,
		func(x, y ClassicProtocol) bool { return x.Name == y.Name && bytes.Equal(x.Metadata, y.Metadata) })
}

// countClassic adds (d = 1) or removes (d = -1) a member's classic
// metadata from the group's counts. A name listed twice counts once.
func (g *group) countClassic(c *ClassicMemberMetadata, d int) {
	if c == nil {
		return
	}
	g.classicMembers += d
	if g.classicProtocols == nil {
		g.classicProtocols = map[string]int{}
	}
	for i, p := range c.SupportedProtocols {
		if slices.ContainsFunc(c.SupportedProtocols[:i], func(q ClassicProtocol) bool { return q.Name == p.Name }) {
			continue
		}
		if n := g.classicProtocols[p.Name] + d; n > 0 {
			g.classicProtocols[p.Name] = n
		} else {
			delete(g.classicProtocols, p.Name)
		}
	}
}

// supportsClassic is Kafka's ConsumerGroup.supportsClassicProtocols: the
// protocol type must be "consumer", and one of the protocols must be
// offered by every classic member (any, if there is none).
func (g *group) supportsClassic(protocolType string, ps []kmsg.JoinGroupRequestProtocol) bool {
	if protocolType != "consumer" || len(ps) == 0 {
		return false
	}
	for _, p := range ps {
		if g.classicProtocols[p.Name] == g.classicMembers {
			return true
		}
	}
	return false
}

// sessionTimeout is a member's session: a classic member's own, the
// broker's for a consumer-protocol member.
func (m *Machine) sessionTimeout(mem *member) time.Duration {
	if c := mem.meta.classic; c != nil {
		return time.Duration(c.SessionTimeoutMs) * time.Millisecond
	}
	return m.cfg.SessionTimeout
}

// parseSubscription reads a ConsumerProtocolSubscription. Clients send
// malformed ones (kafka-go declares v1 without owned partitions), so a
// failed strict read is retried as v0, the prefix of every version.
func parseSubscription(b []byte) (kmsg.ConsumerMemberMetadata, bool) {
	var md kmsg.ConsumerMemberMetadata
	if err := md.ReadFrom(b); err == nil {
		return md, true
	}
	if len(b) < 2 {
		return md, false
	}
	md = kmsg.ConsumerMemberMetadata{}
	if err := md.ReadFrom(append([]byte{0, 0}, b[2:]...)); err != nil {
		return md, false
	}
	md.OwnedPartitions = nil
	return md, true
}

// ownedOf is what a classic member reports owning in its subscription, in
// a heartbeat's terms. An eager member (subscription v0) reports nothing:
// it gave everything up before it joined.
func (m *Machine) ownedOf(md *kmsg.ConsumerMemberMetadata) owned {
	o := owned{}
	for _, t := range md.OwnedPartitions {
		topic, ok := m.topics.byName[t.Topic]
		if !ok {
			continue
		}
		rt := kmsg.NewConsumerGroupHeartbeatRequestTopic()
		rt.TopicID = topic.ID
		rt.Partitions = t.Partitions
		o = append(o, rt)
	}
	return o
}

// classicProtocols copies a JoinGroup's protocols.
func classicProtocols(ps []kmsg.JoinGroupRequestProtocol) []ClassicProtocol {
	out := make([]ClassicProtocol, len(ps))
	for i, p := range ps {
		out[i] = ClassicProtocol{Name: p.Name, Metadata: slices.Clone(p.Metadata)}
	}
	return out
}

// offered reports whether a classic member offered a protocol.
func offered(c *ClassicMemberMetadata, name string) bool {
	return slices.ContainsFunc(c.SupportedProtocols, func(p ClassicProtocol) bool { return p.Name == name })
}

// metadataFor returns a classic member's subscription for a protocol, or
// its first protocol's when the name is "" or not offered.
func metadataFor(ps []ClassicProtocol, name string) []byte {
	for _, p := range ps {
		if p.Name == name {
			return p.Metadata
		}
	}
	if len(ps) > 0 {
		return ps[0].Metadata
	}
	return nil
}

// serializeAssignment is a ConsumerProtocolAssignment of s, in the version
// of the member's first subscription (Kafka's prepareAssignment), topics by
// name.
func (m *Machine) serializeAssignment(s partSet, c *ClassicMemberMetadata) []byte {
	a := kmsg.NewConsumerMemberAssignment()
	if c != nil && len(c.SupportedProtocols) > 0 {
		if md := c.SupportedProtocols[0].Metadata; len(md) >= 2 {
			a.Version = min(max(int16(md[0])<<8|int16(md[1]), 0), 3)
		}
	}
	for _, t := range s {
		name, ok := m.topics.name(t.id)
		if !ok {
			continue
		}
		at := kmsg.NewConsumerMemberAssignmentTopic()
		at.Topic = name
		at.Partitions = slices.Clone(t.parts)
		a.Topics = append(a.Topics, at)
	}
	slices.SortFunc(a.Topics, func(x, y kmsg.ConsumerMemberAssignmentTopic) int {
		return bytes.Compare([]byte(x.Topic), []byte(y.Topic))
	})
	return a.AppendTo(nil)
}

// upgrade serves Upgrade.
func (m *Machine) upgrade(u Upgrade) {
	req := u.Heartbeat.Msg.(*kmsg.ConsumerGroupHeartbeatRequest)
	refuse := func(err *apiError) { m.reply(u.Heartbeat.ID, heartbeatError(req.Version, err)) }
	if m.groups[u.Group] != nil {
		refuse(errorf(kerr.GroupIDNotFound, "Group %s is not a consumer group", u.Group))
		return
	}
	type converted struct {
		meta     memberMeta
		assigned partSet
		// revoking is what the member reported owning in its last
		// JoinGroup and was not assigned since: a cooperative member
		// revokes it after its SyncGroup and rejoins, so it may still
		// hold it.
		revoking partSet
		owned    []kmsg.ConsumerMemberAssignmentTopic
	}
	members := make([]converted, 0, len(u.Members))
	taken := map[tp]bool{}
	for _, cm := range u.Members {
		sub, ok := parseSubscription(metadataFor(cm.Protocols, u.Protocol))
		var asg kmsg.ConsumerMemberAssignment
		// A member that has not synced yet has no assignment bytes at
		// all: it holds nothing (Kafka would fail to parse them).
		if ok && len(cm.Assignment) > 0 {
			ok = asg.ReadFrom(cm.Assignment) == nil
		}
		if !ok {
			refuse(errorf(kerr.GroupIDNotFound, "Cannot upgrade the classic group %s to consumer group because the embedded consumer protocol is malformed.", u.Group))
			return
		}
		meta := memberMeta{
			instanceID:       cm.InstanceID,
			clientID:         cm.ClientID,
			clientHost:       cm.ClientHost,
			names:            sortedNames(sub.Topics),
			rebalanceTimeout: cm.RebalanceTimeoutMs,
			classic: &ClassicMemberMetadata{
				SessionTimeoutMs:   cm.SessionTimeoutMs,
				SupportedProtocols: cm.Protocols,
			},
		}
		if sub.Rack != nil {
			meta.rackID = *sub.Rack
		}
		members = append(members, converted{meta: meta, assigned: m.classicAssigned(asg.Topics, u.Generation, taken),
			owned: ownedAsAssignment(sub.OwnedPartitions)})
	}
	// Only once every assignment is taken: a partition assigned to one
	// member and still reported by another stays with the assignee (the
	// classic group already gave it away).
	for i := range members {
		members[i].revoking = m.classicAssigned(members[i].owned, u.Generation, taken)
	}
	// A new regex must compile before anything is written: the heartbeat
	// that follows cannot be refused once the group is converted.
	if re := regex(req); re != nil && *re != "" {
		if _, err := compileRegex(*re); err != nil {
			refuse(errorf(kerr.InvalidRegularExpression, "SubscribedTopicRegex `%s` is not a valid regular expression: %v.", *re, err))
			return
		}
	}

	// Kafka's fromClassicGroup and createConsumerGroupRecords: every
	// member holds, and is targeted at, what it was last assigned, at the
	// classic generation, Stable. Written as a load is read: it is not a
	// rebalance of its own.
	g := newGroup(u.Group)
	m.groups[g.id] = g
	m.replaying = true
	for i, cm := range u.Members {
		m.emit(memberMetadataRecord(g.id, cm.ID, &members[i].meta))
	}
	m.emit(Record{Type: RecordGroupEpoch, Group: g.id, GroupEpoch: &GroupEpoch{
		Epoch:        u.Generation,
		MetadataHash: m.topics.metadataHash(g.subscribedTopics()),
	}})
	for i, cm := range u.Members {
		m.emit(Record{Type: RecordTargetMember, Group: g.id, Member: cm.ID,
			Target: &TargetAssignment{Partitions: fromPartSet(withoutEpochs(members[i].assigned))}})
	}
	m.emit(Record{Type: RecordTargetEpoch, Group: g.id, TargetEpoch: &TargetAssignmentEpoch{AssignmentEpoch: u.Generation}})
	for i, cm := range u.Members {
		cur := current{epoch: u.Generation, prev: u.Generation, state: MemberStable, assigned: members[i].assigned}
		if len(members[i].revoking) > 0 {
			// Kafka converts these members as Stable and so hands
			// the partitions they are revoking to others at once.
			cur.state, cur.pending = MemberUnrevokedPartitions, members[i].revoking
		}
		m.emit(currentRecord(g.id, cm.ID, cur))
	}
	m.replaying = false
	for _, mem := range g.sortedMembers() {
		mem.lastHeartbeat = m.now
		m.schedule(g, mem, TimerSession, m.sessionTimeout(mem))
		if mem.state == MemberUnrevokedPartitions {
			mem.rebalanceEpoch = mem.epoch
			m.schedule(g, mem, TimerRebalance,
				time.Duration(max(mem.meta.rebalanceTimeout, 0))*time.Millisecond)
		}
	}
	g.upgraded = true
	m.heartbeat(u.Heartbeat, req)
	g.upgraded = false
}

// classicAssigned turns a classic assignment into a partition set given at
// epoch. Topics the broker does not know and partitions beyond a topic's
// count are left out (Kafka drops unknown topics), and so is a partition an
// earlier member already holds: a client-side assignor may have handed it
// out twice, and a consumer group cannot hold that.
func (m *Machine) classicAssigned(ts []kmsg.ConsumerMemberAssignmentTopic, epoch int32, taken map[tp]bool) partSet {
	var ps []tp
	for _, t := range ts {
		topic, ok := m.topics.byName[t.Topic]
		if !ok {
			continue
		}
		for _, p := range t.Partitions {
			k := tp{topic.ID, p}
			if p < 0 || p >= topic.Partitions || taken[k] {
				continue
			}
			taken[k] = true
			ps = append(ps, k)
		}
	}
	return partSetAt(ps, epoch)
}

// partSetAt is a set of distinct partitions, each given at epoch.
func partSetAt(ps []tp, epoch int32) partSet {
	slices.SortFunc(ps, func(a, b tp) int {
		if c := compareIDs(a.id, b.id); c != 0 {
			return c
		}
		return int(a.p) - int(b.p)
	})
	b := newPartBuilder(true)
	for _, k := range ps {
		b.add(k.id, k.p, epoch)
	}
	return b.done()
}

// ownedAsAssignment reads a subscription's owned partitions as assignment
// topics.
func ownedAsAssignment(ps []kmsg.ConsumerMemberMetadataOwnedPartition) []kmsg.ConsumerMemberAssignmentTopic {
	out := make([]kmsg.ConsumerMemberAssignmentTopic, len(ps))
	for i, p := range ps {
		out[i] = kmsg.ConsumerMemberAssignmentTopic{Topic: p.Topic, Partitions: p.Partitions}
	}
	return out
}

// withoutEpochs is a partition set without its assignment epochs, as
// targets are written.
func withoutEpochs(s partSet) partSet {
	out := make(partSet, len(s))
	for i, t := range s {
		out[i] = topicParts{id: t.id, parts: t.parts}
	}
	return out
}

// classicMember finds the member a classic request names, as Kafka's
// validateConsumerGroupMember followed by
// throwIfMemberDoesNotUseClassicProtocol.
func (g *group) classicMember(memberID, instanceID string) (*member, int16) {
	var mem *member
	if instanceID == "" {
		mem = g.members[memberID]
	} else {
		mem = g.staticMember(instanceID)
		if mem != nil && mem.id != memberID {
			return nil, kerr.FencedInstanceID.Code
		}
	}
	if mem == nil || mem.meta.classic == nil {
		return nil, kerr.UnknownMemberID.Code
	}
	return mem, 0
}

// classicRequestMember finds the member a SyncGroup or Heartbeat names;
// the instance id counts only in versions that carry it.
func (m *Machine) classicRequestMember(groupID, memberID string, instanceID *string, hasInstance bool) (*group, *member, int16) {
	g := m.groups[groupID]
	if g == nil {
		return nil, nil, kerr.UnknownMemberID.Code
	}
	inst := ""
	if hasInstance && instanceID != nil {
		inst = *instanceID
	}
	mem, code := g.classicMember(memberID, inst)
	return g, mem, code
}

// mustRejoin is Kafka's condition for telling a classic member to rejoin:
// the group moved past its epoch, it must revoke partitions, or partitions
// it waits for are free now.
func (g *group) mustRejoin(mem *member) bool {
	return mem.epoch < g.epoch || mem.state == MemberUnrevokedPartitions ||
		(mem.state == MemberUnreleasedPartitions && !g.waitingOnUnreleased(mem))
}

// waitingOnUnreleased reports whether a partition of the member's target
// is still held by another member.
func (g *group) waitingOnUnreleased(mem *member) bool {
	waiting := false
	mergeTopics(g.target[mem.id], mem.assigned, func(id TopicID, tgt, have *topicParts) {
		if tgt == nil || waiting {
			return
		}
		for _, p := range tgt.parts {
			if have != nil {
				if _, ok := slices.BinarySearch(have.parts, p); ok {
					continue
				}
			}
			if o, held := g.owners[tp{id, p}]; held && o != mem.id {
				waiting = true
				return
			}
		}
	})
	return waiting
}

// scheduleJoinTimeout gives a classic member told to rejoin its rebalance
// timeout to do so, unless it already runs (Kafka's scheduleIfAbsent).
func (m *Machine) scheduleJoinTimeout(g *group, mem *member) {
	if !mem.armed(TimerClassicJoin) {
		m.schedule(g, mem, TimerClassicJoin, time.Duration(max(mem.meta.rebalanceTimeout, 0))*time.Millisecond)
	}
}

// classicJoin serves a JoinGroup to a consumer group (Kafka's
// classicGroupJoinToConsumerGroup). The caller has checked the group id
// and the session timeout bounds. The answer is immediate: the member
// joins at its current epoch and collects its assignment with SyncGroup.
func (m *Machine) classicJoin(r Request, req *kmsg.JoinGroupRequest) {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Version = req.Version
	fail := func(code int16, memberID string) {
		resp.ErrorCode, resp.MemberID = code, memberID
		m.reply(r.ID, resp)
	}
	g := m.groups[req.Group]
	if g == nil {
		fail(kerr.UnknownMemberID.Code, req.MemberID)
		return
	}
	memberID := req.MemberID
	unknown := memberID == ""
	if unknown {
		memberID = m.newMemberID(g)
	}
	if len(g.members) >= m.cfg.MaxSize && g.members[memberID] == nil {
		fail(kerr.GroupMaxSizeReached.Code, req.MemberID)
		return
	}
	if !g.supportsClassic(req.ProtocolType, req.Protocols) {
		fail(kerr.InconsistentGroupProtocol.Code, req.MemberID)
		return
	}
	instanceID := ""
	if req.Version >= 5 && req.InstanceID != nil {
		instanceID = *req.InstanceID
	}
	if unknown && instanceID == "" && req.Version >= 4 {
		// KIP-394: the member comes back with the id it is given.
		g.handOut(memberID, m.now.Add(time.Duration(req.SessionTimeoutMillis)*time.Millisecond), m.now)
		fail(kerr.MemberIDRequired.Code, memberID)
		return
	}
	var mem, replaced *member
	switch {
	case instanceID == "":
		mem = g.members[memberID]
		if mem == nil && !unknown && !g.takeHandedOut(memberID, m.now) {
			// Kafka takes any member id here, known or not. A
			// dynamic member the group does not know and did not
			// just give an id to was removed from it (its session
			// ran out, or it was fenced), and may still believe it
			// owns partitions others hold and have committed past:
			// accepted, it would be handed some back and resume
			// from its stale position. A classic group tells it
			// UNKNOWN_MEMBER_ID, so the client drops its partitions
			// and joins afresh; so does this one.
			fail(kerr.UnknownMemberID.Code, req.MemberID)
			return
		}
	case unknown:
		// A new incarnation of a static member replaces the old one,
		// whichever protocol it spoke, without waiting for it to leave.
		replaced = g.staticMember(instanceID)
	default:
		existing := g.staticMember(instanceID)
		switch {
		case existing == nil:
			fail(kerr.UnknownMemberID.Code, req.MemberID)
			return
		case existing.id != memberID:
			fail(kerr.FencedInstanceID.Code, req.MemberID)
			return
		}
		mem = existing
	}
	sub, ok := parseSubscription(req.Protocols[0].Metadata)
	if !ok {
		// Kafka answers UNKNOWN_SERVER_ERROR (an IllegalStateException);
		// the member's protocol is what is wrong, so it is told that.
		fail(kerr.InconsistentGroupProtocol.Code, req.MemberID)
		return
	}

	prev := priorMeta(mem, replaced, memberID)
	upd := prev
	upd.instanceID = instanceID
	if sub.Rack != nil {
		upd.rackID = *sub.Rack
	}
	upd.rebalanceTimeout = req.RebalanceTimeoutMillis
	if req.Version == 0 {
		upd.rebalanceTimeout = req.SessionTimeoutMillis
	}
	upd.names = sortedNames(sub.Topics)
	upd.clientID, upd.clientHost = r.ClientID, r.ClientHost
	upd.classic = &ClassicMemberMetadata{SessionTimeoutMs: req.SessionTimeoutMillis, SupportedProtocols: classicProtocols(req.Protocols)}
	subscriptionChanged := !slices.Equal(prev.names, upd.names)

	if replaced != nil && m.downgradeOnReplace(g, replaced, memberID, &upd) {
		resp.MemberID = memberID
		resp.Generation = g.epoch
		m.finishClassicJoin(resp, req)
		m.reply(r.ID, resp)
		return
	}
	mem, trigger := m.putMember(g, mem, replaced, memberID, &upd)
	mem.lastHeartbeat = m.now
	if subscriptionChanged {
		m.setCause(cause{trigger: trigger, member: mem})
		m.bumpEpoch(g)
	}
	if g.epoch > g.assignmentEpoch {
		m.computeTarget(g)
	}
	owned := m.ownedOf(&sub)
	if claimed := m.unheldClaims(g, mem, owned); len(claimed) > 0 {
		// The member holds partitions the group no longer counts as its
		// (it was fenced, and came back before anyone took them): they
		// stay with it until it reports it let them go. Unreleased makes
		// the reconciler start over from what it holds.
		cur := mem.current()
		cur.assigned, cur.state = union(cur.assigned, claimed), MemberUnreleasedPartitions
		m.emit(currentRecord(g.id, mem.id, cur))
	}
	m.reconcile(g, mem, subscriptionChanged, owned)

	m.cancel(g, mem, TimerClassicJoin)
	m.schedule(g, mem, TimerSession, m.sessionTimeout(mem))
	m.schedule(g, mem, TimerClassicSync,
		time.Duration(max(mem.meta.rebalanceTimeout, 0))*time.Millisecond)
	resp.MemberID = mem.id
	resp.Generation = mem.epoch
	m.finishClassicJoin(resp, req)
	m.reply(r.ID, resp)
}

// unheldClaims is what a classic member reports owning that the group
// counts as nobody's, given at the member's epoch. A partition another
// member holds is not among them: the group gave it away when it fenced
// this one, and cannot take it back. Kafka keeps none of them.
func (m *Machine) unheldClaims(g *group, mem *member, o owned) partSet {
	var claimed []tp
	for _, t := range o {
		topic, ok := m.topics.byID[t.TopicID]
		if !ok {
			continue
		}
		for _, p := range t.Partitions {
			k := tp{t.TopicID, p}
			if _, held := g.owners[k]; held || p < 0 || p >= topic.Partitions || slices.Contains(claimed, k) {
				continue
			}
			claimed = append(claimed, k)
		}
	}
	return partSetAt(claimed, mem.epoch)
}

// finishClassicJoin fills in what every successful classic join answer to
// a consumer group carries: protocol type and the member's first protocol.
// There is no leader: the server assigns, so nobody gets the member list.
func (m *Machine) finishClassicJoin(resp *kmsg.JoinGroupResponse, req *kmsg.JoinGroupRequest) {
	pt := "consumer"
	name := req.Protocols[0].Name
	resp.ProtocolType = &pt
	resp.Protocol = &name
}

// classicSync serves a SyncGroup to a consumer group (Kafka's
// classicGroupSyncToConsumerGroup): the member's current assignment.
func (m *Machine) classicSync(r Request, req *kmsg.SyncGroupRequest) {
	resp := kmsg.NewPtrSyncGroupResponse()
	resp.Version = req.Version
	defer m.reply(r.ID, resp)
	g, mem, code := m.classicRequestMember(req.Group, req.MemberID, req.InstanceID, req.Version >= 3)
	switch {
	case code != 0:
	case req.Generation != mem.epoch:
		code = kerr.IllegalGeneration.Code
	case (req.ProtocolType != nil && *req.ProtocolType != "consumer") ||
		(req.Protocol != nil && !offered(mem.meta.classic, *req.Protocol)):
		// Kafka accepts only the member's first protocol, which is what
		// its JoinGroup told it here; but a SyncGroup sent to the classic
		// group before an upgrade names the protocol that group chose.
		code = kerr.InconsistentGroupProtocol.Code
	case g.epoch > mem.epoch && mem.state != MemberUnrevokedPartitions:
		// A new rebalance started; the member rejoins to catch up
		// (unless it is revoking: then its next join does that).
		m.scheduleJoinTimeout(g, mem)
		code = kerr.RebalanceInProgress.Code
	}
	if code != 0 {
		resp.ErrorCode = code
		return
	}
	m.cancel(g, mem, TimerClassicSync)
	m.schedule(g, mem, TimerSession, m.sessionTimeout(mem))
	mem.lastHeartbeat = m.now
	resp.ProtocolType = req.ProtocolType
	resp.Protocol = req.Protocol
	resp.MemberAssignment = m.serializeAssignment(mem.assigned, mem.meta.classic)
}

// classicHeartbeat serves a Heartbeat to a consumer group (Kafka's
// classicGroupHeartbeatToConsumerGroup).
func (m *Machine) classicHeartbeat(r Request, req *kmsg.HeartbeatRequest) {
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.Version = req.Version
	defer m.reply(r.ID, resp)
	g, mem, code := m.classicRequestMember(req.Group, req.MemberID, req.InstanceID, req.Version >= 3)
	if code == 0 && req.Generation != mem.epoch {
		code = kerr.IllegalGeneration.Code
	}
	if code != 0 {
		resp.ErrorCode = code
		return
	}
	m.schedule(g, mem, TimerSession, m.sessionTimeout(mem))
	mem.lastHeartbeat = m.now
	if g.mustRejoin(mem) {
		m.scheduleJoinTimeout(g, mem)
		resp.ErrorCode = kerr.RebalanceInProgress.Code
	}
}

// classicLeave serves a LeaveGroup to a consumer group (Kafka's
// classicGroupLeaveToConsumerGroup): each entry is answered on its own,
// and the group epoch moves once if anyone left.
func (m *Machine) classicLeave(r Request, req *kmsg.LeaveGroupRequest) {
	resp := kmsg.NewPtrLeaveGroupResponse()
	resp.Version = req.Version
	defer m.reply(r.ID, resp)
	members := core.LeaveMembers(req)
	g := m.groups[req.Group]
	var left *member
	for _, lm := range members {
		res := kmsg.NewLeaveGroupResponseMember()
		res.MemberID = lm.MemberID
		res.InstanceID = lm.InstanceID
		var mem *member
		switch {
		case g == nil:
			res.ErrorCode = kerr.UnknownMemberID.Code
		case lm.InstanceID == nil:
			mem = g.members[lm.MemberID]
		default:
			mem = g.staticMember(*lm.InstanceID)
			if mem != nil && lm.MemberID != "" && mem.id != lm.MemberID {
				res.ErrorCode = kerr.FencedInstanceID.Code
				mem = nil
			}
		}
		if mem != nil && mem.meta.classic == nil {
			mem = nil
		}
		if mem == nil {
			if res.ErrorCode == 0 {
				res.ErrorCode = kerr.UnknownMemberID.Code
			}
		} else {
			res.MemberID = mem.id
			if left == nil {
				left = mem
				m.setCause(cause{trigger: triggerMemberLeft, member: mem})
			}
			m.removeMember(g, mem)
			m.cancelMemberTimers(g, mem)
		}
		resp.Members = append(resp.Members, res)
	}
	if req.Version < 3 {
		resp.ErrorCode = resp.Members[0].ErrorCode
		resp.Members = nil
	}
	if left != nil {
		m.bumpEpoch(g)
	}
}

// --- downgrade ---

// DowngradePolicy says when a consumer group whose last consumer-protocol
// member leaves turns back into a classic group: Allowed, and the classic
// members fit MaxSize (group.max.size).
type DowngradePolicy struct {
	Allowed bool
	MaxSize int
}

// downgradeOnFence turns the group classic if the member about to be
// fenced is its last consumer-protocol member (Kafka's
// validateOnlineDowngradeWithFencedMember); it reports whether it did.
func (m *Machine) downgradeOnFence(g *group, mem *member, c cause) bool {
	p := m.cfg.Downgrade
	others := len(g.members) - 1
	if mem.meta.classic != nil || g.classicMembers != others || others < 1 || !p.Allowed || others > p.MaxSize {
		return false
	}
	d := Downgrade{Group: g.id, Generation: g.epoch, Rebalance: true, Cause: memberRef(c.member)}
	for _, o := range g.sortedMembers() {
		if o != mem {
			d.Members = append(d.Members, m.asClassic(o, o.meta, o.assigned))
		}
	}
	m.dropConverted(g)
	m.out.Downgrades = append(m.out.Downgrades, d)
	return true
}

// downgradeOnReplace turns the group classic when a classic JoinGroup's
// static member replaces the last consumer-protocol member (Kafka's
// validateOnlineDowngradeWithReplacedMemberId): the joining member takes
// the replaced one's assignment, and there is no rebalance.
func (m *Machine) downgradeOnReplace(g *group, replaced *member, newID string, upd *memberMeta) bool {
	p := m.cfg.Downgrade
	if replaced.meta.classic != nil || g.classicMembers != len(g.members)-1 || !p.Allowed || len(g.members) > p.MaxSize {
		return false
	}
	// Kafka does not rebalance after this downgrade; it need not when
	// every member holds its whole target. Otherwise what is being
	// revoked or not yet handed out is in no classic assignment, and
	// only a rebalance gives it to anyone.
	d := Downgrade{Group: g.id, Generation: g.epoch, Cause: memberRef(replaced), Joined: newID, Rebalance: !g.settled()}
	for _, o := range g.sortedMembers() {
		if o == replaced {
			joined := m.asClassic(o, *upd, o.assigned)
			joined.ID = newID
			d.Members = append(d.Members, joined)
			continue
		}
		d.Members = append(d.Members, m.asClassic(o, o.meta, o.assigned))
	}
	slices.SortFunc(d.Members, func(a, b ClassicMember) int { return bytes.Compare([]byte(a.ID), []byte(b.ID)) })
	m.dropConverted(g)
	m.out.Downgrades = append(m.out.Downgrades, d)
	return true
}

// settled reports whether every member holds exactly its target at the
// group's epoch, nothing pending revocation.
func (g *group) settled() bool {
	if g.assignmentEpoch != g.epoch {
		return false
	}
	for _, mem := range g.members {
		if len(mem.pending) > 0 || !mem.assigned.samePartitions(g.target[mem.id]) {
			return false
		}
	}
	return true
}

// asClassic describes a member for the classic group.
func (m *Machine) asClassic(mem *member, meta memberMeta, assigned partSet) ClassicMember {
	c := meta.classic
	return ClassicMember{
		ID: mem.id, InstanceID: meta.instanceID, ClientID: meta.clientID, ClientHost: meta.clientHost,
		RebalanceTimeoutMs: meta.rebalanceTimeout, SessionTimeoutMs: c.SessionTimeoutMs,
		Protocols: c.SupportedProtocols, Assignment: m.serializeAssignment(assigned, c),
	}
}

// dropConverted deletes a group that became classic: every member's
// records, then the group's, in Kafka's order (createGroupTombstoneRecords),
// and its deadlines. The rebalance in progress ends there.
func (m *Machine) dropConverted(g *group) {
	if g.current != nil {
		m.closeRebalance(g, TriggerDowngrade)
	}
	ids := make([]string, 0, len(g.members))
	for _, mem := range g.sortedMembers() {
		ids = append(ids, mem.id)
	}
	targets := sortedKeys(g.target)
	// Applied as a load applies records: the group is going, nothing it
	// does now is a rebalance.
	m.replaying = true
	for _, id := range ids {
		m.emit(Record{Type: RecordCurrentAssignment, Group: g.id, Member: id})
	}
	for _, id := range targets {
		m.emit(Record{Type: RecordTargetMember, Group: g.id, Member: id})
	}
	m.emit(Record{Type: RecordTargetEpoch, Group: g.id})
	for _, id := range ids {
		m.emit(Record{Type: RecordMemberMetadata, Group: g.id, Member: id})
	}
	m.emit(Record{Type: RecordGroupEpoch, Group: g.id})
	m.replaying = false
	m.cancelGroupTimers(g)
}

// handOut notes a member id given with MEMBER_ID_REQUIRED, valid until
// expires, and forgets the ones whose time has passed.
func (g *group) handOut(id string, expires, now time.Time) {
	for k, at := range g.handedOut {
		if !now.Before(at) {
			delete(g.handedOut, k)
		}
	}
	if g.handedOut == nil {
		g.handedOut = map[string]time.Time{}
	}
	g.handedOut[id] = expires
}

// takeHandedOut reports whether id was handed out and has not expired,
// and forgets it.
func (g *group) takeHandedOut(id string, now time.Time) bool {
	at, ok := g.handedOut[id]
	delete(g.handedOut, id)
	return ok && now.Before(at)
}
