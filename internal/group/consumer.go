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
// Until that migration is served, a classic request for a consumer group
// and a ConsumerGroupHeartbeat for a classic group get Kafka's errors, and
// only an empty group changes type: a ConsumerGroupHeartbeat joining an
// empty classic group, or a JoinGroup joining an empty consumer group,
// deletes the old group's records (as Kafka's maybeDeleteEmptyClassicGroup
// and maybeDeleteEmptyConsumerGroup do) and keeps its offsets.

// stepConsumer steps the consumer machine and takes its effects into this
// step's.
func (m *Machine) stepConsumer(ev consumer.Event) {
	m.absorb(m.cons.Step(m.now, ev))
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
}

// consumerHeartbeat serves ConsumerGroupHeartbeat.
func (m *Machine) consumerHeartbeat(r Request, req *kmsg.ConsumerGroupHeartbeatRequest) {
	creq := consumer.Request{ID: r.ID, ClientID: r.ClientID, ClientHost: r.ClientHost, Msg: req}
	g := m.groups[req.Group]
	if g == nil || g.consumer {
		m.stepConsumer(creq)
		return
	}
	// The id is a classic group's. Requests that fail their own checks
	// get that answer first, as in Kafka.
	if bad := m.cons.InvalidHeartbeat(req); bad != nil {
		m.reply(r.ID, bad)
		return
	}
	if req.MemberEpoch != 0 || !g.classicEmpty() {
		m.reply(r.ID, consumer.NotConsumerGroup(req))
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

// classicEmpty reports whether a classic group has no members, so its id
// may pass to a consumer group.
func (g *group) classicEmpty() bool {
	return g.state == Empty && len(g.members) == 0 && len(g.pending) == 0
}

// retype gives an empty group's id to a group of the other type: the old
// group's records are deleted, its offsets and rebalance history stay with
// the id.
func (m *Machine) retype(g *group, toConsumer bool) {
	if toConsumer {
		if g.cur != nil {
			m.closeRebalance(g, "empty")
		}
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
// (it reports true, and the join goes on); otherwise the join is refused
// as Kafka refuses a member whose protocols the group cannot take.
func (m *Machine) classicJoinToConsumerGroup(g *group, p *parked, req *kmsg.JoinGroupRequest) bool {
	if m.cons.Members(g.id) == 0 {
		if req.MemberID != "" {
			m.replyJoinError(p, errUnknownMemberID, req.MemberID)
			return false
		}
		m.retype(g, false)
		return true
	}
	if m.cons.Full(g.id, req.MemberID) {
		m.replyJoinError(p, errGroupMaxSizeReached, req.MemberID)
		return false
	}
	m.replyJoinError(p, errInconsistentProtocol, req.MemberID)
	return false
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
