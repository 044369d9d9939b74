package consumer

import (
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/group/core"
	"github.com/groupd/groupd/internal/inspect"
)

// RequestID is an opaque handle the caller attaches to each request; the
// reply carries it back.
type RequestID = core.RequestID

// Event is an input to Step: a Request, a Timer firing, TopicsChanged,
// DeleteGroup or Unload.
type Event interface{ isEvent() }

// Request is a client request. Msg is a *kmsg.ConsumerGroupHeartbeatRequest
// or a *kmsg.ConsumerGroupDescribeRequest with its Version set, or a classic
// *kmsg.JoinGroupRequest, *kmsg.SyncGroupRequest, *kmsg.HeartbeatRequest or
// *kmsg.LeaveGroupRequest for a group of this machine (the caller checks
// what Kafka checks before it looks at the group's type). A describe must
// only name groups this machine owns; the caller splits and merges across
// shards.
type Request struct {
	ID         RequestID
	ClientID   string
	ClientHost string
	Msg        kmsg.Request
}

// Timer reports that the deadline of Key has passed. A firing for a key that
// was cancelled or moved later is ignored, so late or repeated firings are
// harmless.
type Timer struct{ Key TimerKey }

// TopicsChanged gives the machine the broker's whole topic metadata, after
// any topic is created, deleted or grown, and once after Replay. Groups
// subscribed to a changed topic (by name or by regular expression) get a new
// group epoch at once, without waiting for a member to notice.
type TopicsChanged struct{ Topics []Topic }

// DeleteGroup deletes a group that has no members, with tombstones for all
// its records: DeleteGroups, the expiry of an empty group's last offset,
// and a classic JoinGroup taking over the group id. A group with members,
// or none, is left alone.
type DeleteGroup struct{ Group string }

// Unload drops all groups and deadlines, for when the shard moves away.
type Unload struct{}

func (Request) isEvent()       {}
func (Timer) isEvent()         {}
func (TopicsChanged) isEvent() {}
func (DeleteGroup) isEvent()   {}
func (Unload) isEvent()        {}

// TimerKind names what a deadline is for.
type TimerKind = core.TimerKind

// Timer kinds, after Kafka's keyed timers.
const (
	// TimerSession fences a member that stopped heartbeating. It is also
	// the rejoin window of a static member that left with epoch -2: like
	// Kafka, the leave does not move it.
	TimerSession = core.TimerSession
	// TimerRebalance fences a member that did not revoke the partitions
	// it was asked to give up within its rebalance timeout.
	TimerRebalance = core.TimerRebalance
	// TimerClassicJoin fences a classic member told to rejoin that did
	// not within its rebalance timeout.
	TimerClassicJoin = core.TimerClassicJoin
	// TimerClassicSync fences a classic member that joined and did not
	// send SyncGroup within its rebalance timeout.
	TimerClassicSync = core.TimerClassicSync
)

// TimerKey identifies a deadline; scheduling a key again replaces it.
type TimerKey = core.TimerKey

// TimerUpdate sets (Cancel false) or removes (Cancel true) a deadline.
type TimerUpdate = core.TimerUpdate

// Reply answers a request. Msg is the kmsg response with the request's
// version.
type Reply = core.Reply

// Output is everything one Step produced. Replies must not be released
// before Records (and the records of every earlier Output) are durable.
type Output struct {
	Records []Record
	Replies []Reply
	Timers  []TimerUpdate
	// Rebalances are the rebalances this step finished, for the caller
	// to keep in the group's history; the machine keeps only the one in
	// progress (InProgress).
	Rebalances []*inspect.Rebalance
	// Downgrades are the groups this step turned classic: their records
	// are deleted in Records, and the caller rebuilds each as a classic
	// group in the same step.
	Downgrades []Downgrade
}

// Machine is the consumer-group state machine of one shard. The zero value
// is not usable; call New.
type Machine struct {
	cfg    Config
	groups map[string]*group
	topics topicImage
	// timerNotes are the members whose deadlines changed in this step
	// (see timers.go).
	timerNotes []timerNote

	// per-step scratch
	now       time.Time
	out       Output
	touched   []*group
	replaying bool
	pending   cause // why the next epoch bump of this step happens

	// The slices of StepRequest's Outputs, kept for the next one.
	recordBuf []Record
	replyBuf  []Reply
	timerBuf  []TimerUpdate
}

// New returns an empty machine that knows no topics yet.
func New(cfg Config) *Machine {
	return &Machine{
		cfg:    cfg.withDefaults(),
		groups: map[string]*group{},
		topics: newTopicImage(nil),
	}
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
		m.timer(ev.Key)
	case TopicsChanged:
		m.topicsChanged(ev.Topics)
	case DeleteGroup:
		m.deleteGroup(ev.Group)
	case Upgrade:
		m.upgrade(ev)
	case Unload:
		m.unload()
	default:
		panic(fmt.Sprintf("consumer: unknown event %T", ev))
	}
	return m.end()
}

// StepRequest is Step for a Request, for a caller that takes in each
// Output before its next step: the Output's Records, Replies and Timers
// are the machine's own slices, which the next StepRequest reuses (a
// Step does not), and the request is not boxed into an Event. This is
// the path of every ConsumerGroupHeartbeat, so a heartbeat that changes
// nothing allocates its response alone.
func (m *Machine) StepRequest(now time.Time, r Request) Output {
	m.begin(now)
	clear(m.recordBuf)
	clear(m.replyBuf)
	clear(m.timerBuf)
	m.out.Records, m.out.Replies, m.out.Timers = m.recordBuf[:0], m.replyBuf[:0], m.timerBuf[:0]
	m.request(r)
	out := m.end()
	// Kept with their lengths, so that the next step clears what they
	// hold; a step that grew one very large gives it up.
	if cap(out.Records) <= maxReusedOutput {
		m.recordBuf = out.Records
	}
	if cap(out.Replies) <= maxReusedOutput {
		m.replyBuf = out.Replies
	}
	if cap(out.Timers) <= maxReusedOutput {
		m.timerBuf = out.Timers
	}
	// As from Step: none is nil.
	if len(out.Records) == 0 {
		out.Records = nil
	}
	if len(out.Replies) == 0 {
		out.Replies = nil
	}
	if len(out.Timers) == 0 {
		out.Timers = nil
	}
	return out
}

// maxReusedOutput bounds the slices StepRequest keeps.
const maxReusedOutput = 256

func (m *Machine) begin(now time.Time) {
	m.now = now
	m.out = Output{}
	m.touched = m.touched[:0]
	m.pending = cause{}
}

func (m *Machine) end() Output {
	for _, g := range m.touched {
		m.maybeCloseRebalance(g)
	}
	m.out.Timers = m.appendTimerUpdates(m.out.Timers)
	out := m.out
	m.out = Output{}
	m.touched = m.touched[:0]
	return out
}

// touch notes that g changed this step, so its rebalance may end.
func (m *Machine) touch(g *group) {
	for _, t := range m.touched {
		if t == g {
			return
		}
	}
	m.touched = append(m.touched, g)
}

func (m *Machine) reply(id RequestID, msg kmsg.Response) {
	m.out.Replies = append(m.out.Replies, Reply{ID: id, Msg: msg})
}

// emit adds a record to the output and applies it to the state: records are
// the only way state changes, which is what makes Replay rebuild exactly
// what the live machine held. A record that does not apply is a bug in the
// machine, not bad input, hence the panic.
func (m *Machine) emit(r Record) {
	m.out.Records = append(m.out.Records, r)
	if err := m.apply(r); err != nil {
		panic(fmt.Sprintf("consumer: own record %s does not apply: %v", r.Type, err))
	}
}

func (m *Machine) request(r Request) {
	switch req := r.Msg.(type) {
	case *kmsg.ConsumerGroupHeartbeatRequest:
		m.heartbeat(r, req)
	case *kmsg.ConsumerGroupDescribeRequest:
		m.describe(r, req)
	case *kmsg.JoinGroupRequest:
		m.classicJoin(r, req)
	case *kmsg.SyncGroupRequest:
		m.classicSync(r, req)
	case *kmsg.HeartbeatRequest:
		m.classicHeartbeat(r, req)
	case *kmsg.LeaveGroupRequest:
		m.classicLeave(r, req)
	default:
		panic(fmt.Sprintf("consumer: unsupported request %T", r.Msg))
	}
}

func (m *Machine) timer(k TimerKey) {
	g := m.groups[k.Group]
	if g == nil {
		return
	}
	mem := g.members[k.Member]
	if mem == nil || !m.due(g, mem, k.Kind) {
		return // cancelled, moved later, or early
	}
	switch k.Kind {
	case TimerSession:
		m.fence(g, mem, cause{trigger: triggerSessionTimeout, member: mem, releasedAt: mem.lastHeartbeat})
	case TimerRebalance:
		// The deadline belongs to the epoch it was set in; a member that
		// moved on (or left with -2) in the meantime is not fenced.
		if mem.epoch == mem.rebalanceEpoch {
			m.fence(g, mem, cause{trigger: triggerRebalanceTimeout, member: mem})
		}
	case TimerClassicJoin:
		m.fence(g, mem, cause{trigger: triggerRebalanceTimeout, member: mem})
	case TimerClassicSync:
		m.fence(g, mem, cause{trigger: inspect.TriggerPendingSyncTimeout, member: mem})
	}
}

func (m *Machine) unload() {
	for _, id := range m.Groups() {
		m.cancelGroupTimers(m.groups[id])
	}
	m.groups = map[string]*group{}
}

// GroupState returns a group's state and group epoch (Dead, -1 if unknown).
func (m *Machine) GroupState(id string) (State, int32) {
	g := m.groups[id]
	if g == nil {
		return Dead, -1
	}
	return g.state(), g.epoch
}

// Groups returns the ids of all groups, sorted.
func (m *Machine) Groups() []string {
	ids := make([]string, 0, len(m.groups))
	for id := range m.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
