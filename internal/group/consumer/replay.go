package consumer

import (
	"fmt"
	"time"
)

// Replay discards the machine's groups and rebuilds them from records, in
// log order or in store key order: a later record for a key replaces an
// earlier one and a tombstone deletes it, so any order of the latest values
// gives the same state. The topics the machine knows (from TopicsChanged)
// resolve regular expressions; send TopicsChanged again after Replay so
// that a group whose topics changed while it was not loaded gets a new
// epoch.
//
// Like Kafka's onLoaded, every member gets a fresh session deadline from
// now, and a member that was revoking partitions a fresh rebalance
// deadline; the returned Output holds them. A group that was rebalancing
// (not Stable) has its rebalance recorded on from now, as triggered by the
// load (coordinator-loaded). Records that contradict each
// other (a partition held by two members) are an error naming the record,
// and leave the machine without groups.
func (m *Machine) Replay(now time.Time, recs []Record) (Output, error) {
	m.begin(now)
	m.groups = map[string]*group{}
	m.timerNotes = nil
	m.replaying = true
	for i, r := range recs {
		if err := m.apply(r); err != nil {
			m.replaying = false
			m.groups = map[string]*group{}
			m.begin(now)
			return Output{}, fmt.Errorf("consumer: record %d (%s %q/%q): %w", i, r.Type, r.Group, r.Member, err)
		}
	}
	m.replaying = false
	for _, id := range m.Groups() {
		g := m.groups[id]
		if s := g.state(); s == Assigning || s == Reconciling {
			// The rebalance that was in progress goes on being
			// recorded from here: what happened before the load is
			// not known.
			m.setCause(cause{trigger: m.cfg.LoadTrigger})
			m.openRebalance(g, g.epoch)
		}
		for _, mem := range g.sortedMembers() {
			mem.lastHeartbeat = now
			m.schedule(g, mem, TimerSession, m.sessionTimeout(mem))
			if mem.state == MemberUnrevokedPartitions {
				mem.rebalanceEpoch = mem.epoch
				m.schedule(g, mem, TimerRebalance,
					time.Duration(max(mem.meta.rebalanceTimeout, 0))*time.Millisecond)
			}
		}
	}
	return m.end(), nil
}
