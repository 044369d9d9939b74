package group

import (
	"fmt"
	"sort"
	"time"
)

// Trigger says why a rebalance started.
type Trigger uint8

// Rebalance triggers.
const (
	TriggerNewMember Trigger = iota
	TriggerMemberLeave
	TriggerSessionTimeout
	TriggerPendingSyncTimeout
	TriggerMetadataChange
	TriggerLeaderRejoin
	TriggerStaticMemberRejoin
	TriggerOversized
)

var triggerNames = [...]string{
	TriggerNewMember:          "new-member",
	TriggerMemberLeave:        "member-leave",
	TriggerSessionTimeout:     "session-timeout",
	TriggerPendingSyncTimeout: "pending-sync-timeout",
	TriggerMetadataChange:     "metadata-change",
	TriggerLeaderRejoin:       "leader-rejoin",
	TriggerStaticMemberRejoin: "static-member-rejoin",
	TriggerOversized:          "oversized",
}

func (t Trigger) String() string {
	if int(t) < len(triggerNames) {
		return triggerNames[t]
	}
	return fmt.Sprintf("Trigger(%d)", uint8(t))
}

// Rebalance is one entry of a group's rebalance history: why it started, who
// came and went, and how long it took.
type Rebalance struct {
	// Generation is the generation the join phase produced (0 while the
	// rebalance is still preparing).
	Generation int32
	Trigger    Trigger
	// Member is the member whose action triggered the rebalance.
	Member string
	Start  time.Time
	End    time.Time // zero while in progress
	// Joined and Left compare the member ids at the start and the end.
	Joined []string
	Left   []string
	// TimedOut are dynamic members removed because they did not rejoin
	// within the rebalance timeout.
	TimedOut []string
	// Outcome is "stable", "empty", "restarted" (a new rebalance began
	// before this one reached Stable) or "" while in progress.
	Outcome string
}

type reason struct {
	trigger Trigger
	member  string
	// removed are members dropped just before the rebalance opened (a
	// leave, an expiry); they count as members at its start.
	removed []string
}

func (m *Machine) openRebalance(g *group, r reason) {
	if g.current != nil {
		m.closeRebalance(g, "restarted")
	}
	g.current = &Rebalance{Trigger: r.trigger, Member: r.member, Start: m.now}
	g.startMembers = map[string]bool{}
	for id := range g.members {
		g.startMembers[id] = true
	}
	for _, id := range r.removed {
		g.startMembers[id] = true
	}
	if r.trigger == TriggerNewMember || r.trigger == TriggerStaticMemberRejoin {
		// The newcomer was added just before the rebalance opened.
		delete(g.startMembers, r.member)
	}
}

func (m *Machine) closeRebalance(g *group, outcome string) {
	c := g.current
	if c == nil {
		return
	}
	c.End = m.now
	c.Outcome = outcome
	c.Generation = g.generation
	for id := range g.members {
		if !g.startMembers[id] {
			c.Joined = append(c.Joined, id)
		}
	}
	for id := range g.startMembers {
		if _, ok := g.members[id]; !ok {
			c.Left = append(c.Left, id)
		}
	}
	sort.Strings(c.Joined)
	sort.Strings(c.Left)
	g.history = append(g.history, *c)
	if over := len(g.history) - m.cfg.HistorySize; over > 0 {
		g.history = append([]Rebalance(nil), g.history[over:]...)
	}
	g.current, g.startMembers = nil, nil
}

// History returns a group's finished rebalances, oldest first, followed by
// the one in progress if any.
func (m *Machine) History(groupID string) []Rebalance {
	g := m.groups[groupID]
	if g == nil {
		return nil
	}
	out := append([]Rebalance(nil), g.history...)
	if g.current != nil {
		out = append(out, *g.current)
	}
	return out
}
