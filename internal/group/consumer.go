package group

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/inspect"
)

// The consumer (KIP-848) groups of the shard. Their members, epochs and
// assignments live in the consumer machine (package consumer); this machine
// keeps what both group types share, so that a group id holds one type at a
// time and a migration between the protocols can later be one step that
// replaces one by the other: the id, its committed offsets and its
// rebalance history. A consumer group has a *group here with consumer set,
// created when the consumer machine creates the group and removed when the
// group is deleted.
//
// An empty group changes type whatever the migration policy says: a
// ConsumerGroupHeartbeat joining an empty classic group, or a JoinGroup
// joining an empty consumer group, deletes the old group's records (as
// Kafka's maybeDeleteEmptyClassicGroup and maybeDeleteEmptyConsumerGroup
// do) and keeps its offsets. A non-empty group changes type online, as the
// policy allows: a consumer-protocol member joining a classic group
// converts it (upgrade), classic members go on inside the consumer group
// (package consumer serves their JoinGroup, SyncGroup, Heartbeat and
// LeaveGroup), and the group turns classic again when its last
// consumer-protocol member leaves (downgrade). Either conversion writes
// the old type's tombstones and the new type's records in one Output, so
// a restart finds one type or the other.

// stepConsumer steps the consumer machine and takes its effects into this
// step's.
func (m *Machine) stepConsumer(ev consumer.Event) {
	m.absorb(m.cons.Step(m.now, ev))
}

// stepConsumerRequest is stepConsumer for a request: absorb copies what
// it keeps of the Output, whose slices the consumer machine reuses.
func (m *Machine) stepConsumerRequest(r consumer.Request) {
	m.absorb(m.cons.StepRequest(m.now, r))
}

// absorb takes a consumer machine output into this step's.
func (m *Machine) absorb(out consumer.Output) {
	for _, r := range out.Records {
		m.record(consumerRecord(r))
		// Every consumer group starts with its first group epoch.
		if r.Type == consumer.RecordGroupEpoch && r.GroupEpoch != nil && m.groups[r.Group] == nil {
			g := newGroup(r.Group, m.now)
			g.consumer = true
			m.groups[r.Group] = g
		}
	}
	m.out.Replies = append(m.out.Replies, out.Replies...)
	m.consTimers = append(m.consTimers, out.Timers...)
	for _, r := range out.Rebalances {
		if g := m.groups[r.Group]; g != nil && g.consumer {
			m.keepConsumerRebalance(g, r)
		}
	}
	for _, d := range out.Downgrades {
		m.downgrade(d)
	}
}

// consumerHeartbeat serves ConsumerGroupHeartbeat.
func (m *Machine) consumerHeartbeat(r Request, req *kmsg.ConsumerGroupHeartbeatRequest) {
	creq := consumer.Request{ID: r.ID, ClientID: r.ClientID, ClientHost: r.ClientHost, Msg: req}
	g := m.groups[req.Group]
	if g == nil || g.consumer {
		m.stepConsumerRequest(creq)
		return
	}
	// The id is a classic group's. Requests that fail their own checks
	// get that answer first, as in Kafka.
	if bad := m.cons.InvalidHeartbeat(req); bad != nil {
		m.reply(r.ID, bad)
		return
	}
	if req.MemberEpoch != 0 {
		m.reply(r.ID, consumer.NotConsumerGroup(req))
		return
	}
	if !g.classicEmpty() {
		m.upgrade(g, creq, req)
		return
	}
	// A join takes over an empty classic group, but only if it
	// succeeds: a refused join changes nothing.
	out := m.cons.Step(m.now, creq)
	if m.cons.Has(req.Group) {
		m.retype(g, true)
	}
	m.absorb(out)
}

// upgrade converts a non-empty classic group into a consumer group for a
// joining consumer-protocol member, if Kafka would (validateOnlineUpgrade):
// the policy allows it, the group uses the consumer protocol, and it fits
// group.consumer.max.size. Refused, the member is told the group is not a
// consumer group (or, when the group would be full with it, so).
func (m *Machine) upgrade(g *group, creq consumer.Request, req *kmsg.ConsumerGroupHeartbeatRequest) {
	maxSize := m.cons.Config().MaxSize
	if !m.cfg.MigrationPolicy.UpgradeEnabled() || g.protocolType != consumerProtocolType || len(g.members) > maxSize {
		m.reply(creq.ID, consumer.NotConsumerGroup(req))
		return
	}
	if len(g.members) >= maxSize && (req.MemberID == "" || g.members[req.MemberID] == nil) {
		// Kafka converts and then finds the group full; the refusal
		// discards the conversion.
		m.reply(creq.ID, consumer.GroupFull(req, maxSize))
		return
	}
	u := consumer.Upgrade{Group: g.id, Generation: g.generation, Protocol: g.protocol, Heartbeat: creq}
	for _, mem := range g.sortedMembers() {
		u.Members = append(u.Members, classicMember(mem))
	}
	out := m.cons.Step(m.now, u)
	if !m.cons.Has(g.id) {
		m.absorb(out) // the refusal
		return
	}
	// Kafka's convertToConsumerGroup: members waiting in a join or sync
	// rejoin the consumer group.
	for _, mem := range g.sortedMembers() {
		if mem.join != nil {
			m.replyJoinError(mem.join, errRebalanceInProgress, mem.id)
			g.setJoin(mem, nil)
		}
		if mem.sync != nil {
			m.replySyncError(mem.sync, errRebalanceInProgress)
			mem.sync = nil
		}
	}
	if g.cur != nil {
		m.closeRebalance(g, consumer.TriggerUpgrade)
	}
	m.handOver(g, true)
	m.absorb(out)
}

// classicMember describes a classic member for the conversion.
func classicMember(mem *member) consumer.ClassicMember {
	cm := consumer.ClassicMember{
		ID: mem.id, InstanceID: mem.instanceID, ClientID: mem.clientID, ClientHost: mem.clientHost,
		RebalanceTimeoutMs: int32(mem.rebalance / time.Millisecond),
		SessionTimeoutMs:   int32(mem.session / time.Millisecond),
		Assignment:         mem.assignment,
	}
	for _, p := range mem.protocols {
		cm.Protocols = append(cm.Protocols, consumer.ClassicProtocol{Name: p.name, Metadata: p.metadata})
	}
	return cm
}

// downgrade rebuilds a consumer group that the consumer machine turned
// back into a classic one (Kafka's convertToClassicGroup): a Stable group
// at the consumer group's epoch, the members' current assignments as
// their classic ones, followed by a rebalance unless a static member's
// replacement caused it. Offsets and history stay with the id.
func (m *Machine) downgrade(d consumer.Downgrade) {
	old := m.groups[d.Group]
	if old == nil {
		return
	}
	g := newGroup(d.Group, m.now)
	g.offsets, g.history, g.nextSeq = old.offsets, old.history, old.nextSeq
	g.state, g.prevState = Stable, CompletingRebalance
	g.generation = d.Generation
	for _, cm := range d.Members {
		mem := &member{
			id: cm.ID, instanceID: cm.InstanceID, clientID: cm.ClientID, clientHost: cm.ClientHost,
			session:      time.Duration(cm.SessionTimeoutMs) * time.Millisecond,
			rebalance:    time.Duration(cm.RebalanceTimeoutMs) * time.Millisecond,
			protocolType: consumerProtocolType,
			assignment:   cm.Assignment,
			received:     cm.Assignment,
			receivedGen:  d.Generation,
			lastSeen:     m.now,
			joinedAt:     m.now,
		}
		for _, p := range cm.Protocols {
			mem.protocols = append(mem.protocols, protocol{name: p.Name, metadata: p.Metadata})
		}
		g.add(mem)
		m.schedule(TimerKey{Group: g.id, Kind: TimerHeartbeat, Member: mem.id}, mem.session)
	}
	g.protocolType = consumerProtocolType
	g.protocol = g.selectProtocol()
	g.computeSubscribedTopics()
	m.groups[g.id] = g
	m.record(m.metadataRecord(g))
	if d.Joined != "" {
		// The static member whose join made the group classic was told
		// its own first protocol; it must sync with the group's (Kafka
		// tells it its own, and a member preferring another protocol
		// than the group chose would then be refused its SyncGroup).
		for _, r := range m.out.Replies {
			if jr, ok := r.Msg.(*kmsg.JoinGroupResponse); ok && jr.ErrorCode == 0 && jr.MemberID == d.Joined {
				jr.Protocol = optStr(g.protocol)
			}
		}
	}
	rebalance := d.Rebalance
	for _, mem := range g.sortedMembers() {
		// Inside the consumer group each classic member was told its
		// own first protocol; one told another than the group's must
		// rejoin to learn it, even where Kafka does not rebalance.
		if mem.id != d.Joined && len(mem.protocols) > 0 && mem.protocols[0].name != g.protocol {
			rebalance = true
		}
	}
	if rebalance {
		var who *member
		if c := d.Cause; c != nil {
			who = &member{id: c.MemberID, instanceID: c.InstanceID, clientID: c.ClientID, clientHost: c.ClientHost}
		}
		m.prepareRebalance(g, reason{trigger: consumer.TriggerDowngrade, who: who})
	}
}

// classicEmpty reports whether a classic group has no members, so its id
// may pass to a consumer group.
func (g *group) classicEmpty() bool {
	return g.state == Empty && len(g.members) == 0 && len(g.pending) == 0
}

// retype gives an empty group's id to a group of the other type: the old
// group's records are deleted, its offsets and rebalance history stay with
// the id.
func (m *Machine) retype(g *group, toConsumer bool) {
	if toConsumer && g.cur != nil {
		m.closeRebalance(g, "empty")
	}
	m.handOver(g, toConsumer)
}

// handOver deletes a group's records and gives its id, offsets and
// rebalance history to a group of the other type.
func (m *Machine) handOver(g *group, toConsumer bool) {
	if toConsumer {
		m.timers.CancelGroup(g.id)
		m.record(Record{Type: RecordGroupMetadata, Group: g.id})
	} else {
		m.stepConsumer(consumer.DeleteGroup{Group: g.id})
	}
	n := newGroup(g.id, m.now)
	n.consumer = toConsumer
	n.offsets, n.history, n.nextSeq = g.offsets, g.history, g.nextSeq
	m.groups[g.id] = n
}

// classicJoinToConsumerGroup answers a JoinGroup for a consumer group. An
// empty consumer group gives its id to the classic group the join creates
// (it reports true, and the join goes on); otherwise the member joins the
// consumer group speaking the classic protocol.
func (m *Machine) classicJoinToConsumerGroup(g *group, r Request, p *parked, req *kmsg.JoinGroupRequest) bool {
	if m.cons.Members(g.id) == 0 {
		if req.MemberID != "" {
			m.replyJoinError(p, errUnknownMemberID, req.MemberID)
			return false
		}
		m.retype(g, false)
		return true
	}
	m.stepConsumerRequest(consumer.Request{ID: r.ID, ClientID: r.ClientID, ClientHost: r.ClientHost, Msg: req})
	return false
}

// classicToConsumerGroup hands a SyncGroup, Heartbeat or LeaveGroup for a
// consumer group to the consumer machine.
func (m *Machine) classicToConsumerGroup(r Request) {
	m.stepConsumerRequest(consumer.Request{ID: r.ID, ClientID: r.ClientID, ClientHost: r.ClientHost, Msg: r.Msg})
}

// consumerDescribe serves ConsumerGroupDescribe.
func (m *Machine) consumerDescribe(r Request, req *kmsg.ConsumerGroupDescribeRequest) {
	resp := kmsg.NewPtrConsumerGroupDescribeResponse()
	resp.Version = req.Version
	for _, id := range req.Groups {
		if g := m.groups[id]; g != nil && !g.consumer {
			dg := kmsg.NewConsumerGroupDescribeResponseGroup()
			dg.Group = id
			dg.AuthorizedOperations = -2147483648
			dg.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "Group " + id + " is not a consumer group."
			dg.ErrorMessage = &msg
			resp.Groups = append(resp.Groups, dg)
			continue
		}
		resp.Groups = append(resp.Groups, m.cons.DescribeGroup(id))
	}
	m.reply(r.ID, resp)
}

// subscribed reports whether a group's members subscribe to a topic.
func (m *Machine) subscribed(g *group, topic string) bool {
	if g.consumer {
		return m.cons.Subscribed(g.id, topic)
	}
	return g.isSubscribedToTopic(topic)
}

// deleteConsumerGroup deletes an empty consumer group: its records, its
// offsets' and its history's.
func (m *Machine) deleteConsumerGroup(g *group) {
	for _, tp := range g.offsets.sorted() {
		m.record(offsetRecord(g.id, tp.topic, tp.partition, nil))
	}
	m.stepConsumer(consumer.DeleteGroup{Group: g.id})
	m.removeGroup(g)
}

// committedOffset is the consumer machine's view of the offsets.
func (m *Machine) committedOffset(groupID, topic string, partition int32) (int64, bool) {
	g := m.groups[groupID]
	if g == nil {
		return 0, false
	}
	v, ok := g.offsets.get(topicPartition{topic, partition})
	return v.offset, ok
}

// keepConsumerRebalance keeps a finished consumer-group rebalance in the
// group's history as a classic one is kept: numbered, checked for a storm,
// written to the store and handed to the runtime (Output.Rebalances) to
// fill in its commit gaps.
func (m *Machine) keepConsumerRebalance(g *group, r *inspect.Rebalance) {
	m.numberConsumerRebalance(g, r)
	g.nextSeq++
	m.keepRebalance(g, r)
}

// numberConsumerRebalance gives a consumer-group rebalance its sequence
// number and storm flag, and its times the store's millisecond precision,
// so that what is served is what a restart reads back.
func (m *Machine) numberConsumerRebalance(g *group, r *inspect.Rebalance) {
	r.Seq = g.nextSeq
	r.StartedAt = msTime(r.StartedAt)
	if r.EndedAt != nil {
		end := msTime(*r.EndedAt)
		r.EndedAt = &end
		r.DurationMs = end.Sub(r.StartedAt).Milliseconds()
	}
	for i := range r.Moved {
		mv := &r.Moved[i]
		mv.ReleasedAt = msTime(mv.ReleasedAt)
		if !mv.AssignedAt.IsZero() {
			mv.AssignedAt = msTime(mv.AssignedAt)
			mv.PauseMs = max(mv.AssignedAt.Sub(mv.ReleasedAt).Milliseconds(), 0)
		}
	}
	m.checkStorm(g, r, m.cons.Config().SessionTimeout)
}

// consumerRebalances returns a consumer group's history and the rebalance
// in progress.
func (m *Machine) consumerInProgress(g *group, now time.Time) (inspect.Rebalance, bool) {
	r, ok := m.cons.InProgress(g.id, now)
	if !ok {
		return r, false
	}
	m.numberConsumerRebalance(g, &r)
	return r, true
}

// consumerSummary is a consumer group's line in the group list.
func (m *Machine) consumerSummary(g *group, now time.Time) inspect.GroupSummary {
	s, _ := m.cons.Summary(g.id)
	s.Rebalances = len(g.history)
	if r, ok := m.consumerInProgress(g, now); ok {
		s.Rebalances++
		s.LastRebalance = r.Summary()
	} else if n := len(g.history); n > 0 {
		s.LastRebalance = g.history[n-1].Summary()
	}
	return s
}

// describeConsumer is a consumer group's whole view.
func (m *Machine) describeConsumer(g *group, now time.Time) inspect.Group {
	v, _ := m.cons.View(g.id)
	v.GroupSummary = m.consumerSummary(g, now)
	owners := map[topicPartition]string{}
	for _, mem := range v.Members {
		for _, t := range mem.Assignment {
			for _, p := range t.Partitions {
				owners[topicPartition{t.Topic, p}] = mem.MemberID
			}
		}
	}
	v.Offsets = append(v.Offsets, g.offsetViews(owners)...)
	return v
}

// ConsumerGroupState returns a consumer group's state and group epoch
// (Dead, -1 if there is no such consumer group).
func (m *Machine) ConsumerGroupState(id string) (consumer.State, int32) {
	return m.cons.GroupState(id)
}

// GroupType returns inspect.TypeClassic or inspect.TypeConsumer for a
// group, "" for an unknown one.
func (m *Machine) GroupType(id string) string {
	g := m.groups[id]
	switch {
	case g == nil:
		return ""
	case g.consumer:
		return inspect.TypeConsumer
	}
	return inspect.TypeClassic
}

// replayConsumer rebuilds the consumer groups from their records and gives
// each its place among the group ids. A group id with records of both
// types is an error: a change of type writes the old type's tombstones in
// the same batch as the new type's records.
func (m *Machine) replayConsumer(now time.Time, recs []consumer.Record, classic map[string]*GroupMetadata) (consumer.Output, error) {
	out, err := m.cons.Replay(now, recs)
	if err != nil {
		return out, &ReplayError{Err: err}
	}
	for _, id := range m.cons.Groups() {
		if classic[id] != nil {
			return out, &ReplayError{Err: fmt.Errorf("group %q has records of both a classic and a consumer group", id)}
		}
		g := newGroup(id, now)
		g.consumer = true
		g.loadedAt = now
		m.groups[id] = g
	}
	return out, nil
}

// ReplayError reports stored records that contradict each other. Reading
// them again gives the same records, so a retry cannot help.
type ReplayError struct{ Err error }

func (e *ReplayError) Error() string { return "group records contradict each other: " + e.Err.Error() }

func (e *ReplayError) Unwrap() error { return e.Err }

// checkCoverage notes whether a group loaded Stable has persisted
// assignments that give a subscribed partition to nobody, with no member
// reporting it still owns it (a cooperative group withholds such
// partitions). Only a downgrade writes such a record, and the rebalance
// that follows it lives in memory: a coordinator reloaded before that
// rebalance ends would otherwise leave those partitions unconsumed, as no
// member has a reason to rejoin. The group is loaded as it was persisted,
// Stable; its members' next JoinGroup, SyncGroup or Heartbeat starts the
// rebalance (resumeRebalance). It waits for the topics to be known.
func (m *Machine) checkCoverage(g *group) {
	if m.topics == nil {
		return
	}
	g.coverageUnchecked = false
	if g.state != Stable || !g.subscribedKnown || len(g.subscribed) == 0 {
		return
	}
	held := map[topicPartition]bool{}
	for _, mem := range g.sortedMembers() {
		var a kmsg.ConsumerMemberAssignment
		if a.ReadFrom(mem.assignment) != nil {
			return // not ours to judge
		}
		for _, t := range a.Topics {
			for _, p := range t.Partitions {
				held[topicPartition{t.Topic, p}] = true
			}
		}
		var md kmsg.ConsumerMemberMetadata
		if md.ReadFrom(mem.metadataFor(g.protocol)) == nil {
			for _, t := range md.OwnedPartitions {
				for _, p := range t.Partitions {
					held[topicPartition{t.Topic, p}] = true
				}
			}
		}
	}
	for _, t := range m.topics {
		if !g.subscribed[t.Name] {
			continue
		}
		for p := range t.Partitions {
			if !held[topicPartition{t.Name, p}] {
				g.uncovered = true
				return
			}
		}
	}
}

// resumeRebalance starts the rebalance checkCoverage found missing, on the
// first membership request to the group after its load.
func (m *Machine) resumeRebalance(id string) { m.resumeGroupRebalance(m.groups[id]) }

// resumeGroupRebalance is resumeRebalance with the group (nil if none)
// already looked up.
func (m *Machine) resumeGroupRebalance(g *group) {
	if g == nil || !g.uncovered {
		return
	}
	g.uncovered = false
	if g.state == Stable {
		m.prepareRebalance(g, reason{trigger: m.cfg.LoadTrigger})
	}
}
