package consumer

import (
	"cmp"
	"slices"
	"time"

	"github.com/groupd/groupd/internal/inspect"
)

// Rebalance triggers, as the rebalance record names them.
const (
	triggerMemberJoined         = inspect.TriggerMemberJoined
	triggerMemberLeft           = inspect.TriggerMemberLeft
	triggerSessionTimeout       = inspect.TriggerSessionTimeout
	triggerRebalanceTimeout     = inspect.TriggerRebalanceTimeout
	triggerSubscriptionChanged  = inspect.TriggerSubscriptionChanged
	triggerTopicMetadataChanged = inspect.TriggerTopicMetadataChanged
)

// cause is why the next group epoch bump of this step happens.
type cause struct {
	trigger string
	member  *member // who caused it, nil for topic changes
	// releasedAt, when set, is when the member's partitions count as given
	// up: a member fenced for silence was last heard from then.
	releasedAt time.Time
}

// rebalance is the tracking of one epoch bump until every member holds the
// new target (or the group empties, or another bump supersedes it).
type rebalance struct {
	before, after int32
	start, end    time.Time
	trigger       string
	member        *inspect.MemberRef
	startMembers  map[string]bool
	moves         []inspect.Move
	waits         map[string]time.Duration
	outcome       string
	in, out       []string
}

// setCause records why the coming epoch bump happens, for its rebalance
// record; fence and the heartbeat set it before emitting records.
func (m *Machine) setCause(c cause) { m.pending = c }

func memberRef(mem *member) *inspect.MemberRef {
	if mem == nil {
		return nil
	}
	return &inspect.MemberRef{
		MemberID:   mem.id,
		InstanceID: mem.meta.instanceID,
		ClientID:   mem.meta.clientID,
		ClientHost: mem.meta.clientHost,
	}
}

// openRebalance starts the record of an epoch bump from before.
func (m *Machine) openRebalance(g *group, before int32) {
	if g.current != nil {
		m.closeRebalance(g, "restarted")
	}
	c := m.pending
	r := &rebalance{
		before:       before,
		after:        g.epoch,
		start:        m.now,
		trigger:      c.trigger,
		member:       memberRef(c.member),
		startMembers: make(map[string]bool, len(g.members)+1),
		waits:        map[string]time.Duration{},
	}
	for id := range g.members {
		r.startMembers[id] = true
	}
	if c.member != nil {
		switch c.trigger {
		case triggerMemberJoined:
			// The newcomer was added just before the bump.
			delete(r.startMembers, c.member.id)
		case triggerMemberLeft, triggerSessionTimeout, triggerRebalanceTimeout:
			// The leaver was removed just before the bump.
			r.startMembers[c.member.id] = true
		}
	}
	if r.trigger == "" {
		r.trigger = triggerSubscriptionChanged
	}
	g.current = r
	m.pending = cause{}
}

// noteRelease records that a member gave a partition up (or lost it with
// its membership) at a time, for the rebalance that hands it on.
func (g *group) noteRelease(k tp, from string, at time.Time) {
	if g.released == nil {
		g.released = map[tp]release{}
	}
	g.released[k] = release{from: from, at: at}
}

// trackMoves notes the partitions a member was just given, with the pause
// since their previous owner gave them up, and when the member reached the
// open rebalance's target.
func (m *Machine) trackMoves(g *group, mem *member, oldAssigned partSet, wasReconciled bool) {
	diff(oldAssigned, mem.assigned, nil, func(id TopicID, p, _ int32) {
		k := tp{id, p}
		rel, wasReleased := g.released[k]
		delete(g.released, k)
		if g.current == nil {
			return
		}
		mv := inspect.Move{Topic: m.topicName(id), Partition: p, To: mem.id, CommitGap: -1, ReleasedAt: m.now, AssignedAt: m.now}
		if wasReleased {
			mv.From = rel.from
			mv.PauseMs = m.now.Sub(rel.at).Milliseconds()
			mv.ReleasedAt = rel.at
		}
		g.current.moves = append(g.current.moves, mv)
	})
	if c := g.current; c != nil && !wasReconciled && g.assignmentEpoch == c.after && mem.reconciledTo(g.assignmentEpoch) {
		c.waits[mem.id] = m.now.Sub(c.start)
	}
}

// topicName names a topic for people: its name, or its id once deleted.
func (m *Machine) topicName(id TopicID) string {
	if n, ok := m.topics.name(id); ok {
		return n
	}
	return id.String()
}

// maybeCloseRebalance ends the open rebalance once the group is Stable or
// Empty.
func (m *Machine) maybeCloseRebalance(g *group) {
	if g.current == nil || m.groups[g.id] != g {
		return
	}
	switch g.state() {
	case Stable:
		m.closeRebalance(g, "stable")
	case Empty:
		m.closeRebalance(g, "empty")
	}
}

func (m *Machine) closeRebalance(g *group, outcome string) {
	r := g.current
	r.end, r.outcome = m.now, outcome
	for id := range g.members {
		if !r.startMembers[id] {
			r.in = append(r.in, id)
		}
	}
	for id := range r.startMembers {
		if _, ok := g.members[id]; !ok {
			r.out = append(r.out, id)
		}
	}
	slices.Sort(r.in)
	slices.Sort(r.out)
	if outcome != "restarted" {
		// Partitions given up that nobody took: their topic went away or
		// nobody subscribes to it any more.
		for k, rel := range g.released {
			r.moves = append(r.moves, inspect.Move{Topic: m.topicName(k.id), Partition: k.p, From: rel.from, CommitGap: -1, ReleasedAt: rel.at})
		}
		g.released = nil
	}
	slices.SortFunc(r.moves, func(a, b inspect.Move) int {
		if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Partition, b.Partition); c != 0 {
			return c
		}
		return cmp.Compare(a.To, b.To)
	})
	g.history = append(g.history, *r)
	if over := len(g.history) - m.cfg.HistorySize; over > 0 {
		g.history = slices.Clone(g.history[over:])
	}
	g.current = nil
}

// Rebalances returns a group's rebalance records, oldest first, the one in
// progress (if any) last; nil for an unknown group. A rebalance is one group
// epoch bump: it ends when every member holds the new target assignment
// ("stable"), when the group empties ("empty"), or when another bump
// supersedes it ("restarted"). Moves carry the pause between the previous
// owner giving a partition up and the new owner receiving it; commit gaps
// are left at -1 for the coordinator, which knows offsets, to fill in.
func (m *Machine) Rebalances(groupID string) []inspect.Rebalance {
	g := m.groups[groupID]
	if g == nil {
		return nil
	}
	out := make([]inspect.Rebalance, 0, len(g.history)+1)
	for i := range g.history {
		out = append(out, g.history[i].view(groupID))
	}
	if g.current != nil {
		out = append(out, g.current.view(groupID))
	}
	return out
}

func (r *rebalance) view(groupID string) inspect.Rebalance {
	v := inspect.Rebalance{
		Group:            groupID,
		Protocol:         inspect.ProtocolConsumer,
		GenerationBefore: r.before,
		GenerationAfter:  r.after,
		StartedAt:        r.start,
		Trigger:          r.trigger,
		Member:           r.member,
		MembersIn:        slices.Clone(r.in),
		MembersOut:       slices.Clone(r.out),
		Moved:            slices.Clone(r.moves),
		Outcome:          r.outcome,
	}
	if r.outcome != "" {
		end := r.end
		v.EndedAt = &end
		v.DurationMs = r.end.Sub(r.start).Milliseconds()
	}
	for id, d := range r.waits {
		v.WaitedFor = append(v.WaitedFor, inspect.Wait{Member: id, WaitedMs: d.Milliseconds()})
	}
	slices.SortFunc(v.WaitedFor, func(a, b inspect.Wait) int {
		if c := cmp.Compare(b.WaitedMs, a.WaitedMs); c != 0 {
			return c
		}
		return cmp.Compare(a.Member, b.Member)
	})
	return v
}
