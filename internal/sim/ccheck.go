package sim

import (
	"maps"
	"slices"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/inspect"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The checkers of consumer (KIP-848) groups.
const (
	// No partition is held by two members: on the coordinator's books
	// (assigned and pending revocation, after every step), and among the
	// clients (when a member takes a partition, no other process that is
	// still a member owns it).
	ckCOwned = "consumer-owned-disjoint"
	// Group epochs move up by one, target epochs never go back, a
	// member's epoch never goes back (except to -2, a static member
	// leaving for now), and no member ever sees its epoch go back, also
	// across coordinator crashes.
	ckCEpoch = "consumer-epoch-monotonic"
	// A restarted coordinator holds exactly what was durable: group and
	// target epochs, members, their epochs and assignments.
	ckCRestore = "consumer-restart-restores"
	// What the coordinator hands out names topics that exist.
	ckCAssign = "consumer-assignment"
)

// ckey names one record of a consumer group.
type ckey struct {
	typ    consumer.RecordType
	member string
}

// cbook is a consumer group's records by key: the latest value of each.
type cbook map[ckey]consumer.Record

func (b cbook) apply(r consumer.Record) {
	k := ckey{r.Type, r.Member}
	if r.Tombstone() {
		delete(b, k)
		return
	}
	b[k] = r
}

func (b cbook) groupEpoch() (int32, bool) {
	r, ok := b[ckey{typ: consumer.RecordGroupEpoch}]
	if !ok {
		return 0, false
	}
	return r.GroupEpoch.Epoch, true
}

func (b cbook) targetEpoch() int32 {
	if r, ok := b[ckey{typ: consumer.RecordTargetEpoch}]; ok {
		return r.TargetEpoch.AssignmentEpoch
	}
	return 0
}

// members returns the member ids with metadata, sorted.
func (b cbook) members() []string {
	var ids []string
	for k := range b {
		if k.typ == consumer.RecordMemberMetadata {
			ids = append(ids, k.member)
		}
	}
	slices.Sort(ids)
	return ids
}

func (b cbook) current(member string) (*consumer.CurrentAssignment, bool) {
	r, ok := b[ckey{consumer.RecordCurrentAssignment, member}]
	if !ok {
		return nil, false
	}
	return r.Current, true
}

// ccheck is what the checkers know about one consumer group: its records
// as the coordinator's memory has them, and as the store does.
type ccheck struct {
	spec *groupSpec
	mem  cbook
	dur  cbook
}

func (c *checker) addConsumerGroup(g *groupSpec) {
	if g.mig != nil {
		// A migrating group has the classic group checkers too
		// (addGroup); each checks it while it is of its type.
		c.mids = append(c.mids, g.id)
		slices.Sort(c.mids)
	} else {
		c.addOffsetsOnly(g)
	}
	if c.cgroups == nil {
		c.cgroups = map[string]*ccheck{}
	}
	c.cgroups[g.id] = &ccheck{spec: g, mem: cbook{}, dur: cbook{}}
	c.cids = append(c.cids, g.id)
	slices.Sort(c.cids)
}

// addOffsetsOnly adds a consumer group to the offset checkers.
func (c *checker) addOffsetsOnly(g *groupSpec) {
	// Offsets are kept and checked as a classic group's are; the group
	// takes no part in the classic group checkers (c.ids).
	c.groups[g.id] = &gcheck{
		spec:       g,
		durOffsets: map[tp]int64{},
		memOffsets: map[tp]int64{},
		acked:      map[tp]int64{},
		delivered:  map[int32]map[tp]string{},
		records:    map[int32]*group.GroupMetadata{},
		lastAssign: map[string][]byte{},
	}
}

func (w *world) names(ts []consumer.TopicPartitions) []tp {
	var out []tp
	for _, t := range ts {
		name, ok := w.topicIDs[t.TopicID]
		if !ok {
			name = t.TopicID.String()
		}
		for _, p := range t.Partitions {
			out = append(out, tp{name, p})
		}
	}
	sortTPs(out)
	return out
}

// afterConsumer checks the consumer records of one step against the
// coordinator's memory before it, then the books after it.
func (c *checker) afterConsumer(out group.Output) {
	touched := map[string]bool{}
	for _, gr := range out.Records {
		if gr.Consumer == nil {
			continue
		}
		cc := c.cgroups[gr.Group]
		if cc == nil {
			continue
		}
		r := *gr.Consumer
		touched[gr.Group] = true
		c.count(ckCEpoch)
		switch r.Type {
		case consumer.RecordGroupEpoch:
			prev, had := cc.mem.groupEpoch()
			switch {
			case r.GroupEpoch == nil && c.isMigrating(gr.Group) && c.w.groupType(gr.Group) == inspect.TypeClassic:
				// Converted to a classic group.
			case r.GroupEpoch == nil:
				c.fail(ckCEpoch, "consumer group %s deleted; the simulation deletes no groups", gr.Group)
			case had && r.GroupEpoch.Epoch != prev+1:
				c.fail(ckCEpoch, "consumer group %s: group epoch %d -> %d", gr.Group, prev, r.GroupEpoch.Epoch)
			}
		case consumer.RecordTargetEpoch:
			ge, _ := cc.mem.groupEpoch()
			if r.TargetEpoch != nil {
				if e := r.TargetEpoch.AssignmentEpoch; e < cc.mem.targetEpoch() || e > ge {
					c.fail(ckCEpoch, "consumer group %s: target epoch %d -> %d with group epoch %d", gr.Group, cc.mem.targetEpoch(), e, ge)
				}
			}
		case consumer.RecordCurrentAssignment:
			if r.Current == nil {
				break
			}
			e := r.Current.MemberEpoch
			prev, had := cc.mem.current(r.Member)
			if had && e != -2 && prev.MemberEpoch != -2 && e < prev.MemberEpoch {
				c.fail(ckCEpoch, "consumer group %s: member %s epoch went back %d -> %d", gr.Group, r.Member, prev.MemberEpoch, e)
			}
			if e > cc.mem.targetEpoch() {
				c.fail(ckCEpoch, "consumer group %s: member %s at epoch %d, ahead of the target epoch %d", gr.Group, r.Member, e, cc.mem.targetEpoch())
			}
		}
		cc.mem.apply(r)
	}
	for _, id := range c.cids {
		if touched[id] {
			c.checkBooks(c.cgroups[id])
		}
	}
}

// beforeConsumer: a member never holds an epoch ahead of the one the
// coordinator has for it. Members learn epochs only from replies whose
// records were durable, and a coordinator's memory only moves on from
// what is durable; so a member ahead of it saw an epoch that was lost.
func (c *checker) beforeConsumer(msg kmsg.Request) {
	var groupID, memberID, kind string
	var epoch int32
	switch q := msg.(type) {
	case *kmsg.ConsumerGroupHeartbeatRequest:
		groupID, memberID, epoch, kind = q.Group, q.MemberID, q.MemberEpoch, "heartbeat"
	case *kmsg.OffsetCommitRequest:
		groupID, memberID, epoch, kind = q.Group, q.MemberID, q.Generation, "commit"
	default:
		return
	}
	cc := c.cgroups[groupID]
	if cc == nil || epoch <= 0 {
		return
	}
	c.count(ckCEpoch)
	cur, ok := cc.mem.current(memberID)
	switch {
	case !ok || cur.MemberEpoch < 0:
	case epoch > cur.MemberEpoch:
		c.fail(ckCEpoch, "consumer group %s: member %s sends epoch %d, ahead of the coordinator's %d: an epoch it was told went back", groupID, memberID, epoch, cur.MemberEpoch)
	case epoch < cur.MemberEpoch:
		// The reply that moved it on was lost (or is still on its
		// way): the previous-epoch rule or fencing answers.
		c.w.count("run.consumer-previous-epoch-" + kind)
	}
}

// checkBooks: no partition assigned or pending revocation in two members.
func (c *checker) checkBooks(cc *ccheck) {
	c.count(ckCOwned)
	holder := map[tp]string{}
	for _, id := range cc.mem.members() {
		cur, ok := cc.mem.current(id)
		if !ok {
			continue
		}
		held := append(c.w.names(cur.Assigned), c.w.names(cur.PendingRevocation)...)
		for _, t := range held {
			if o, ok := holder[t]; ok && o != id {
				c.fail(ckCOwned, "consumer group %s: %v held by members %s and %s on the coordinator's books", cc.spec.id, t, o, id)
				return
			}
			holder[t] = id
		}
	}
}

// onDurableConsumer folds durable consumer records into the store's model.
func (c *checker) onDurableConsumer(recs []group.Record) {
	for _, r := range recs {
		if r.Consumer == nil {
			continue
		}
		if cc := c.cgroups[r.Group]; cc != nil {
			cc.dur.apply(*r.Consumer)
		}
	}
}

// onConsumerEpoch: a member never sees its epoch go back while it is a
// member.
func (c *checker) onConsumerEpoch(p *process, epoch int32) {
	c.count(ckCEpoch)
	if epoch < p.cm.acked {
		c.fail(ckCEpoch, "%s (member %s) got epoch %d after epoch %d", p.name, p.memberID, epoch, p.cm.acked)
	}
}

// onTake: a member takes partitions; no other process that is still a
// member owns them. A process the coordinator no longer counts as a member
// (fenced while it was paused, say) owns nothing anybody acknowledged.
func (c *checker) onTake(p *process, added []tp) {
	if c.isMigrating(p.g.id) {
		c.onMigrateTake(p, added)
		return
	}
	m := c.w.coord.machine(p.g.id)
	if m == nil {
		c.w.count("run.consumer-take-while-down")
		return
	}
	d := c.w.describeConsumer(p.g.id)
	members := map[string]bool{}
	for _, mem := range d.Members {
		members[mem.MemberID] = true
	}
	if !members[p.memberID] {
		c.w.count("run.consumer-take-after-fenced")
		return
	}
	for _, q := range p.g.procs {
		if q == p || !q.alive || q.cm == nil || !members[q.memberID] {
			continue
		}
		for _, t := range added {
			c.count(ckCOwned)
			if slices.Contains(q.owned, t) {
				c.fail(ckCOwned, "consumer group %s: %s (member %s) takes %v at epoch %d while %s (member %s) still owns it", p.g.id, p.name, p.memberID, t, p.cm.epoch, q.name, q.memberID)
				return
			}
		}
	}
}

// onLoadConsumer checks a freshly loaded machine against the store's
// model and the epochs members have seen, then starts the memory model
// from the store's.
func (c *checker) onLoadConsumer(why string) {
	for _, id := range c.cids {
		cc := c.cgroups[id]
		c.count(ckCRestore)
		m := c.w.coord.machine(id)
		st, epoch := m.ConsumerGroupState(id)
		de, had := cc.dur.groupEpoch()
		switch {
		case !had:
			if st != consumer.Dead {
				c.fail(ckCRestore, "consumer group %s: %s after %s, but nothing about it was durable", id, st, why)
			}
		case epoch != de:
			c.fail(ckCRestore, "consumer group %s: epoch %d after %s; the store holds %d", id, epoch, why, de)
		}
		if had {
			c.compareLoaded(cc, why)
		}
		// No member sees its epoch go back: what it was told was
		// durable before it was told.
		members := map[string]int32{}
		if st != consumer.Dead {
			for _, mem := range c.w.describeConsumer(id).Members {
				members[mem.MemberID] = mem.MemberEpoch
			}
		}
		for _, p := range cc.spec.procs {
			if !p.alive || p.cm == nil || p.cm.acked <= 0 {
				continue
			}
			c.count(ckCEpoch)
			if e, ok := members[p.memberID]; ok && e >= 0 && e < p.cm.acked {
				c.fail(ckCEpoch, "consumer group %s: member %s (%s) is at epoch %d after %s, but it was told epoch %d", id, p.memberID, p.name, e, why, p.cm.acked)
			}
		}
		cc.mem = maps.Clone(cc.dur)
		if !c.isMigrating(id) {
			c.checkOffsetsAfterLoad(id, st != consumer.Dead, why)
		}
	}
}

// compareLoaded compares a loaded consumer group with the store's model.
func (c *checker) compareLoaded(cc *ccheck, why string) {
	id := cc.spec.id
	d := c.w.describeConsumer(id)
	if d.AssignmentEpoch != cc.dur.targetEpoch() {
		c.fail(ckCRestore, "consumer group %s: target epoch %d after %s; the store holds %d", id, d.AssignmentEpoch, why, cc.dur.targetEpoch())
		return
	}
	want := cc.dur.members()
	var got []string
	byID := map[string]kmsg.ConsumerGroupDescribeResponseGroupMember{}
	for _, mem := range d.Members {
		got = append(got, mem.MemberID)
		byID[mem.MemberID] = mem
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		c.fail(ckCRestore, "consumer group %s: members %v after %s; the store holds %v", id, got, why, want)
		return
	}
	for _, mid := range want {
		cur, ok := cc.dur.current(mid)
		if !ok {
			continue
		}
		mem := byID[mid]
		assigned := c.w.assignmentTPs(mem.Assignment)
		if mem.MemberEpoch != cur.MemberEpoch || !slices.Equal(assigned, c.w.names(cur.Assigned)) {
			c.fail(ckCRestore, "consumer group %s: member %s at epoch %d with %s after %s; the store holds epoch %d with %s",
				id, mid, mem.MemberEpoch, fmtTPs(assigned), why, cur.MemberEpoch, fmtTPs(c.w.names(cur.Assigned)))
			return
		}
	}
}
