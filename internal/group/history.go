package group

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/groupd/groupd/internal/inspect"
)

// The rebalance history. Every rebalance of a group, from the event that
// opened it (prepareRebalance) until every member received its new
// assignment, is followed here and then kept as an inspect.Rebalance: the
// group's newest Config.HistorySize of them, each written to the store as
// its own record (RecordRebalance, keyed by group and sequence number) when
// it ends, with a tombstone for the one that falls out.
//
// Pauses are measured per partition from its release to its receipt. A
// partition is released when its owner gives it up: an eager member gives
// up everything as soon as it learns of a rebalance (its JoinGroup, or a
// heartbeat answered REBALANCE_IN_PROGRESS), a cooperative member gives up
// what the previous rebalance took from it when it rejoins, and a member
// that leaves or dies gives up everything when it leaves or when it was
// last heard from. A partition is received when the SyncGroup reply that
// carries the new owner's assignment is released.

// rebalance is the one a group has in progress.
type rebalance struct {
	rec inspect.Rebalance
	// The members when it opened are those whose member.startSeq is its
	// Seq, and those who have left since: out (unsorted, possibly with
	// repeats) lists these, starting with those whose removal opened
	// it. The newcomer whose join opened it was not a member then.
	out []string
	// joinDone is set once the join phase has ended (WaitedFor is final).
	joinDone bool
	// assigned is set once the leader's assignment was accepted; then
	// awaiting counts the members that have not received theirs yet
	// (member.awaiting), whose moves wait in member.pending.
	assigned bool
	awaiting int
	// done is set once every member has received its assignment: the
	// rebalance is over, as of endedAt, with membersIn and membersOut
	// (unsorted) as they were then. Its record is built and kept by the
	// next step, a TimerHistory firing due at once, or by whatever opens
	// the next rebalance first (closeRebalance), so that the replies
	// that ended it need not wait for their history.
	done                  bool
	endedAt               time.Time
	membersIn, membersOut []string
}

// pendingMove is a partition assigned to a member that has not received
// it yet.
type pendingMove struct {
	topic     string
	partition int32
	from      string
	fromGen   int32
	release   time.Time
}

// orphan is a partition nobody holds: the previous rebalance took it from
// its owner (a cooperative revocation), its owner left or died, or the
// member it was given never received it. releasedAt is zero while the
// owner still has to give it up (a cooperative revocation pending: it does
// when it rejoins). gen is the generation in which from received it.
type orphan struct {
	from       string
	gen        int32
	releasedAt time.Time
}

// departure is a member removed by a timeout, remembered for a while so
// that storms can be explained.
type departure struct {
	memberID string
	identity string
	trigger  string // why it was removed
	at       time.Time
	// lastSeen is when it was last heard from before it was removed;
	// heardAt when a request of its old member id arrived afterwards.
	lastSeen time.Time
	heardAt  time.Time
	session  time.Duration
	// For a removal at the end of a join phase: the phase's start, the
	// member's rebalance timeout, and when the same client joined again.
	phaseStart time.Time
	rebalance  time.Duration
	rejoinedAt time.Time
	// consumed is set once a rejoin was attributed to it.
	consumed bool
}

// maxDepartures bounds a group's departures beyond the storm window.
const maxDepartures = 64

// cooperativeAssignors are the classic assignors that rebalance
// incrementally. A client rebalances cooperatively only when every
// assignor it lists is cooperative (Kafka's ConsumerCoordinator and
// franz-go both take the protocol common to all of them), so a group is
// cooperative only when every member lists nothing else.
var cooperativeAssignors = map[string]map[string]bool{
	consumerProtocolType: {"cooperative-sticky": true},
	// Kafka Connect's incremental cooperative protocols (KIP-415).
	"connect": {"compatible": true, "sessioned": true},
}

// rebalanceProtocol is how the members will rebalance, from the protocols
// they declared.
func (g *group) rebalanceProtocol() string {
	if len(g.members) == 0 {
		return inspect.ProtocolEager
	}
	for _, mem := range g.sortedMembers() {
		if g.eager(mem) {
			return inspect.ProtocolEager
		}
	}
	return inspect.ProtocolCooperative
}

// eager reports whether a member gives up everything it holds as soon as it
// learns of a rebalance, rather than only what the new assignment takes.
func (g *group) eager(mem *member) bool {
	coop := cooperativeAssignors[g.protocolType]
	if len(mem.protocols) == 0 {
		return true
	}
	for _, p := range mem.protocols {
		if !coop[p.name] {
			return true
		}
	}
	return false
}

// reason says why a rebalance opens: a trigger name and the member whose
// action (or removal) opened it. removed are members dropped just before,
// who count as members at its start; newcomer says who is a member only
// since then.
type reason struct {
	trigger  string
	who      *member
	removed  []string
	newcomer bool
}

func msTime(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()).UTC() }

func memberRef(mem *member) *inspect.MemberRef {
	if mem == nil {
		return nil
	}
	return &inspect.MemberRef{MemberID: mem.id, InstanceID: mem.instanceID, ClientID: mem.clientID, ClientHost: mem.clientHost}
}

// identity is who a member is across member ids, for storms: its instance
// id if static, else its client id and host. A dynamic member that is
// removed rejoins under a new member id.
func identity(instanceID, clientID, clientHost string) string {
	if instanceID != "" {
		return "instance " + instanceID
	}
	return "client " + clientID + " on " + clientHost
}

func refIdentity(r *inspect.MemberRef) string {
	return identity(r.InstanceID, r.ClientID, r.ClientHost)
}

func (mem *member) identity() string { return identity(mem.instanceID, mem.clientID, mem.clientHost) }

// noteJoin records a JoinGroup of an existing or new member.
func (m *Machine) noteJoin(mem *member) {
	mem.lastSeen, mem.joinedAt = m.now, m.now
	if mem.gaveUp.IsZero() {
		mem.gaveUp = m.now
	}
}

func (m *Machine) openRebalance(g *group, r reason) {
	if g.cur != nil {
		m.closeRebalance(g, "restarted")
	}
	cur := &rebalance{
		rec: inspect.Rebalance{
			Group:            g.id,
			Seq:              g.nextSeq,
			Protocol:         g.rebalanceProtocol(),
			GenerationBefore: g.generation,
			GenerationAfter:  g.generation,
			StartedAt:        msTime(m.now),
			Trigger:          r.trigger,
			Member:           memberRef(r.who),
		},
	}
	g.nextSeq++
	for _, mem := range g.sortedMembers() {
		mem.startSeq = cur.rec.Seq
	}
	for _, id := range r.removed {
		if g.members[id] == nil {
			cur.out = append(cur.out, id)
		}
	}
	if r.who != nil && r.newcomer {
		r.who.startSeq = 0
	}
	g.cur = cur
	var session time.Duration
	if r.who != nil {
		session = r.who.session
	}
	m.checkStorm(g, &cur.rec, session)
}

// joinPhaseDone notes the end of the join phase: the generation it made,
// how the members will rebalance, and how long each member kept it
// waiting. timedOut are the members it removed for not rejoining.
func (m *Machine) joinPhaseDone(g *group, timedOut []*member) {
	cur := g.cur
	if cur == nil {
		return
	}
	cur.rec.GenerationAfter = g.generation
	if len(g.members) > 0 {
		cur.rec.Protocol = g.rebalanceProtocol()
	}
	cur.rec.WaitedFor = m.waits(g, cur, timedOut)
	cur.joinDone = true
}

// waits lists the join phase's longest waits, longest first, at most
// inspect.MaxWaits of them. Members without a parked JoinGroup have not
// rejoined: they waited the whole phase so far.
func (m *Machine) waits(g *group, cur *rebalance, timedOut []*member) []inspect.Wait {
	start := cur.rec.StartedAt
	whole := msTime(m.now).Sub(start).Milliseconds()
	top := make([]inspect.Wait, 0, inspect.MaxWaits)
	longer := func(a, b inspect.Wait) int {
		return cmp.Or(cmp.Compare(b.WaitedMs, a.WaitedMs), strings.Compare(a.Member, b.Member))
	}
	// A thousand members' waits are not sorted to keep sixteen.
	add := func(w inspect.Wait) {
		if len(top) == cap(top) {
			if last := top[len(top)-1]; w.WaitedMs < last.WaitedMs || longer(w, last) >= 0 {
				return
			}
		}
		i, _ := slices.BinarySearchFunc(top, w, longer)
		if len(top) == cap(top) {
			top = top[:len(top)-1]
		}
		top = slices.Insert(top, i, w)
	}
	for _, mem := range g.sortedMembers() {
		w := inspect.Wait{Member: mem.id, WaitedMs: whole}
		if mem.join != nil {
			w.WaitedMs, w.Rejoined = max(msTime(mem.joinedAt).Sub(start).Milliseconds(), 0), true
		}
		add(w)
	}
	for _, mem := range timedOut {
		add(inspect.Wait{Member: mem.id, WaitedMs: whole})
	}
	return top
}

// assignmentAccepted works out, when the leader's assignment is accepted,
// which partitions change owner and since when each was released. The
// moves become final as their new owners receive their assignments
// (delivered).
func (m *Machine) assignmentAccepted(g *group) {
	cur := g.cur
	if cur == nil {
		return
	}
	cur.assigned = true
	members := g.sortedMembers()
	for _, mem := range members {
		mem.awaiting, mem.revoking = true, false
	}
	cur.awaiting = len(members)
	if g.protocolType != consumerProtocolType {
		return
	}
	coop := cur.rec.Protocol == inspect.ProtocolCooperative

	// Who held each partition last: the newest claim wins, a member's
	// over an orphan of the same generation. Ties are broken by member
	// id, so that whatever the leader sent (even a partition twice), the
	// outcome does not depend on map order.
	type claim struct {
		owner   string
		gen     int32
		release time.Time
		live    bool
		taken   bool // assigned in this rebalance
	}
	newer := func(c, old claim) bool {
		if c.gen != old.gen {
			return c.gen > old.gen
		}
		if c.live != old.live {
			return c.live
		}
		return c.owner < old.owner
	}
	prev := make(map[topicPartition]claim, len(g.orphans))
	for tp, o := range g.orphans {
		prev[tp] = claim{owner: o.from, gen: o.gen, release: o.resolve(g)}
	}
	names := map[string]string{}
	for _, mem := range members {
		if len(mem.received) == 0 {
			continue
		}
		c := claim{owner: mem.id, gen: mem.receivedGen, release: mem.gaveUp, live: true}
		walkAssignment(mem.received, names, func(tp topicPartition) {
			if old, ok := prev[tp]; !ok || newer(c, old) {
				prev[tp] = c
			}
		})
	}
	g.orphans = nil
	// One backing array for every member's pending moves.
	pending := make([]pendingMove, 0, len(members))
	for _, mem := range members {
		start := len(pending)
		walkAssignment(mem.assignment, names, func(tp topicPartition) {
			c, ok := prev[tp]
			if ok && !c.taken {
				c.taken = true
				prev[tp] = c
			}
			pm := pendingMove{topic: tp.topic, partition: tp.partition, from: c.owner, fromGen: c.gen, release: c.release}
			if ok && c.live && c.owner == mem.id && coop {
				return // kept: a cooperative member goes on consuming it
			}
			if !ok || pm.release.IsZero() {
				// Nobody had it, or we cannot tell since when:
				// it waited for this rebalance.
				pm.release = cur.rec.StartedAt
			}
			pending = append(pending, pm)
		})
		mem.pending = pending[start:len(pending):len(pending)]
	}
	cur.rec.Moved = make([]inspect.Move, 0, len(pending))
	// What was held but is assigned to nobody.
	for tp, c := range prev {
		if c.taken {
			continue
		}
		o := orphan{from: c.owner, gen: c.gen, releasedAt: c.release}
		if coop && c.live {
			// Revoked: its owner gives it up once it has its new
			// assignment, and rejoins.
			o.releasedAt = time.Time{}
			g.members[c.owner].revoking = true
		}
		g.setOrphan(tp, o)
	}
}

func (g *group) setOrphan(tp topicPartition, o orphan) {
	if g.orphans == nil {
		g.orphans = map[topicPartition]orphan{}
	}
	g.orphans[tp] = o
}

// resolve returns when the orphan was released: if its owner had still to
// give it up, when the owner did (zero if it has not yet).
func (o orphan) resolve(g *group) time.Time {
	if !o.releasedAt.IsZero() {
		return o.releasedAt
	}
	if mem := g.members[o.from]; mem != nil {
		return mem.gaveUp
	}
	return time.Time{}
}

// walkAssignment calls fn with every partition of a consumer-protocol
// assignment (ConsumerProtocolAssignment: version, [topic, [partition]],
// user data), read in place with its topic names interned in names (if not
// nil), so that the assignments of a thousand members cost no allocation
// each. It accepts
// what assign.DecodeAssignment accepts (an empty assignment holds nothing;
// the user data may be missing) and reports false, having called fn for
// nothing, for anything else: as far as the history is concerned, such an
// assignment holds nothing.
func walkAssignment(b []byte, names map[string]string, fn func(topicPartition)) bool {
	if len(b) == 0 {
		return true
	}
	if !walkTopics(b, nil, nil) {
		return false
	}
	walkTopics(b, names, fn)
	return true
}

// walkTopics reads the topics of an assignment, calling fn (if not nil)
// with each partition; it reports whether they parse.
func walkTopics(b []byte, names map[string]string, fn func(topicPartition)) bool {
	if len(b) < 6 || int16(binary.BigEndian.Uint16(b)) < 0 {
		return false
	}
	n := int32(binary.BigEndian.Uint32(b[2:]))
	b = b[6:]
	// -1 is a null array; each topic takes at least 6 bytes.
	if n < -1 || int64(n)*6 > int64(len(b)) {
		return false
	}
	for range n {
		if len(b) < 2 {
			return false
		}
		l := int16(binary.BigEndian.Uint16(b))
		b = b[2:]
		if l < 0 || int(l) > len(b)-4 {
			return false
		}
		name := b[:l]
		c := int32(binary.BigEndian.Uint32(b[l:]))
		b = b[int(l)+4:]
		if c < -1 || int64(c)*4 > int64(len(b)) {
			return false
		}
		c = max(c, 0)
		if fn != nil && c > 0 {
			topic, ok := names[string(name)]
			if !ok {
				topic = string(name)
				if names != nil {
					names[topic] = topic
				}
			}
			for j := range c {
				fn(topicPartition{topic, int32(binary.BigEndian.Uint32(b[4*j:]))})
			}
		}
		b = b[4*c:]
	}
	return true
}

// delivered notes that mem received its assignment (a SyncGroup reply
// carrying it was released): its moves in the rebalance in progress end.
func (m *Machine) delivered(g *group, mem *member) {
	mem.received, mem.receivedGen, mem.gaveUp = mem.assignment, g.generation, time.Time{}
	cur := g.cur
	if cur == nil || !mem.awaiting {
		return
	}
	mem.awaiting = false
	cur.awaiting--
	now := msTime(m.now)
	for _, pm := range mem.pending {
		committed := int64(-1)
		if v, ok := g.offsets.get(topicPartition{pm.topic, pm.partition}); ok {
			committed = v.offset
		}
		pause := max(now.Sub(msTime(pm.release)).Milliseconds(), 0)
		cur.rec.Moved = append(cur.rec.Moved, inspect.Move{
			Topic:      pm.topic,
			Partition:  pm.partition,
			From:       pm.from,
			To:         mem.id,
			PauseMs:    pause,
			ReleasedAt: now.Add(-time.Duration(pause) * time.Millisecond),
			AssignedAt: now,
			Committed:  committed,
			CommitGap:  -1,
		})
	}
	mem.pending = nil
}

// maybeEndRebalance ends the rebalance in progress once every member has
// received its assignment. Its record waits for a step of its own
// (rebalance.done).
func (m *Machine) maybeEndRebalance(g *group) {
	cur := g.cur
	if cur == nil || !cur.assigned || cur.awaiting != 0 || cur.done {
		return
	}
	cur.done, cur.endedAt = true, m.now
	cur.rec.GenerationAfter = g.generation
	cur.membersIn, cur.membersOut = g.membersInOut(cur)
	m.schedule(TimerKey{Group: g.id, Kind: TimerHistory}, 0)
}

// leftDuringRebalance notes that mem, no longer a member, leaves the
// rebalance in progress if it was a member when that opened.
func (g *group) leftDuringRebalance(mem *member) {
	if cur := g.cur; cur != nil && !cur.done && mem.startSeq == cur.rec.Seq {
		cur.out = append(cur.out, mem.id)
	}
}

// membersInOut lists, unsorted, the members that joined and left since
// the rebalance opened.
func (g *group) membersInOut(cur *rebalance) (in, out []string) {
	in = []string{}
	for _, mem := range g.sortedMembers() {
		if mem.startSeq != cur.rec.Seq {
			in = append(in, mem.id)
		}
	}
	return in, append([]string{}, cur.out...)
}

// memberGone notes that mem left the group or was removed; lastHeard is
// when it gave up its partitions unless it had done so already (it leaves
// now, or died after it was last heard from).
func (m *Machine) memberGone(g *group, mem *member, lastHeard time.Time) {
	release := mem.gaveUp
	if release.IsZero() {
		release = lastHeard
	}
	if mem.revoking {
		// It leaves before giving up what it was to revoke.
		for tp, o := range g.orphans {
			if o.from == mem.id && o.releasedAt.IsZero() {
				o.releasedAt = release
				g.orphans[tp] = o
			}
		}
	}
	if g.protocolType == consumerProtocolType {
		walkAssignment(mem.received, nil, func(tp topicPartition) {
			if o, ok := g.orphans[tp]; !ok || o.gen <= mem.receivedGen {
				g.setOrphan(tp, orphan{from: mem.id, gen: mem.receivedGen, releasedAt: release})
			}
		})
	}
	// What it was given but never received goes back to where it came
	// from.
	g.notAwaiting(mem)
}

// notAwaiting turns the moves a member will not receive back into orphans
// of their previous owners, and stops waiting for it.
func (g *group) notAwaiting(mem *member) {
	for _, pm := range mem.pending {
		tp := topicPartition{pm.topic, pm.partition}
		if o, ok := g.orphans[tp]; ok && (o.gen > pm.fromGen || (o.gen == pm.fromGen && o.from <= pm.from)) {
			continue // a newer claim, or (the same partition given twice) the same by id order
		}
		g.setOrphan(tp, orphan{from: pm.from, gen: pm.fromGen, releasedAt: pm.release})
	}
	mem.pending = nil
	if mem.awaiting {
		mem.awaiting = false
		if g.cur != nil {
			g.cur.awaiting--
		}
	}
}

// closeRebalance ends the rebalance in progress with an outcome: "stable"
// (every member received its assignment), "empty" (no members are left)
// or "restarted" (another rebalance began first).
func (m *Machine) closeRebalance(g *group, outcome string) {
	cur := g.cur
	if cur == nil {
		return
	}
	if cur.awaiting > 0 {
		for _, mem := range g.sortedMembers() {
			g.notAwaiting(mem)
		}
	}
	g.cur = nil
	if outcome == "empty" {
		// Nobody is left to hand partitions over to; a later member
		// starts afresh.
		g.orphans = nil
	}
	if cur.done {
		// It ended before whatever closes it now.
		outcome = "stable"
		m.cancel(TimerKey{Group: g.id, Kind: TimerHistory})
	}
	r := m.snapshot(g, cur, m.now, true)
	r.Outcome = outcome
	m.keepRebalance(g, &r)
}

// keepRebalance adds a finished rebalance to the group's history: written
// to the store, handed to the runtime (which may fill in its commit gaps
// before the record is written), and the oldest beyond HistorySize
// tombstoned.
func (m *Machine) keepRebalance(g *group, rp *inspect.Rebalance) {
	g.history = append(g.history, rp)
	m.record(Record{Type: RecordRebalance, Group: g.id, Seq: rp.Seq, Rebalance: rp})
	m.out.Rebalances = append(m.out.Rebalances, rp)
	if over := len(g.history) - m.cfg.HistorySize; over > 0 {
		for _, old := range g.history[:over] {
			m.record(Record{Type: RecordRebalance, Group: g.id, Seq: old.Seq})
		}
		g.history = slices.Clone(g.history[over:])
	}
}

// snapshot is the record of a rebalance as it stands at now; final says
// it is being closed at now (with an outcome still to set), so the record
// may keep its lists. One that is done is shown as it ended.
func (m *Machine) snapshot(g *group, cur *rebalance, now time.Time, final bool) inspect.Rebalance {
	r := cur.rec
	if cur.done {
		now = cur.endedAt
		r.MembersIn, r.MembersOut = slices.Clone(cur.membersIn), slices.Clone(cur.membersOut)
		if final {
			r.MembersIn, r.MembersOut = cur.membersIn, cur.membersOut
		}
		r.Outcome = "stable"
	} else {
		r.GenerationAfter = g.generation
		r.MembersIn, r.MembersOut = g.membersInOut(cur)
	}
	if final || cur.done {
		end := msTime(now)
		r.EndedAt = &end
	}
	r.DurationMs = max(msTime(now).Sub(r.StartedAt).Milliseconds(), 0)
	slices.Sort(r.MembersIn)
	slices.Sort(r.MembersOut)
	r.MembersOut = slices.Compact(r.MembersOut)
	if !final {
		r.Moved = slices.Clone(r.Moved)
	}
	if r.Moved == nil {
		r.Moved = []inspect.Move{}
	}
	slices.SortFunc(r.Moved, func(a, b inspect.Move) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition), strings.Compare(a.To, b.To))
	})
	if !cur.joinDone {
		r.WaitedFor = m.waits(g, cur, nil)
	}
	return r
}

// dropHistory tombstones a group's stored rebalances, when the group goes.
func (m *Machine) dropHistory(g *group) {
	for _, r := range g.history {
		m.record(Record{Type: RecordRebalance, Group: g.id, Seq: r.Seq})
	}
	g.history, g.cur = nil, nil
}

// depart remembers a member removed by a timeout.
func (m *Machine) depart(g *group, d departure) {
	cutoff := m.now.Add(-m.cfg.StormWindow)
	keep := g.departed[:0]
	for _, old := range g.departed {
		if !old.at.Before(cutoff) {
			keep = append(keep, old)
		}
	}
	g.departed = append(keep, d)
	if over := len(g.departed) - maxDepartures; over > 0 {
		g.departed = append(g.departed[:0], g.departed[over:]...)
	}
}

// heardFromDeparted notes a request from the old member id of a member
// removed for a timeout: how long it had been silent is the gap in its
// heartbeats that its session timeout did not cover.
func (m *Machine) heardFromDeparted(g *group, memberID string) {
	for i := range g.departed {
		d := &g.departed[i]
		if d.memberID == memberID && d.heardAt.IsZero() {
			d.heardAt = m.now
		}
	}
}

// newMemberTrigger names what a new member's join opens: a client that was
// removed for exceeding its rebalance timeout and comes back opens a
// rebalance-timeout rebalance; anyone else a member-joined one.
func (m *Machine) newMemberTrigger(g *group, mem *member) string {
	id := mem.identity()
	for i := len(g.departed) - 1; i >= 0; i-- {
		d := &g.departed[i]
		if d.identity == id && d.trigger == inspect.TriggerRebalanceTimeout && !d.consumed {
			d.consumed, d.rejoinedAt = true, m.now
			return inspect.TriggerRebalanceTimeout
		}
	}
	return inspect.TriggerMemberJoined
}

// rejoinReason names what opens a rebalance when an existing member
// rejoins with base as the plain trigger (leader-rejoined or
// subscription-changed): a member whose first request since the group was
// loaded is this JoinGroup was rebalancing when the coordinator moved, and
// a cooperative member coming back after it revoked what the last
// rebalance took from it opens the follow-up rebalance. prior is what the
// member was like before this JoinGroup.
func (m *Machine) rejoinReason(g *group, mem *member, base string, prior priorJoin) reason {
	switch {
	case prior.loaded:
		base = m.cfg.LoadTrigger
	case g.protocolType == consumerProtocolType && revocationPending(prior.metadata, mem.received) &&
		g.rebalanceProtocol() == inspect.ProtocolCooperative:
		base = inspect.TriggerCooperativeFollowUp
	}
	return reason{trigger: base, who: mem}
}

// priorJoin is what rejoinReason needs to know of a member from before its
// JoinGroup was applied.
type priorJoin struct {
	loaded   bool
	metadata []byte
}

func (g *group) priorJoin(mem *member) priorJoin {
	return priorJoin{
		loaded:   !g.loadedAt.IsZero() && mem.lastSeen.Equal(g.loadedAt),
		metadata: mem.metadataFor(g.protocol),
	}
}

// renameMember gives the partitions a static member's previous incarnation
// gave up to its new member id.
func (m *Machine) renameMember(g *group, oldID, newID string) {
	for tp, o := range g.orphans {
		if o.from == oldID {
			o.from = newID
			g.orphans[tp] = o
		}
	}
}

// checkStorm flags r when its trigger came from the same member (by
// identity) at least StormCount times within StormWindow, counting r.
func (m *Machine) checkStorm(g *group, r *inspect.Rebalance, session time.Duration) {
	if r.Member == nil {
		return
	}
	id := refIdentity(r.Member)
	since := r.StartedAt.Add(-m.cfg.StormWindow)
	n := 1
	for i := len(g.history) - 1; i >= 0 && !g.history[i].StartedAt.Before(since); i-- {
		h := g.history[i]
		if h.Trigger == r.Trigger && h.Member != nil && refIdentity(h.Member) == id {
			n++
		}
	}
	if n < m.cfg.StormCount {
		return
	}
	r.Storm = true
	r.StormCause = m.stormCause(g, r, session, id, n)
}

// Storm causes. The cause is the first prefix, and the rest of the text
// gives what the coordinator measured.
const (
	StormSessionTimeout   = "session timeout shorter than heartbeat gap"
	StormRebalanceTimeout = "rejoined after exceeding rebalance timeout"
	StormNoSync           = "never completes SyncGroup"
	StormRepeated         = "repeated"
)

// stormCause names the likely cause of a storm from what the coordinator
// saw of the member: removed for missing its session timeout, for not
// rejoining within its rebalance timeout, or for not sending SyncGroup.
func (m *Machine) stormCause(g *group, r *inspect.Rebalance, session time.Duration, id string, n int) string {
	window := m.cfg.StormWindow
	cutoff := m.now.Add(-window)
	var expired, late, noSync []*departure
	for i := range g.departed {
		d := &g.departed[i]
		if d.identity != id || d.at.Before(cutoff) {
			continue
		}
		switch d.trigger {
		case inspect.TriggerSessionTimeout:
			expired = append(expired, d)
		case inspect.TriggerRebalanceTimeout:
			late = append(late, d)
		case inspect.TriggerPendingSyncTimeout:
			noSync = append(noSync, d)
		}
	}
	// times is how often the member was removed for the cause: the
	// departures remembered, or the storm's own count when the trigger
	// is the removal itself (departures do not survive a restart).
	times := func(ds []*departure, trigger string) int {
		if r.Trigger == trigger {
			return max(len(ds), n)
		}
		return len(ds)
	}
	// cause names a timeout, the longest delay seen that exceeded it,
	// and how often it removed the member.
	cause := func(prefix, timeout string, limit time.Duration, seen string, longest time.Duration, verb string, count int) string {
		s := fmt.Sprintf("%s: %s %d ms", prefix, timeout, limit.Milliseconds())
		if longest > 0 {
			s += fmt.Sprintf(seen, longest.Milliseconds())
		}
		return fmt.Sprintf("%s; %s %d times within %s", s, verb, count, window)
	}
	switch {
	case r.Trigger == inspect.TriggerSessionTimeout || len(expired) > 0:
		var gap time.Duration
		for _, d := range expired {
			session = d.session
			if !d.heardAt.IsZero() {
				gap = max(gap, d.heardAt.Sub(d.lastSeen))
			}
		}
		return cause(StormSessionTimeout, "session timeout", session, ", heartbeat gap %d ms observed", gap,
			"expired", times(expired, inspect.TriggerSessionTimeout))
	case r.Trigger == inspect.TriggerRebalanceTimeout || len(late) > 0:
		var timeout, lateBy time.Duration
		for _, d := range late {
			if timeout = d.rebalance; !d.rejoinedAt.IsZero() {
				lateBy = max(lateBy, d.rejoinedAt.Sub(d.phaseStart))
			}
		}
		return cause(StormRebalanceTimeout, "rebalance timeout", timeout, ", rejoined %d ms after the rebalance began", lateBy,
			"removed", times(late, inspect.TriggerRebalanceTimeout))
	case r.Trigger == inspect.TriggerPendingSyncTimeout || len(noSync) > 0:
		return fmt.Sprintf("%s: removed %d times within %s for not sending SyncGroup after its JoinGroup was answered",
			StormNoSync, times(noSync, inspect.TriggerPendingSyncTimeout), window)
	}
	return fmt.Sprintf("%s %s: %d times within %s", StormRepeated, r.Trigger, n, window)
}

// Rebalances returns a group's rebalances, oldest first, the one in
// progress (if any) last as it stands at now. ok is false for an unknown
// group.
func (m *Machine) Rebalances(groupID string, now time.Time) (rs []inspect.Rebalance, ok bool) {
	g := m.groups[groupID]
	if g == nil {
		return nil, false
	}
	rs = make([]inspect.Rebalance, 0, len(g.history)+1)
	for _, r := range g.history {
		rs = append(rs, *r)
	}
	if g.cur != nil {
		rs = append(rs, m.snapshot(g, g.cur, now, false))
	}
	if g.consumer {
		if r, ok := m.consumerInProgress(g, now); ok {
			rs = append(rs, r)
		}
	}
	return rs, true
}

// lastRebalance summarizes the group's newest rebalance, in progress or
// not.
func (m *Machine) lastRebalance(g *group, now time.Time) *inspect.RebalanceSummary {
	if g.cur != nil {
		r := m.snapshot(g, g.cur, now, false)
		return r.Summary()
	}
	if n := len(g.history); n > 0 {
		return g.history[n-1].Summary()
	}
	return nil
}
