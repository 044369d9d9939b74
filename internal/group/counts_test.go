package group

import "fmt"

// checkCounts recomputes every group's running counts from its members and
// panics if they drifted: a missed update would change protocol selection
// or when a join phase completes, silently.
func (m *Machine) checkCounts() {
	for _, id := range m.Groups() {
		g := m.groups[id]
		supporters := map[string]int{}
		awaiting := 0
		for _, mem := range g.sortedMembers() {
			seen := map[string]bool{}
			for _, p := range mem.protocols {
				if !seen[p.name] {
					seen[p.name] = true
					supporters[p.name]++
				}
			}
			if mem.join != nil {
				awaiting++
			}
		}
		order := g.sortedMembers()
		if len(order) != len(g.members) {
			panic(fmt.Sprintf("group %s: %d members in join order, %d members", id, len(order), len(g.members)))
		}
		for i, mem := range order {
			if g.members[mem.id] != mem || mem.gone || (i > 0 && order[i-1].seq >= mem.seq) {
				panic(fmt.Sprintf("group %s: join order %d (%s) is not a member in order", id, i, mem.id))
			}
		}
		if awaiting != g.awaiting {
			panic(fmt.Sprintf("group %s: %d members awaiting join, counted %d", id, awaiting, g.awaiting))
		}
		if len(supporters) != len(g.supporters) {
			panic(fmt.Sprintf("group %s: supporters %v, counted %v", id, supporters, g.supporters))
		}
		for name, n := range supporters {
			if g.supporters[name] != n {
				panic(fmt.Sprintf("group %s: supporters %v, counted %v", id, supporters, g.supporters))
			}
		}
	}
}
