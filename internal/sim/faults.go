package sim

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/groupd/groupd/internal/group"
)

// params are the knobs a seed chooses once, at the start of a run.
type params struct {
	faultPhase time.Duration // faults and churn happen in [0, faultPhase)

	netMin, netMax time.Duration // normal one-way latency
	slowP          float64       // chance a message is slow (reordering)
	slowMax        time.Duration
	lossP          float64 // chance a response is lost

	groupCommit bool          // hold a batch open for a while before Apply
	flushMax    time.Duration // longest a batch stays open
	storeFailP  float64       // chance a store write fails

	faultGap time.Duration // mean gap between discrete faults
	weights  [numFaults]int

	initialDelay time.Duration
	commitEvery  time.Duration

	// Largest timeouts of any process, for the liveness bound.
	maxSession, maxRebalance, maxReqTimeout time.Duration
	// settleSlack is what the coordinator itself may add to the time
	// groups need to converge once faults stop.
	settleSlack time.Duration
	// consumerSlack is what consumer groups' reconciliation adds to it:
	// a few heartbeat intervals.
	consumerSlack time.Duration
}

type faultKind int

const (
	fMemberCrash faultKind = iota
	fMemberPause
	fStaticRestart
	fSharedInstance
	fCoordCrash
	fStoreFail
	fMemberJoin
	fMemberLeave
	numFaults
)

var faultNames = [numFaults]string{
	fMemberCrash:    "member-crash",
	fMemberPause:    "member-pause",
	fStaticRestart:  "static-restart",
	fSharedInstance: "shared-instance-id",
	fCoordCrash:     "coordinator-crash",
	fStoreFail:      "store-write-failure",
	fMemberJoin:     "member-join",
	fMemberLeave:    "member-leave",
}

// groupSpec is one consumer group of the run and the topics it consumes.
type groupSpec struct {
	id     string
	topics map[string]int32
	names  []string // sorted topic names
	// configs are the protocol lists processes of this group may be
	// started with; mixing them models a rolling upgrade.
	configs    [][]string
	staticP    float64
	nextStatic int
	procs      []*process
	// consumer marks a consumer (KIP-848) group; its topics are the
	// broker's and may grow.
	consumer bool
	// mig is set for a group rolled between the protocols (migrate.go).
	mig *migration
}

// partitions returns every partition of the given topics, sorted.
func (g *groupSpec) partitions(topics []string) []tp {
	var out []tp
	for _, t := range topics {
		for p := int32(0); p < g.topics[t]; p++ {
			out = append(out, tp{t, p})
		}
	}
	sortTPs(out)
	return out
}

var protocolConfigs = [][][]string{
	{{"range"}},
	{{"roundrobin"}},
	{{"sticky"}},
	{{"sticky", "range"}},
	{{"cooperative-sticky"}},
	{{"cooperative-sticky"}},
	// Rolling upgrades: eager members that already list the cooperative
	// assignor beside cooperative-only members, and the first step of
	// the upgrade where range is still common to all.
	{{"cooperative-sticky", "range"}, {"cooperative-sticky"}},
	{{"range"}, {"cooperative-sticky", "range"}},
}

func (w *world) setup() {
	p := &w.p
	p.faultPhase = w.between(20*time.Second, 120*time.Second)
	p.netMin = w.between(0, 2*time.Millisecond)
	p.netMax = p.netMin + w.between(1*time.Millisecond, 30*time.Millisecond)
	if w.chance(0.7) {
		p.slowP = pick(w, []float64{0.01, 0.05, 0.2})
		p.slowMax = w.between(50*time.Millisecond, 5*time.Second)
	}
	if w.chance(0.6) {
		p.lossP = pick(w, []float64{0.002, 0.01, 0.05})
	}
	p.groupCommit = w.chance(0.5)
	p.flushMax = w.between(0, 50*time.Millisecond)
	if w.chance(0.4) {
		p.storeFailP = pick(w, []float64{0.005, 0.02, 0.1})
	}
	p.faultGap = w.between(500*time.Millisecond, 10*time.Second)
	for k := range p.weights {
		if w.chance(0.7) {
			p.weights[k] = 1 + w.intn(4)
		}
	}
	p.initialDelay = pick(w, []time.Duration{-1, 0, time.Second, 3 * time.Second})
	p.commitEvery = w.between(200*time.Millisecond, 5*time.Second)

	if w.opts.Runtime {
		w.coord = newRuntimeCoord(w)
	} else {
		w.coord = newCoordinator(w)
	}
	w.chk = newChecker(w)

	ngroups := 1
	if w.opts.Mix == MixConsumer || w.opts.Mix == MixMigrate {
		ngroups = 0
	} else if w.chance(0.3) {
		ngroups = 2
	}
	for i := range ngroups {
		g := &groupSpec{id: fmt.Sprintf("g%d", i), topics: map[string]int32{}}
		w.drawTopics(g)
		g.configs = pick(w, protocolConfigs)
		g.staticP = pick(w, []float64{0, 0, 0.5, 1})
		w.groups = append(w.groups, g)
		w.chk.addGroup(g)
	}
	if w.opts.Mix != MixClassic {
		w.setupConsumer()
	}
	if w.opts.Mix == MixMigrate || w.opts.Mix == MixBoth && w.chance(0.15) {
		w.setupMigrating()
	}
	w.logf("setup faultPhase=%v net=[%v,%v] slow=%.3f/%v loss=%.3f groupCommit=%v flush=%v storeFail=%.3f faultGap=%v weights=%v initialDelay=%v",
		p.faultPhase, p.netMin, p.netMax, p.slowP, p.slowMax, p.lossP, p.groupCommit, p.flushMax, p.storeFailP, p.faultGap, p.weights, p.initialDelay)
	if w.opts.Mix != MixClassic {
		w.logf("consumer session=%v heartbeat=%v weights=%v", w.cp.session, w.cp.hb, w.cp.weights)
	}
	for _, g := range w.groups {
		switch {
		case g.consumer:
			w.logf("consumer group %s topics=%v static=%.1f", g.id, g.topics, g.staticP)
		case g.mig != nil:
			w.logf("migrating group %s topics=%v configs=%v static=%.1f passes=%d", g.id, g.topics, g.configs, g.staticP, g.mig.maxPasses)
			w.startRoll(g)
		default:
			w.logf("group %s topics=%v configs=%v static=%.1f", g.id, g.topics, g.configs, g.staticP)
		}
		for range 1 + w.intn(5) {
			pr := w.newProcess(g, "")
			w.after(w.between(0, 2*time.Second), pr.start)
		}
	}
	w.coord.start()
	w.scheduleFault()
	w.quietAt = start.Add(p.faultPhase)
	w.at(w.quietAt, w.enterQuiet)
}

// drawPartitions draws a topic's partition count: mostly a few, now and
// then many.
func (w *world) drawPartitions() int32 {
	n := int32(1 + w.intn(8))
	if w.chance(0.1) {
		n = int32(9 + w.intn(24))
	}
	return n
}

// drawTopics gives a classic (or migrating) group one to three topics.
func (w *world) drawTopics(g *groupSpec) {
	for t := range 1 + w.intn(3) {
		name := fmt.Sprintf("%s.t%d", g.id, t)
		g.topics[name] = w.drawPartitions()
		g.names = append(g.names, name)
	}
	sort.Strings(g.names)
}

// newProcess creates a client process of g. A non-empty instance id makes
// it static with that id (a restart or a second process sharing the id).
func (w *world) newProcess(g *groupSpec, instanceID string) *process {
	if g.mig != nil {
		return w.newProcessKind(g, instanceID, g.mig.toConsumer, nil)
	}
	if instanceID == "" && w.chance(g.staticP) {
		instanceID = fmt.Sprintf("%s-i%d", g.id, g.nextStatic)
		g.nextStatic++
	}
	var pr *process
	if g.consumer {
		pr = newConsumerProcess(w, g, len(w.procs), instanceID)
	} else {
		pr = newProcess(w, g, len(w.procs), instanceID, pick(w, g.configs))
	}
	return w.register(g, pr)
}

// register adds a new process to the run and its group, and its timeouts
// to the liveness bound.
func (w *world) register(g *groupSpec, pr *process) *process {
	w.procs = append(w.procs, pr)
	g.procs = append(g.procs, pr)
	w.p.maxSession = max(w.p.maxSession, pr.session)
	w.p.maxRebalance = max(w.p.maxRebalance, pr.rebalance)
	w.p.maxReqTimeout = max(w.p.maxReqTimeout, pr.reqTimeout, pr.rebalance+joinTimeoutSlack)
	return pr
}

func (w *world) scheduleFault() {
	gap := time.Duration(w.rng.ExpFloat64() * float64(w.p.faultGap))
	w.after(gap.Round(time.Millisecond), func() {
		if w.quiet {
			return
		}
		if w.opts.Mix != MixClassic && w.chance(0.3) {
			w.injectConsumerFault()
		} else {
			w.injectFault()
		}
		w.scheduleFault()
	})
}

// weighted draws an index with probability proportional to its weight;
// false if every weight is zero (nothing is drawn then).
func (w *world) weighted(weights []int) (int, bool) {
	total := 0
	for _, x := range weights {
		total += x
	}
	if total == 0 {
		return 0, false
	}
	r := w.intn(total)
	k := 0
	for ; k < len(weights); k++ {
		if r < weights[k] {
			break
		}
		r -= weights[k]
	}
	return k, true
}

func (w *world) injectFault() {
	i, ok := w.weighted(w.p.weights[:])
	if !ok {
		return
	}
	k := faultKind(i)
	g := pick(w, w.groups)
	live := g.live()
	switch k {
	case fMemberCrash:
		if len(live) == 0 {
			return
		}
		pr := pick(w, live)
		pr.crash()
		if w.chance(0.5) {
			// A dynamic consumer restarted is simply a new member;
			// a static one comes back under its instance id.
			w.after(w.between(100*time.Millisecond, 2*pr.session), func() {
				if !w.quiet {
					w.newProcess(g, pr.instanceID).start()
				}
			})
		}
	case fMemberPause:
		if len(live) == 0 {
			return
		}
		pr := pick(w, live)
		var d time.Duration
		switch w.intn(3) {
		case 0:
			d = w.between(100*time.Millisecond, pr.session)
		case 1:
			d = pr.session + w.between(0, pr.session)
		default:
			d = pr.rebalance + w.between(0, pr.session)
		}
		pr.pause(d)
	case fStaticRestart:
		statics := staticProcesses(live)
		if len(statics) == 0 {
			return
		}
		pr := pick(w, statics)
		if (g.consumer || pr.cm != nil) && w.chance(0.7) {
			// A consumer-protocol static member restarting cleanly
			// leaves with -2, so its next incarnation takes its place.
			pr.close()
		} else {
			pr.crash()
		}
		w.after(w.between(0, pr.session+pr.session/2), func() {
			if !w.quiet {
				w.newProcess(g, pr.instanceID).start()
			}
		})
	case fSharedInstance:
		statics := staticProcesses(live)
		if len(statics) == 0 {
			return
		}
		pr := pick(w, statics)
		w.newProcess(g, pr.instanceID).start()
	case fCoordCrash:
		w.coord.crashFault()
	case fStoreFail:
		if w.coord.isUp() {
			w.coord.failNextWrite(1 + w.intn(2))
		}
	case fMemberJoin:
		if len(g.procs) < 14 {
			w.newProcess(g, "").start()
		}
	case fMemberLeave:
		if len(live) == 0 {
			return
		}
		pick(w, live).close()
	}
	w.count("fault." + faultNames[k])
	if g.consumer && k != fCoordCrash && k != fStoreFail {
		w.count("fault.consumer-group-" + faultNames[k])
	}
	w.logf("fault %s group=%s", faultNames[k], g.id)
}

// live returns the group's processes that are running (maybe paused) and
// not fenced or closing.
func (g *groupSpec) live() []*process {
	var out []*process
	for _, pr := range g.procs {
		if pr.alive && !pr.fatal && !pr.leaving {
			out = append(out, pr)
		}
	}
	return out
}

// enterQuiet ends the fault phase: the network becomes reliable, paused
// processes resume, the coordinator is up, and from now on the groups must
// converge within the liveness bound.
func (w *world) enterQuiet() {
	w.quiet = true
	w.p.lossP, w.p.slowP, w.p.storeFailP = 0, 0, 0
	w.coord.stopFaults()
	if !w.coord.isUp() {
		w.coord.restart()
	}
	for _, pr := range w.procs {
		if pr.paused {
			pr.resume()
		}
	}
	for _, g := range w.groups {
		if g.mig != nil {
			w.finishRoll(g)
		}
	}
	w.deadline = w.now.Add(w.livenessBound())
	w.logf("quiet: faults stop; groups must converge by %.3fs", w.deadline.Sub(start).Seconds())
	w.after(0, w.checkConverged)
}

// livenessBound is how long after the last fault the groups may take to
// converge: a client may need a full request timeout to notice a lost
// response, then a departed member's session must expire, then a join phase
// and a sync phase (each bounded by the rebalance timeout) must finish;
// a cooperative hand-over needs a second, quick round, and the initial
// rebalance delay can stretch an empty group's first join phase.
func (w *world) livenessBound() time.Duration {
	p := w.p
	return p.maxReqTimeout + p.maxSession + 2*p.maxRebalance + 2*max(p.initialDelay, 0) + p.settleSlack + p.consumerSlack + 5*time.Second
}

// checkConverged polls convergence; once every group has converged it keeps
// running for a stability window and checks that nothing moved.
func (w *world) checkConverged() {
	w.chk.count("liveness")
	ok, why := w.converged()
	if !ok {
		if w.now.After(w.deadline) {
			w.fail("liveness", fmt.Sprintf("groups did not converge within %v after faults stopped: %s", w.livenessBound(), why))
			return
		}
		w.after(250*time.Millisecond, w.checkConverged)
		return
	}
	gens := map[string]int32{}
	for _, g := range w.groups {
		gens[g.id] = w.groupEpoch(g)
	}
	w.logf("converged")
	w.after(w.p.maxSession+time.Second, func() {
		ok, why := w.converged()
		if !ok {
			if w.now.After(w.deadline) {
				w.fail("stability", "converged groups moved again without faults after the liveness bound: "+why)
				return
			}
			w.count("run.reconverge")
			w.logf("groups moved after converging (%s); converging again", why)
			w.after(0, w.checkConverged)
			return
		}
		for _, g := range w.groups {
			if gen := w.groupEpoch(g); gen != gens[g.id] {
				// A fault's aftermath can still move a converged
				// group (a member that lost a response may miss its
				// session deadline); that is allowed within the
				// bound, so converge again.
				if w.now.After(w.deadline) {
					w.fail("stability", fmt.Sprintf("group %s rebalanced without faults after the liveness bound: generation %d -> %d", g.id, gens[g.id], gen))
					return
				}
				w.count("run.reconverge")
				w.logf("group %s moved after converging (generation %d -> %d); converging again", g.id, gens[g.id], gen)
				w.after(0, w.checkConverged)
				return
			}
		}
		w.done = true
	})
}

// converged reports whether every group is Stable with exactly its live
// processes as members, all synced to the current generation, owning
// disjoint partitions that cover every subscribed partition; or Empty when
// no process is left.
func (w *world) converged() (bool, string) {
	c := w.coord
	if !c.isUp() {
		return false, "coordinator down"
	}
	for _, g := range w.groups {
		var live []*process
		for _, pr := range g.procs {
			if pr.alive && !pr.fatal {
				live = append(live, pr)
			}
		}
		if c.machine(g.id) == nil {
			return false, fmt.Sprintf("group %s: its shard is loading", g.id)
		}
		var ok bool
		var why string
		switch {
		case g.consumer:
			ok, why = w.consumerConverged(g, c.machine(g.id))
		case g.mig != nil:
			ok, why = w.migratingConverged(g, live)
		default:
			ok, why = w.classicConverged(g, live)
		}
		if !ok {
			return false, why
		}
	}
	return true, ""
}

// classicConverged reports whether a classic group is Stable with exactly
// its live processes as members, all synced to the current generation,
// owning disjoint partitions that cover every subscribed partition; or
// Empty when no process is left.
func (w *world) classicConverged(g *groupSpec, live []*process) (bool, string) {
	c := w.coord
	{
		st, gen := c.machine(g.id).GroupState(g.id)
		if len(live) == 0 {
			if st != group.Empty && st != group.Dead {
				return false, fmt.Sprintf("group %s has no processes but is %s", g.id, st)
			}
			return true, ""
		}
		if st != group.Stable {
			return false, fmt.Sprintf("group %s is %s (generation %d)", g.id, st, gen)
		}
		d := w.describe(g.id)
		members := map[string]bool{}
		for _, m := range d.Members {
			members[m.MemberID] = true
		}
		if len(members) != len(live) {
			return false, fmt.Sprintf("group %s has %d members for %d live processes", g.id, len(members), len(live))
		}
		owner := map[tp]string{}
		var topics []string
		for _, pr := range live {
			if !members[pr.memberID] {
				return false, fmt.Sprintf("group %s: process %s (member %q) is not a member", g.id, pr.name, pr.memberID)
			}
			if pr.state != psStable || pr.needRejoin || pr.generation != gen || len(pr.revoking) > 0 || pr.leaving {
				return false, fmt.Sprintf("group %s: process %s not settled (state %v gen %d/%d rejoin %v)", g.id, pr.name, pr.state, pr.generation, gen, pr.needRejoin)
			}
			for _, t := range pr.owned {
				if o, ok := owner[t]; ok {
					return false, fmt.Sprintf("group %s: %v owned by %s and %s", g.id, t, o, pr.name)
				}
				owner[t] = pr.name
			}
			topics = append(topics, pr.topics...)
		}
		slices.Sort(topics)
		topics = slices.Compact(topics)
		for _, t := range g.partitions(topics) {
			if _, ok := owner[t]; !ok {
				return false, fmt.Sprintf("group %s: %v not owned by any process", g.id, t)
			}
		}
	}
	return true, ""
}

// staticProcesses returns the processes with a group.instance.id.
func staticProcesses(ps []*process) []*process {
	var statics []*process
	for _, pr := range ps {
		if pr.instanceID != "" {
			statics = append(statics, pr)
		}
	}
	return statics
}
