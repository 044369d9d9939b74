// Package core holds what the two group state machines share: package
// group (the classic protocol, and the machine a coordinator shard steps)
// and package group/consumer (KIP-848 consumer groups). That is the handle
// a request is stepped with and the reply that carries it back, keyed
// deadlines and their table, the primitives of the record encoding, and
// member-id generation. Package group re-exports the types, so the
// coordinator runtime sees one set whichever machine serves a group.
//
// Like the machines, nothing here reads a clock, starts a goroutine or
// depends on map iteration order.
package core

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// RequestID is an opaque handle the caller attaches to each request; the
// reply, possibly released by a later step, carries it back.
type RequestID uint64

// Reply answers a request. Msg is the kmsg response with Version set to the
// request's version.
type Reply struct {
	ID  RequestID
	Msg kmsg.Response
}

// TimerKind names what a deadline is for. The kinds of both machines share
// one numbering, so a key names its machine too.
type TimerKind uint8

// Timer kinds, after Kafka's keyed timers.
const (
	// TimerHeartbeat is a classic member's session (or new-member join)
	// deadline.
	TimerHeartbeat TimerKind = iota
	// TimerPending is the deadline for a classic KIP-394 pending member
	// to rejoin with its assigned id.
	TimerPending
	// TimerJoin completes a classic join phase (rebalance timeout) or
	// ends one step of the initial rebalance delay.
	TimerJoin
	// TimerSync removes classic members that did not send SyncGroup
	// (KAFKA-12890).
	TimerSync
	// TimerSession fences a consumer-group member that stopped
	// heartbeating. It is also the rejoin window of a static member that
	// left with epoch -2.
	TimerSession
	// TimerRebalance fences a consumer-group member that did not revoke
	// the partitions it was asked to give up within its rebalance
	// timeout.
	TimerRebalance
	// TimerClassicJoin fences a classic member of a consumer group that
	// was told to rejoin and did not send JoinGroup within its rebalance
	// timeout.
	TimerClassicJoin
	// TimerClassicSync fences a classic member of a consumer group that
	// did not send SyncGroup within its rebalance timeout after joining.
	TimerClassicSync
)

func (k TimerKind) String() string {
	switch k {
	case TimerHeartbeat:
		return "heartbeat"
	case TimerPending:
		return "pending"
	case TimerJoin:
		return "join"
	case TimerSync:
		return "sync"
	case TimerSession:
		return "session"
	case TimerRebalance:
		return "rebalance"
	case TimerClassicJoin:
		return "classic-join"
	case TimerClassicSync:
		return "classic-sync"
	}
	return fmt.Sprintf("TimerKind(%d)", uint8(k))
}

// Consumer reports whether the kind belongs to the consumer-group machine.
func (k TimerKind) Consumer() bool { return k >= TimerSession && k <= TimerClassicSync }

// TimerKey identifies a deadline. It is comparable, so a caller can keep it
// as a map key; scheduling a key again replaces its deadline.
type TimerKey struct {
	Group  string
	Kind   TimerKind
	Member string // empty for the group-wide classic join and sync timers
}

func (k TimerKey) String() string {
	if k.Member != "" {
		return fmt.Sprintf("%s/%s-%s", k.Group, k.Kind, k.Member)
	}
	return fmt.Sprintf("%s/%s", k.Group, k.Kind)
}

// CompareTimerKeys orders keys by group, kind and member: a total order,
// so keys due together are handled in the same order on every run.
func CompareTimerKeys(a, b TimerKey) int {
	if c := strings.Compare(a.Group, b.Group); c != 0 {
		return c
	}
	if a.Kind != b.Kind {
		return int(a.Kind) - int(b.Kind)
	}
	return strings.Compare(a.Member, b.Member)
}

// SortTimerKeys sorts keys by CompareTimerKeys.
func SortTimerKeys(keys []TimerKey) { slices.SortFunc(keys, CompareTimerKeys) }

// TimerUpdate sets (Cancel false) or removes (Cancel true) a deadline.
type TimerUpdate struct {
	Key      TimerKey
	Deadline time.Time
	Cancel   bool
}

// SortTimerUpdates sorts updates by key.
func SortTimerUpdates(us []TimerUpdate) {
	slices.SortFunc(us, func(a, b TimerUpdate) int { return CompareTimerKeys(a.Key, b.Key) })
}

// Timers is a machine's table of deadlines, which also notes the keys a
// step changed so that the step can report them. The zero value is ready
// to use.
type Timers struct {
	at map[TimerKey]time.Time
	// The keys changed since the last Updates. Most steps change one or
	// two (a heartbeat, a commit none), so they are kept in a short list,
	// each with its latest change so that Updates need not look it up
	// again, and moved to a set only when a step touches many (a join
	// phase completing reschedules every member).
	dirtyList []TimerUpdate
	dirty     map[TimerKey]bool
}

// dirtyListMax is how many keys the list holds before they move to the set.
const dirtyListMax = 8

// markDirty notes u, k's latest change.
func (t *Timers) markDirty(u TimerUpdate) {
	if t.dirty != nil {
		t.dirty[u.Key] = true
		return
	}
	for i := range t.dirtyList {
		if t.dirtyList[i].Key == u.Key {
			t.dirtyList[i] = u
			return
		}
	}
	if len(t.dirtyList) < dirtyListMax {
		t.dirtyList = append(t.dirtyList, u)
		return
	}
	t.dirty = make(map[TimerKey]bool, 2*dirtyListMax)
	for _, d := range t.dirtyList {
		t.dirty[d.Key] = true
	}
	t.dirty[u.Key] = true
	clear(t.dirtyList)
	t.dirtyList = t.dirtyList[:0]
}

// Set schedules k at the deadline, replacing any earlier one.
func (t *Timers) Set(k TimerKey, deadline time.Time) {
	if t.at == nil {
		t.at = map[TimerKey]time.Time{}
	}
	t.at[k] = deadline
	t.markDirty(TimerUpdate{Key: k, Deadline: deadline})
}

// Cancel removes k's deadline, if any.
func (t *Timers) Cancel(k TimerKey) {
	if _, ok := t.at[k]; ok {
		delete(t.at, k)
		t.markDirty(TimerUpdate{Key: k, Cancel: true})
	}
}

// CancelGroup removes every deadline of a group.
func (t *Timers) CancelGroup(group string) {
	for k := range t.at {
		if k.Group == group {
			t.Cancel(k)
		}
	}
}

// CancelAll removes every deadline.
func (t *Timers) CancelAll() {
	for k := range t.at {
		t.Cancel(k)
	}
}

// Get returns k's deadline.
func (t *Timers) Get(k TimerKey) (time.Time, bool) {
	d, ok := t.at[k]
	return d, ok
}

// Due reports whether k has a deadline that is not after now, and if so
// removes it: a timer firing for a key that was cancelled or moved later
// is stale and ignored.
func (t *Timers) Due(k TimerKey, now time.Time) bool {
	d, ok := t.at[k]
	if !ok || now.Before(d) {
		return false
	}
	t.Cancel(k)
	return true
}

// Reset drops every deadline without reporting the changes, for a machine
// that is rebuilt from its records.
func (t *Timers) Reset() {
	t.at = nil
	clear(t.dirtyList)
	t.dirty, t.dirtyList = nil, t.dirtyList[:0]
}

// Updates returns the changes since the last call, sorted by key, and
// starts noting afresh.
func (t *Timers) Updates() []TimerUpdate { return t.AppendUpdates(nil) }

// AppendUpdates is Updates appending to dst, so that a caller stepping
// many events can reuse one slice. With no changes it returns dst as is.
func (t *Timers) AppendUpdates(dst []TimerUpdate) []TimerUpdate {
	out := dst
	if t.dirty == nil {
		if len(t.dirtyList) > 0 {
			start := len(out)
			out = append(out, t.dirtyList...)
			SortTimerUpdates(out[start:])
		}
		clear(t.dirtyList)
		t.dirtyList = t.dirtyList[:0]
		return out
	}
	keys := make([]TimerKey, 0, len(t.dirty))
	for k := range t.dirty {
		keys = append(keys, k)
	}
	SortTimerKeys(keys)
	out = slices.Grow(out, len(keys))
	for _, k := range keys {
		if d, ok := t.at[k]; ok {
			out = append(out, TimerUpdate{Key: k, Deadline: d})
		} else {
			out = append(out, TimerUpdate{Key: k, Cancel: true})
		}
	}
	t.dirty = nil
	return out
}

// All returns every deadline, sorted by key.
func (t *Timers) All() []TimerUpdate {
	keys := make([]TimerKey, 0, len(t.at))
	for k := range t.at {
		keys = append(keys, k)
	}
	SortTimerKeys(keys)
	out := make([]TimerUpdate, len(keys))
	for i, k := range keys {
		out[i] = TimerUpdate{Key: k, Deadline: t.at[k]}
	}
	return out
}

// Len is how many deadlines are set.
func (t *Timers) Len() int { return len(t.at) }

// LeaveMembers returns the members a LeaveGroup names: its list from v3,
// the single member id of earlier versions.
func LeaveMembers(req *kmsg.LeaveGroupRequest) []kmsg.LeaveGroupRequestMember {
	if req.Version >= 3 {
		return req.Members
	}
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID = req.MemberID
	return []kmsg.LeaveGroupRequestMember{lm}
}
