package sim

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/groupd/groupd/assign"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// tp is a topic partition.
type tp struct {
	topic string
	part  int32
}

func (t tp) String() string { return fmt.Sprintf("%s/%d", t.topic, t.part) }

func sortTPs(ts []tp) {
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].topic != ts[j].topic {
			return ts[i].topic < ts[j].topic
		}
		return ts[i].part < ts[j].part
	})
}

func toTPs(a []assign.TopicPartitions) []tp {
	var out []tp
	for _, t := range a {
		for _, p := range t.Partitions {
			out = append(out, tp{t.Topic, p})
		}
	}
	sortTPs(out)
	return out
}

func fromTPs(ts []tp) []assign.TopicPartitions {
	ts = slices.Clone(ts)
	sortTPs(ts)
	var out []assign.TopicPartitions
	for _, t := range ts {
		if len(out) == 0 || out[len(out)-1].Topic != t.topic {
			out = append(out, assign.TopicPartitions{Topic: t.topic})
		}
		last := &out[len(out)-1]
		last.Partitions = append(last.Partitions, t.part)
	}
	return out
}

func fmtTPs(ts []tp) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// versions are the request versions one client speaks.
type versions struct{ join, sync, hb, leave, commit, fetch int16 }

type pstate uint8

const (
	psNew     pstate = iota // must (re)join
	psJoining               // JoinGroup outstanding
	psSyncing               // SyncGroup outstanding
	psStable                // holds the assignment of its generation
)

func (s pstate) String() string {
	return [...]string{"new", "joining", "syncing", "stable"}[s]
}

// joinTimeoutSlack is what clients add to the rebalance timeout for a
// JoinGroup's request timeout (Java: rebalance.timeout + 5s).
const joinTimeoutSlack = 5 * time.Second

// outReq is the one request a process has outstanding. Like Kafka
// brokers, which read one request per connection at a time, a client here
// sends the next request only after the previous one was answered or timed
// out, so a connection is strictly ordered.
type outReq struct {
	seq    uint64
	kind   string
	req    kmsg.Request
	conn   *conn
	onResp func(kmsg.Response)
	onErr  func()
}

// process is one simulated consumer process: a classic-protocol Kafka
// client with its own request versions, timeouts and assignors.
type process struct {
	w           *world
	g           *groupSpec
	id          int
	name        string
	clientID    string
	instanceID  string
	protos      []string
	cooperative bool
	topics      []string
	v           versions
	metaVersion int16

	session, rebalance, hb, reqTimeout time.Duration
	resetIDOnIllegal                   bool

	alive, fatal, leaving, paused bool
	sendLeave, leaveCommitted     bool
	deferred                      []func()

	memberID   string
	generation int32
	protocol   string
	state      pstate
	needRejoin bool

	owned        []tp // sorted
	lastAssigned []tp // for the eager sticky assignor's user data
	lastGen      int32
	revoking     []tp
	kept         []tp // revoked but still consumed (Bugs.ClassicKeepRevoked)
	// fencedHeld is what the process held when the coordinator of its
	// migrating group last dropped its member: a zombie's claims, lost
	// to the group, which it keeps until it lets them go or takes them
	// again, even if it rejoins under the same member id.
	fencedHeld   map[tp]bool
	positions    map[tp]int64
	committed    map[tp]int64
	unpositioned map[tp]bool

	// cm is set for a consumer-protocol (KIP-848) client (consumer.go).
	cm *cmember

	conn         *conn
	out          *outReq
	retry        *outReq // a commit to resend after a lost response
	nextHB       time.Time
	nextCommit   time.Time
	backoffUntil time.Time
	wakeAt       time.Time
}

func newProcess(w *world, g *groupSpec, id int, instanceID string, protos []string) *process {
	p := &process{
		w:            w,
		g:            g,
		id:           id,
		name:         fmt.Sprintf("p%d", id),
		clientID:     g.id + "-client",
		instanceID:   instanceID,
		protos:       protos,
		cooperative:  len(protos) == 1 && protos[0] == "cooperative-sticky",
		generation:   -1,
		lastGen:      -1,
		positions:    map[tp]int64{},
		committed:    map[tp]int64{},
		unpositioned: map[tp]bool{},
	}
	p.session = pick(w, []time.Duration{6 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second})
	p.hb = p.session / time.Duration(3+w.intn(3))
	p.rebalance = pick(w, []time.Duration{p.session, 2 * p.session, 30 * time.Second, 60 * time.Second})
	p.reqTimeout = p.session/2 + w.between(0, p.session*4/10)
	p.resetIDOnIllegal = w.chance(0.5)
	switch {
	case instanceID != "":
		p.v = versions{join: int16(5 + w.intn(5)), sync: int16(3 + w.intn(3)), hb: int16(3 + w.intn(2)),
			leave: int16(3 + w.intn(3)), commit: int16(7 + w.intn(3)), fetch: int16(1 + w.intn(7))}
	case w.chance(0.7):
		p.v = versions{join: int16(4 + w.intn(6)), sync: int16(1 + w.intn(5)), hb: int16(1 + w.intn(4)),
			leave: int16(w.intn(6)), commit: int16(2 + w.intn(8)), fetch: int16(1 + w.intn(7))}
	default:
		p.v = versions{join: int16(w.intn(4)), sync: int16(w.intn(3)), hb: int16(w.intn(3)),
			leave: int16(w.intn(3)), commit: int16(2 + w.intn(5)), fetch: int16(1 + w.intn(5))}
	}
	if p.v.join == 0 {
		// JoinGroup v0 has no rebalance timeout; the session timeout is
		// used for both.
		p.rebalance = p.session
	}
	p.metaVersion = int16(w.intn(4))
	if p.cooperative && p.metaVersion == 0 {
		p.metaVersion = 1 + int16(w.intn(3))
	}
	p.topics = g.names
	for _, q := range g.procs {
		if instanceID != "" && q.instanceID == instanceID {
			// A restarted (or duplicated) static member runs the same
			// deployment, so it subscribes to the same topics. Kafka does
			// not rebalance when a static member rejoins a Stable group,
			// so a changed subscription would not be seen by the leader.
			p.topics = q.topics
		}
	}
	if len(g.names) > 1 && instanceID == "" && w.chance(0.25) {
		var sub []string
		for _, t := range g.names {
			if w.chance(0.5) {
				sub = append(sub, t)
			}
		}
		if len(sub) > 0 {
			p.topics = sub
		}
	}
	w.logf("new process %s group=%s instance=%q protos=%v coop=%v topics=%v versions=%+v session=%v hb=%v rebalance=%v reqTimeout=%v",
		p.name, g.id, instanceID, protos, p.cooperative, p.topics, p.v, p.session, p.hb, p.rebalance, p.reqTimeout)
	return p
}

func (p *process) logf(format string, args ...any) {
	p.w.logf(p.name+" "+format, args...)
}

// do runs fn unless the process is gone; a paused process runs it when it
// resumes, as a frozen process handles its socket and timers late.
func (p *process) do(fn func()) {
	if !p.alive {
		return
	}
	if p.paused {
		p.deferred = append(p.deferred, fn)
		return
	}
	fn()
}

func (p *process) start() {
	p.alive = true
	p.state = psNew
	p.logf("start")
	p.kick()
}

func (p *process) crash() {
	p.logf("crash")
	p.alive = false
	p.paused = false
	p.deferred = nil
	p.conn = nil
	p.out = nil
}

func (p *process) pause(d time.Duration) {
	if p.paused {
		return
	}
	p.logf("pause for %v", d)
	p.paused = true
	p.w.after(d, func() {
		if p.paused && p.alive {
			p.resume()
		}
	})
}

func (p *process) resume() {
	p.logf("resume")
	p.paused = false
	ds := p.deferred
	p.deferred = nil
	for _, fn := range ds {
		if !p.alive || p.paused {
			break
		}
		fn()
	}
	p.kick()
}

// close shuts the consumer down: commit, then LeaveGroup, except that a
// static member usually just goes away (KIP-345) and lets its session
// expire, so that a quick restart causes no rebalance.
func (p *process) close() {
	p.leaving = true
	if p.cm != nil {
		// A consumer-protocol member leaves with -1, or a static one
		// with -2, unless it just goes away.
		p.sendLeave = p.instanceID == "" || p.w.chance(0.8)
	} else {
		p.sendLeave = p.instanceID == "" || p.w.chance(0.3)
	}
	p.logf("close (leave=%v)", p.sendLeave)
	p.kick()
}

func (p *process) finish() {
	p.logf("closed")
	p.alive = false
	p.conn = nil
	p.out = nil
}

func (p *process) wake(t time.Time) {
	if !p.wakeAt.IsZero() && !p.wakeAt.After(t) && p.wakeAt.After(p.w.now) {
		return
	}
	p.wakeAt = t
	p.w.at(t, func() {
		if p.wakeAt.Equal(t) {
			p.wakeAt = time.Time{}
		}
		p.do(p.kick)
	})
}

func (p *process) backoff() {
	p.backoffUntil = p.w.now.Add(p.w.between(50*time.Millisecond, 500*time.Millisecond))
}

// kick decides the process's next request when it has none outstanding.
func (p *process) kick() {
	w := p.w
	if !p.alive || p.paused || p.out != nil {
		return
	}
	if w.now.Before(p.backoffUntil) {
		p.wake(p.backoffUntil)
		return
	}
	if r := p.retry; r != nil {
		p.retry = nil
		w.count("run.commit-retry")
		p.logf("retry %s", r.kind)
		p.send(r.kind, r.req, r.onResp, r.onErr)
		return
	}
	if p.cm != nil {
		p.cKick()
		return
	}
	switch {
	case len(p.revoking) > 0:
		// Cooperative: commit what is being given up, then rejoin.
		revoking := p.revoking
		p.commit(revoking, func() {
			for _, t := range revoking {
				delete(p.positions, t)
				delete(p.committed, t)
			}
			p.keepRevoked(revoking)
			p.revoking = nil
			p.needRejoin = true
		})
	case p.leaving:
		if !p.leaveCommitted && p.state == psStable && p.hasProgress() {
			p.commit(p.owned, func() { p.leaveCommitted = true })
			return
		}
		p.leaveCommitted = true
		if !p.sendLeave || p.memberID == "" {
			p.finish()
			return
		}
		p.leave()
	case p.state == psNew || p.needRejoin:
		if !p.cooperative && len(p.owned) > 0 {
			// Eager: commit, then revoke everything before joining.
			if p.state == psStable && p.hasProgress() {
				p.commit(p.owned, p.revokeAll)
				return
			}
			p.revokeAll()
		}
		p.join()
	case p.state == psStable:
		switch {
		case len(p.unpositioned) > 0:
			p.fetch()
		case !w.now.Before(p.nextCommit) && p.hasProgress():
			p.commit(p.owned, nil)
		case !w.now.Before(p.nextHB):
			p.heartbeat()
		default:
			if !w.now.Before(p.nextCommit) {
				p.nextCommit = w.now.Add(w.p.commitEvery)
			}
			p.wake(minTime(p.nextHB, p.nextCommit))
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// hasProgress consumes: every positioned owned partition advances by a
// random amount, and reports whether any is ahead of its last commit.
func (p *process) hasProgress() bool {
	any := false
	for _, t := range p.owned {
		if p.unpositioned[t] {
			continue
		}
		if _, ok := p.positions[t]; !ok {
			continue
		}
		p.positions[t] += int64(p.w.intn(20))
		if p.positions[t] > p.committed[t] {
			any = true
		}
	}
	return any
}

func (p *process) revokeAll() {
	p.logf("revoke all %s", fmtTPs(p.owned))
	p.keepRevoked(p.owned)
	p.owned = nil
	p.positions = map[tp]int64{}
	p.committed = map[tp]int64{}
	p.unpositioned = map[tp]bool{}
}

// reset is what clients do on UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION:
// the partitions are lost (not revoked: nothing is committed) and the
// process joins again, as a new member when the id is reset.
func (p *process) reset(clearID bool, why string) {
	p.logf("reset (%s) clearID=%v lost %s", why, clearID, fmtTPs(p.owned))
	if clearID {
		p.memberID = ""
	}
	p.generation = -1
	p.owned, p.lastAssigned, p.revoking, p.kept = nil, nil, nil, nil
	p.lastGen = -1
	p.positions = map[tp]int64{}
	p.committed = map[tp]int64{}
	p.unpositioned = map[tp]bool{}
	p.retry = nil
	p.state = psNew
	p.needRejoin = false
}

// lostMembership handles the errors of a SyncGroup, Heartbeat or
// OffsetCommit that end the process's membership, as clients do, and
// reports whether code was one of them.
func (p *process) lostMembership(api string, code int16) bool {
	switch code {
	case kerr.UnknownMemberID.Code:
		p.reset(true, api+": UNKNOWN_MEMBER_ID")
	case kerr.IllegalGeneration.Code:
		p.reset(p.resetIDOnIllegal, api+": ILLEGAL_GENERATION")
	case kerr.FencedInstanceID.Code:
		p.fenced(api)
	default:
		return false
	}
	return true
}

func (p *process) fenced(api string) {
	p.logf("fenced by %s: FENCED_INSTANCE_ID is fatal", api)
	p.w.count("run.fenced-process")
	p.fatal = true
	p.alive = false
	p.out = nil
	p.conn = nil
}

// coordinatorError reports whether code means "find the coordinator again
// and retry".
func coordinatorError(code int16) bool {
	switch code {
	case kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code:
		return true
	}
	return false
}

func (p *process) send(kind string, req kmsg.Request, onResp func(kmsg.Response), onErr func()) {
	w := p.w
	w.reqSeq++
	o := &outReq{seq: w.reqSeq, kind: kind, req: req, onResp: onResp, onErr: onErr}
	p.out = o
	timeout := p.reqTimeout
	if kind == "join" {
		timeout = p.rebalance + joinTimeoutSlack
	}
	w.sendRequest(p, o)
	w.after(timeout, func() {
		p.do(func() {
			if p.out == o {
				w.count("run.request-timeout")
				if kind != "heartbeat" && kind != "leave" {
					// The client resends (commit) or redoes (join,
					// sync, fetch) what it never heard back about.
					w.count("fault.retry-after-loss")
				}
				p.logf("%s timed out; reconnecting", kind)
				p.netError(o)
			}
		})
	})
}

// netError fails the outstanding request: the connection is gone.
func (p *process) netError(o *outReq) {
	if p.out != o {
		return
	}
	p.out = nil
	if p.conn != nil {
		// The client closes the connection with a reset, which also
		// discards whatever it still had in flight: a request it gave
		// up on never reaches the coordinator after its retry.
		p.conn.dead = true
	}
	p.conn = nil
	o.onErr()
	p.kick()
}

// receive handles a response arriving on connection c.
func (p *process) receive(c *conn, seq uint64, msg kmsg.Response) {
	p.do(func() {
		if p.conn != c || p.out == nil || p.out.seq != seq {
			return
		}
		o := p.out
		p.out = nil
		o.onResp(msg)
		p.kick()
	})
}

func (p *process) subscription(proto string) []byte {
	md := assign.Metadata{Topics: p.topics, Generation: -1}
	switch {
	case p.cooperative:
		md.Owned = fromTPs(p.owned)
		md.Generation = p.lastGen
		if p.metaVersion < 2 {
			md.UserData = binary.BigEndian.AppendUint32(nil, uint32(p.lastGen))
		}
	case proto == "sticky" && len(p.lastAssigned) > 0:
		md.UserData = assign.EncodeStickyUserData(assign.StickyUserData{Owned: fromTPs(p.lastAssigned), Generation: p.lastGen})
	}
	return md.Encode(p.metaVersion)
}

func (p *process) join() {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = p.v.join
	req.Group = p.g.id
	req.SessionTimeoutMillis = int32(p.session.Milliseconds())
	req.RebalanceTimeoutMillis = int32(p.rebalance.Milliseconds())
	req.MemberID = p.memberID
	if p.instanceID != "" {
		req.InstanceID = &p.instanceID
	}
	req.ProtocolType = "consumer"
	for _, name := range p.protos {
		pr := kmsg.NewJoinGroupRequestProtocol()
		pr.Name = name
		pr.Metadata = p.subscription(name)
		req.Protocols = append(req.Protocols, pr)
	}
	p.state = psJoining
	p.needRejoin = false
	p.send("join", req, func(r kmsg.Response) { p.onJoin(r.(*kmsg.JoinGroupResponse)) }, func() {
		p.state = psNew
		p.backoff()
	})
}

func (p *process) onJoin(resp *kmsg.JoinGroupResponse) {
	code := resp.ErrorCode
	switch {
	case code == 0:
	case code == kerr.MemberIDRequired.Code:
		p.memberID = resp.MemberID
		p.state = psNew
		return
	case code == kerr.UnknownMemberID.Code:
		p.reset(true, "join: UNKNOWN_MEMBER_ID")
		p.backoff()
		return
	case code == kerr.FencedInstanceID.Code:
		p.fenced("join")
		return
	case p.migrateRefused(code):
		return
	case code == kerr.InconsistentGroupProtocol.Code:
		// Fatal in clients. It happens when a member offers none of
		// the protocols every current member supports; note that a
		// replayed member supports only the group's selected protocol
		// (as in Kafka's ClassicGroup.fromRecord).
		p.logf("INCONSISTENT_GROUP_PROTOCOL is fatal")
		p.w.count("run.inconsistent-protocol")
		p.fatal = true
		p.alive = false
		p.out = nil
		p.conn = nil
		return
	case code == kerr.RebalanceInProgress.Code || coordinatorError(code):
		p.state = psNew
		p.backoff()
		return
	default:
		p.w.chk.unexpected(p, "JoinGroup", code)
		return
	}
	p.memberID = resp.MemberID
	p.generation = resp.Generation
	p.protocol = ""
	if resp.Protocol != nil {
		p.protocol = *resp.Protocol
	}
	leader := resp.LeaderID == p.memberID
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = p.v.sync
	req.Group = p.g.id
	req.Generation = resp.Generation
	req.MemberID = p.memberID
	if p.instanceID != "" {
		req.InstanceID = &p.instanceID
	}
	if req.Version >= 5 {
		req.ProtocolType = kmsg.StringPtr("consumer")
		req.Protocol = kmsg.StringPtr(p.protocol)
	}
	if leader && !resp.SkipAssignment {
		req.GroupAssignment = p.assign(resp)
	}
	p.state = psSyncing
	gen := resp.Generation
	p.send("sync", req, func(r kmsg.Response) { p.onSync(gen, r.(*kmsg.SyncGroupResponse)) }, func() {
		p.state = psNew
		p.backoff()
	})
}

func (p *process) assignor(name string) assign.Assignor {
	switch name {
	case "range":
		return assign.Range()
	case "roundrobin":
		return assign.RoundRobin()
	case "sticky":
		return assign.Sticky()
	case "cooperative-sticky":
		if p.w.opts.Bugs.EagerInCooperative {
			return assign.Sticky()
		}
		return assign.CooperativeSticky()
	}
	p.w.fail("protocol", fmt.Sprintf("coordinator selected protocol %q that no member offered", name))
	return assign.Range()
}

// assign runs the leader's assignment with the real assignors.
func (p *process) assign(resp *kmsg.JoinGroupResponse) []kmsg.SyncGroupRequestGroupAssignment {
	var members []assign.Member
	for _, m := range resp.Members {
		md, err := assign.DecodeMetadata(m.ProtocolMetadata)
		if err != nil {
			p.w.fail("metadata", fmt.Sprintf("leader %s cannot decode member %s's subscription: %v", p.name, m.MemberID, err))
			return nil
		}
		inst := ""
		if m.InstanceID != nil {
			inst = *m.InstanceID
		}
		members = append(members, md.Member(m.MemberID, inst))
	}
	a := p.assignor(p.protocol).Assign(members, p.g.topics)
	ids := make([]string, 0, len(a))
	for id := range a {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []kmsg.SyncGroupRequestGroupAssignment
	for _, id := range ids {
		ga := kmsg.NewSyncGroupRequestGroupAssignment()
		ga.MemberID = id
		ga.MemberAssignment = assign.EncodeAssignment(p.metaVersion, a[id], nil)
		out = append(out, ga)
	}
	p.logf("leader of generation %d assigns with %s to %d members", resp.Generation, p.protocol, len(ids))
	return out
}

func (p *process) onSync(gen int32, resp *kmsg.SyncGroupResponse) {
	code := resp.ErrorCode
	if p.lostMembership("sync", code) {
		return
	}
	switch {
	case code == 0:
	case code == kerr.RebalanceInProgress.Code:
		p.state = psNew
		return
	case coordinatorError(code):
		p.state = psNew
		p.backoff()
		return
	default:
		p.w.chk.unexpected(p, "SyncGroup", code)
		return
	}
	_, parts, _, err := assign.DecodeAssignment(resp.MemberAssignment)
	if err != nil {
		p.w.fail("assignment", fmt.Sprintf("%s cannot decode its assignment for generation %d: %v", p.name, gen, err))
		return
	}
	assigned := toTPs(parts)
	p.w.chk.onSyncDelivered(p, gen, assigned)
	p.state = psStable
	p.nextHB = p.w.now.Add(p.hb)
	p.nextCommit = p.w.now.Add(p.w.p.commitEvery)
	var revoked []tp
	has := map[tp]bool{}
	for _, t := range assigned {
		has[t] = true
	}
	for _, t := range p.owned {
		if !has[t] {
			revoked = append(revoked, t)
		}
	}
	owned := map[tp]bool{}
	for _, t := range p.owned {
		owned[t] = true
	}
	for _, t := range assigned {
		if !owned[t] {
			p.unpositioned[t] = true
		}
	}
	p.logf("generation %d assigned %s", gen, fmtTPs(assigned))
	for _, t := range assigned {
		if !slices.Contains(p.topics, t.topic) {
			// Java's checkAssignmentMatchedSubscription: the group was
			// formed with another subscription; join again.
			p.logf("assignment does not match the subscription; rejoining")
			p.needRejoin = true
			break
		}
	}
	p.owned = assigned
	p.lastAssigned = assigned
	p.lastGen = gen
	if len(revoked) > 0 {
		// Cooperative: give up what moved, then rejoin for the
		// second round. An eager member owned nothing by now.
		p.revoking = revoked
	}
}

func (p *process) heartbeat() {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version = p.v.hb
	req.Group = p.g.id
	req.Generation = p.generation
	req.MemberID = p.memberID
	if p.instanceID != "" {
		req.InstanceID = &p.instanceID
	}
	p.send("heartbeat", req, func(r kmsg.Response) {
		p.nextHB = p.w.now.Add(p.hb)
		code := r.(*kmsg.HeartbeatResponse).ErrorCode
		if p.lostMembership("heartbeat", code) {
			return
		}
		switch {
		case code == 0:
		case code == kerr.RebalanceInProgress.Code:
			p.needRejoin = true
		case coordinatorError(code):
			p.backoff()
		default:
			p.w.chk.unexpected(p, "Heartbeat", code)
		}
	}, func() {
		p.nextHB = p.w.now.Add(p.hb)
	})
}

// commit commits the positions of parts that moved since their last commit,
// then calls then (unless the process was reset or fenced meanwhile).
func (p *process) commit(parts []tp, then func()) {
	offsets := map[tp]int64{}
	for _, t := range parts {
		if pos, ok := p.positions[t]; ok && !p.unpositioned[t] && pos > p.committed[t] {
			offsets[t] = pos
		}
	}
	p.nextCommit = p.w.now.Add(p.w.p.commitEvery)
	if len(offsets) == 0 {
		if then != nil {
			then()
		}
		p.kick()
		return
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = p.v.commit
	req.Group = p.g.id
	req.Generation = p.generation
	req.MemberID = p.memberID
	if p.instanceID != "" {
		req.InstanceID = &p.instanceID
	}
	req.RetentionTimeMillis = -1
	keys := make([]tp, 0, len(offsets))
	for t := range offsets {
		keys = append(keys, t)
	}
	sortTPs(keys)
	for _, t := range keys {
		if len(req.Topics) == 0 || req.Topics[len(req.Topics)-1].Topic != t.topic {
			rt := kmsg.NewOffsetCommitRequestTopic()
			rt.Topic = t.topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition = t.part
		rp.Offset = offsets[t]
		rp.LeaderEpoch = -1
		req.Topics[len(req.Topics)-1].Partitions = append(req.Topics[len(req.Topics)-1].Partitions, rp)
	}
	var onResp func(kmsg.Response)
	var onErr func()
	onResp = func(r kmsg.Response) {
		resp := r.(*kmsg.OffsetCommitResponse)
		code := int16(0)
		acked := map[tp]int64{}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					code = rp.ErrorCode
					continue
				}
				t := tp{rt.Topic, rp.Partition}
				acked[t] = offsets[t]
			}
		}
		if len(acked) > 0 {
			p.w.chk.onCommitAck(p, acked)
			for t, o := range acked {
				p.committed[t] = max(p.committed[t], o)
			}
		}
		if p.cm != nil && p.cOnCommitError(code) || p.cm == nil && p.lostMembership("commit", code) {
			return
		}
		switch {
		case code == 0 || code == kerr.RebalanceInProgress.Code:
		case coordinatorError(code):
			onErr()
			return
		default:
			p.w.chk.unexpected(p, "OffsetCommit", code)
			return
		}
		if then != nil {
			then()
		}
	}
	attempt := 0
	onErr = func() {
		// A synchronous commit is retried as the same request, so a
		// commit whose response was lost may arrive twice.
		attempt++
		if attempt <= 3 && p.alive && !p.fatal {
			p.backoff()
			p.retry = &outReq{kind: "commit", req: req, onResp: onResp, onErr: onErr}
			return
		}
		if then != nil {
			then()
		}
	}
	p.send("commit", req, onResp, onErr)
}

// fetch reads the committed offsets of newly assigned partitions; a
// partition with no commit starts at 0 (auto.offset.reset=earliest).
func (p *process) fetch() {
	parts := make([]tp, 0, len(p.unpositioned))
	for t := range p.unpositioned {
		parts = append(parts, t)
	}
	sortTPs(parts)
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = p.v.fetch
	req.Group = p.g.id
	for _, t := range fromTPs(parts) {
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic = t.Topic
		rt.Partitions = t.Partitions
		req.Topics = append(req.Topics, rt)
	}
	p.send("fetch", req, func(r kmsg.Response) {
		resp := r.(*kmsg.OffsetFetchResponse)
		if coordinatorError(resp.ErrorCode) {
			p.backoff()
			return
		}
		if resp.ErrorCode != 0 {
			p.w.chk.unexpected(p, "OffsetFetch", resp.ErrorCode)
			return
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				t := tp{rt.Topic, rp.Partition}
				if coordinatorError(rp.ErrorCode) {
					p.backoff()
					return
				}
				if rp.ErrorCode != 0 {
					p.w.chk.unexpected(p, "OffsetFetch", rp.ErrorCode)
					return
				}
				if !p.unpositioned[t] {
					continue
				}
				delete(p.unpositioned, t)
				pos := max(rp.Offset)
				p.positions[t] = pos
				p.committed[t] = pos
			}
		}
	}, p.backoff)
}

func (p *process) leave() {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version = p.v.leave
	req.Group = p.g.id
	if req.Version < 3 {
		req.MemberID = p.memberID
	} else {
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = p.memberID
		if p.instanceID != "" {
			m.InstanceID = &p.instanceID
		}
		req.Members = append(req.Members, m)
	}
	p.send("leave", req, func(r kmsg.Response) { p.finish() }, p.finish)
}
