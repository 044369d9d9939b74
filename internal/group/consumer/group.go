package consumer

import (
	"fmt"
	"regexp"
	"slices"
	"time"
)

// State is a consumer group's state, named as Kafka's ConsumerGroupState.
type State uint8

// Group states (ConsumerGroup.maybeUpdateGroupState).
const (
	// Empty: no members.
	Empty State = iota
	// Assigning: the group epoch is ahead of the target assignment epoch;
	// the next heartbeat computes a new target.
	Assigning
	// Reconciling: some member has not reached the target yet.
	Reconciling
	// Stable: every member holds its target at the target epoch.
	Stable
	// Dead: the group does not exist.
	Dead
)

func (s State) String() string {
	switch s {
	case Empty:
		return "Empty"
	case Assigning:
		return "Assigning"
	case Reconciling:
		return "Reconciling"
	case Stable:
		return "Stable"
	case Dead:
		return "Dead"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MemberState is a member's reconciliation state (Kafka's MemberState); the
// values are the ones stored in CurrentAssignment records.
type MemberState int8

// Member states.
const (
	// MemberStable: the member holds its target at the target epoch.
	MemberStable MemberState = 0
	// MemberUnrevokedPartitions: the member must first give up partitions
	// it still reports owning; it stays at its epoch until it does.
	MemberUnrevokedPartitions MemberState = 1
	// MemberUnreleasedPartitions: the member is at the target epoch but
	// waits for partitions other members have not released yet.
	MemberUnreleasedPartitions MemberState = 2
	// MemberUnknown is any other stored value, from a newer version; such
	// a member is fenced unless it owns nothing (Kafka's rule).
	MemberUnknown MemberState = 127
)

func (s MemberState) String() string {
	switch s {
	case MemberStable:
		return "STABLE"
	case MemberUnrevokedPartitions:
		return "UNREVOKED_PARTITIONS"
	case MemberUnreleasedPartitions:
		return "UNRELEASED_PARTITIONS"
	}
	return "UNKNOWN"
}

// Special member epochs of ConsumerGroupHeartbeat.
const (
	joinEpoch        int32 = 0
	leaveEpoch       int32 = -1
	staticLeaveEpoch int32 = -2
)

// tp names one partition.
type tp struct {
	id TopicID
	p  int32
}

// memberMeta is what a MemberMetadata record holds.
type memberMeta struct {
	instanceID       string // "" for a dynamic member
	rackID           string
	clientID         string
	clientHost       string
	names            []string // subscribed topic names, sorted and distinct
	regex            string   // subscribed topic regex, "" for none
	rebalanceTimeout int32    // ms
	serverAssignor   string   // "" for none
	// classic is set for a member speaking the classic protocol; it is
	// shared between copies and never modified.
	classic *ClassicMemberMetadata
}

func (a *memberMeta) equal(b *memberMeta) bool {
	return a.instanceID == b.instanceID && a.rackID == b.rackID && a.clientID == b.clientID &&
		a.clientHost == b.clientHost && a.regex == b.regex && a.rebalanceTimeout == b.rebalanceTimeout &&
		a.serverAssignor == b.serverAssignor && slices.Equal(a.names, b.names) && classicEqual(a.classic, b.classic)
}

type member struct {
	id   string
	meta memberMeta
	// Current assignment (CurrentAssignment record).
	epoch     int32
	prevEpoch int32
	state     MemberState
	assigned  partSet // with assignment epochs
	pending   partSet // pending revocation, with assignment epochs

	hasMeta, hasCurrent bool

	// The member's deadlines (soft state, see timers.go).
	timers memberTimers

	// Soft state, not persisted.
	lastHeartbeat  time.Time
	rebalanceEpoch int32 // the epoch the rebalance deadline was set in
}

func newMember(id string) *member {
	// Kafka's ConsumerGroupMember.Builder defaults.
	return &member{id: id, prevEpoch: -1, meta: memberMeta{rebalanceTimeout: -1}}
}

func (mem *member) reconciledTo(epoch int32) bool {
	return mem.state == MemberStable && mem.epoch == epoch
}

// regexSub is one regular expression some members subscribe to, resolved
// against the topics the machine knows.
type regexSub struct {
	count  int
	re     *regexp.Regexp // nil if it did not compile (only from old records)
	topics []string       // sorted
}

type group struct {
	id              string
	epoch           int32
	metadataHash    uint64
	assignmentEpoch int32
	members         map[string]*member
	static          map[string]string // instance id -> member id
	target          map[string]partSet
	// owners maps every partition some member holds (assigned or pending
	// revocation) to that member. Kafka keeps the holder's epoch instead;
	// the holder's id also serves the rebalance record, and its epoch is
	// on the member, so an epoch bump rewrites no entry here.
	owners map[tp]string

	names     map[string]int // topic -> members subscribing by name
	regexes   map[string]*regexSub
	assignors map[string]int // server assignor -> members naming it

	// classicMembers counts the members speaking the classic protocol,
	// and classicProtocols how many of them offer each protocol name, so
	// that a JoinGroup checks its protocols in O(protocols).
	classicMembers   int
	classicProtocols map[string]int

	// assigner computes targets incrementally; nil until the next
	// computation builds it.
	assigner *assigner

	// unreconciled counts members not reconciledTo(assignmentEpoch), so
	// the group state costs O(1) instead of a scan per heartbeat.
	unreconciled int

	// The rebalance in progress and the partitions given up in it (soft
	// state); finished rebalances go to the caller. upgraded is set while
	// the heartbeat that converted the group from a classic one is
	// served, so its rebalance says so.
	upgraded bool
	current  *rebalance
	released map[tp]release

	// handedOut holds the member ids given to dynamic classic members
	// with MEMBER_ID_REQUIRED, until the member comes back with its id or
	// its session timeout passes (soft state). A classic JoinGroup naming
	// a member id neither here nor in the group comes from a member the
	// group removed (a zombie) and is answered UNKNOWN_MEMBER_ID, as a
	// classic group answers it, so that the client drops the partitions
	// it still thinks it owns before it joins again.
	handedOut map[string]time.Time
}

func newGroup(id string) *group {
	return &group{
		id:        id,
		members:   map[string]*member{},
		static:    map[string]string{},
		target:    map[string]partSet{},
		owners:    map[tp]string{},
		names:     map[string]int{},
		regexes:   map[string]*regexSub{},
		assignors: map[string]int{},
	}
}

func (g *group) state() State {
	switch {
	case len(g.members) == 0:
		return Empty
	case g.epoch > g.assignmentEpoch:
		return Assigning
	case g.unreconciled > 0:
		return Reconciling
	}
	return Stable
}

// sortedMembers returns the members by id.
func (g *group) sortedMembers() []*member {
	ms := make([]*member, 0, len(g.members))
	for _, mem := range g.members {
		ms = append(ms, mem)
	}
	slices.SortFunc(ms, func(a, b *member) int {
		if a.id < b.id {
			return -1
		}
		if a.id > b.id {
			return 1
		}
		return 0
	})
	return ms
}

// staticMember returns the member holding instance id inst, or nil.
func (g *group) staticMember(inst string) *member {
	if id, ok := g.static[inst]; ok {
		return g.members[id]
	}
	return nil
}

// subscribedTopics returns the sorted names the group subscribes to, by
// name or through a regular expression.
func (g *group) subscribedTopics() []string {
	out := make([]string, 0, len(g.names))
	for n := range g.names {
		out = append(out, n)
	}
	for _, rs := range g.regexes {
		out = append(out, rs.topics...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// memberTopics returns the names mem subscribes to: its names plus what its
// regex resolves to. The names slice itself is returned when there is no
// regex, so members with one subscription share one slice.
func (g *group) memberTopics(mem *member) []string {
	if mem.meta.regex == "" {
		return mem.meta.names
	}
	rs := g.regexes[mem.meta.regex]
	if rs == nil || len(rs.topics) == 0 {
		return mem.meta.names
	}
	if len(mem.meta.names) == 0 {
		return rs.topics
	}
	out := append(slices.Clip(mem.meta.names), rs.topics...)
	slices.Sort(out)
	return slices.Compact(out)
}

// preferredAssignor is the server assignor most members name; ties go to
// the one listed first in the configuration (Kafka breaks them by hash map
// order), and with no votes the first configured assignor is used.
func (g *group) preferredAssignor(configured []string) string {
	best, votes := configured[0], 0
	for _, name := range configured {
		if n := g.assignors[name]; n > votes {
			best, votes = name, n
		}
	}
	return best
}

// release is when a partition left its previous owner during a rebalance.
type release struct {
	from string
	at   time.Time
}

// --- applying records ---

func (m *Machine) groupOrCreate(id string) *group {
	g := m.groups[id]
	if g == nil {
		g = newGroup(id)
		m.groups[id] = g
	}
	return g
}

func (g *group) memberOrCreate(id string) *member {
	mem := g.members[id]
	if mem == nil {
		mem = newMember(id)
		g.members[id] = mem
		g.countReconciled(mem, 1)
		if g.current != nil {
			g.current.memberCame(id)
		}
	}
	return mem
}

func (g *group) countReconciled(mem *member, d int) {
	if !mem.reconciledTo(g.assignmentEpoch) {
		g.unreconciled += d
	}
}

func (g *group) recountReconciled() {
	g.unreconciled = 0
	for _, mem := range g.members {
		g.countReconciled(mem, 1)
	}
}

// dropIfGone removes a member once its metadata and current assignment
// records are both gone, with its deadlines.
func (m *Machine) dropIfGone(g *group, mem *member) {
	if mem.hasMeta || mem.hasCurrent {
		return
	}
	cancelAllOf(m, g.id, mem)
	g.countReconciled(mem, -1)
	delete(g.members, mem.id)
	if g.current != nil {
		g.current.memberWent(mem.id)
	}
}

// setMeta replaces a member's metadata (nil: the record was deleted) and
// keeps the group's subscription counts in step. It refuses an instance id
// another member holds: two incarnations of one static member at once.
func (m *Machine) setMeta(g *group, mem *member, meta *memberMeta) error {
	if meta != nil && meta.instanceID != "" {
		if other, ok := g.static[meta.instanceID]; ok && other != mem.id {
			return fmt.Errorf("instance id %q given to %s while %s holds it", meta.instanceID, mem.id, other)
		}
	}
	old := &mem.meta
	if mem.hasMeta {
		for _, n := range old.names {
			if g.names[n]--; g.names[n] <= 0 {
				delete(g.names, n)
			}
		}
		if old.regex != "" {
			if rs := g.regexes[old.regex]; rs != nil {
				if rs.count--; rs.count <= 0 {
					delete(g.regexes, old.regex)
				}
			}
		}
		if old.serverAssignor != "" {
			if g.assignors[old.serverAssignor]--; g.assignors[old.serverAssignor] <= 0 {
				delete(g.assignors, old.serverAssignor)
			}
		}
		if old.instanceID != "" && g.static[old.instanceID] == mem.id {
			delete(g.static, old.instanceID)
		}
		g.countClassic(old.classic, -1)
	}
	if meta == nil {
		mem.hasMeta = false
		mem.meta = memberMeta{rebalanceTimeout: -1}
		return nil
	}
	mem.meta, mem.hasMeta = *meta, true
	for _, n := range meta.names {
		g.names[n]++
	}
	if meta.regex != "" {
		rs := g.regexes[meta.regex]
		if rs == nil {
			rs = &regexSub{}
			// A pattern that no longer compiles (a record from another
			// version) matches nothing rather than stopping the load.
			rs.re, _ = compileRegex(meta.regex)
			rs.topics = m.topics.resolveRegex(rs.re)
			g.regexes[meta.regex] = rs
		}
		rs.count++
	}
	if meta.serverAssignor != "" {
		g.assignors[meta.serverAssignor]++
	}
	if meta.instanceID != "" {
		g.static[meta.instanceID] = mem.id
	}
	g.countClassic(meta.classic, 1)
	return nil
}

// setCurrent replaces a member's current assignment and the partition
// ownership index. It refuses a partition another member still holds (two
// owners at once) and a partition both assigned and pending revocation:
// the machine never writes either, so only damaged records can.
func (m *Machine) setCurrent(g *group, mem *member, epoch, prev int32, state MemberState, assigned, pending partSet) error {
	var err error
	if len(pending) > 0 {
		pending.each(func(id TopicID, p, _ int32) {
			if assigned.contains(id, p) && err == nil {
				err = fmt.Errorf("partition %s-%d both assigned to and revoked from %s", id, p, mem.id)
			}
		})
	}
	oldOwned, newOwned := union(mem.assigned, mem.pending), union(assigned, pending)
	diff(oldOwned, newOwned, nil, func(id TopicID, p, _ int32) {
		if o, ok := g.owners[tp{id, p}]; ok && o != mem.id && err == nil {
			err = fmt.Errorf("partition %s-%d given to %s while %s holds it", id, p, mem.id, o)
		}
	})
	if err != nil {
		return err
	}
	wasReconciled := mem.reconciledTo(g.assignmentEpoch)
	oldAssigned := mem.assigned
	track := !m.replaying
	at := m.now
	if !m.pending.releasedAt.IsZero() {
		at = m.pending.releasedAt
	}
	diff(oldOwned, newOwned, func(id TopicID, p, _ int32) {
		delete(g.owners, tp{id, p})
		if track {
			g.noteRelease(tp{id, p}, mem.id, at)
		}
	}, func(id TopicID, p, _ int32) {
		g.owners[tp{id, p}] = mem.id
	})
	g.countReconciled(mem, -1)
	mem.epoch, mem.prevEpoch, mem.state = epoch, prev, state
	mem.assigned, mem.pending = assigned, pending
	g.countReconciled(mem, 1)
	if track {
		m.trackMoves(g, mem, oldAssigned, wasReconciled)
	}
	return nil
}

// apply changes the state by one record, the same way for live steps and
// for Replay. A tombstone for a group that does not exist changes nothing:
// in log order, the tombstones of a deleted group may come after the one
// that removed it.
func (m *Machine) apply(r Record) error {
	if r.Tombstone() && m.groups[r.Group] == nil {
		return nil
	}
	switch r.Type {
	case RecordGroupEpoch:
		if r.GroupEpoch == nil {
			if g := m.groups[r.Group]; g != nil {
				m.dropGroup(g)
			}
			return nil
		}
		g := m.groupOrCreate(r.Group)
		before := g.epoch
		g.epoch, g.metadataHash = r.GroupEpoch.Epoch, r.GroupEpoch.MetadataHash
		if !m.replaying && g.epoch > before {
			m.openRebalance(g, before)
		}
		m.touch(g)
	case RecordMemberMetadata:
		g := m.groupOrCreate(r.Group)
		if r.MemberMetadata == nil {
			if mem := g.members[r.Member]; mem != nil {
				_ = m.setMeta(g, mem, nil) // a deletion cannot conflict
				m.dropIfGone(g, mem)
				g.syncMember(r.Member)
			}
			break
		}
		v := r.MemberMetadata
		meta := memberMeta{
			instanceID:       v.InstanceID,
			rackID:           v.RackID,
			clientID:         v.ClientID,
			clientHost:       v.ClientHost,
			names:            v.SubscribedTopicNames,
			regex:            v.SubscribedTopicRegex,
			rebalanceTimeout: v.RebalanceTimeoutMs,
			serverAssignor:   v.ServerAssignor,
			classic:          v.Classic,
		}
		mem := g.memberOrCreate(r.Member)
		if err := m.setMeta(g, mem, &meta); err != nil {
			m.dropIfGone(g, mem)
			return err
		}
		g.syncMember(r.Member)
	case RecordTargetMember:
		g := m.groupOrCreate(r.Group)
		if r.Target == nil {
			delete(g.target, r.Member)
			break
		}
		g.target[r.Member] = toPartSet(r.Target.Partitions, false)
		m.targetWritten(g, r.Member, g.target[r.Member])
	case RecordTargetEpoch:
		g := m.groupOrCreate(r.Group)
		if r.TargetEpoch == nil {
			g.assignmentEpoch = 0
		} else {
			g.assignmentEpoch = r.TargetEpoch.AssignmentEpoch
		}
		g.recountReconciled()
		m.touch(g)
	case RecordCurrentAssignment:
		g := m.groupOrCreate(r.Group)
		if r.Current == nil {
			mem := g.members[r.Member]
			if mem == nil {
				break
			}
			if err := m.setCurrent(g, mem, leaveEpoch, leaveEpoch, MemberStable, nil, nil); err != nil {
				return err
			}
			mem.hasCurrent = false
			m.dropIfGone(g, mem)
			g.syncMember(r.Member)
			m.touch(g)
			break
		}
		v := r.Current
		_, existed := g.members[r.Member]
		mem := g.memberOrCreate(r.Member)
		if !existed {
			g.syncMember(r.Member)
		}
		if err := m.setCurrent(g, mem, v.MemberEpoch, v.PreviousMemberEpoch, v.State,
			toPartSet(v.Assigned, true), toPartSet(v.PendingRevocation, true)); err != nil {
			return err
		}
		mem.hasCurrent = true
		m.touch(g)
	default:
		return fmt.Errorf("unknown record type %d", r.Type)
	}
	return nil
}

// dropGroup forgets a group and its deadlines.
func (m *Machine) dropGroup(g *group) {
	delete(m.groups, g.id)
	m.cancelGroupTimers(g)
}
