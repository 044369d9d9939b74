package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/inspect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Migrating groups (Options.Mix both and migrate) are rolled between the
// protocols while they run, as operators roll a fleet one process at a
// time: a group starts with classic members; a roller replaces them one
// by one by consumer-protocol members with the same subscription (a static
// member by one with the same instance id, mostly), and may later roll it
// back, and forth again, all under the usual faults. Processes started
// while a pass is under way (restarts, new members) run the version the
// pass deploys.
//
// A refused join is retried: a consumer-protocol member that a classic
// group does not take (GROUP_ID_NOT_FOUND) or a classic member that a
// consumer group does not take (INCONSISTENT_GROUP_PROTOCOL) tries again
// after a backoff, as an operator restarts a process that stopped.
//
// Their checkers (below, and the classic and consumer ones, which follow
// the group's current type) hold across conversions: one ownership view of
// the group whatever protocol each process speaks, the group type changing
// only as the migration rules allow, epochs that carry over an online
// conversion, and a restart that brings back exactly the durable type.

// The migration checkers.
const (
	// No partition is taken by a process while another process that is
	// still a member of the group holds it, whatever protocol either
	// speaks: a classic member holds what its last SyncGroup gave it
	// (and what it is still revoking) until it revokes, rejoins or is
	// fenced; a consumer member what its heartbeats gave it.
	ckMOwned = "migrate-owned-once"
	// The group type changes only as the rules allow: to consumer only
	// by a ConsumerGroupHeartbeat, to classic only when no
	// consumer-protocol member is left; a consumer group whose members
	// all speak the classic protocol has been downgraded (the default
	// policy allows it); the store never holds both types of one group,
	// and a restart brings back the durable type.
	ckMType = "migrate-group-type"
	// An online conversion keeps the epoch: the consumer group starts at
	// the classic generation, and the classic group at the consumer
	// group's epoch, so no member sees its generation go back.
	ckMEpoch = "migrate-epoch-carried"
)

// migration is the roller's state for one migrating group.
type migration struct {
	// toConsumer is the kind of process the current pass deploys.
	toConsumer bool
	passes     int // passes started
	maxPasses  int // 1: upgrade; 2: upgrade and roll back; 3: and again
	// replacing is set while a replacement waits for its predecessor to
	// stop; the roller moves one process at a time.
	replacing bool
	// starting counts replacements created but not started yet.
	starting int
	// finishAtQuiet replaces every process of the old kind at once when
	// the faults stop, so the group settles as one kind.
	finishAtQuiet bool
}

// setupMigrating draws the migrating groups of a run.
func (w *world) setupMigrating() {
	n := 1
	if w.opts.Mix == MixMigrate && w.chance(0.3) {
		n = 2
	}
	for i := range n {
		g := &groupSpec{id: fmt.Sprintf("m%d", i), topics: map[string]int32{}, mig: &migration{}}
		w.drawTopics(g)
		for _, name := range g.names {
			if w.topicIDs == nil {
				w.topicIDs = map[consumer.TopicID]string{}
			}
			w.topicIDs[topicID(name)] = name
		}
		g.configs = pick(w, migrateConfigs)
		g.staticP = pick(w, []float64{0, 0, 0.5, 1})
		g.mig.maxPasses = 1 + w.intn(3)
		// A mixed group settles only once the coordinator serves the
		// migration of a non-empty group.
		g.mig.finishAtQuiet = true
		w.groups = append(w.groups, g)
		w.chk.addGroup(g)
		w.chk.addConsumerGroup(g)
	}
}

// migrateConfigs are the protocol lists a migrating group's classic
// processes may run: those whose every list holds every list's first
// protocol. The classic group's protocol is one of the firsts (each member
// votes its first of the protocols all members support), and after a
// coordinator load, as in Kafka, a member's record keeps only that
// protocol; a newcomer whose list lacks it gets INCONSISTENT_GROUP_PROTOCOL
// until the loaded members rejoin, which nothing makes them do, so a group
// mixing [range] with [cooperative-sticky range] would never settle.
var migrateConfigs = sharedFirstConfigs(protocolConfigs)

func sharedFirstConfigs(all [][][]string) [][][]string {
	var out [][][]string
	for _, lists := range all {
		shared := true
		for _, a := range lists {
			for _, b := range lists {
				shared = shared && slices.Contains(b, a[0])
			}
		}
		if shared {
			out = append(out, lists)
		}
	}
	return out
}

// startRoll starts the roller of a migrating group.
func (w *world) startRoll(g *groupSpec) {
	w.after(w.between(time.Second, w.p.faultPhase/3), func() { w.rollStep(g) })
}

// rollStep moves one process of a group to the pass's kind, or starts the
// next pass when none of the old kind is left.
func (w *world) rollStep(g *groupSpec) {
	if w.quiet {
		return
	}
	defer w.after(w.between(500*time.Millisecond, 8*time.Second), func() { w.rollStep(g) })
	mg := g.mig
	if mg.replacing {
		return
	}
	old := g.oldKind()
	if len(old) > 0 && mg.passes > 0 {
		w.replace(g, pick(w, old), true)
		return
	}
	if mg.passes < mg.maxPasses && (mg.passes == 0 || w.chance(0.5)) {
		mg.passes++
		mg.toConsumer = !mg.toConsumer
		w.count("run.migrate-pass")
		w.logf("roll: group %s pass %d deploys %s members", g.id, mg.passes, kindName(mg.toConsumer))
	}
}

func kindName(consumer bool) string {
	if consumer {
		return "consumer-protocol"
	}
	return "classic"
}

// oldKind returns the live processes the current pass has still to move.
func (g *groupSpec) oldKind() []*process {
	var out []*process
	for _, pr := range g.live() {
		if (pr.cm != nil) != g.mig.toConsumer {
			out = append(out, pr)
		}
	}
	return out
}

// replace stops pr and, once it has stopped, starts a process of the
// pass's kind with its subscription (and, mostly, its instance id).
func (w *world) replace(g *groupSpec, pr *process, oneAtATime bool) {
	mg := g.mig
	inst := ""
	if pr.instanceID != "" && w.chance(0.8) {
		inst = pr.instanceID
	}
	sub := pr.topics
	if pr.cm != nil {
		sub = pr.cm.names
	}
	if pr.instanceID != "" && w.chance(0.4) || pr.instanceID == "" && w.chance(0.2) {
		pr.crash()
	} else {
		pr.close()
	}
	next := w.newProcessKind(g, inst, mg.toConsumer, sub)
	w.count("run.migrate-replace-" + kindName(mg.toConsumer))
	w.logf("roll: group %s replaces %s by %s (%s, instance %q)", g.id, pr.name, next.name, kindName(mg.toConsumer), inst)
	mg.starting++
	if oneAtATime {
		mg.replacing = true
	}
	var wait func()
	wait = func() {
		if pr.alive {
			w.after(100*time.Millisecond, wait)
			return
		}
		w.after(w.between(0, time.Second), func() {
			mg.starting--
			if oneAtATime {
				mg.replacing = false
			}
			next.start()
		})
	}
	wait()
}

// finishRoll replaces every remaining process of the old kind at once.
func (w *world) finishRoll(g *groupSpec) {
	if !g.mig.finishAtQuiet || g.mig.passes == 0 {
		return
	}
	for _, pr := range g.oldKind() {
		w.replace(g, pr, false)
	}
}

// newProcessKind creates a process of a migrating group: consumer-protocol
// or classic, subscribed to sub (the group's topics when nil).
func (w *world) newProcessKind(g *groupSpec, instanceID string, consumerKind bool, sub []string) *process {
	if instanceID == "" && w.chance(g.staticP) {
		instanceID = fmt.Sprintf("%s-i%d", g.id, g.nextStatic)
		g.nextStatic++
	}
	if sub == nil {
		sub = g.names
		// A restarted static member runs the same deployment.
		for _, q := range g.procs {
			if instanceID != "" && q.instanceID == instanceID {
				sub = q.subscribedNames()
			}
		}
	}
	var pr *process
	if consumerKind {
		pr = newConsumerProcess(w, g, len(w.procs), instanceID)
		pr.cm.names, pr.cm.regex = slices.Clone(sub), ""
	} else {
		pr = newProcess(w, g, len(w.procs), instanceID, pick(w, g.configs))
		pr.topics = slices.Clone(sub)
	}
	pr.logf("subscribes to %v", sub)
	return w.register(g, pr)
}

// subscribedNames is the topics a process subscribes to by name.
func (p *process) subscribedNames() []string {
	if p.cm != nil {
		return p.cm.names
	}
	return p.topics
}

// held is what a process consumes: what it owns and, for a classic
// process, what it is still revoking (it commits those before it lets
// them go).
func (p *process) held() []tp {
	return slices.Concat(p.owned, p.revoking, p.kept)
}

// keepRevoked is Bugs.ClassicKeepRevoked: a classic client of a migrating
// group goes on consuming what it revokes.
func (p *process) keepRevoked(ts []tp) {
	if p.w.opts.Bugs.ClassicKeepRevoked && p.g.mig != nil {
		p.kept = append(p.kept, ts...)
	}
}

// storeFilter is what a store write keeps of a batch under the harness
// bugs that drop records.
func (w *world) storeFilter(recs []group.Record) []group.Record {
	recs = w.opts.Bugs.filter(recs)
	if !w.opts.Bugs.DropConvertedGroupRecords {
		return recs
	}
	for _, r := range recs {
		classicGone := r.Type == group.RecordGroupMetadata && r.Metadata == nil
		consumerGone := r.Consumer != nil && r.Consumer.Type == consumer.RecordGroupEpoch && r.Consumer.GroupEpoch == nil
		if (classicGone || consumerGone) && w.chk.isMigrating(r.Group) {
			if w.dropped == nil {
				w.dropped = map[string]bool{}
			}
			w.dropped[r.Group] = true
		}
	}
	var keep []group.Record
	for _, r := range recs {
		if !w.dropped[r.Group] || r.Type == group.RecordOffsetCommit {
			keep = append(keep, r)
		}
	}
	return keep
}

// groupType is a group's type in the machine that owns it: classic,
// consumer, or "" (no such group, or the coordinator is down).
func (w *world) groupType(id string) string {
	m := w.coord.machine(id)
	if m == nil {
		return ""
	}
	return m.GroupType(id)
}

// mstate is what the migration checkers saw of a migrating group after the
// last step.
type mstate struct {
	typ      string
	epoch    int32 // classic generation or consumer group epoch
	members  int
	consumer int // consumer-protocol members
}

func (w *world) migState(id string) mstate {
	s := mstate{typ: w.groupType(id)}
	switch s.typ {
	case inspect.TypeClassic:
		_, s.epoch = w.coord.machine(id).GroupState(id)
		s.members = len(w.describe(id).Members)
	case inspect.TypeConsumer:
		_, s.epoch = w.coord.machine(id).ConsumerGroupState(id)
		for _, mem := range w.describeConsumer(id).Members {
			s.members++
			if mem.MemberType != 0 {
				s.consumer++
			}
		}
	}
	return s
}

// memberSet returns the member ids of a group, of whichever type it is,
// each with the epoch the coordinator holds it at: a consumer group's
// member epoch, or a classic group's generation.
func (w *world) memberSet(id string) map[string]int32 {
	out := map[string]int32{}
	switch w.groupType(id) {
	case inspect.TypeClassic:
		_, gen := w.coord.machine(id).GroupState(id)
		for _, mem := range w.describe(id).Members {
			out[mem.MemberID] = gen
		}
	case inspect.TypeConsumer:
		for _, mem := range w.describeConsumer(id).Members {
			out[mem.MemberID] = mem.MemberEpoch
		}
	}
	return out
}

// onMigrateTake: a process of a migrating group takes partitions; no
// other process that is still a member holds any of them. A process the
// coordinator no longer counts as a member (fenced while it was paused,
// say) holds nothing anybody acknowledged, and a take by one is a zombie's.
func (c *checker) onMigrateTake(p *process, added []tp) {
	if len(added) == 0 {
		return
	}
	p.forgetFenced(added)
	if c.w.coord.machine(p.g.id) == nil {
		c.w.count("run.migrate-take-while-down")
		return
	}
	members := c.w.memberSet(p.g.id)
	if _, ok := members[p.memberID]; !ok {
		c.w.count("run.migrate-take-after-fenced")
		return
	}
	classic := c.w.groupType(p.g.id) == inspect.TypeClassic
	for _, q := range p.g.procs {
		qEpoch, isMember := members[q.memberID]
		if q == p || !q.alive || q.memberID == "" || !isMember {
			continue
		}
		// The classic protocol's own window, which its checkers allow:
		// a join completes with a static member that did not rejoin
		// (paused, or gone without a leave) kept in the group, and the
		// leader hands out what it held before it has heard of the new
		// generation. It gives them up at its next request.
		olderGen := classic && p.cm == nil && q.cm == nil && q.generation < p.generation
		// The same window carried across an upgrade: the classic member
		// was kept at a later generation than the one it last heard of,
		// so what it still holds from that older generation is not what
		// the group gave it; the consumer group took over the later
		// generation's assignment, and the member's next request (its
		// generation now stale) makes it give up the rest.
		staleClassic := !classic && q.cm == nil && q.generation < qEpoch
		held := q.held()
		for _, t := range added {
			if !q.claims(held, t) {
				c.count(ckMOwned)
				continue
			}
			switch {
			case olderGen:
				c.w.count("run.migrate-take-from-older-generation")
			case staleClassic:
				c.w.count("run.migrate-take-from-stale-classic")
			default:
				c.count(ckMOwned)
				c.fail(ckMOwned, "group %s: %s (%s member %s) takes %v while %s (%s member %s) still holds it",
					p.g.id, p.name, kindName(p.cm != nil), p.memberID, t, q.name, kindName(q.cm != nil), q.memberID)
				return
			}
		}
	}
}

// noteFenced marks as a zombie's what each live process of a migrating
// group holds while the coordinator does not count it as a member: the
// group has lost those partitions (a classic member removed on session
// expiry learns it only at its next request), so another member may take
// them, and they stay lost when the process rejoins under its old member
// id (a consumer group takes such a join as a new member's).
func (c *checker) noteFenced(g *groupSpec, members map[string]int32) {
	for _, q := range g.procs {
		if _, ok := members[q.memberID]; !q.alive || q.memberID == "" || ok {
			continue
		}
		for _, t := range q.held() {
			if q.fencedHeld == nil {
				q.fencedHeld = map[tp]bool{}
			}
			q.fencedHeld[t] = true
		}
	}
}

// claims reports whether a process that is a member holds t (of held, its
// holdings) as a member: a zombie's holding is not a claim.
func (p *process) claims(held []tp, t tp) bool {
	return slices.Contains(held, t) && !p.fencedHeld[t]
}

// forgetFenced: what a process takes again is a member's holding.
func (p *process) forgetFenced(added []tp) {
	for _, t := range added {
		delete(p.fencedHeld, t)
	}
}

// mpre is what the migration checkers note before a step.
type mpre map[string]mstate

func (c *checker) beforeMigrate() mpre {
	if len(c.mids) == 0 {
		return nil
	}
	// What the last step (or load) left: nothing else moves a group.
	out := mpre{}
	for _, id := range c.mids {
		out[id] = c.mobs[id]
	}
	return out
}

// afterMigrate checks the type changes of one step.
func (c *checker) afterMigrate(ev group.Event, was mpre) {
	for _, id := range c.mids {
		prev, now := was[id], c.w.migState(id)
		c.mobs[id] = now
		if now.typ != "" {
			c.noteFenced(c.groups[id].spec, c.w.memberSet(id))
		}
		c.count(ckMType)
		if prev.typ != now.typ && prev.members > 0 {
			c.count(ckMEpoch)
		}
		if check, msg := migrateRule(id, prev, now, ev); check != "" {
			c.fail(check, "%s", msg)
			return
		}
		if prev.typ == now.typ || prev.typ == "" {
			continue
		}
		c.w.count("run.migrate-to-" + now.typ)
		c.w.logf("group %s converted %s -> %s on %s (epoch %d -> %d, %d -> %d members)", id, prev.typ, now.typ, eventName(ev), prev.epoch, now.epoch, prev.members, now.members)
		gc := c.groups[id]
		if prev.members > 0 {
			c.w.count("run.migrate-online-to-" + now.typ)
		} else {
			// An empty group is replaced by a new one: its
			// generations start again.
			gc.maxSyncGen, gc.maxObsGen = -1, 0
		}
		// Generations are numbered per classic incarnation; a
		// downgrade's own record stays, so that a static member
		// replaced at its generation is checked as it is.
		downgrade := gc.records[now.epoch]
		gc.delivered = map[int32]map[tp]string{}
		gc.records = map[int32]*group.GroupMetadata{}
		if now.typ == inspect.TypeClassic && downgrade != nil {
			gc.records[now.epoch] = downgrade
		}
	}
}

// migrateRule checks one step's change of a migrating group, from prev to
// now, against the migration rules (with a policy that allows both ways),
// and returns the checker that fails and why, or "".
func migrateRule(id string, prev, now mstate, ev group.Event) (check, msg string) {
	if now.typ == inspect.TypeConsumer && now.members > 0 && now.consumer == 0 {
		return ckMType, fmt.Sprintf("group %s is a consumer group of %d classic members and no consumer-protocol member; it should have been downgraded", id, now.members)
	}
	if prev.typ == now.typ || prev.typ == "" {
		return "", ""
	}
	switch now.typ {
	case "":
		return ckMType, fmt.Sprintf("group %s (%s) disappeared; the simulation deletes no groups", id, prev.typ)
	case inspect.TypeConsumer:
		req, _ := ev.(group.Request)
		if _, ok := req.Msg.(*kmsg.ConsumerGroupHeartbeatRequest); !ok {
			return ckMType, fmt.Sprintf("group %s became a consumer group on %s, not on a ConsumerGroupHeartbeat", id, eventName(ev))
		}
	}
	if prev.members > 0 && now.epoch < prev.epoch {
		return ckMEpoch, fmt.Sprintf("group %s converted %s -> %s with %d members: epoch went back %d -> %d", id, prev.typ, now.typ, prev.members, prev.epoch, now.epoch)
	}
	return "", ""
}

// eventName names an event for a checker's message.
func eventName(ev group.Event) string {
	if req, ok := ev.(group.Request); ok {
		return fmt.Sprintf("%T", req.Msg)
	}
	return fmt.Sprintf("%T", ev)
}

// checkDurableType: the store never holds both types of a migrating group.
func (c *checker) checkDurableType() {
	for _, id := range c.mids {
		c.count(ckMType)
		_, consumerDurable := c.cgroups[id].dur.groupEpoch()
		if c.groups[id].durMeta != nil && consumerDurable {
			c.fail(ckMType, "group %s: the store holds both a classic and a consumer group", id)
			return
		}
	}
}

// durableType is the type of a migrating group the store holds.
func (c *checker) durableType(id string) string {
	switch _, ok := c.cgroups[id].dur.groupEpoch(); {
	case ok:
		return inspect.TypeConsumer
	case c.groups[id].durMeta != nil:
		return inspect.TypeClassic
	}
	return ""
}

// onLoadMigrate: a freshly loaded migrating group is of the type the
// store holds (a crash mid-conversion leaves the old group or the new
// one), and its offsets are exactly the durable ones.
func (c *checker) onLoadMigrate(why string) {
	for _, id := range c.mids {
		c.count(ckMType)
		typ, want := c.w.groupType(id), c.durableType(id)
		if want == "" && typ == inspect.TypeClassic {
			// A group known only by its offsets comes back as an
			// empty classic group.
			want = typ
		}
		if typ != want {
			c.fail(ckMType, "group %s is %q after %s; the store holds a %q group", id, typ, why, want)
			return
		}
		c.mobs[id] = c.w.migState(id)
		if typ == inspect.TypeClassic {
			c.groups[id].restoreRecord()
		}
		c.checkOffsetsAfterLoad(id, typ != "", why)
	}
}

// restoreRecord: a load that brings a classic group back (undoing an
// upgrade the store never held) brings back its persisted assignment
// record, which the conversion cleared from the records seen, so a static
// member replaced at that generation is checked as a replacement, not as
// a new generation's complete assignment.
func (gc *gcheck) restoreRecord() {
	m := gc.durMeta
	if m == nil || len(m.Members) == 0 {
		return
	}
	if _, ok := gc.records[m.Generation]; !ok {
		gc.records[m.Generation] = m
	}
}

// isMigrating reports whether id is a migrating group.
func (c *checker) isMigrating(id string) bool {
	g := c.groups[id]
	return g != nil && g.spec.mig != nil
}

// migratingConverged reports whether a migrating group has settled: as a
// classic group of classic processes, or as a consumer group of processes
// of both kinds.
func (w *world) migratingConverged(g *groupSpec, live []*process) (bool, string) {
	if g.mig.starting > 0 {
		return false, fmt.Sprintf("group %s: %d replacements not started", g.id, g.mig.starting)
	}
	m := w.coord.machine(g.id)
	switch w.groupType(g.id) {
	case inspect.TypeConsumer:
		return w.consumerConverged(g, m)
	case inspect.TypeClassic:
		for _, pr := range live {
			if pr.cm != nil {
				return false, fmt.Sprintf("group %s is classic but consumer-protocol process %s is live", g.id, pr.name)
			}
		}
		return w.classicConverged(g, live)
	}
	if len(live) > 0 {
		return false, fmt.Sprintf("group %s does not exist", g.id)
	}
	return true, ""
}

// migrateRefused handles a join a group of the other type refused: the
// process tries again after a backoff. It reports whether code was such a
// refusal.
func (p *process) migrateRefused(code int16) bool {
	if p.g.mig == nil {
		return false
	}
	switch {
	case p.cm != nil && code == kerr.GroupIDNotFound.Code:
		p.w.count("run.migrate-consumer-refused")
		if p.cm.epoch != 0 {
			p.cReset(errName(code))
		}
		p.cm.full = true
	case p.cm == nil && code == kerr.InconsistentGroupProtocol.Code:
		p.w.count("run.migrate-classic-refused")
		p.state = psNew
	default:
		return false
	}
	// Longer than a retry's backoff: the process is restarted.
	p.backoffUntil = p.w.now.Add(p.w.between(500*time.Millisecond, 3*time.Second))
	return true
}

// onSyncMigrating checks an assignment a classic process of a migrating
// group received: only subscribed topics, and nothing another member still
// holds.
func (c *checker) onSyncMigrating(p *process, assigned []tp) {
	for _, t := range assigned {
		if !slices.Contains(p.topics, t.topic) {
			c.fail(ckAssignDeliv, "group %s: %s received %v of a topic it does not subscribe to", p.g.id, p.name, t)
			return
		}
	}
	had := tpSet(p.held())
	var added []tp
	for _, t := range assigned {
		if !had[t] {
			added = append(added, t)
		}
	}
	c.onMigrateTake(p, added)
}
