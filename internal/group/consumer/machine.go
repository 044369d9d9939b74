package consumer

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// RequestID is an opaque handle the caller attaches to each request; the
// reply carries it back.
type RequestID uint64

// Event is an input to Step: a Request, a Timer firing, TopicsChanged or
// Unload.
type Event interface{ isEvent() }

// Request is a client request. Msg is a *kmsg.ConsumerGroupHeartbeatRequest
// or a *kmsg.ConsumerGroupDescribeRequest with its Version set. A describe
// must only name groups this machine owns; the caller splits and merges
// across shards.
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

// Unload drops all groups and deadlines, for when the shard moves away.
type Unload struct{}

func (Request) isEvent()       {}
func (Timer) isEvent()         {}
func (TopicsChanged) isEvent() {}
func (Unload) isEvent()        {}

// TimerKind names what a deadline is for.
type TimerKind uint8

// Timer kinds, after Kafka's keyed timers.
const (
	// TimerSession fences a member that stopped heartbeating. It is also
	// the rejoin window of a static member that left with epoch -2: like
	// Kafka, the leave does not move it.
	TimerSession TimerKind = iota
	// TimerRebalance fences a member that did not revoke the partitions
	// it was asked to give up within its rebalance timeout.
	TimerRebalance
)

func (k TimerKind) String() string {
	switch k {
	case TimerSession:
		return "session"
	case TimerRebalance:
		return "rebalance"
	}
	return fmt.Sprintf("TimerKind(%d)", uint8(k))
}

// TimerKey identifies a deadline; scheduling a key again replaces it.
type TimerKey struct {
	Group  string
	Kind   TimerKind
	Member string
}

func (k TimerKey) String() string { return fmt.Sprintf("%s/%s-%s", k.Group, k.Kind, k.Member) }

// TimerUpdate sets (Cancel false) or removes (Cancel true) a deadline.
type TimerUpdate struct {
	Key      TimerKey
	Deadline time.Time
	Cancel   bool
}

// Reply answers a request. Msg is the kmsg response with the request's
// version.
type Reply struct {
	ID  RequestID
	Msg kmsg.Response
}

// Output is everything one Step produced. Replies must not be released
// before Records (and the records of every earlier Output) are durable.
type Output struct {
	Records []Record
	Replies []Reply
	Timers  []TimerUpdate
}

// Machine is the consumer-group state machine of one shard. The zero value
// is not usable; call New.
type Machine struct {
	cfg    Config
	groups map[string]*group
	timers map[TimerKey]time.Time
	topics topicImage

	// per-step scratch
	now time.Time
	out Output
	// The keys whose deadline this step changed: a heartbeat changes one
	// or two, so a short list; a step touching many (a load, an unload)
	// moves them to a set.
	dirtyList []TimerKey
	dirty     map[TimerKey]bool
	touched   []*group
	replaying bool
	pending   cause // why the next epoch bump of this step happens
}

// New returns an empty machine that knows no topics yet.
func New(cfg Config) *Machine {
	return &Machine{
		cfg:    cfg.withDefaults(),
		groups: map[string]*group{},
		timers: map[TimerKey]time.Time{},
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
	case Unload:
		m.unload()
	default:
		panic(fmt.Sprintf("consumer: unknown event %T", ev))
	}
	return m.end()
}

func (m *Machine) begin(now time.Time) {
	m.now = now
	m.out = Output{}
	m.dirty, m.dirtyList = nil, m.dirtyList[:0]
	m.touched = m.touched[:0]
	m.pending = cause{}
}

func (m *Machine) end() Output {
	for _, g := range m.touched {
		m.maybeCloseRebalance(g)
	}
	keys := m.dirtyList
	if m.dirty != nil {
		keys = make([]TimerKey, 0, len(m.dirty))
		for k := range m.dirty {
			keys = append(keys, k)
		}
	}
	if len(keys) > 0 {
		sortTimerKeys(keys)
		m.out.Timers = make([]TimerUpdate, 0, len(keys))
		for _, k := range keys {
			if d, ok := m.timers[k]; ok {
				m.out.Timers = append(m.out.Timers, TimerUpdate{Key: k, Deadline: d})
			} else {
				m.out.Timers = append(m.out.Timers, TimerUpdate{Key: k, Cancel: true})
			}
		}
	}
	out := m.out
	m.out, m.dirty, m.dirtyList = Output{}, nil, m.dirtyList[:0]
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

// sortTimerKeys orders keys by group, kind and member; keys are distinct so
// the order is total.
func sortTimerKeys(keys []TimerKey) {
	slices.SortFunc(keys, func(a, b TimerKey) int {
		if c := strings.Compare(a.Group, b.Group); c != 0 {
			return c
		}
		if a.Kind != b.Kind {
			return int(a.Kind) - int(b.Kind)
		}
		return strings.Compare(a.Member, b.Member)
	})
}

// dirtyListMax is how many keys the list holds before they move to the set.
const dirtyListMax = 8

func (m *Machine) markDirty(k TimerKey) {
	if m.dirty != nil {
		m.dirty[k] = true
		return
	}
	for _, d := range m.dirtyList {
		if d == k {
			return
		}
	}
	if len(m.dirtyList) < dirtyListMax {
		m.dirtyList = append(m.dirtyList, k)
		return
	}
	m.dirty = make(map[TimerKey]bool, 2*dirtyListMax)
	for _, d := range m.dirtyList {
		m.dirty[d] = true
	}
	m.dirty[k] = true
}

func (m *Machine) schedule(k TimerKey, d time.Duration) {
	m.timers[k] = m.now.Add(d)
	m.markDirty(k)
}

func (m *Machine) cancel(k TimerKey) {
	if _, ok := m.timers[k]; ok {
		delete(m.timers, k)
		m.markDirty(k)
	}
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

// Deadlines returns all scheduled deadlines sorted by key, so a runtime that
// lost its timer table (or a test) can rebuild it.
func (m *Machine) Deadlines() []TimerUpdate {
	keys := make([]TimerKey, 0, len(m.timers))
	for k := range m.timers {
		keys = append(keys, k)
	}
	sortTimerKeys(keys)
	out := make([]TimerUpdate, len(keys))
	for i, k := range keys {
		out[i] = TimerUpdate{Key: k, Deadline: m.timers[k]}
	}
	return out
}

func (m *Machine) request(r Request) {
	switch req := r.Msg.(type) {
	case *kmsg.ConsumerGroupHeartbeatRequest:
		m.heartbeat(r, req)
	case *kmsg.ConsumerGroupDescribeRequest:
		m.describe(r, req)
	default:
		panic(fmt.Sprintf("consumer: unsupported request %T", r.Msg))
	}
}

func (m *Machine) timer(k TimerKey) {
	d, ok := m.timers[k]
	if !ok || m.now.Before(d) {
		return // cancelled, moved later, or early
	}
	delete(m.timers, k)
	m.markDirty(k)
	g := m.groups[k.Group]
	if g == nil {
		return
	}
	mem := g.members[k.Member]
	if mem == nil {
		return
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
	}
}

func (m *Machine) unload() {
	m.groups = map[string]*group{}
	for k := range m.timers {
		m.cancel(k)
	}
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
