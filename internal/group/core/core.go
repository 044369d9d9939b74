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
	// TimerHistory is due as soon as a classic group's rebalance has
	// ended: its step builds and keeps the rebalance's record, after the
	// replies that ended it are on their way.
	TimerHistory
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
	case TimerHistory:
		return "history"
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

// compareEntries is CompareTimerKeys for the entries a step changed, most
// of which, when there are many, are one group's keys of one kind: those
// compare by member alone.
func compareEntries(a, b *timerEntry) int {
	if a.key.Kind == b.key.Kind && a.key.Group == b.key.Group {
		return strings.Compare(a.key.Member, b.key.Member)
	}
	return CompareTimerKeys(a.key, b.key)
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
	// at holds an entry per key with a deadline, and per key cancelled
	// since the last Updates (live false), which that call reports and
	// drops. A key set, cancelled and set again within a step keeps its
	// one entry, so every key is reported once.
	at map[TimerKey]*timerEntry
	// dirty lists the entries changed since the last Updates, each once:
	// a step that reschedules every member of a large group notes each
	// with one map lookup, and no set of keys is built to report them.
	dirty []*timerEntry
	live  int
}

type timerEntry struct {
	key      TimerKey
	deadline time.Time
	live     bool // false: cancelled, to be reported and dropped
	dirty    bool // in Timers.dirty
}

func (t *Timers) noteDirty(e *timerEntry) {
	if !e.dirty {
		e.dirty = true
		t.dirty = append(t.dirty, e)
	}
}

// Set schedules k at the deadline, replacing any earlier one.
func (t *Timers) Set(k TimerKey, deadline time.Time) {
	e := t.at[k]
	if e == nil {
		if t.at == nil {
			t.at = map[TimerKey]*timerEntry{}
		}
		e = &timerEntry{key: k}
		t.at[k] = e
	}
	if !e.live {
		e.live = true
		t.live++
	}
	e.deadline = deadline
	t.noteDirty(e)
}

// Cancel removes k's deadline, if any.
func (t *Timers) Cancel(k TimerKey) {
	if e := t.at[k]; e != nil && e.live {
		t.cancel(e)
	}
}

func (t *Timers) cancel(e *timerEntry) {
	e.live = false
	e.deadline = time.Time{}
	t.live--
	t.noteDirty(e)
}

// CancelGroup removes every deadline of a group.
func (t *Timers) CancelGroup(group string) {
	for k, e := range t.at {
		if k.Group == group && e.live {
			t.cancel(e)
		}
	}
}

// CancelAll removes every deadline.
func (t *Timers) CancelAll() {
	for _, e := range t.at {
		if e.live {
			t.cancel(e)
		}
	}
}

// Get returns k's deadline.
func (t *Timers) Get(k TimerKey) (time.Time, bool) {
	if e := t.at[k]; e != nil && e.live {
		return e.deadline, true
	}
	return time.Time{}, false
}

// Due reports whether k has a deadline that is not after now, and if so
// removes it: a timer firing for a key that was cancelled or moved later
// is stale and ignored.
func (t *Timers) Due(k TimerKey, now time.Time) bool {
	e := t.at[k]
	if e == nil || !e.live || now.Before(e.deadline) {
		return false
	}
	t.cancel(e)
	return true
}

// Reset drops every deadline without reporting the changes, for a machine
// that is rebuilt from its records.
func (t *Timers) Reset() {
	t.at = nil
	clear(t.dirty)
	t.dirty, t.live = t.dirty[:0], 0
}

// Updates returns the changes since the last call, sorted by key, and
// starts noting afresh.
func (t *Timers) Updates() []TimerUpdate { return t.AppendUpdates(nil) }

// AppendUpdates is Updates appending to dst, so that a caller stepping
// many events can reuse one slice. With no changes it returns dst as is.
func (t *Timers) AppendUpdates(dst []TimerUpdate) []TimerUpdate {
	if len(t.dirty) == 0 {
		return dst
	}
	if len(t.dirty) > 1 {
		slices.SortFunc(t.dirty, compareEntries)
	}
	out := slices.Grow(dst, len(t.dirty))
	for _, e := range t.dirty {
		e.dirty = false
		if e.live {
			out = append(out, TimerUpdate{Key: e.key, Deadline: e.deadline})
		} else {
			out = append(out, TimerUpdate{Key: e.key, Cancel: true})
			delete(t.at, e.key)
		}
	}
	clear(t.dirty)
	t.dirty = t.dirty[:0]
	return out
}

// All returns every deadline, sorted by key.
func (t *Timers) All() []TimerUpdate {
	out := make([]TimerUpdate, 0, t.live)
	for k, e := range t.at {
		if e.live {
			out = append(out, TimerUpdate{Key: k, Deadline: e.deadline})
		}
	}
	SortTimerUpdates(out)
	return out
}

// Len is how many deadlines are set.
func (t *Timers) Len() int { return t.live }

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
