package consumer

import (
	"fmt"
	"slices"
	"strings"
)

// dump renders everything the records determine, derived indexes included,
// in a canonical order. Two machines with equal dumps hold the same groups;
// soft state (deadlines, rebalance history, last heartbeats) is left out
// because records do not carry it.
func (m *Machine) dump(name func(TopicID) string) string {
	var b strings.Builder
	for _, id := range m.Groups() {
		g := m.groups[id]
		fmt.Fprintf(&b, "group %s state=%s epoch=%d assignment-epoch=%d hash=%016x unreconciled=%d\n",
			id, g.state(), g.epoch, g.assignmentEpoch, g.metadataHash, g.unreconciled)
		for _, mem := range g.sortedMembers() {
			fmt.Fprintf(&b, "  member %s meta=%v current=%v epoch=%d prev=%d state=%s assigned=%s pending=%s\n",
				mem.id, mem.hasMeta, mem.hasCurrent, mem.epoch, mem.prevEpoch, mem.state,
				fmtParts(mem.assigned, name), fmtParts(mem.pending, name))
			fmt.Fprintf(&b, "    %s\n", fmtMeta(&mem.meta))
		}
		for _, mid := range sortedKeys(g.target) {
			fmt.Fprintf(&b, "  target %s %s\n", mid, fmtParts(g.target[mid], name))
		}
		owners := make([]string, 0, len(g.owners))
		for k, o := range g.owners {
			owners = append(owners, fmt.Sprintf("%s-%d=%s", name(k.id), k.p, o))
		}
		slices.Sort(owners)
		fmt.Fprintf(&b, "  owners %v\n", owners)
		fmt.Fprintf(&b, "  names %v\n", fmtCounts(g.names))
		fmt.Fprintf(&b, "  assignors %v\n", fmtCounts(g.assignors))
		for _, re := range sortedKeys(g.regexes) {
			rs := g.regexes[re]
			fmt.Fprintf(&b, "  regex %q count=%d compiled=%v topics=%v\n", re, rs.count, rs.re != nil, rs.topics)
		}
		for _, inst := range sortedKeys(g.static) {
			fmt.Fprintf(&b, "  static %s=%s\n", inst, g.static[inst])
		}
	}
	return b.String()
}

func fmtCounts(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func fmtMeta(v *memberMeta) string {
	return fmt.Sprintf("instance=%q rack=%q client=%s host=%s topics=%v regex=%q rebalance=%d assignor=%q",
		v.instanceID, v.rackID, v.clientID, v.clientHost, v.names, v.regex, v.rebalanceTimeout, v.serverAssignor)
}

// fmtParts prints a partition set as a[0 1]+b[2]; with epochs,
// a[0@1 1@3].
func fmtParts(s partSet, name func(TopicID) string) string {
	if len(s) == 0 {
		return "-"
	}
	type named struct {
		name string
		tp   topicParts
	}
	ns := make([]named, len(s))
	for i, t := range s {
		ns[i] = named{name(t.id), t}
	}
	slices.SortFunc(ns, func(a, b named) int { return strings.Compare(a.name, b.name) })
	var parts []string
	for _, n := range ns {
		var ps []string
		for i, p := range n.tp.parts {
			if n.tp.epochs != nil {
				ps = append(ps, fmt.Sprintf("%d@%d", p, n.tp.epochs[i]))
			} else {
				ps = append(ps, fmt.Sprint(p))
			}
		}
		parts = append(parts, n.name+"["+strings.Join(ps, " ")+"]")
	}
	return strings.Join(parts, "+")
}

// checkInvariants verifies the machine's own bookkeeping: the ownership
// index is exactly the union of the members' assigned and pending
// partitions, no partition has two holders, counts match the members, and
// the group state agrees with a full scan.
func (m *Machine) checkInvariants() error {
	for _, id := range m.Groups() {
		g := m.groups[id]
		seen := map[tp]string{}
		names, assignors, regexes, static := map[string]int{}, map[string]int{}, map[string]int{}, map[string]string{}
		unreconciled := 0
		var classic ClassicMemberMetadata // every classic member's protocols, for the counts
		classicMembers := 0
		for _, mem := range g.sortedMembers() {
			if !mem.reconciledTo(g.assignmentEpoch) {
				unreconciled++
			}
			var err error
			for _, s := range []partSet{mem.assigned, mem.pending} {
				if err := checkCanonical(s, true); err != nil {
					return fmt.Errorf("group %s member %s: %v", id, mem.id, err)
				}
				s.each(func(tid TopicID, p, _ int32) {
					k := tp{tid, p}
					if other, dup := seen[k]; dup && err == nil {
						err = fmt.Errorf("group %s: %s-%d held by %s and %s", id, tid, p, other, mem.id)
					}
					seen[k] = mem.id
					if o := g.owners[k]; o != mem.id && err == nil {
						err = fmt.Errorf("group %s: index has %s-%d at %q, member %s holds it", id, tid, p, o, mem.id)
					}
				})
			}
			if err != nil {
				return err
			}
			if mem.hasMeta {
				for _, n := range mem.meta.names {
					names[n]++
				}
				if mem.meta.serverAssignor != "" {
					assignors[mem.meta.serverAssignor]++
				}
				if mem.meta.regex != "" {
					regexes[mem.meta.regex]++
				}
				if mem.meta.instanceID != "" {
					static[mem.meta.instanceID] = mem.id
				}
				if c := mem.meta.classic; c != nil {
					classicMembers++
					classic.SupportedProtocols = append(classic.SupportedProtocols, c.SupportedProtocols...)
				}
			}
		}
		if classicMembers != g.classicMembers {
			return fmt.Errorf("group %s: %d classic members, count says %d", id, classicMembers, g.classicMembers)
		}
		for name, n := range g.classicProtocols {
			if n <= 0 || n > classicMembers {
				return fmt.Errorf("group %s: classic protocol %s counted %d", id, name, n)
			}
		}
		for _, p := range classic.SupportedProtocols {
			if g.classicProtocols[p.Name] == 0 {
				return fmt.Errorf("group %s: classic protocol %s not counted", id, p.Name)
			}
		}
		if len(seen) != len(g.owners) {
			return fmt.Errorf("group %s: index has %d partitions, members hold %d", id, len(g.owners), len(seen))
		}
		if unreconciled != g.unreconciled {
			return fmt.Errorf("group %s: unreconciled count %d, scan says %d", id, g.unreconciled, unreconciled)
		}
		if fmtCounts(names) != fmtCounts(g.names) || fmtCounts(assignors) != fmtCounts(g.assignors) {
			return fmt.Errorf("group %s: subscription counts drifted", id)
		}
		if len(regexes) != len(g.regexes) {
			return fmt.Errorf("group %s: %d regexes, members use %d", id, len(g.regexes), len(regexes))
		}
		for re, n := range regexes {
			if rs := g.regexes[re]; rs == nil || rs.count != n {
				return fmt.Errorf("group %s: regex %q count drifted", id, re)
			}
		}
		if fmt.Sprint(static) != fmt.Sprint(g.static) {
			return fmt.Errorf("group %s: static map %v, members say %v", id, g.static, static)
		}
		for mid, s := range g.target {
			if err := checkCanonical(s, false); err != nil {
				return fmt.Errorf("group %s target %s: %v", id, mid, err)
			}
		}
	}
	return nil
}

func checkCanonical(s partSet, epochs bool) error {
	for i, t := range s {
		if i > 0 && compareIDs(s[i-1].id, t.id) >= 0 {
			return fmt.Errorf("topics out of order")
		}
		if len(t.parts) == 0 {
			return fmt.Errorf("empty topic")
		}
		if !slices.IsSorted(t.parts) || len(slices.Compact(slices.Clone(t.parts))) != len(t.parts) {
			return fmt.Errorf("partitions not ascending: %v", t.parts)
		}
		if epochs != (t.epochs != nil) || (epochs && len(t.epochs) != len(t.parts)) {
			return fmt.Errorf("epochs %v for partitions %v", t.epochs, t.parts)
		}
	}
	return nil
}
