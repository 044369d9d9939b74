package group

import (
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/inspect"
)

func strPtr(s string) *string { return &s }

func optStr(s string) *string {
	if s == "" {
		return nil
	}
	p := new(string) // only here: &s would move s to the heap for "" too
	*p = s
	return p
}

// sharedStr hands out one *string for a string that many replies of a
// step carry (the group's protocol type and protocol), instead of one
// allocation per reply. Nothing writes through the pointers it returns.
type sharedStr struct {
	s string
	p *string
}

// get is optStr(s), the same pointer as last time if s is unchanged.
func (c *sharedStr) get(s string) *string {
	if s == "" {
		return nil
	}
	if c.p == nil || c.s != s {
		c.s, c.p = s, optStr(s)
	}
	return c.p
}

func (m *Machine) replyJoinError(p *parked, code int16, memberID string) {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Version = p.version
	resp.ErrorCode = code
	resp.MemberID = memberID
	m.reply(p.id, resp)
}

func (m *Machine) replySyncError(p *parked, code int16) {
	resp := kmsg.NewPtrSyncGroupResponse()
	resp.Version = p.version
	resp.ErrorCode = code
	m.reply(p.id, resp)
}

// joinResponse is the successful JoinGroup answer for the current
// generation; the leader gets the member list.
func (g *group) joinResponse(version int16, memberID string, withMembers bool) *kmsg.JoinGroupResponse {
	resp := kmsg.NewPtrJoinGroupResponse()
	g.fillJoinResponse(resp, version, memberID, withMembers)
	return resp
}

// fillJoinResponse makes resp, a response in its default state, the
// successful JoinGroup answer (joinResponse).
func (g *group) fillJoinResponse(resp *kmsg.JoinGroupResponse, version int16, memberID string, withMembers bool) {
	resp.Version = version
	resp.Generation = g.generation
	resp.ProtocolType = g.ptype.get(g.protocolType)
	resp.Protocol = g.pname.get(g.protocol)
	resp.LeaderID = g.leader
	resp.MemberID = memberID
	if withMembers {
		ms := g.sortedMembers()
		resp.Members = make([]kmsg.JoinGroupResponseMember, len(ms))
		for i, mem := range ms {
			jm := &resp.Members[i]
			jm.Default()
			jm.MemberID = mem.id
			jm.InstanceID = optStr(mem.instanceID)
			jm.ProtocolMetadata = mem.metadataFor(g.protocol)
		}
	}
}

func (m *Machine) joinGroup(r Request, req *kmsg.JoinGroupRequest) {
	p := &parked{id: r.ID, version: req.Version}
	session := time.Duration(req.SessionTimeoutMillis) * time.Millisecond
	rebalance := time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	if req.Version == 0 {
		// v0 has no rebalance timeout; Kafka uses the session timeout.
		rebalance = session
	}
	instanceID := ""
	if req.Version >= 5 && req.InstanceID != nil {
		instanceID = *req.InstanceID
	}
	if req.Group == "" {
		m.replyJoinError(p, errInvalidGroupID, req.MemberID)
		return
	}
	if session < m.cfg.MinSessionTimeout || session > m.cfg.MaxSessionTimeout {
		m.replyJoinError(p, errInvalidSessionTimeout, req.MemberID)
		return
	}

	g := m.groups[req.Group]
	isNewGroup := false
	if g != nil && g.consumer {
		if !m.classicJoinToConsumerGroup(g, r, p, req) {
			return
		}
		g, isNewGroup = m.groups[req.Group], true
	}
	if g == nil {
		if req.MemberID != "" {
			m.replyJoinError(p, errUnknownMemberID, req.MemberID)
			return
		}
		g = newGroup(req.Group, m.now)
		m.groups[req.Group] = g
		isNewGroup = true
	}
	nrec := len(m.out.Records)

	j := joinArgs{r: r, req: req, p: p, session: session, rebalance: rebalance, instanceID: instanceID}
	switch {
	case !m.acceptJoiningMember(g, req.MemberID):
		// Kafka's group.remove: the refused id is neither a member nor
		// pending any more. Unlike Kafka, the join phase completes at
		// once if the refused member was all it waited for, rather than
		// at the next join or timer.
		if mem := g.members[req.MemberID]; mem != nil {
			m.removeMember(g, mem, errUnknownMemberID, m.now)
		} else if g.pending[req.MemberID] {
			m.removePending(g, req.MemberID)
		}
		m.replyJoinError(p, errGroupMaxSizeReached, "")
		m.maybeCompleteJoinPhase(g)
	case req.MemberID == "":
		m.joinNewMember(g, j)
	default:
		m.joinExistingMember(g, j)
	}

	if isNewGroup && len(m.out.Records) == nrec {
		// A new group must reach the store even if nothing else did, so
		// that it survives a restart like Kafka's timeline commit.
		m.record(emptyMetadataRecord(g))
	}
}

// emptyMetadataRecord is what Kafka writes when a JoinGroup creates a group:
// no members, generation 0. Members joining right now are not persisted;
// they only become durable with the leader's assignment.
func emptyMetadataRecord(g *group) Record {
	return Record{Type: RecordGroupMetadata, Group: g.id, Metadata: &GroupMetadata{
		ProtocolType:   g.protocolType,
		StateTimestamp: unixMilli(g.stateTime),
	}}
}

type joinArgs struct {
	r          Request
	req        *kmsg.JoinGroupRequest
	p          *parked
	session    time.Duration
	rebalance  time.Duration
	instanceID string
}

// acceptJoiningMember is Kafka's group.max.size check (KAFKA-9885): while
// preparing, counting members awaiting join kicks out the last rejoiners if
// the limit was lowered.
func (m *Machine) acceptJoiningMember(g *group, memberID string) bool {
	switch g.state {
	case Empty, Dead:
		return true
	case PreparingRebalance:
		if mem := g.members[memberID]; mem != nil && mem.join != nil {
			return true
		}
		return g.numAwaitingJoin() < m.cfg.MaxGroupSize
	default:
		if _, ok := g.members[memberID]; ok {
			return true
		}
		return len(g.members) < m.cfg.MaxGroupSize
	}
}

func (m *Machine) newMemberID(g *group, prefix string) string {
	for {
		id := m.cfg.NewMemberID(prefix)
		if _, ok := g.members[id]; !ok && !g.pending[id] {
			return id
		}
	}
}

func (m *Machine) joinNewMember(g *group, j joinArgs) {
	if !g.supportsProtocols(j.req.ProtocolType, j.req.Protocols) {
		m.replyJoinError(j.p, errInconsistentProtocol, "")
		return
	}
	prefix := j.r.ClientID
	if j.instanceID != "" {
		prefix = j.instanceID
	}
	id := m.newMemberID(g, prefix)
	switch {
	case j.instanceID != "":
		if old, ok := g.static[j.instanceID]; ok {
			m.replaceStaticMember(g, j, old, id)
			return
		}
		m.addMember(g, j, id)
	case j.req.Version >= 4:
		// KIP-394: hand out the id and wait for the member to come back
		// with it, so a client that times out does not leave a ghost.
		g.pending[id] = true
		m.schedule(TimerKey{Group: g.id, Kind: TimerPending, Member: id}, j.session)
		m.replyJoinError(j.p, errMemberIDRequired, id)
	default:
		m.addMember(g, j, id)
	}
}

func (m *Machine) joinExistingMember(g *group, j joinArgs) {
	id := j.req.MemberID
	if !g.supportsProtocols(j.req.ProtocolType, j.req.Protocols) {
		m.replyJoinError(j.p, errInconsistentProtocol, id)
		return
	}
	if g.pending[id] {
		if j.instanceID != "" {
			// Pending members are always dynamic; Kafka fails with an
			// internal error here. The instance id is unknown, which is
			// what validateMember would say.
			m.replyJoinError(j.p, errUnknownMemberID, id)
			return
		}
		m.removePending(g, id)
		m.addMember(g, j, id)
		return
	}
	if code := g.validateMember(id, j.instanceID); code != 0 {
		if code == errUnknownMemberID {
			m.heardFromDeparted(g, id)
		}
		m.replyJoinError(j.p, code, id)
		return
	}
	mem := g.members[id]
	prior := g.priorJoin(mem)
	m.noteJoin(mem)
	switch g.state {
	case PreparingRebalance:
		m.updateMember(g, mem, j)
		m.maybeCompleteJoinPhase(g)
	case CompletingRebalance:
		if mem.matches(j.req.Protocols) {
			// A retry of a join whose answer was lost: repeat it.
			m.reply(j.p.id, g.joinResponse(j.p.version, id, g.leader == id))
			return
		}
		m.updateMember(g, mem, j)
		m.prepareRebalance(g, m.rejoinReason(g, mem, inspect.TriggerSubscriptionChanged, prior))
	case Stable:
		if g.leader == id {
			// The leader rejoins to react to changes invisible in
			// member metadata (e.g. new partitions).
			m.updateMember(g, mem, j)
			m.prepareRebalance(g, m.rejoinReason(g, mem, inspect.TriggerLeaderRejoined, prior))
			return
		}
		if !mem.matches(j.req.Protocols) {
			m.updateMember(g, mem, j)
			m.prepareRebalance(g, m.rejoinReason(g, mem, inspect.TriggerSubscriptionChanged, prior))
			return
		}
		m.reply(j.p.id, g.joinResponse(j.p.version, id, false))
	default:
		m.replyJoinError(j.p, errUnknownMemberID, id)
	}
}

func toProtocols(ps []kmsg.JoinGroupRequestProtocol) []protocol {
	out := make([]protocol, len(ps))
	for i, p := range ps {
		out[i] = protocol{name: p.Name, metadata: append([]byte(nil), p.Metadata...)}
	}
	return out
}

func (m *Machine) parkJoin(g *group, mem *member, p *parked) {
	if mem.join != nil && p != nil {
		// Kafka drops the superseded future and lets the client time
		// out; answering it frees the caller's handle.
		m.replyJoinError(mem.join, errRebalanceInProgress, mem.id)
	}
	g.setJoin(mem, p)
}

func (m *Machine) updateMember(g *group, mem *member, j joinArgs) {
	g.setProtocols(mem, toProtocols(j.req.Protocols))
	mem.rebalance = j.rebalance
	mem.session = j.session
	m.parkJoin(g, mem, j.p)
}

func (m *Machine) addMember(g *group, j joinArgs, id string) {
	mem := &member{
		id:           id,
		instanceID:   j.instanceID,
		clientID:     j.r.ClientID,
		clientHost:   j.r.ClientHost,
		session:      j.session,
		rebalance:    j.rebalance,
		protocolType: j.req.ProtocolType,
		protocols:    toProtocols(j.req.Protocols),
		join:         j.p,
		isNew:        true,
	}
	if g.state == PreparingRebalance && g.prevState == Empty {
		g.newMemberAdded = true
	}
	g.add(mem)
	m.noteJoin(mem)
	// A new member cannot heartbeat while its join is parked, so its
	// liveness is bounded by the new-member join timeout instead.
	m.schedule(TimerKey{Group: g.id, Kind: TimerHeartbeat, Member: id}, m.cfg.NewMemberJoinTimeout)
	m.maybePrepareRebalanceOrCompleteJoin(g, reason{trigger: m.newMemberTrigger(g, mem), who: mem, newcomer: true})
}

func (m *Machine) replaceStaticMember(g *group, j joinArgs, oldID, newID string) {
	old := g.members[oldID]
	oldLeader := g.leader
	// Read before the new incarnation's metadata replaces the old one's.
	handover := g.protocolType == consumerProtocolType && revocationPending(old.metadataFor(g.protocol), old.assignment)
	// Fence the previous incarnation's parked requests at once.
	if old.join != nil {
		m.replyJoinError(old.join, errFencedInstanceID, oldID)
		g.setJoin(old, nil)
	}
	if old.sync != nil {
		m.replySyncError(old.sync, errFencedInstanceID)
		old.sync = nil
	}
	// The new incarnation takes over the old one's place in join order
	// and its protocols, so it takes over its counts too.
	delete(g.members, oldID)
	m.cancel(TimerKey{Group: g.id, Kind: TimerHeartbeat, Member: oldID})
	mem := &member{
		id:           newID,
		instanceID:   old.instanceID,
		clientID:     old.clientID,
		clientHost:   old.clientHost,
		session:      old.session,
		rebalance:    old.rebalance,
		protocolType: old.protocolType,
		protocols:    old.protocols,
		assignment:   old.assignment,
		seq:          old.seq,
		received:     old.received,
		receivedGen:  old.receivedGen,
		awaiting:     old.awaiting,
		revoking:     old.revoking,
		pending:      old.pending,
	}
	g.members[newID] = mem
	g.replaceMember(old, mem)
	m.renameMember(g, oldID, newID)
	g.static[mem.instanceID] = newID
	if g.leader == oldID {
		g.leader = newID
	}
	if g.pendingSync[oldID] {
		delete(g.pendingSync, oldID)
		g.pendingSync[newID] = true
	}
	m.schedule(TimerKey{Group: g.id, Kind: TimerHeartbeat, Member: newID}, mem.session)
	m.updateMember(g, mem, j)
	m.noteJoin(mem)
	replaced := reason{trigger: inspect.TriggerStaticReplaced, who: mem, removed: []string{oldID}, newcomer: true}

	switch g.state {
	case Stable:
		// A cooperative member whose assignment lacks partitions it
		// reported owning was to revoke them and rejoin, so that the
		// next round hands them over. Its new incarnation owns nothing
		// and will not rejoin: without a rebalance those partitions
		// would stay unassigned. Kafka replaces without a rebalance
		// here too; groupd rebalances instead.
		if g.selectProtocol() != g.protocol || handover {
			m.prepareRebalance(g, replaced)
			return
		}
		// KIP-345: same protocol, so no rebalance; persist the new id
		// and hand back the current generation.
		g.setJoin(mem, nil)
		m.record(m.metadataRecord(g))
		var resp *kmsg.JoinGroupResponse
		if j.p.version >= 9 {
			// KIP-814: a static leader gets the members but must not
			// compute a new assignment.
			isLeader := g.leader == newID
			resp = g.joinResponse(j.p.version, newID, isLeader)
			resp.SkipAssignment = isLeader
		} else {
			// Older clients see the previous leader id, so a
			// returning leader does not reassign without members.
			resp = g.joinResponse(j.p.version, newID, false)
			resp.LeaderID = oldLeader
		}
		m.reply(j.p.id, resp)
	case CompletingRebalance:
		// The leader may already have assigned to the old id.
		m.prepareRebalance(g, replaced)
	default:
		m.maybeCompleteJoinPhase(g)
	}
}

func (g *group) canRebalance() bool { return CanTransition(g.state, PreparingRebalance) }

func (m *Machine) maybePrepareRebalanceOrCompleteJoin(g *group, why reason) {
	if g.canRebalance() {
		m.prepareRebalance(g, why)
	} else {
		m.maybeCompleteJoinPhase(g)
	}
}

// maybeCompleteJoinPhase never completes the initial rebalance early: that
// delay exists to gather members (KIP-134).
func (m *Machine) maybeCompleteJoinPhase(g *group) {
	if g.state == PreparingRebalance && g.prevState != Empty && g.hasAllMembersJoined() {
		m.completeJoin(g)
	}
}

func (m *Machine) prepareRebalance(g *group, why reason) {
	if g.state == CompletingRebalance {
		m.resetAndPropagateAssignmentError(g, errRebalanceInProgress)
	}
	m.cancel(TimerKey{Group: g.id, Kind: TimerSync})
	initial := g.state == Empty
	m.openRebalance(g, why)
	g.transition(m.now, PreparingRebalance)
	if initial {
		g.joinIsInitial = true
		g.newMemberAdded = false
		g.initialDelay = m.cfg.InitialRebalanceDelay
		g.initialRemaining = max(g.rebalanceTimeout()-m.cfg.InitialRebalanceDelay, 0)
		m.schedule(TimerKey{Group: g.id, Kind: TimerJoin}, g.initialDelay)
		return
	}
	if g.hasAllMembersJoined() {
		m.completeJoin(g)
		return
	}
	g.joinIsInitial = false
	m.schedule(TimerKey{Group: g.id, Kind: TimerJoin}, g.rebalanceTimeout())
}

// onInitialDelay extends the initial delay while members keep arriving, but
// never beyond the rebalance timeout.
func (m *Machine) onInitialDelay(g *group) {
	if g.newMemberAdded && g.initialRemaining != 0 {
		g.newMemberAdded = false
		delay := min(m.cfg.InitialRebalanceDelay, g.initialRemaining)
		g.initialRemaining = max(g.initialRemaining-g.initialDelay, 0)
		g.initialDelay = delay
		m.schedule(TimerKey{Group: g.id, Kind: TimerJoin}, delay)
		return
	}
	m.completeJoin(g)
}

func (m *Machine) completeJoin(g *group) {
	m.cancel(TimerKey{Group: g.id, Kind: TimerJoin})
	g.joinIsInitial = false
	var timedOut []*member
	for _, mem := range g.sortedMembers() {
		if mem.join == nil && mem.instanceID == "" {
			g.remove(mem.id)
			m.cancel(TimerKey{Group: g.id, Kind: TimerHeartbeat, Member: mem.id})
			timedOut = append(timedOut, mem)
			m.memberGone(g, mem, mem.lastSeen)
			d := departure{memberID: mem.id, identity: mem.identity(), trigger: inspect.TriggerRebalanceTimeout,
				at: m.now, lastSeen: mem.lastSeen, session: mem.session, rebalance: mem.rebalance}
			if g.cur != nil {
				d.phaseStart = g.cur.rec.StartedAt
			}
			m.depart(g, d)
		}
	}
	if !m.electJoinedLeader(g) && len(g.members) > 0 {
		// Nobody rejoined (only static members are left): wait another
		// rebalance timeout for session timeouts to clear them.
		m.schedule(TimerKey{Group: g.id, Kind: TimerJoin}, g.rebalanceTimeout())
		return
	}
	g.generation++
	if len(g.members) > 0 {
		g.protocol = g.selectProtocol()
		g.computeSubscribedTopics()
		g.transition(m.now, CompletingRebalance)
	} else {
		g.protocol = ""
		g.computeSubscribedTopics()
		g.transition(m.now, Empty)
	}
	g.pendingSync = map[string]bool{}
	m.joinPhaseDone(g, timedOut)
	if g.state == Empty {
		g.leader = ""
		m.record(m.metadataRecord(g))
		m.closeRebalance(g, "empty")
		return
	}
	// The answers of the members' parked joins, in one allocation.
	resps := make([]kmsg.JoinGroupResponse, g.numAwaitingJoin())
	m.out.Replies = slices.Grow(m.out.Replies, len(resps))
	for _, mem := range g.sortedMembers() {
		if mem.join != nil {
			var resp *kmsg.JoinGroupResponse
			if len(resps) > 0 {
				resp, resps = &resps[0], resps[1:]
				resp.Default()
			} else {
				resp = kmsg.NewPtrJoinGroupResponse()
			}
			g.fillJoinResponse(resp, mem.join.version, mem.id, g.leader == mem.id)
			m.reply(mem.join.id, resp)
			g.setJoin(mem, nil)
		}
		m.schedule(TimerKey{Group: g.id, Kind: TimerHeartbeat, Member: mem.id}, mem.session)
		mem.isNew = false
		g.pendingSync[mem.id] = true
	}
	g.syncGeneration = g.generation
	m.schedule(TimerKey{Group: g.id, Kind: TimerSync}, g.rebalanceTimeout())
}

// electJoinedLeader keeps the leader if it rejoined, else picks the first
// rejoined member in join order.
func (m *Machine) electJoinedLeader(g *group) bool {
	if l := g.members[g.leader]; l != nil && l.join != nil {
		return true
	}
	for _, mem := range g.sortedMembers() {
		if mem.join != nil {
			g.leader = mem.id
			return true
		}
	}
	return false
}

func (m *Machine) resetAndPropagateAssignmentError(g *group, code int16) {
	for _, mem := range g.members {
		mem.assignment = nil
	}
	m.propagateAssignment(g, code)
}

func (m *Machine) propagateAssignment(g *group, code int16) {
	ms := g.sortedMembers()
	n := 0
	for _, mem := range ms {
		if mem.sync != nil {
			n++
		}
	}
	// The answers of the members' parked syncs, in one allocation.
	resps := make([]kmsg.SyncGroupResponse, n)
	m.out.Replies = slices.Grow(m.out.Replies, n)
	for _, mem := range ms {
		if mem.sync == nil {
			continue
		}
		resp := &resps[0]
		resps = resps[1:]
		resp.Default()
		resp.Version = mem.sync.version
		resp.ErrorCode = code
		if code == 0 {
			resp.ProtocolType = g.ptype.get(g.protocolType)
			resp.Protocol = g.pname.get(g.protocol)
			resp.MemberAssignment = mem.assignment
		}
		m.reply(mem.sync.id, resp)
		mem.sync = nil
		if code == 0 {
			m.delivered(g, mem)
		}
		// Expirations that fired while the member waited were ignored,
		// so its session starts over now.
		m.schedule(TimerKey{Group: g.id, Kind: TimerHeartbeat, Member: mem.id}, mem.session)
	}
}

// removeMember drops a member, answering whatever it has parked, and
// reacts like Kafka's removeMemberAndUpdateClassicGroup. lastHeard is when
// the member gave up its partitions if it had not yet (see memberGone).
func (m *Machine) removeMember(g *group, mem *member, code int16, lastHeard time.Time) {
	if mem.join != nil {
		m.replyJoinError(mem.join, code, "")
		g.setJoin(mem, nil)
	}
	if mem.sync != nil {
		// Kafka leaves this future dangling; answer it instead.
		m.replySyncError(mem.sync, code)
		mem.sync = nil
	}
	g.remove(mem.id)
	m.cancel(TimerKey{Group: g.id, Kind: TimerHeartbeat, Member: mem.id})
	m.memberGone(g, mem, lastHeard)
}

func (m *Machine) onHeartbeatExpired(g *group, id string) {
	mem := g.members[id]
	if mem == nil {
		return
	}
	// Members parked in a join or sync count as alive, except new ones,
	// whose timer is the new-member join timeout.
	if !mem.isNew && (mem.join != nil || mem.sync != nil) {
		return
	}
	m.removeMember(g, mem, errUnknownMemberID, mem.lastSeen)
	m.depart(g, departure{memberID: id, identity: mem.identity(), trigger: inspect.TriggerSessionTimeout,
		at: m.now, lastSeen: mem.lastSeen, session: mem.session, rebalance: mem.rebalance})
	switch g.state {
	case Stable, CompletingRebalance:
		m.maybePrepareRebalanceOrCompleteJoin(g, reason{trigger: inspect.TriggerSessionTimeout, who: mem, removed: []string{id}})
	case PreparingRebalance:
		if g.hasAllMembersJoined() {
			m.completeJoin(g)
		}
	}
}

// removePending forgets a KIP-394 pending member id and its deadline.
func (m *Machine) removePending(g *group, id string) {
	delete(g.pending, id)
	m.cancel(TimerKey{Group: g.id, Kind: TimerPending, Member: id})
}

func (m *Machine) onPendingExpired(g *group, id string) {
	if !g.pending[id] {
		return
	}
	delete(g.pending, id)
	if g.state == PreparingRebalance && g.hasAllMembersJoined() {
		m.completeJoin(g)
	}
}

// onSyncExpired removes members that got their JoinGroup answer but never
// sent SyncGroup, so the group cannot hang in CompletingRebalance
// (KAFKA-12890).
func (m *Machine) onSyncExpired(g *group) {
	if g.syncGeneration != g.generation || (g.state != CompletingRebalance && g.state != Stable) {
		return
	}
	if len(g.pendingSync) == 0 {
		return
	}
	ids := sortedKeys(g.pendingSync)
	var first *member
	for _, id := range ids {
		if mem := g.members[id]; mem != nil {
			m.removeMember(g, mem, errUnknownMemberID, mem.lastSeen)
			m.depart(g, departure{memberID: id, identity: mem.identity(), trigger: inspect.TriggerPendingSyncTimeout,
				at: m.now, lastSeen: mem.lastSeen, session: mem.session, rebalance: mem.rebalance})
			if first == nil {
				first = mem
			}
		}
	}
	m.prepareRebalance(g, reason{trigger: inspect.TriggerPendingSyncTimeout, who: first, removed: ids})
}

// revocationPending reports whether a consumer-protocol member's
// subscription metadata claims a partition that its assignment no longer
// holds: under the cooperative protocol the member must still revoke it
// and rejoin. Metadata that does not parse claims nothing.
func revocationPending(metadata, assignment []byte) bool {
	var md kmsg.ConsumerMemberMetadata
	if md.ReadFrom(metadata) != nil || len(md.OwnedPartitions) == 0 {
		return false
	}
	var as kmsg.ConsumerMemberAssignment
	if as.ReadFrom(assignment) != nil {
		return false
	}
	assigned := make(map[string]map[int32]bool, len(as.Topics))
	for _, t := range as.Topics {
		ps := make(map[int32]bool, len(t.Partitions))
		for _, p := range t.Partitions {
			ps[p] = true
		}
		assigned[t.Topic] = ps
	}
	for _, t := range md.OwnedPartitions {
		for _, p := range t.Partitions {
			if !assigned[t.Topic][p] {
				return true
			}
		}
	}
	return false
}
