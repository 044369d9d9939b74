package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/groupd/groupd/assign"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/inspect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The checkers, named as the failures report them. IDs in brackets refer to
// the invariants of reference/peers-and-invariants.md §2.5.
const (
	ckTransition   = "state-transition"         // Kafka's state table
	ckGeneration   = "generation-monotonic"     // [A4]
	ckAssignRecord = "assignment-disjoint-full" // [A1] on the persisted assignment
	ckAssignDeliv  = "assignment-delivered"     // [A1] on what members receive
	ckCooperative  = "cooperative-handover"     // [A2]
	ckStatic       = "static-instance-unique"   // [A6]
	ckFencing      = "fencing-errors"           // [A5]
	ckAckDurable   = "ack-durable"              // [O1]
	ckFetch        = "fetch-read-your-commits"  // [O2]
	ckForward      = "offsets-forward"          // [O3]
	ckRestart      = "restart-restores"         // [O1, C4]
	ckStableAcross = "stable-across-restart"    // [C4]
)

type stateGen struct {
	state group.State
	gen   int32
}

// gcheck is what the checkers know about one group.
type gcheck struct {
	spec *groupSpec
	obs  stateGen // the machine's state after the last step

	// The durable model: what the store must hold if the runtime keeps
	// "durable before visible", built from the records the machine
	// produced and the writes that succeeded.
	durMeta    *group.GroupMetadata
	durOffsets map[tp]int64
	snap       stateGen // the machine's state when everything was durable
	snapValid  bool

	memOffsets map[tp]int64 // committed offsets in the machine's memory
	acked      map[tp]int64 // highest offset acknowledged to a client

	maxObsGen  int32                          // highest generation the machine reached, any incarnation
	maxSyncGen int32                          // highest generation whose assignment a member received
	delivered  map[int32]map[tp]string        // generation -> partition -> owner (instance id or member id)
	records    map[int32]*group.GroupMetadata // generation -> latest persisted assignment
	lastAssign map[string][]byte              // member id -> last assignment received (for ServeStaleSync)
}

type checker struct {
	w      *world
	groups map[string]*gcheck
	ids    []string // classic groups

	cgroups map[string]*ccheck // consumer groups
	cids    []string

	mids []string          // migrating groups (in ids and cids too)
	mobs map[string]mstate // migrating groups after the last step or load
}

func newChecker(w *world) *checker {
	return &checker{w: w, groups: map[string]*gcheck{}, mobs: map[string]mstate{}}
}

func (c *checker) addGroup(g *groupSpec) {
	c.groups[g.id] = &gcheck{
		spec:       g,
		obs:        stateGen{group.Dead, -1},
		durOffsets: map[tp]int64{},
		memOffsets: map[tp]int64{},
		acked:      map[tp]int64{},
		maxSyncGen: -1,
		delivered:  map[int32]map[tp]string{},
		records:    map[int32]*group.GroupMetadata{},
		lastAssign: map[string][]byte{},
	}
	c.ids = append(c.ids, g.id)
	slices.Sort(c.ids)
}

func (c *checker) count(name string) { c.w.count("check." + name) }

func (c *checker) fail(check, format string, args ...any) {
	c.w.fail(check, fmt.Sprintf(format, args...))
}

func (c *checker) unexpected(p *process, api string, code int16) {
	c.fail("unexpected-error", "%s got %s from %s", p.name, errName(code), api)
}

func errName(code int16) string {
	if code == 0 {
		return "NONE"
	}
	if err := kerr.ErrorForCode(code); err != nil {
		if ke, ok := err.(*kerr.Error); ok {
			return ke.Message
		}
		return err.Error()
	}
	return fmt.Sprint(code)
}

// pre is what the checkers saw just before a step.
type pre struct {
	states map[string]stateGen
	reqID  group.RequestID
	api    string
	expect int16 // expected fencing error, when known
	check  bool
	group  string
	mig    mpre // migrating groups
}

// reqFields extracts the identity fields a request carries, as the machine
// reads them for its version.
func reqFields(r kmsg.Request) (api, groupID, memberID, instanceID string, gen int32, ok bool) {
	inst := func(p *string, visible bool) string {
		if p != nil && visible {
			return *p
		}
		return ""
	}
	switch q := r.(type) {
	case *kmsg.HeartbeatRequest:
		return "Heartbeat", q.Group, q.MemberID, inst(q.InstanceID, q.Version >= 3), q.Generation, true
	case *kmsg.SyncGroupRequest:
		return "SyncGroup", q.Group, q.MemberID, inst(q.InstanceID, q.Version >= 3), q.Generation, true
	case *kmsg.OffsetCommitRequest:
		return "OffsetCommit", q.Group, q.MemberID, inst(q.InstanceID, q.Version >= 7), q.Generation, q.Version >= 1
	case *kmsg.JoinGroupRequest:
		return "JoinGroup", q.Group, q.MemberID, inst(q.InstanceID, q.Version >= 5), -1, true
	}
	return "", "", "", "", 0, false
}

// before snapshots group states, and for requests that carry a member
// identity computes the error Kafka's rules demand from the current
// membership (validateMember, then the generation).
func (c *checker) before(ev group.Event, from *process) pre {
	p := pre{states: map[string]stateGen{}}
	for _, id := range c.ids {
		s, g := c.state(id)
		p.states[id] = stateGen{s, g}
	}
	p.mig = c.beforeMigrate()
	req, ok := ev.(group.Request)
	if !ok {
		return p
	}
	if len(c.cids) > 0 {
		c.beforeConsumer(req.Msg)
	}
	api, gid, memberID, instanceID, gen, ok := reqFields(req.Msg)
	if !ok || c.groups[gid] == nil || c.cgroups[gid] != nil && (!c.isMigrating(gid) || p.mig[gid].typ != inspect.TypeClassic) {
		return p
	}
	p.reqID, p.api, p.group = req.ID, api, gid
	st := p.states[gid]
	if api == "JoinGroup" {
		switch {
		case memberID == "" && instanceID == "" && req.Msg.GetVersion() >= 4:
			p.expect, p.check = kerr.MemberIDRequired.Code, true
		case memberID != "" && st.state == group.Dead:
			p.expect, p.check = kerr.UnknownMemberID.Code, true
		case memberID != "" && instanceID != "":
			d := c.w.describe(gid)
			for _, mem := range d.Members {
				if mem.InstanceID != nil && *mem.InstanceID == instanceID && mem.MemberID != memberID {
					p.expect, p.check = kerr.FencedInstanceID.Code, true
				}
			}
		}
		return p
	}
	if st.state == group.Dead {
		return p
	}
	p.check = true
	d := c.w.describe(gid)
	isMember := false
	for _, mem := range d.Members {
		if mem.MemberID == memberID {
			isMember = true
		}
	}
	if instanceID != "" {
		owner := ""
		for _, mem := range d.Members {
			if mem.InstanceID != nil && *mem.InstanceID == instanceID {
				owner = mem.MemberID
			}
		}
		switch {
		case owner == "":
			p.expect = kerr.UnknownMemberID.Code
		case owner != memberID:
			p.expect = kerr.FencedInstanceID.Code
		}
	}
	switch {
	case p.expect != 0:
	case !isMember:
		p.expect = kerr.UnknownMemberID.Code
	case gen != st.gen:
		p.expect = kerr.IllegalGeneration.Code
	}
	return p
}

// fencingCodes are the errors that reject a member's identity.
func fencingCode(code int16) bool {
	switch code {
	case kerr.UnknownMemberID.Code, kerr.IllegalGeneration.Code, kerr.FencedInstanceID.Code:
		return true
	}
	return false
}

func replyCode(msg kmsg.Response) (int16, bool) {
	switch r := msg.(type) {
	case *kmsg.HeartbeatResponse:
		return r.ErrorCode, true
	case *kmsg.SyncGroupResponse:
		return r.ErrorCode, true
	case *kmsg.JoinGroupResponse:
		return r.ErrorCode, true
	case *kmsg.OffsetCommitResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				return p.ErrorCode, true
			}
		}
	}
	return 0, false
}

func reach(a, b group.State) bool {
	if group.CanTransition(a, b) {
		return true
	}
	for s := group.Empty; s <= group.Dead; s++ {
		if s != a && s != b && group.CanTransition(a, s) && group.CanTransition(s, b) {
			return true
		}
	}
	return false
}

// after checks one step's effects.
func (c *checker) after(ev group.Event, from *process, p pre, out group.Output) {
	for _, id := range c.ids {
		gc := c.groups[id]
		s, gen := c.state(id)
		was := p.states[id]
		gc.obs = stateGen{s, gen}
		gc.maxObsGen = max(gc.maxObsGen, gen)
		if gc.spec.mig != nil && (p.mig[id].typ != inspect.TypeClassic || c.w.groupType(id) != inspect.TypeClassic) {
			// Not a classic group before or after the step: the
			// migration checkers follow its type changes.
			continue
		}
		if was.state == group.Dead && was.gen == -1 {
			if s == group.Dead {
				continue
			}
			was = stateGen{group.Empty, 0}
		}
		c.count(ckTransition)
		switch {
		case s == group.Dead:
			c.fail(ckTransition, "group %s disappeared (%s gen %d -> Dead); the simulation deletes no groups", id, was.state, was.gen)
		case s != was.state && !reach(was.state, s):
			c.fail(ckTransition, "group %s moved %s -> %s in one step, which no path of Kafka's table allows", id, was.state, s)
		case s == was.state && gen != was.gen && !reach(s, s):
			c.fail(ckTransition, "group %s stayed %s but its generation moved %d -> %d", id, s, was.gen, gen)
		}
		c.count(ckGeneration)
		switch {
		case gen < was.gen:
			c.fail(ckGeneration, "group %s generation went back %d -> %d", id, was.gen, gen)
		case gen > was.gen+1:
			c.fail(ckGeneration, "group %s generation jumped %d -> %d in one step", id, was.gen, gen)
		case gen != was.gen && s != group.CompletingRebalance && s != group.Empty:
			c.fail(ckGeneration, "group %s generation moved %d -> %d but it is %s; a new generation starts CompletingRebalance or Empty", id, was.gen, gen, s)
		}
	}

	if p.check {
		c.count(ckFencing)
		for _, r := range out.Replies {
			if r.ID != p.reqID {
				continue
			}
			code, ok := replyCode(r.Msg)
			switch {
			case !ok:
			case p.api == "JoinGroup" && code == kerr.InconsistentGroupProtocol.Code:
				// JoinGroup checks the protocols before the member.
			case p.expect != 0 && code != p.expect:
				c.fail(ckFencing, "%s from %s to group %s: expected %s from the membership before the step, got %s", p.api, from.name, p.group, errName(p.expect), errName(code))
			case p.expect == 0 && fencingCode(code):
				c.fail(ckFencing, "%s from %s (member %q) to group %s: a valid member was rejected with %s", p.api, from.name, from.memberID, p.group, errName(code))
			}
			p.check = false
		}
		if p.check && p.expect != 0 && p.api == "SyncGroup" {
			c.fail(ckFencing, "SyncGroup from %s to group %s should fail with %s but was parked", from.name, p.group, errName(p.expect))
		}
	}

	if req, ok := ev.(group.Request); !ok || isMembership(req.Msg) {
		c.checkStatic()
	}

	for _, r := range out.Records {
		gc := c.groups[r.Group]
		if gc == nil {
			continue
		}
		switch r.Type {
		case group.RecordOffsetCommit:
			c.count(ckForward)
			t := tp{r.Topic, r.Partition}
			if r.Offset == nil {
				c.fail(ckForward, "group %s: offset of %v deleted; the simulation deletes no offsets", r.Group, t)
				continue
			}
			if prev, ok := gc.memOffsets[t]; ok && r.Offset.Offset < prev {
				c.fail(ckForward, "group %s: committed offset of %v moved backward %d -> %d under forward-committing members", r.Group, t, prev, r.Offset.Offset)
			}
			gc.memOffsets[t] = r.Offset.Offset
		case group.RecordGroupMetadata:
			if r.Metadata == nil && gc.spec.mig != nil && c.w.groupType(r.Group) == inspect.TypeConsumer {
				continue // converted to a consumer group
			}
			if r.Metadata == nil {
				c.fail(ckTransition, "group %s: metadata deleted", r.Group)
				continue
			}
			if _, gen := c.state(r.Group); gen != r.Metadata.Generation {
				c.fail(ckGeneration, "group %s: persisted generation %d but the group is at %d", r.Group, r.Metadata.Generation, gen)
			}
			if len(r.Metadata.Members) > 0 {
				// A record of the generation already persisted is a
				// static member replaced without a rebalance (KIP-345):
				// it carries the old assignment over to the new member
				// id, and only disjointness applies to it.
				_, replaced := gc.records[r.Metadata.Generation]
				// A consumer group downgraded keeps its members'
				// assignments, without what the last
				// consumer-protocol member held, until the
				// rebalance that follows (as in Kafka).
				downgraded := p.mig[r.Group].typ == inspect.TypeConsumer
				c.checkAssignmentRecord(gc, r.Metadata, !replaced && !downgraded)
				gc.records[r.Metadata.Generation] = r.Metadata
			}
		}
	}

	if len(c.cids) > 0 {
		c.afterConsumer(out)
	}
	if len(c.mids) > 0 {
		c.afterMigrate(ev, p.mig)
	}

	for _, r := range out.Replies {
		f, ok := r.Msg.(*kmsg.OffsetFetchResponse)
		if !ok || from == nil {
			continue
		}
		gc := c.groups[from.g.id]
		for _, t := range f.Topics {
			for _, pp := range t.Partitions {
				c.count(ckFetch)
				k := tp{t.Topic, pp.Partition}
				if a, ok := gc.acked[k]; ok && pp.ErrorCode == 0 && pp.Offset < a {
					c.fail(ckFetch, "group %s: OffsetFetch of %v returned %d, older than the acknowledged commit %d", from.g.id, k, pp.Offset, a)
				}
			}
		}
	}
}

func isMembership(r kmsg.Request) bool {
	switch r.(type) {
	case *kmsg.JoinGroupRequest, *kmsg.LeaveGroupRequest, *kmsg.SyncGroupRequest:
		return true
	}
	return false
}

// checkStatic: at most one member per group.instance.id.
func (c *checker) checkStatic() {
	for _, id := range c.ids {
		gc := c.groups[id]
		if gc.spec.staticP == 0 {
			continue
		}
		c.count(ckStatic)
		d := c.w.describe(id)
		seen := map[string]string{}
		for _, m := range d.Members {
			if m.InstanceID == nil {
				continue
			}
			if o, ok := seen[*m.InstanceID]; ok {
				c.fail(ckStatic, "group %s: instance id %q held by members %s and %s", id, *m.InstanceID, o, m.MemberID)
			}
			seen[*m.InstanceID] = m.MemberID
		}
	}
}

func decodeParts(b []byte) ([]tp, error) {
	_, parts, _, err := assign.DecodeAssignment(b)
	return toTPs(parts), err
}

// checkAssignmentRecord checks a persisted assignment: pairwise disjoint,
// only subscribed topics, and complete: every partition of a subscribed
// topic is assigned, except (cooperative) partitions withheld because a
// member still reports owning them. For cooperative-sticky it also checks
// that no partition goes to a new owner while another member reports it.
func (c *checker) checkAssignmentRecord(gc *gcheck, md *group.GroupMetadata, full bool) {
	c.count(ckAssignRecord)
	owner := map[tp]string{}
	reported := map[tp][]string{}
	ownedBy := map[string]map[tp]bool{}
	assigned := map[string][]tp{}
	var topics []string
	for _, mm := range md.Members {
		sub, err := assign.DecodeMetadata(mm.Subscription)
		if err != nil {
			c.fail(ckAssignRecord, "group %s generation %d: member %s subscription does not decode: %v", gc.spec.id, md.Generation, mm.MemberID, err)
			return
		}
		parts, err := decodeParts(mm.Assignment)
		if err != nil {
			c.fail(ckAssignRecord, "group %s generation %d: member %s assignment does not decode: %v", gc.spec.id, md.Generation, mm.MemberID, err)
			return
		}
		subscribed := map[string]bool{}
		for _, t := range sub.Topics {
			subscribed[t] = true
		}
		topics = append(topics, sub.Topics...)
		for _, t := range parts {
			if full && !subscribed[t.topic] {
				c.fail(ckAssignRecord, "group %s generation %d: member %s assigned %v of a topic it does not subscribe to", gc.spec.id, md.Generation, mm.MemberID, t)
			}
			if o, ok := owner[t]; ok {
				c.fail(ckAssignRecord, "group %s generation %d: %v assigned to both %s and %s", gc.spec.id, md.Generation, t, o, mm.MemberID)
			}
			owner[t] = mm.MemberID
		}
		assigned[mm.MemberID] = parts
		ownedBy[mm.MemberID] = map[tp]bool{}
		for _, t := range toTPs(sub.Owned) {
			reported[t] = append(reported[t], mm.MemberID)
			ownedBy[mm.MemberID][t] = true
		}
	}
	if !full {
		return
	}
	coop := md.Protocol == "cooperative-sticky"
	slices.Sort(topics)
	topics = slices.Compact(topics)
	for _, t := range gc.spec.partitions(topics) {
		if _, ok := owner[t]; ok {
			continue
		}
		if coop && len(reported[t]) > 0 {
			continue // withheld until its owner revokes it
		}
		c.fail(ckAssignRecord, "group %s generation %d (%s): %v is subscribed but assigned to nobody", gc.spec.id, md.Generation, md.Protocol, t)
	}
	if !coop {
		return
	}
	c.count(ckCooperative)
	for _, mm := range md.Members {
		for _, t := range assigned[mm.MemberID] {
			if ownedBy[mm.MemberID][t] {
				continue
			}
			for _, o := range reported[t] {
				if o != mm.MemberID {
					c.fail(ckCooperative, "group %s generation %d: %v given to %s while %s still reports owning it", gc.spec.id, md.Generation, t, mm.MemberID, o)
				}
			}
		}
	}
}

// onSyncDelivered checks an assignment a member received.
func (c *checker) onSyncDelivered(p *process, gen int32, assigned []tp) {
	c.count(ckAssignDeliv)
	gc := c.groups[p.g.id]
	if gc.spec.mig != nil {
		// Generations are member epochs inside a consumer group, and
		// restart with an empty group's conversion: the ownership
		// checker follows what each process holds instead.
		c.onSyncMigrating(p, assigned)
		return
	}
	who := p.memberID
	if p.instanceID != "" {
		who = p.instanceID
	}
	d := gc.delivered[gen]
	if d == nil {
		d = map[tp]string{}
		gc.delivered[gen] = d
	}
	sub := map[string]bool{}
	for _, t := range p.topics {
		sub[t] = true
	}
	for _, t := range assigned {
		if o, ok := d[t]; ok && o != who {
			c.fail(ckAssignDeliv, "group %s generation %d: %v delivered to %s (%s) and to %s", p.g.id, gen, t, p.name, who, o)
		}
		d[t] = who
		if !sub[t.topic] {
			c.fail(ckAssignDeliv, "group %s generation %d: %s received %v of a topic it does not subscribe to", p.g.id, gen, p.name, t)
		}
	}
	if rec := gc.records[gen]; rec != nil {
		for _, mm := range rec.Members {
			if mm.MemberID != p.memberID {
				continue
			}
			want, _ := decodeParts(mm.Assignment)
			if !slices.Equal(want, assigned) {
				c.fail(ckAssignDeliv, "group %s generation %d: %s received %s but the persisted assignment is %s", p.g.id, gen, p.name, fmtTPs(assigned), fmtTPs(want))
			}
		}
	}
	gc.maxSyncGen = max(gc.maxSyncGen, gen)
	gc.lastAssign[p.memberID] = assign.EncodeAssignment(0, fromTPs(assigned), nil)
}

// onCommitAck: an acknowledged commit must already be durable.
func (c *checker) onCommitAck(p *process, acked map[tp]int64) {
	gc := c.groups[p.g.id]
	for _, t := range sortedKeys(acked) {
		o := acked[t]
		c.count(ckAckDurable)
		if d, ok := gc.durOffsets[t]; !ok || d < o {
			c.fail(ckAckDurable, "group %s: commit of %v at %d acknowledged to %s but the store holds %d", p.g.id, t, o, p.name, gc.durOffsetOr(t))
		}
		gc.acked[t] = max(gc.acked[t], o)
	}
}

func (gc *gcheck) durOffsetOr(t tp) int64 {
	if d, ok := gc.durOffsets[t]; ok {
		return d
	}
	return -1
}

func sortedKeys[V any](m map[tp]V) []tp {
	ks := slices.Collect(maps.Keys(m))
	sortTPs(ks)
	return ks
}

// onDurable folds records the store now holds into the durable model. The
// state noted for a group it touches is no longer what a restart gives,
// until onSettled notes the new one.
func (c *checker) onDurable(recs []group.Record) {
	c.onDurableConsumer(recs)
	defer c.checkDurableType()
	for _, r := range recs {
		gc := c.groups[r.Group]
		if gc == nil {
			continue
		}
		gc.snapValid = false
		switch r.Type {
		case group.RecordGroupMetadata:
			gc.durMeta = r.Metadata
		case group.RecordOffsetCommit:
			if r.Offset == nil {
				delete(gc.durOffsets, tp{r.Topic, r.Partition})
			} else {
				gc.durOffsets[tp{r.Topic, r.Partition}] = r.Offset.Offset
			}
		}
	}
}

// onSettled notes the machines' state at a moment when every record they
// produced is durable, which is what a restart must bring back (up to state
// no record carries).
func (c *checker) onSettled() {
	for _, id := range c.ids {
		if c.w.coord.machine(id) == nil {
			continue
		}
		s, g := c.state(id)
		c.groups[id].snap = stateGen{s, g}
		c.groups[id].snapValid = true
	}
}

// state is a group's state and generation in the machine that owns it.
func (c *checker) state(id string) (group.State, int32) {
	m := c.w.coord.machine(id)
	if m == nil {
		return group.Dead, -1
	}
	return m.GroupState(id)
}

func (c *checker) onCrash() {
	for _, id := range c.ids {
		c.groups[id].obs = stateGen{group.Dead, -1}
	}
	clear(c.mobs)
}

// onLoad checks a freshly replayed machine against the durable model: the
// group comes back exactly as persisted (a group with members Stable at its
// persisted generation, else Empty), a group Stable when its state was last
// durable is Stable at the same generation, no delivered generation is rolled
// back, and every committed offset is exactly the durable one (so no
// acknowledged commit is lost).
func (c *checker) onLoad(why string, ids []string) {
	if len(c.mids) > 0 {
		c.onLoadMigrate(why)
	}
	for _, id := range ids {
		gc := c.groups[id]
		s, gen := c.state(id)
		c.count(ckRestart)
		switch {
		case gc.durMeta == nil && gc.spec.mig != nil && s == group.Empty && gen == 0:
			// Known only by its offsets: an empty group, after a
			// conversion, whose new type has no record yet.
		case gc.durMeta == nil:
			if s != group.Dead {
				c.fail(ckRestart, "group %s: %s after %s, but nothing about it was durable", id, s, why)
			}
		case len(gc.durMeta.Members) > 0:
			if s != group.Stable || gen != gc.durMeta.Generation {
				c.fail(ckRestart, "group %s: %s generation %d after %s; the store holds generation %d with %d members", id, s, gen, why, gc.durMeta.Generation, len(gc.durMeta.Members))
			}
		default:
			if s != group.Empty || gen != gc.durMeta.Generation {
				c.fail(ckRestart, "group %s: %s generation %d after %s; the store holds an empty group at generation %d", id, s, gen, why, gc.durMeta.Generation)
			}
		}
		if gc.snapValid && gc.snap.state == group.Stable {
			c.count(ckStableAcross)
			if s != group.Stable || gen != gc.snap.gen {
				c.fail(ckStableAcross, "group %s was Stable at generation %d with everything durable, but is %s generation %d after %s", id, gc.snap.gen, s, gen, why)
			}
		}
		if s != group.Dead && gen < gc.maxObsGen {
			// A join phase that completed but whose assignment never
			// became durable leaves nothing in the store, so its
			// generation number is handed out again, as in Kafka. No
			// member received an assignment for it (checked below).
			c.w.count("run.generation-reissued-after-" + strings.Fields(why)[0])
		}
		c.count(ckGeneration)
		if s != group.Dead && gen < gc.maxSyncGen {
			c.fail(ckGeneration, "group %s: generation %d after %s, but members already received assignments of generation %d", id, gen, why, gc.maxSyncGen)
		}
		if gc.spec.mig == nil {
			c.checkOffsetsAfterLoad(id, s != group.Dead, why)
		}
		gc.obs = stateGen{s, gen}
	}
	c.checkStatic()
	if len(c.cids) > 0 {
		c.onLoadConsumer(why)
	}
}

// checkOffsetsAfterLoad: every committed offset of a freshly loaded group
// is exactly the durable one, so no acknowledged commit is lost.
func (c *checker) checkOffsetsAfterLoad(id string, exists bool, why string) {
	gc := c.groups[id]
	got := map[tp]int64{}
	if exists {
		got = c.w.offsets(id)
	}
	for _, t := range sortedKeys(gc.acked) {
		c.count(ckAckDurable)
		if got[t] < gc.acked[t] {
			c.fail(ckAckDurable, "group %s: %v has committed offset %d after %s, below the acknowledged %d", id, t, got[t], why, gc.acked[t])
		}
	}
	if !maps.Equal(got, gc.durOffsets) {
		c.fail(ckRestart, "group %s: offsets after %s differ from the durable ones: got %v want %v", id, why, fmtOffsets(got), fmtOffsets(gc.durOffsets))
	}
	gc.memOffsets = maps.Clone(gc.durOffsets)
}

func fmtOffsets(m map[tp]int64) string {
	var parts []string
	for _, t := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%v=%d", t, m[t]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// staleSync is the ServeStaleSync bug: a fenced SyncGroup is answered with
// the last assignment that member id received.
func (c *checker) staleSync(pd *pending, msg kmsg.Response) kmsg.Response {
	resp, ok := msg.(*kmsg.SyncGroupResponse)
	req, ok2 := pd.o.req.(*kmsg.SyncGroupRequest)
	if !ok || !ok2 || (resp.ErrorCode != kerr.IllegalGeneration.Code && resp.ErrorCode != kerr.UnknownMemberID.Code) {
		return msg
	}
	gc := c.groups[req.Group]
	a, ok := gc.lastAssign[req.MemberID]
	if !ok {
		return msg
	}
	out := kmsg.NewPtrSyncGroupResponse()
	out.Version = resp.Version
	out.ProtocolType = kmsg.StringPtr("consumer")
	out.Protocol = req.Protocol
	out.MemberAssignment = a
	return out
}
