package sim

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/inspect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Consumer-protocol (KIP-848) groups in the simulation. A process of a
// consumer group speaks ConsumerGroupHeartbeat instead of JoinGroup,
// SyncGroup and Heartbeat, and reconciles as the Java and franz-go clients
// do: it joins with epoch 0 and an empty owned list, heartbeats at the
// interval the coordinator gives, and when a heartbeat brings a new
// assignment it commits and drops what the assignment no longer holds,
// takes what is new, and acknowledges by sending the partitions it now
// owns. After an error or a request that timed out it sends every field
// again, which is how a lost response is made good: the coordinator
// accepts the previous epoch from a member that owns nothing it was not
// given. FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID lose the partitions
// (nothing is committed) and rejoin with epoch 0; FENCED_INSTANCE_ID and
// UNRELEASED_INSTANCE_ID are fatal, as in the Java client.
//
// The broker's topics are the world's (world.topics): consumer groups'
// topics can gain partitions and new topics can appear, which the
// coordinator learns as TopicsChanged, and members change their
// subscriptions by names or by regular expression.

// Mix selects which group types a run has.
type Mix uint8

// The mixes. The zero value is classic groups only, the runs the simulator
// had before consumer groups: its seeds replay the same traces.
const (
	MixClassic  Mix = iota // classic groups only
	MixBoth                // classic groups and, for most seeds, a consumer group
	MixConsumer            // consumer groups only
	MixMigrate             // groups rolled between the protocols only
)

func (m Mix) String() string {
	return [...]string{"classic", "both", "consumer", "migrate"}[m]
}

// ParseMix reads a Mix by name.
func ParseMix(s string) (Mix, error) {
	for m := MixClassic; m <= MixMigrate; m++ {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown mix %q (classic, both, consumer, migrate)", s)
}

// cparams are the consumer-protocol knobs a seed chooses.
type cparams struct {
	session, hb time.Duration // the coordinator's session timeout and heartbeat interval
	weights     [numCFaults]int
}

type cfaultKind int

const (
	cfSubscribe cfaultKind = iota
	cfTopicGrow
	cfTopicCreate
	numCFaults
)

var cfaultNames = [numCFaults]string{
	cfSubscribe:   "consumer-subscription-change",
	cfTopicGrow:   "consumer-topic-grows",
	cfTopicCreate: "consumer-topic-created",
}

// topicID is a topic's id in the broker's metadata: derived from its name,
// so it is the same in every incarnation.
func topicID(name string) consumer.TopicID {
	var id consumer.TopicID
	h := fnv.New128a()
	h.Write([]byte(name))
	copy(id[:], h.Sum(nil))
	return id
}

// setupConsumer draws the consumer groups of a run and the coordinator's
// consumer settings.
func (w *world) setupConsumer() {
	cp := &w.cp
	cp.session = pick(w, []time.Duration{6 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second})
	cp.hb = cp.session / time.Duration(3+w.intn(4))
	for k := range cp.weights {
		if w.chance(0.7) {
			cp.weights[k] = 1 + w.intn(3)
		}
	}
	n := 1
	switch {
	case w.opts.Mix == MixMigrate:
		n = 0
	case w.opts.Mix == MixBoth && w.chance(0.3):
		n = 0
	case w.chance(0.25):
		n = 2
	}
	for i := range n {
		g := &groupSpec{id: fmt.Sprintf("c%d", i), topics: map[string]int32{}, consumer: true}
		for range 1 + w.intn(3) {
			w.createTopic(g)
		}
		g.staticP = pick(w, []float64{0, 0, 0.5, 1})
		w.groups = append(w.groups, g)
		w.chk.addConsumerGroup(g)
	}
	w.p.maxSession = max(w.p.maxSession, cp.session)
	// Reconciliation takes a few heartbeats after the last member
	// settles: one to learn the new target, one to acknowledge the
	// revocation, one to take the released partitions.
	w.p.consumerSlack = 4 * cp.hb
}

// createTopic adds a topic to a consumer group's topics and the broker's.
func (w *world) createTopic(g *groupSpec) string {
	name := fmt.Sprintf("%s.t%d", g.id, len(g.names))
	n := w.drawPartitions()
	g.topics[name] = n
	g.names = append(g.names, name)
	sort.Strings(g.names)
	if w.topicIDs == nil {
		w.topicIDs = map[consumer.TopicID]string{}
	}
	w.topicIDs[topicID(name)] = name
	return name
}

// brokerTopics is the broker's topic metadata: every consumer group's
// topics, sorted by name.
func (w *world) brokerTopics() []group.Topic {
	var out []group.Topic
	for _, g := range w.groups {
		if !g.consumer && g.mig == nil {
			continue
		}
		for _, n := range g.names {
			out = append(out, group.Topic{Name: n, ID: topicID(n), Partitions: g.topics[n]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// consumerConfig is the coordinator's consumer-protocol configuration for
// incarnation inc.
func (w *world) consumerConfig(inc int) consumer.Config {
	return consumer.Config{
		SessionTimeout:    w.cp.session,
		HeartbeatInterval: w.cp.hb,
		NewMemberID:       consumer.SequentialMemberIDs(fmt.Sprintf("cm-%d.", inc)),
	}
}

// injectConsumerFault injects one of the consumer-protocol faults.
func (w *world) injectConsumerFault() {
	var gs []*groupSpec
	for _, g := range w.groups {
		if g.consumer {
			gs = append(gs, g)
		}
	}
	if len(gs) == 0 {
		return
	}
	i, ok := w.weighted(w.cp.weights[:])
	if !ok {
		return
	}
	k := cfaultKind(i)
	g := pick(w, gs)
	switch k {
	case cfSubscribe:
		live := g.live()
		if len(live) == 0 {
			return
		}
		pr := pick(w, live)
		pr.cm.subscribe(pr)
		pr.cm.subChanged = true
		pr.cm.subGen++
		pr.logf("subscribes to names=%v regex=%q", pr.cm.names, pr.cm.regex)
		pr.do(pr.kick)
	case cfTopicGrow:
		t := pick(w, g.names)
		g.topics[t] += int32(1 + w.intn(4))
		w.logf("topic %s now has %d partitions", t, g.topics[t])
		w.coord.topicsChanged()
	case cfTopicCreate:
		if len(g.names) >= 5 {
			return
		}
		t := w.createTopic(g)
		w.logf("topic %s created with %d partitions", t, g.topics[t])
		w.coord.topicsChanged()
	}
	w.count("fault." + cfaultNames[k])
	w.logf("fault %s group=%s", cfaultNames[k], g.id)
}

// cmember is the consumer-protocol state of a process.
type cmember struct {
	version  int16 // ConsumerGroupHeartbeat v0 (the coordinator names the member) or v1
	epoch    int32 // 0: must (re)join
	acked    int32 // highest epoch received since the member last lost its membership
	names    []string
	regex    string // when set, the subscription is this pattern (v1)
	assignor *string

	full       bool // the next heartbeat sends every field
	subChanged bool // the next heartbeat sends the subscription
	subGen     int  // counts subscription changes, so a reply clears subChanged only for the one its request carried
	ackPending bool // the next heartbeat sends the owned partitions, at once
	target     []tp // an assignment received and not reconciled yet
	reported   []tp // what the member says it owns (Bugs.ConsumerKeepRevoked)
	nextID     int
}

// newConsumerProcess creates a consumer-protocol client process of g.
func newConsumerProcess(w *world, g *groupSpec, id int, instanceID string) *process {
	p := &process{
		w:            w,
		g:            g,
		id:           id,
		name:         fmt.Sprintf("p%d", id),
		clientID:     g.id + "-client",
		instanceID:   instanceID,
		generation:   -1,
		lastGen:      -1,
		positions:    map[tp]int64{},
		committed:    map[tp]int64{},
		unpositioned: map[tp]bool{},
		cm:           &cmember{version: int16(w.intn(2))},
	}
	p.session = w.cp.session
	p.hb = w.cp.hb
	p.rebalance = pick(w, []time.Duration{p.session, 2 * p.session, 30 * time.Second, 60 * time.Second})
	p.reqTimeout = p.session/2 + w.between(0, p.session*4/10)
	// OffsetCommit v9 carries the member epoch; older versions are refused
	// to consumer-protocol members.
	p.v = versions{commit: 9, fetch: int16(1 + w.intn(7))}
	if w.chance(0.5) {
		p.cm.assignor = kmsg.StringPtr(pick(w, []string{consumer.AssignorUniform, consumer.AssignorRange}))
	}
	p.cm.names = g.names
	for _, q := range g.procs {
		if instanceID != "" && q.instanceID == instanceID && q.cm != nil {
			p.cm.names, p.cm.regex, p.cm.version = q.cm.names, q.cm.regex, q.cm.version
		}
	}
	if instanceID == "" && g.mig == nil && w.chance(0.3) {
		p.cm.subscribe(p)
	}
	w.logf("new consumer process %s group=%s instance=%q v%d names=%v regex=%q assignor=%v rebalance=%v reqTimeout=%v",
		p.name, g.id, instanceID, p.cm.version, p.cm.names, p.cm.regex, strOr(p.cm.assignor, "default"), p.rebalance, p.reqTimeout)
	return p
}

func strOr(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}

// subscribe draws a new subscription: some of the group's topics by name,
// or (v1) a pattern over them, which also matches topics created later.
func (c *cmember) subscribe(p *process) {
	w := p.w
	g := p.g
	if c.version >= 1 && w.chance(0.4) {
		c.names = nil
		c.regex = pick(w, []string{
			regexp.QuoteMeta(g.id) + `\..*`,
			regexp.QuoteMeta(g.id) + `\.t[0-2]`,
			regexp.QuoteMeta(g.id) + `\.t[13579]`,
		})
		return
	}
	c.regex = ""
	var sub []string
	for _, t := range g.names {
		if w.chance(0.6) {
			sub = append(sub, t)
		}
	}
	if len(sub) == 0 {
		sub = []string{pick(w, g.names)}
	}
	c.names = sub
}

// subscribedTopics resolves a process's subscription against the broker's
// topics, as the coordinator does.
func (p *process) subscribedTopics() []string {
	c := p.cm
	if c.regex == "" {
		var out []string
		for _, n := range c.names {
			if _, ok := p.g.topics[n]; ok {
				out = append(out, n)
			}
		}
		return out
	}
	re := regexp.MustCompile(`^(?:` + c.regex + `)$`)
	var out []string
	for _, n := range p.g.names {
		if re.MatchString(n) {
			out = append(out, n)
		}
	}
	return out
}

// cKick decides a consumer-protocol process's next request.
func (p *process) cKick() {
	w := p.w
	c := p.cm
	switch {
	case c.target != nil:
		p.cReconcile()
	case p.leaving:
		if !p.leaveCommitted && c.epoch > 0 && p.hasProgress() {
			p.commit(p.owned, func() { p.leaveCommitted = true })
			return
		}
		p.leaveCommitted = true
		if !p.sendLeave || p.memberID == "" || c.epoch <= 0 {
			p.finish()
			return
		}
		p.cLeave()
	case c.epoch == 0:
		p.cJoin()
	case len(p.unpositioned) > 0:
		p.fetch()
	case !w.now.Before(p.nextCommit) && p.hasProgress():
		p.commit(p.owned, nil)
	case !w.now.Before(p.nextHB) || c.full || c.subChanged || c.ackPending:
		p.cHeartbeat()
	default:
		if !w.now.Before(p.nextCommit) {
			p.nextCommit = w.now.Add(w.p.commitEvery)
		}
		p.wake(minTime(p.nextHB, p.nextCommit))
	}
}

// cReconcile applies an assignment: commit what is given up, drop it, take
// what is new, and acknowledge.
func (p *process) cReconcile() {
	keep := tpSet(p.cm.target)
	var revoked []tp
	for _, t := range p.owned {
		if !keep[t] {
			revoked = append(revoked, t)
		}
	}
	if len(revoked) == 0 {
		p.cTake()
		p.kick()
		return
	}
	p.logf("revoke %s", fmtTPs(revoked))
	p.commit(revoked, func() {
		if p.cm.target != nil {
			p.cTake()
		}
	})
}

// cTake finishes a reconciliation: the process owns its assignment.
func (p *process) cTake() {
	c := p.cm
	target := c.target
	c.target = nil
	had := tpSet(p.owned)
	keep := tpSet(target)
	var added []tp
	for _, t := range target {
		if !had[t] {
			added = append(added, t)
			p.unpositioned[t] = true
		}
	}
	owned := target
	for _, t := range p.owned {
		if !keep[t] {
			delete(p.positions, t)
			delete(p.committed, t)
			delete(p.unpositioned, t)
			if p.w.opts.Bugs.ConsumerKeepRevoked {
				owned = append(slices.Clone(owned), t)
			}
		}
	}
	if len(added) > 0 {
		p.logf("epoch %d takes %s", c.epoch, fmtTPs(added))
		p.w.chk.onTake(p, added)
	}
	sortTPs(owned)
	p.owned = owned
	c.reported = target
	c.ackPending = true
}

func tpSet(ts []tp) map[tp]bool {
	s := make(map[tp]bool, len(ts))
	for _, t := range ts {
		s[t] = true
	}
	return s
}

// cReset is what clients do on FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID:
// the partitions are lost (nothing is committed) and the member joins
// again with epoch 0, under the same member id.
func (p *process) cReset(why string) {
	p.logf("lost membership (%s); lost %s", why, fmtTPs(p.owned))
	p.w.count("run.consumer-membership-lost")
	c := p.cm
	c.epoch, c.acked = 0, 0
	c.target, c.reported = nil, nil
	c.full, c.ackPending = true, false
	p.generation = -1
	p.owned = nil
	p.positions = map[tp]int64{}
	p.committed = map[tp]int64{}
	p.unpositioned = map[tp]bool{}
	p.retry = nil
}

// cMemberID is the member id a request carries: v1 clients make their own.
func (p *process) cMemberID() string {
	if p.memberID == "" && p.cm.version >= 1 {
		p.cm.nextID++
		p.memberID = fmt.Sprintf("%s-u%d", p.name, p.cm.nextID)
	}
	return p.memberID
}

func (p *process) cRequest(epoch int32) *kmsg.ConsumerGroupHeartbeatRequest {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = p.cm.version
	req.Group = p.g.id
	req.MemberID = p.cMemberID()
	req.MemberEpoch = epoch
	if p.instanceID != "" {
		req.InstanceID = kmsg.StringPtr(p.instanceID)
	}
	return req
}

// withSubscription fills in the member's subscription.
func (p *process) withSubscription(req *kmsg.ConsumerGroupHeartbeatRequest) {
	c := p.cm
	if c.regex != "" {
		req.SubscribedTopicRegex = kmsg.StringPtr(c.regex)
		if p.w.chance(0.5) {
			// Moving from names to a pattern: the names become empty.
			req.SubscribedTopicNames = []string{}
		}
	} else {
		req.SubscribedTopicNames = slices.Clone(c.names)
		if req.SubscribedTopicNames == nil {
			req.SubscribedTopicNames = []string{}
		}
		if req.Version >= 1 {
			req.SubscribedTopicRegex = kmsg.StringPtr("")
		}
	}
}

func ownedTopics(ts []tp) []kmsg.ConsumerGroupHeartbeatRequestTopic {
	out := []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	for _, t := range fromTPs(ts) {
		rt := kmsg.NewConsumerGroupHeartbeatRequestTopic()
		rt.TopicID = topicID(t.Topic)
		rt.Partitions = t.Partitions
		out = append(out, rt)
	}
	return out
}

// cJoin joins with epoch 0 and every field.
func (p *process) cJoin() {
	req := p.cRequest(0)
	req.RebalanceTimeoutMillis = int32(p.rebalance.Milliseconds())
	req.ServerAssignor = p.cm.assignor
	p.withSubscription(req)
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	p.w.count("run.consumer-join")
	p.cSend("cjoin", req)
}

// cHeartbeat heartbeats at the member's epoch: every field after an error,
// the subscription when it changed, the owned partitions when a
// reconciliation must be acknowledged (and now and then anyway).
func (p *process) cHeartbeat() {
	c := p.cm
	req := p.cRequest(c.epoch)
	if c.full {
		req.RebalanceTimeoutMillis = int32(p.rebalance.Milliseconds())
		req.ServerAssignor = c.assignor
	}
	if c.full || c.subChanged {
		p.withSubscription(req)
	}
	if c.full || c.ackPending || p.w.chance(0.1) {
		req.Topics = ownedTopics(c.reported)
	}
	p.w.count("run.consumer-heartbeat")
	p.cSend("cheartbeat", req)
}

// cLeave leaves: the partitions are given up first, as clients revoke
// them before they send the leave; a static member usually leaves for now
// (-2) so that its next incarnation takes its place.
func (p *process) cLeave() {
	epoch := int32(-1)
	if p.instanceID != "" && p.w.chance(0.8) {
		epoch = -2
	}
	p.logf("gives up %s and leaves with epoch %d", fmtTPs(p.owned), epoch)
	p.owned, p.cm.reported = nil, nil
	req := p.cRequest(epoch)
	p.w.count("run.consumer-leave")
	p.send("cleave", req, func(kmsg.Response) { p.finish() }, p.finish)
}

func (p *process) cSend(kind string, req *kmsg.ConsumerGroupHeartbeatRequest) {
	sent, subGen := slices.Clone(p.cm.reported), p.cm.subGen
	p.send(kind, req, func(r kmsg.Response) {
		p.cOnHeartbeat(req, sent, subGen, r.(*kmsg.ConsumerGroupHeartbeatResponse))
	}, func() {
		// The response may be lost: send everything again.
		p.cm.full = true
		p.backoff()
	})
}

func (p *process) cOnHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest, sent []tp, subGen int, resp *kmsg.ConsumerGroupHeartbeatResponse) {
	w := p.w
	c := p.cm
	switch code := resp.ErrorCode; {
	case code == 0:
	case code == kerr.FencedMemberEpoch.Code || code == kerr.UnknownMemberID.Code:
		p.cReset(errName(code))
		return
	case code == kerr.FencedInstanceID.Code || code == kerr.UnreleasedInstanceID.Code:
		p.logf("%s is fatal", errName(code))
		w.count("run.consumer-fatal-" + errName(code))
		p.fatal = true
		p.alive = false
		p.out = nil
		p.conn = nil
		return
	case coordinatorError(code):
		c.full = true
		p.backoff()
		return
	case p.migrateRefused(code):
		return
	default:
		w.chk.unexpected(p, "ConsumerGroupHeartbeat", code)
		return
	}
	if resp.MemberID != nil && *resp.MemberID != "" {
		p.memberID = *resp.MemberID
	}
	w.chk.onConsumerEpoch(p, resp.MemberEpoch)
	c.epoch = resp.MemberEpoch
	c.acked = max(c.acked, resp.MemberEpoch)
	p.generation = c.epoch
	if ms := resp.HeartbeatIntervalMillis; ms > 0 {
		p.hb = time.Duration(ms) * time.Millisecond
	}
	p.nextHB = w.now.Add(p.hb)
	if req.MemberEpoch == 0 || c.full {
		p.nextCommit = w.now.Add(w.p.commitEvery)
	}
	if req.RebalanceTimeoutMillis != -1 {
		c.full = false
	}
	if (req.SubscribedTopicNames != nil || req.SubscribedTopicRegex != nil) && subGen == c.subGen {
		c.subChanged = false
	}
	if req.Topics != nil && slices.Equal(sent, c.reported) {
		c.ackPending = false
	}
	if a := resp.Assignment; a != nil {
		var target []tp
		for _, t := range a.Topics {
			name, ok := w.topicIDs[t.TopicID]
			if !ok {
				w.fail(ckCAssign, fmt.Sprintf("%s was assigned partitions of unknown topic id %x", p.name, t.TopicID))
				return
			}
			for _, part := range t.Partitions {
				target = append(target, tp{name, part})
			}
		}
		sortTPs(target)
		if target == nil {
			target = []tp{}
		}
		if !slices.Equal(target, p.owned) || !slices.Equal(target, c.reported) {
			c.target = target
		}
	}
}

// cOnCommitError handles the errors of an OffsetCommit from a consumer
// member and reports whether code was one of the membership's.
func (p *process) cOnCommitError(code int16) bool {
	switch code {
	case kerr.UnknownMemberID.Code, kerr.FencedMemberEpoch.Code:
		p.cReset("commit: " + errName(code))
		return true
	case kerr.FencedInstanceID.Code:
		p.fenced("commit")
		return true
	}
	return false
}

// describeConsumer reads a consumer group through its machine.
func (w *world) describeConsumer(id string) kmsg.ConsumerGroupDescribeResponseGroup {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Version = 1
	req.Groups = []string{id}
	resp := w.read(id, req).(*kmsg.ConsumerGroupDescribeResponse)
	return resp.Groups[0]
}

// assignmentTPs converts a described assignment to partitions by name.
func (w *world) assignmentTPs(a kmsg.Assignment) []tp {
	var out []tp
	for _, t := range a.TopicPartitions {
		name := w.topicIDs[t.TopicID]
		for _, p := range t.Partitions {
			out = append(out, tp{name, p})
		}
	}
	sortTPs(out)
	return out
}

// consumerConverged reports whether a consumer group is Stable with exactly
// its live processes as members, each at the group epoch and owning what
// the coordinator says it holds, together every subscribed partition once;
// or Empty when no process is left.
func (w *world) consumerConverged(g *groupSpec, m *group.Machine) (bool, string) {
	var live []*process
	for _, pr := range g.procs {
		if pr.alive && !pr.fatal {
			live = append(live, pr)
		}
	}
	st, epoch := m.ConsumerGroupState(g.id)
	if len(live) == 0 {
		if st != consumer.Empty && st != consumer.Dead {
			return false, fmt.Sprintf("consumer group %s has no processes but is %s", g.id, st)
		}
		return true, ""
	}
	if st != consumer.Stable {
		return false, fmt.Sprintf("consumer group %s is %s (epoch %d)", g.id, st, epoch)
	}
	d := w.describeConsumer(g.id)
	members := map[string]kmsg.ConsumerGroupDescribeResponseGroupMember{}
	for _, mem := range d.Members {
		members[mem.MemberID] = mem
	}
	if len(members) != len(live) {
		return false, fmt.Sprintf("consumer group %s has %d members for %d live processes", g.id, len(members), len(live))
	}
	owner := map[tp]string{}
	var topics []string
	for _, pr := range live {
		mem, ok := members[pr.memberID]
		if !ok {
			return false, fmt.Sprintf("consumer group %s: process %s (member %q) is not a member", g.id, pr.name, pr.memberID)
		}
		if c := pr.cm; c == nil {
			// A classic process inside a consumer group (a migrating
			// group): synced at its member epoch, the group's.
			if pr.state != psStable || pr.needRejoin || len(pr.revoking) > 0 || pr.leaving || pr.generation != epoch || mem.MemberEpoch != epoch {
				return false, fmt.Sprintf("consumer group %s: classic process %s not settled (state %v gen %d/%d, member epoch %d, rejoin %v)", g.id, pr.name, pr.state, pr.generation, epoch, mem.MemberEpoch, pr.needRejoin)
			}
		} else if c.epoch != epoch || mem.MemberEpoch != epoch || c.target != nil || c.ackPending || pr.leaving {
			return false, fmt.Sprintf("consumer group %s: process %s not settled (epoch %d/%d, member epoch %d)", g.id, pr.name, c.epoch, epoch, mem.MemberEpoch)
		}
		if got := w.assignmentTPs(mem.Assignment); !slices.Equal(got, pr.owned) {
			return false, fmt.Sprintf("consumer group %s: process %s owns %s but holds %s", g.id, pr.name, fmtTPs(pr.owned), fmtTPs(got))
		}
		for _, t := range pr.owned {
			if o, ok := owner[t]; ok {
				return false, fmt.Sprintf("consumer group %s: %v owned by %s and %s", g.id, t, o, pr.name)
			}
			owner[t] = pr.name
		}
		if pr.cm == nil {
			topics = append(topics, pr.topics...)
		} else {
			topics = append(topics, pr.subscribedTopics()...)
		}
	}
	slices.Sort(topics)
	topics = slices.Compact(topics)
	for _, t := range g.partitions(topics) {
		if _, ok := owner[t]; !ok {
			return false, fmt.Sprintf("consumer group %s: %v is subscribed but not owned by any process", g.id, t)
		}
	}
	return true, ""
}

// groupEpoch is a group's generation or, for a consumer group, its epoch.
func (w *world) groupEpoch(g *groupSpec) int32 {
	m := w.coord.machine(g.id)
	if g.consumer || g.mig != nil && w.groupType(g.id) == inspect.TypeConsumer {
		_, e := m.ConsumerGroupState(g.id)
		return e
	}
	_, gen := m.GroupState(g.id)
	return gen
}
