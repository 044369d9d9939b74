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
	triggerCoordinatorLoaded    = inspect.TriggerCoordinatorLoaded
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
	// came and went are the members present now and not at the start,
	// and the other way round, kept as members come and go (see
	// memberCame), so that a bump in a large group copies no list of
	// its members. nil while empty.
	came, went map[string]bool
	moves      []inspect.Move
	waits      map[string]time.Duration
	outcome    string
	in, out    []string
}

// memberCame notes a member added to the group while the rebalance is
// open: one that was there at the start and went comes back.
func (r *rebalance) memberCame(id string) {
	if r.went[id] {
		delete(r.went, id)
		return
	}
	if r.came == nil {
		r.came = map[string]bool{}
	}
	r.came[id] = true
}

// memberWent notes a member removed from the group while the rebalance is
// open.
func (r *rebalance) memberWent(id string) {
	if r.came[id] {
		delete(r.came, id)
		return
	}
	if r.went == nil {
		r.went = map[string]bool{}
	}
	r.went[id] = true
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
		before:  before,
		after:   g.epoch,
		start:   m.now,
		trigger: c.trigger,
		member:  memberRef(c.member),
		// Every member is likely to be waited for.
		waits: make(map[string]time.Duration, len(g.members)),
	}
	if c.member != nil {
		switch c.trigger {
		case triggerMemberJoined:
			// The newcomer was added just before the bump.
			if g.members[c.member.id] != nil {
				r.memberCame(c.member.id)
			}
		case triggerMemberLeft, triggerSessionTimeout, triggerRebalanceTimeout:
			// The leaver was removed just before the bump.
			if g.members[c.member.id] == nil {
				r.memberWent(c.member.id)
			}
		}
	}
	if r.trigger == "" {
		r.trigger = triggerSubscriptionChanged
	}
	if g.upgraded {
		r.trigger = TriggerUpgrade
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
		topic := m.topicName(id)
		mv := inspect.Move{Topic: topic, Partition: p, To: mem.id, Committed: m.committed(g.id, topic, p),
			CommitGap: -1, ReleasedAt: m.now, AssignedAt: m.now}
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
	r.in, r.out = r.membersInOut()
	if outcome != "restarted" {
		// Partitions given up that nobody took: their topic went away or
		// nobody subscribes to it any more.
		for k, rel := range g.released {
			topic := m.topicName(k.id)
			r.moves = append(r.moves, inspect.Move{Topic: topic, Partition: k.p, From: rel.from,
				Committed: m.committed(g.id, topic, k.p), CommitGap: -1, ReleasedAt: rel.at})
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
	v := r.view(g.id, m.now)
	m.out.Rebalances = append(m.out.Rebalances, &v)
	g.current = nil
}

// committed is the group's committed offset of a partition, -1 if none.
func (m *Machine) committed(groupID, topic string, p int32) int64 {
	if f := m.cfg.CommittedOffset; f != nil {
		if o, ok := f(groupID, topic, p); ok {
			return o
		}
	}
	return -1
}

// InProgress returns a group's rebalance in progress as it stands, if any.
// A rebalance is one group epoch bump: it ends when every member holds the
// new target assignment ("stable"), when the group empties ("empty"), or
// when another bump supersedes it ("restarted"), and then comes out of the
// step in Output.Rebalances. Moves carry the pause between the previous
// owner giving a partition up and the new owner receiving it; commit gaps
// are left at -1 for the coordinator, which knows high watermarks, to fill
// in.
func (m *Machine) InProgress(groupID string, now time.Time) (inspect.Rebalance, bool) {
	g := m.groups[groupID]
	if g == nil || g.current == nil {
		return inspect.Rebalance{}, false
	}
	r := *g.current
	r.in, r.out = r.membersInOut()
	return r.view(groupID, now), true
}

// membersInOut compares the members now with those at the start.
func (r *rebalance) membersInOut() (in, out []string) {
	return sortedSet(r.came), sortedSet(r.went)
}

// sortedSet returns a set's members sorted, nil for none.
func sortedSet(s map[string]bool) []string {
	if len(s) == 0 {
		return nil
	}
	return sortedKeys(s)
}

// view is the rebalance as the history shows it; one in progress lasts
// until now.
func (r *rebalance) view(groupID string, now time.Time) inspect.Rebalance {
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
	} else {
		v.DurationMs = max(now.Sub(r.start).Milliseconds(), 0)
	}
	v.WaitedFor = longestWaits(r.waits, inspect.MaxWaits)
	if v.MembersIn == nil {
		v.MembersIn = []string{}
	}
	if v.MembersOut == nil {
		v.MembersOut = []string{}
	}
	if v.Moved == nil {
		v.Moved = []inspect.Move{}
	}
	return v
}

// longestWaits returns the n longest waits, longest first and ties by
// member id, without sorting them all: a rebalance of a large group waits
// for every member.
func longestWaits(waits map[string]time.Duration, n int) []inspect.Wait {
	if len(waits) == 0 {
		return nil
	}
	before := func(a, b inspect.Wait) int {
		if c := cmp.Compare(b.WaitedMs, a.WaitedMs); c != 0 {
			return c
		}
		return cmp.Compare(a.Member, b.Member)
	}
	out := make([]inspect.Wait, 0, min(len(waits), n))
	for id, d := range waits {
		w := inspect.Wait{Member: id, WaitedMs: d.Milliseconds(), Rejoined: true}
		if len(out) == n && before(w, out[n-1]) >= 0 {
			continue
		}
		i, _ := slices.BinarySearchFunc(out, w, before)
		if len(out) < n {
			out = append(out, inspect.Wait{})
		}
		copy(out[i+1:], out[i:len(out)-1])
		out[i] = w
	}
	return out
}
