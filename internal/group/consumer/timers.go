package consumer

import (
	"slices"
	"time"

	"github.com/groupd/groupd/internal/group/core"
)

// The machine's deadlines. Every consumer timer belongs to a member (its
// session, its rebalance, its classic join and sync), so each member keeps
// its own: a heartbeat moving its session deadline writes to the member it
// already holds instead of hashing a key of two strings into a table, which
// in a large group is a cache miss per heartbeat. A step notes the members
// whose deadlines changed and reports them, sorted by key, as a keyed table
// would.

// numTimerKinds is the number of consumer timer kinds, TimerSession to
// TimerClassicSync.
const numTimerKinds = int(TimerClassicSync-TimerSession) + 1

// memberTimers are one member's deadlines by kind.
type memberTimers struct {
	at    [numTimerKinds]time.Time
	armed uint8 // a bit per kind with a deadline
	dirty uint8 // a bit per kind changed in this step (see timerNote)
}

// timerNote is a member whose deadlines changed in this step, with its
// group's id.
type timerNote struct {
	group string
	mem   *member
}

func timerBit(k TimerKind) uint8 { return 1 << (k - TimerSession) }

func validKind(k TimerKind) bool { return k >= TimerSession && k <= TimerClassicSync }

// schedule sets a member's deadline of a kind d from now, replacing any
// earlier one.
func (m *Machine) schedule(g *group, mem *member, k TimerKind, d time.Duration) {
	t := &mem.timers
	t.at[k-TimerSession] = m.now.Add(d)
	t.armed |= timerBit(k)
	m.timerChanged(g.id, mem, k)
}

// cancel removes a member's deadline of a kind, if any.
func (m *Machine) cancel(g *group, mem *member, k TimerKind) {
	m.cancelTimer(g.id, mem, k)
}

func (m *Machine) cancelTimer(groupID string, mem *member, k TimerKind) {
	t := &mem.timers
	if t.armed&timerBit(k) == 0 {
		return
	}
	t.armed &^= timerBit(k)
	t.at[k-TimerSession] = time.Time{}
	m.timerChanged(groupID, mem, k)
}

// cancelMemberTimers cancels every deadline of a member.
func (m *Machine) cancelMemberTimers(g *group, mem *member) {
	cancelAllOf(m, g.id, mem)
}

func cancelAllOf(m *Machine, groupID string, mem *member) {
	for k := TimerSession; k <= TimerClassicSync; k++ {
		m.cancelTimer(groupID, mem, k)
	}
}

// armed reports whether a member has a deadline of a kind.
func (mem *member) armed(k TimerKind) bool { return mem.timers.armed&timerBit(k) != 0 }

func (m *Machine) timerChanged(groupID string, mem *member, k TimerKind) {
	if mem.timers.dirty == 0 {
		m.timerNotes = append(m.timerNotes, timerNote{group: groupID, mem: mem})
	}
	mem.timers.dirty |= timerBit(k)
}

// due reports whether a member's deadline of a kind has passed, and if so
// removes it: a firing for a deadline that was cancelled or moved later is
// stale and ignored.
func (m *Machine) due(g *group, mem *member, k TimerKind) bool {
	if !validKind(k) || !mem.armed(k) || m.now.Before(mem.timers.at[k-TimerSession]) {
		return false
	}
	m.cancel(g, mem, k)
	return true
}

// cancelGroupTimers removes every deadline of a group's members.
func (m *Machine) cancelGroupTimers(g *group) {
	for _, mem := range g.sortedMembers() {
		m.cancelMemberTimers(g, mem)
	}
}

// appendTimerUpdates appends the deadlines changed in this step, sorted by
// key, one per key, to dst, and starts noting afresh.
func (m *Machine) appendTimerUpdates(dst []TimerUpdate) []TimerUpdate {
	if len(m.timerNotes) == 0 {
		return dst
	}
	start := len(dst)
	for _, n := range m.timerNotes {
		t := &n.mem.timers
		for k := TimerSession; k <= TimerClassicSync; k++ {
			if t.dirty&timerBit(k) == 0 {
				continue
			}
			key := TimerKey{Group: n.group, Kind: k, Member: n.mem.id}
			if t.armed&timerBit(k) != 0 {
				dst = append(dst, TimerUpdate{Key: key, Deadline: t.at[k-TimerSession]})
			} else {
				dst = append(dst, TimerUpdate{Key: key, Cancel: true})
			}
		}
		t.dirty = 0
	}
	clear(m.timerNotes)
	m.timerNotes = m.timerNotes[:0]
	out := dst[start:]
	if len(out) > 1 {
		// A member removed and added again under its id in one step
		// has two entries for each key it had: the later one is the
		// key's state.
		slices.SortStableFunc(out, func(a, b TimerUpdate) int { return core.CompareTimerKeys(a.Key, b.Key) })
		w := 0
		for i := range out {
			if i+1 < len(out) && out[i+1].Key == out[i].Key {
				continue
			}
			out[w] = out[i]
			w++
		}
		clear(out[w:])
		dst = dst[:start+w]
	}
	return dst
}

// Deadlines returns all scheduled deadlines sorted by key, so a runtime that
// lost its timer table (or a test) can rebuild it.
func (m *Machine) Deadlines() []TimerUpdate {
	var out []TimerUpdate
	for _, id := range m.Groups() {
		for _, mem := range m.groups[id].members {
			for k := TimerSession; k <= TimerClassicSync; k++ {
				if mem.armed(k) {
					out = append(out, TimerUpdate{Key: TimerKey{Group: id, Kind: k, Member: mem.id}, Deadline: mem.timers.at[k-TimerSession]})
				}
			}
		}
	}
	core.SortTimerUpdates(out)
	return out
}
