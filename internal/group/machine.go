package group

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/group/core"
	"github.com/groupd/groupd/internal/inspect"
)

// RequestID is an opaque handle the caller attaches to each request;
// replies, possibly released by a later Step, carry it back.
type RequestID = core.RequestID

// Event is an input to Step: a Request, a Timer firing, ExpireOffsets,
// TopicsChanged or Unload.
type Event interface{ isEvent() }

// Request is a client request. Msg is one of *kmsg.JoinGroupRequest,
// *kmsg.SyncGroupRequest, *kmsg.HeartbeatRequest, *kmsg.LeaveGroupRequest,
// *kmsg.OffsetCommitRequest, *kmsg.OffsetFetchRequest,
// *kmsg.DescribeGroupsRequest, *kmsg.ListGroupsRequest,
// *kmsg.DeleteGroupsRequest, *kmsg.OffsetDeleteRequest,
// *kmsg.ConsumerGroupHeartbeatRequest or *kmsg.ConsumerGroupDescribeRequest,
// with its Version set. Requests naming several groups must only name groups this machine
// owns; the caller splits and merges across shards.
type Request struct {
	ID         RequestID
	ClientID   string
	ClientHost string
	Msg        kmsg.Request
}

// Timer reports that the deadline of Key has passed. Timers for keys that were
// cancelled or rescheduled later are ignored, so a late or duplicate firing is
// harmless.
type Timer struct{ Key TimerKey }

// ExpireOffsets asks the machine to expire offsets past retention (KIP-211);
// the caller sends it every offsets.retention.check.interval.ms.
type ExpireOffsets struct{}

// TopicsChanged gives the machine the broker's whole topic metadata: once
// before Replay, and again whenever a topic is created, deleted or gains
// partitions. Consumer groups subscribed to a changed topic get a new group
// epoch at once, without waiting for a member to notice.
type TopicsChanged struct{ Topics []Topic }

// Topic is one topic of the broker's metadata.
type Topic = consumer.Topic

// Unload answers every parked request with NOT_COORDINATOR and drops all
// groups, for when the shard moves away.
type Unload struct{}

func (Request) isEvent()       {}
func (Timer) isEvent()         {}
func (ExpireOffsets) isEvent() {}
func (TopicsChanged) isEvent() {}
func (Unload) isEvent()        {}

// TimerKind names what a deadline is for; the consumer-group machine's
// kinds share the numbering.
type TimerKind = core.TimerKind

// Timer kinds of classic groups, after Kafka's keyed timers.
const (
	// TimerHeartbeat is a member's session (or new-member join) deadline.
	TimerHeartbeat = core.TimerHeartbeat
	// TimerPending is the deadline for a KIP-394 pending member to rejoin
	// with its assigned id.
	TimerPending = core.TimerPending
	// TimerJoin completes the join phase (rebalance timeout) or ends one
	// step of the initial rebalance delay.
	TimerJoin = core.TimerJoin
	// TimerSync removes members that did not send SyncGroup (KAFKA-12890).
	TimerSync = core.TimerSync
	// TimerHistory keeps the record of a rebalance that has ended, in a
	// step of its own (history.go).
	TimerHistory = core.TimerHistory
)

// TimerKey identifies a deadline. It is comparable so the caller can keep it
// as a map key; scheduling a key again replaces its deadline.
type TimerKey = core.TimerKey

// TimerUpdate sets (Cancel false) or removes (Cancel true) a deadline.
type TimerUpdate = core.TimerUpdate

// Reply answers a request. Msg is the kmsg response with Version set to the
// request's version.
type Reply = core.Reply

// Output is everything one Step produced. Replies must not be sent before
// Records (and the records of all earlier Outputs) are durable.
type Output struct {
	Records []Record
	Replies []Reply
	Timers  []TimerUpdate
	// Rebalances are the rebalances this step finished. Each is also the
	// Rebalance of a record in Records and an entry of its group's
	// history: the runtime may fill in the Moved[i].CommitGap fields,
	// and nothing else, before the records are made durable.
	Rebalances []*inspect.Rebalance
}

// parked is a request waiting for a later event.
type parked struct {
	id      RequestID
	version int16
}

type protocol struct {
	name     string
	metadata []byte
}

type member struct {
	id           string
	instanceID   string // "" means dynamic
	clientID     string
	clientHost   string
	session      time.Duration
	rebalance    time.Duration
	protocolType string
	protocols    []protocol
	assignment   []byte
	join         *parked
	sync         *parked
	syncSlot     parked // what sync points to, so that parking allocates nothing
	isNew        bool
	seq          uint64 // join order, for deterministic iteration
	gone         bool   // removed from its group (group.order)
	// startSeq is the Seq of the rebalance in progress if the member was
	// in the group when it opened (history.go).
	startSeq uint64

	// For the rebalance history (history.go). lastSeen is when the member
	// last sent a heartbeat, JoinGroup, SyncGroup or an offset commit that
	// kept its session alive; joinedAt its latest
	// JoinGroup. received is the assignment it was last given (assignment
	// may be newer while it has not synced) and receivedGen its
	// generation. gaveUp is when it first learnt of a rebalance after
	// receiving its assignment (a JoinGroup, or a heartbeat answered
	// REBALANCE_IN_PROGRESS): an eager member revokes everything then.
	// awaiting is set while the rebalance in progress waits for the
	// member to receive its assignment, and pending holds its moves;
	// revoking while orphans it has still to give up are waiting for it.
	lastSeen    time.Time
	joinedAt    time.Time
	received    []byte
	receivedGen int32
	gaveUp      time.Time
	awaiting    bool
	revoking    bool
	pending     []pendingMove
}

func (m *member) metadataFor(name string) []byte {
	for _, p := range m.protocols {
		if p.name == name {
			return p.metadata
		}
	}
	return nil
}

// vote returns the member's most preferred protocol among those every
// member of g supports.
func (m *member) vote(g *group) string {
	for _, p := range m.protocols {
		if g.supportedByAll(p.name) {
			return p.name
		}
	}
	return ""
}

func (m *member) matches(ps []kmsg.JoinGroupRequestProtocol) bool {
	if len(ps) != len(m.protocols) {
		return false
	}
	for i, p := range ps {
		if p.Name != m.protocols[i].name || string(p.Metadata) != string(m.protocols[i].metadata) {
			return false
		}
	}
	return true
}

type topicPartition struct {
	topic     string
	partition int32
}

type offsetValue struct {
	offset      int64
	leaderEpoch int32
	metadata    string
	commitTime  int64 // unix ms
	expireTime  int64 // unix ms, -1 if none
}

type group struct {
	id string
	// consumer is set for a consumer (KIP-848) group: its members live in
	// the consumer machine, and of the fields below only the offsets and
	// the rebalance history are used (the classic state stays Empty).
	consumer     bool
	state        State
	prevState    State
	stateTime    time.Time
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	// order holds the members in join order (by seq), and possibly
	// members removed since (member.gone), gaps of them; head is the
	// index of the first member that may be present. A slice that
	// sortedMembers handed out is never changed in place, only
	// appended to: compaction and replacement build a new one.
	order       []*member
	gaps, head  int
	pending     map[string]bool
	pendingSync map[string]bool
	static      map[string]string // instance id -> member id
	seq         uint64

	// Running counts over members, kept by add, remove, setProtocols and
	// setJoin, so that a join need not scan the whole group: supporters
	// maps a protocol name to how many members list it, and awaiting is
	// how many members have a JoinGroup parked. Without them every join of
	// an n-member rebalance costs O(n), and the rebalance O(n²).
	supporters map[string]int
	awaiting   int

	// ptype and pname share the pointers to protocolType and protocol
	// among the replies that carry them.
	ptype, pname sharedStr

	newMemberAdded   bool
	initialDelay     time.Duration
	initialRemaining time.Duration
	joinIsInitial    bool
	syncGeneration   int32

	subscribed      map[string]bool
	subscribedKnown bool

	offsets offsetTable

	// The rebalance history (history.go): finished rebalances oldest
	// first, the one in progress, the next sequence number, partitions
	// nobody holds, recently removed members, and when the group was
	// loaded from the store.
	history  []*inspect.Rebalance
	cur      *rebalance
	nextSeq  uint64
	orphans  map[topicPartition]orphan
	departed []departure
	loadedAt time.Time
	// coverageUnchecked marks a group loaded Stable whose assignments
	// have not yet been checked against the topics, and uncovered one
	// whose assignments leave a partition to nobody (checkCoverage).
	coverageUnchecked, uncovered bool
}

func newGroup(id string, now time.Time) *group {
	return &group{
		id:          id,
		state:       Empty,
		prevState:   Empty,
		stateTime:   now,
		members:     map[string]*member{},
		pending:     map[string]bool{},
		pendingSync: map[string]bool{},
		static:      map[string]string{},
		offsets:     newOffsetTable(),
		supporters:  map[string]int{},
		nextSeq:     1,
	}
}

func (g *group) transition(now time.Time, to State) {
	mustTransition(g.state, to)
	g.prevState = g.state
	g.state = to
	g.stateTime = now
}

// sortedMembers returns members in join order. The slice is the group's
// own: the caller must not change it, and may keep iterating it while
// members are added or removed (it then sees the members as they were).
func (g *group) sortedMembers() []*member {
	if g.gaps > 0 {
		ms := make([]*member, 0, len(g.members))
		for _, m := range g.order[g.head:] {
			if !m.gone {
				ms = append(ms, m)
			}
		}
		g.order, g.gaps, g.head = ms, 0, 0
	}
	return g.order
}

func sortedKeys(m map[string]bool) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (g *group) add(m *member) {
	if len(g.members) == 0 {
		g.protocolType = m.protocolType
	}
	g.seq++
	m.seq = g.seq
	g.members[m.id] = m
	g.order = append(g.order, m)
	g.countMember(m, 1)
	if m.instanceID != "" {
		g.static[m.instanceID] = m.id
	}
	if g.leader == "" {
		g.leader = m.id
	}
}

func (g *group) remove(id string) {
	if m, ok := g.members[id]; ok {
		delete(g.members, id)
		m.gone = true
		g.gaps++
		g.leftDuringRebalance(m)
		g.countMember(m, -1)
		if m.instanceID != "" && g.static[m.instanceID] == id {
			delete(g.static, m.instanceID)
		}
	}
	delete(g.pending, id)
	delete(g.pendingSync, id)
	if g.leader == id {
		// Kafka takes the next key of a HashMap; join order is the
		// deterministic equivalent.
		g.leader = ""
		if first := g.firstMember(); first != nil {
			g.leader = first.id
		}
	}
}

// firstMember returns the member that joined first. A batch LeaveGroup
// removes the leader again and again: head moves past the members gone
// from the front, so that each call does not scan them again.
func (g *group) firstMember() *member {
	for ; g.head < len(g.order); g.head++ {
		if m := g.order[g.head]; !m.gone {
			return m
		}
	}
	return nil
}

// replaceMember puts mem, a new incarnation of a member with the same seq,
// in old's place in join order; old is no longer a member.
func (g *group) replaceMember(old, mem *member) {
	i, found := slices.BinarySearchFunc(g.order, old.seq, func(m *member, seq uint64) int { return cmp.Compare(m.seq, seq) })
	if !found || g.order[i] != old {
		panic(fmt.Sprintf("group %s: member %s not in join order", g.id, old.id))
	}
	order := slices.Clone(g.order)
	order[i] = mem
	g.order = order
	old.gone = true
	g.leftDuringRebalance(old)
}

// countMember adds (d = 1) or removes (d = -1) a member's share of the
// running counts.
func (g *group) countMember(m *member, d int) {
	g.countProtocols(m.protocols, d)
	if m.join != nil {
		g.awaiting += d
	}
}

// countProtocols counts each distinct name in ps once, as a member that
// lists a protocol twice still supports it once.
func (g *group) countProtocols(ps []protocol, d int) {
	for i, p := range ps {
		if listsBefore(ps[:i], p.name) {
			continue
		}
		if n := g.supporters[p.name] + d; n != 0 {
			g.supporters[p.name] = n
		} else {
			delete(g.supporters, p.name)
		}
	}
}

func listsBefore(ps []protocol, name string) bool {
	for _, p := range ps {
		if p.name == name {
			return true
		}
	}
	return false
}

// setProtocols replaces the protocols of a member of g.
func (g *group) setProtocols(m *member, ps []protocol) {
	g.countProtocols(m.protocols, -1)
	m.protocols = ps
	g.countProtocols(ps, 1)
}

// setJoin parks (or, with nil, unparks) a JoinGroup of a member of g.
func (g *group) setJoin(m *member, p *parked) {
	switch {
	case m.join == nil && p != nil:
		g.awaiting++
	case m.join != nil && p == nil:
		g.awaiting--
	}
	m.join = p
}

func (g *group) numAwaitingJoin() int { return g.awaiting }

func (g *group) hasAllMembersJoined() bool {
	return len(g.members) == g.awaiting && len(g.pending) == 0
}

// rebalanceTimeout is the largest rebalance timeout of the current members.
func (g *group) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.sortedMembers() {
		if m.rebalance > d {
			d = m.rebalance
		}
	}
	return d
}

// supportedByAll reports whether every member lists the protocol.
func (g *group) supportedByAll(name string) bool {
	return g.supporters[name] == len(g.members)
}

func (g *group) supportsProtocols(protocolType string, ps []kmsg.JoinGroupRequestProtocol) bool {
	if g.state == Empty {
		return protocolType != "" && len(ps) > 0
	}
	if g.protocolType != protocolType {
		return false
	}
	for _, p := range ps {
		if g.supportedByAll(p.Name) {
			return true
		}
	}
	return false
}

// selectProtocol lets every member vote for its most preferred protocol among
// those all members support. Kafka breaks ties by HashMap order; here the
// protocol that received its first vote earliest (in join order) wins.
func (g *group) selectProtocol() string {
	if len(g.supporters) == 1 {
		// One protocol among all members: if all list it, all vote
		// for it.
		for name, n := range g.supporters {
			if n == len(g.members) {
				return name
			}
		}
	}
	var votes map[string]int
	var order []string
	for _, m := range g.sortedMembers() {
		v := m.vote(g)
		if v == "" {
			continue
		}
		if votes == nil {
			votes = map[string]int{}
		}
		if votes[v] == 0 {
			order = append(order, v)
		}
		votes[v]++
	}
	best, bestVotes := "", 0
	for _, p := range order {
		if votes[p] > bestVotes {
			best, bestVotes = p, votes[p]
		}
	}
	return best
}

// validateMember is Kafka's ClassicGroup.validateMember.
func (g *group) validateMember(memberID, instanceID string) int16 {
	_, code := g.validMember(memberID, instanceID)
	return code
}

// validMember is validateMember that also returns the member when it is
// valid (code 0).
func (g *group) validMember(memberID, instanceID string) (*member, int16) {
	if instanceID != "" {
		existing, ok := g.static[instanceID]
		if !ok {
			return nil, errUnknownMemberID
		}
		if existing != memberID {
			return nil, errFencedInstanceID
		}
	}
	mem := g.members[memberID]
	if mem == nil {
		return nil, errUnknownMemberID
	}
	return mem, 0
}

func (g *group) computeSubscribedTopics() {
	g.subscribed, g.subscribedKnown = nil, false
	if g.protocolType != consumerProtocolType {
		return
	}
	g.subscribed = map[string]bool{}
	if len(g.members) == 0 {
		g.subscribedKnown = true
		return
	}
	if g.protocol == "" {
		g.subscribed = nil
		return
	}
	// Members of a group mostly send the same subscription: one that
	// repeats the previous member's bytes adds nothing.
	var last []byte
	for i, m := range g.sortedMembers() {
		md := m.metadataFor(g.protocol)
		if i > 0 && string(md) == string(last) {
			continue
		}
		last = md
		topics, ok := parseSubscribedTopics(md)
		if !ok {
			g.subscribed = nil
			return
		}
		for _, t := range topics {
			g.subscribed[t] = true
		}
	}
	g.subscribedKnown = true
}

// isSubscribedToTopic is Kafka's rule: when the subscriptions are unknown, a
// group using the consumer protocol is assumed subscribed to everything.
func (g *group) isSubscribedToTopic(topic string) bool {
	if g.subscribedKnown {
		return g.subscribed[topic]
	}
	return g.protocolType == consumerProtocolType
}

const consumerProtocolType = "consumer"

// parseSubscribedTopics reads the topics of a ConsumerProtocolSubscription.
// Clients send malformed metadata (kafka-go declares v1 without owned
// partitions), so a failed strict parse is retried as v0, which is the prefix
// of every version: that is what Kafka does.
func parseSubscribedTopics(b []byte) ([]string, bool) {
	var md kmsg.ConsumerMemberMetadata
	if err := md.ReadFrom(b); err == nil {
		return md.Topics, true
	}
	if len(b) < 2 {
		return nil, false
	}
	c := append([]byte{0, 0}, b[2:]...)
	md = kmsg.ConsumerMemberMetadata{}
	if err := md.ReadFrom(c); err == nil {
		return md.Topics, true
	}
	return nil, false
}

// Machine is the group state machine of one shard: it holds the classic
// groups itself and the consumer (KIP-848) groups through a consumer.Machine,
// and owns what the two types share: the group ids (one group id holds one
// type), the committed offsets and the rebalance history. The zero value is
// not usable; call New.
type Machine struct {
	cfg    Config
	groups map[string]*group
	timers core.Timers
	cons   *consumer.Machine
	// topics is the broker's topic metadata as last given (nil: never),
	// for the consumer machine after a Replay.
	topics []Topic

	// per-step scratch
	now time.Time
	out Output
	// consTimers holds the consumer machine's deadline changes of this
	// step, merged into the output at its end.
	consTimers []TimerUpdate
	// reuse is set while StepRequest runs: the output's Replies and
	// Timers then go into replyBuf and timerBuf, which the next
	// StepRequest reuses.
	reuse    bool
	replyBuf []Reply
	timerBuf []TimerUpdate
}

// maxReusedOutput bounds the slices StepRequest keeps between steps: one
// step that answered or rescheduled a whole large group does not pin its
// output's size.
const maxReusedOutput = 64

// New returns an empty machine.
func New(cfg Config) *Machine {
	m := &Machine{
		cfg:    cfg.withDefaults(),
		groups: map[string]*group{},
	}
	ccfg := m.cfg.Consumer
	ccfg.LoadTrigger = m.cfg.LoadTrigger
	ccfg.CommittedOffset = m.committedOffset
	ccfg.Downgrade = consumer.DowngradePolicy{Allowed: m.cfg.MigrationPolicy.DowngradeEnabled(), MaxSize: m.cfg.MaxGroupSize}
	m.cons = consumer.New(ccfg)
	return m
}

// Config returns the machine's effective configuration.
func (m *Machine) Config() Config { return m.cfg }

// Step applies one event at time now and returns its effects.
func (m *Machine) Step(now time.Time, ev Event) Output {
	m.begin(now)
	switch ev := ev.(type) {
	case Request:
		m.request(ev)
	case Timer:
		if ev.Key.Kind.Consumer() {
			m.stepConsumer(consumer.Timer{Key: ev.Key})
		} else {
			m.timer(ev.Key)
		}
	case ExpireOffsets:
		m.expireOffsets()
	case TopicsChanged:
		m.topics = ev.Topics
		for _, id := range m.Groups() {
			if g := m.groups[id]; g.coverageUnchecked {
				m.checkCoverage(g)
			}
		}
		m.stepConsumer(consumer.TopicsChanged{Topics: ev.Topics})
	case Unload:
		m.unload()
	default:
		panic(fmt.Sprintf("group: unknown event %T", ev))
	}
	return m.end()
}

// StepRequest is Step with a Request, for a runtime that steps requests
// one after another and is done with each output before the next step:
// the returned Output's Replies and Timers are reused by the next
// StepRequest, and must not be kept. It spares the step the allocations
// of an Event and of those two slices; its effects are Step's.
func (m *Machine) StepRequest(now time.Time, r Request) Output {
	m.reuse = true
	m.begin(now)
	m.request(r)
	out := m.end()
	m.reuse = false
	// Kept with their lengths, so the next step clears what they hold.
	if cap(out.Replies) <= maxReusedOutput {
		m.replyBuf = out.Replies
	}
	if cap(out.Timers) <= maxReusedOutput {
		m.timerBuf = out.Timers
	}
	// As from Step: no replies or no timer changes are nil.
	if len(out.Replies) == 0 {
		out.Replies = nil
	}
	if len(out.Timers) == 0 {
		out.Timers = nil
	}
	return out
}

func (m *Machine) begin(now time.Time) {
	m.now = now
	m.out = Output{}
	if m.reuse {
		clear(m.replyBuf)
		clear(m.timerBuf)
		m.out.Replies, m.out.Timers = m.replyBuf[:0], m.timerBuf[:0]
	}
	m.consTimers = m.consTimers[:0]
}

func (m *Machine) end() Output {
	m.out.Timers = m.timers.AppendUpdates(m.out.Timers)
	if len(m.consTimers) > 0 {
		// The two machines' keys differ in kind, so there is nothing
		// to merge, only to order.
		m.out.Timers = append(m.out.Timers, m.consTimers...)
		core.SortTimerUpdates(m.out.Timers)
	}
	out := m.out
	m.out = Output{}
	m.consTimers = m.consTimers[:0]
	return out
}

func (m *Machine) schedule(k TimerKey, d time.Duration) { m.timers.Set(k, m.now.Add(d)) }

func (m *Machine) cancel(k TimerKey) { m.timers.Cancel(k) }

func (m *Machine) reply(id RequestID, msg kmsg.Response) {
	m.out.Replies = append(m.out.Replies, Reply{ID: id, Msg: msg})
}

func (m *Machine) record(r Record) {
	m.out.Records = append(m.out.Records, r)
}

// Deadlines returns all scheduled deadlines, of both group types, sorted by
// key. It lets a runtime that lost its timer table (or a test) rebuild it.
func (m *Machine) Deadlines() []TimerUpdate {
	out := m.timers.All()
	if cs := m.cons.Deadlines(); len(cs) > 0 {
		out = append(out, cs...)
		core.SortTimerUpdates(out)
	}
	return out
}

func (m *Machine) request(r Request) {
	switch req := r.Msg.(type) {
	case *kmsg.JoinGroupRequest:
		m.resumeRebalance(req.Group)
		m.joinGroup(r, req)
	case *kmsg.SyncGroupRequest:
		m.resumeRebalance(req.Group)
		m.syncGroup(r, req)
	case *kmsg.HeartbeatRequest:
		m.heartbeat(r, req)
	case *kmsg.LeaveGroupRequest:
		m.leaveGroup(r, req)
	case *kmsg.OffsetCommitRequest:
		m.offsetCommit(r, req)
	case *kmsg.OffsetFetchRequest:
		m.offsetFetch(r, req)
	case *kmsg.DescribeGroupsRequest:
		m.describeGroups(r, req)
	case *kmsg.ListGroupsRequest:
		m.listGroups(r, req)
	case *kmsg.DeleteGroupsRequest:
		m.deleteGroups(r, req)
	case *kmsg.OffsetDeleteRequest:
		m.offsetDelete(r, req)
	case *kmsg.ConsumerGroupHeartbeatRequest:
		m.consumerHeartbeat(r, req)
	case *kmsg.ConsumerGroupDescribeRequest:
		m.consumerDescribe(r, req)
	default:
		panic(fmt.Sprintf("group: unsupported request %T", r.Msg))
	}
}

func (m *Machine) timer(k TimerKey) {
	if !m.timers.Due(k, m.now) {
		return // cancelled, replaced by a later deadline, or early
	}
	g := m.groups[k.Group]
	if g == nil || g.consumer {
		return
	}
	switch k.Kind {
	case TimerHeartbeat:
		m.onHeartbeatExpired(g, k.Member)
	case TimerPending:
		m.onPendingExpired(g, k.Member)
	case TimerJoin:
		if g.joinIsInitial {
			m.onInitialDelay(g)
		} else {
			m.completeJoin(g)
		}
	case TimerSync:
		m.onSyncExpired(g)
	case TimerHistory:
		if g.cur != nil && g.cur.done {
			m.closeRebalance(g, "stable")
		}
	}
}

func (m *Machine) unload() {
	ids := make([]string, 0, len(m.groups))
	for id := range m.groups {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		g := m.groups[id]
		if g.consumer {
			delete(m.groups, id)
			continue
		}
		for _, mem := range g.sortedMembers() {
			if mem.join != nil {
				m.replyJoinError(mem.join, errNotCoordinator, "")
				g.setJoin(mem, nil)
			}
			if mem.sync != nil {
				m.replySyncError(mem.sync, errNotCoordinator)
				mem.sync = nil
			}
		}
		g.transition(m.now, Dead)
		delete(m.groups, id)
	}
	m.timers.CancelAll()
	m.stepConsumer(consumer.Unload{})
}

// removeGroup drops a deleted or expired group. Its timers and its
// rebalance history go with it.
func (m *Machine) removeGroup(g *group) {
	if g.cur != nil && g.cur.done {
		// Kept (and observed) before it is tombstoned with the rest.
		m.closeRebalance(g, "stable")
	}
	m.dropHistory(g)
	g.transition(m.now, Dead)
	delete(m.groups, g.id)
	m.timers.CancelGroup(g.id)
}

// GroupState returns the state and generation of a classic group (Dead, -1
// if unknown or a consumer group; see ConsumerGroupState).
func (m *Machine) GroupState(id string) (State, int32) {
	g := m.groups[id]
	if g == nil || g.consumer {
		return Dead, -1
	}
	return g.state, g.generation
}

// Groups returns the ids of all groups, sorted.
func (m *Machine) Groups() []string {
	ids := make([]string, 0, len(m.groups))
	for id := range m.groups {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
