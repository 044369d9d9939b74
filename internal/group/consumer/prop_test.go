package consumer

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"pgregory.net/rapid"
)

// TestProperties drives the machine with simulated clients that join,
// heartbeat, leave, crash, pause past their timeouts, lose responses and
// change subscriptions, while topics are created, grown and deleted. After
// every step it checks that no partition is held by two members at once
// (each member's acknowledged owned set: what the client owns, while the
// coordinator still counts it as a member), that every client owns only what
// the coordinator thinks it may, and that epochs never go backwards. Then it
// lets the group go quiet and checks that every subscribed partition is
// assigned, once, and owned by its member, and that the records replay to
// the same state. A longer run:
//
//	go test ./internal/group/consumer -run TestProperties -rapid.checks=20000
func TestProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := newSim(rt)
		for range rapid.IntRange(10, 120).Draw(rt, "steps") {
			s.step(rt)
			s.check(rt)
		}
		s.quiesce(rt)
	})
}

type clientState uint8

const (
	running clientState = iota
	paused              // alive, owns what it owns, but silent
	gone                // left, crashed or fatally fenced
)

type simClient struct {
	id, instance string
	names        []string
	regex        string
	epoch        int32
	joined       bool
	owned        partSet
	state        clientState
	needFull     bool // after a lost response, as real clients do
	subChanged   bool
	lastEpoch    int32 // highest epoch this incarnation was told
}

type sim struct {
	m       *Machine
	now     time.Time
	timers  map[TimerKey]time.Time
	topics  map[string]Topic
	created uint16
	clients []*simClient
	nextID  int
	reqID   RequestID

	groupEpoch, assignmentEpoch int32
	memberEpochs                map[string]int32
	records                     []Record // everything emitted, for replay checks
}

var simTopicNames = []string{"a", "b", "c", "d"}

func newSim(rt *rapid.T) *sim {
	cfg := Config{}
	if rapid.Bool().Draw(rt, "range") {
		cfg.Assignors = []string{AssignorRange, AssignorUniform}
	}
	s := &sim{m: New(cfg), now: epoch0, timers: map[TimerKey]time.Time{}, topics: map[string]Topic{},
		memberEpochs: map[string]int32{}}
	for _, n := range simTopicNames[:rapid.IntRange(1, 3).Draw(rt, "initial topics")] {
		s.setTopic(n, rapid.Int32Range(1, 6).Draw(rt, "partitions"))
	}
	s.pushTopics()
	return s
}

func (s *sim) setTopic(name string, parts int32) {
	t, ok := s.topics[name]
	if !ok {
		s.created++
		t.Name = name
		t.ID[0], t.ID[1], t.ID[15] = byte(s.created>>8), byte(s.created), 7
	}
	t.Partitions = parts
	s.topics[name] = t
}

func (s *sim) pushTopics() {
	ts := make([]Topic, 0, len(s.topics))
	for _, n := range simTopicNames {
		if t, ok := s.topics[n]; ok {
			ts = append(ts, t)
		}
	}
	s.apply(s.m.Step(s.now, TopicsChanged{Topics: ts}))
}

func (s *sim) apply(out Output) {
	s.records = append(s.records, out.Records...)
	for _, u := range out.Timers {
		if u.Cancel {
			delete(s.timers, u.Key)
		} else {
			s.timers[u.Key] = u.Deadline
		}
	}
}

func (s *sim) live() []*simClient {
	var out []*simClient
	for _, c := range s.clients {
		if c.state != gone {
			out = append(out, c)
		}
	}
	return out
}

func (s *sim) drawSubscription(rt *rapid.T, c *simClient) {
	switch rapid.IntRange(0, 3).Draw(rt, "subscription kind") {
	case 0:
		c.names, c.regex = []string{"a"}, ""
	case 1:
		c.names = rapid.SliceOfNDistinct(rapid.SampledFrom(simTopicNames), 1, 3, rapid.ID[string]).Draw(rt, "names")
		c.regex = ""
	case 2:
		c.names, c.regex = []string{}, rapid.SampledFrom([]string{"[ab]", "c|d", ".*", "x.*"}).Draw(rt, "regex")
	default:
		c.names, c.regex = []string{"d"}, "[bc]"
	}
}

func (s *sim) step(rt *rapid.T) {
	live := s.live()
	switch rapid.IntRange(0, 11).Draw(rt, "action") {
	case 0: // a new client
		if len(live) >= 6 {
			return
		}
		s.nextID++
		c := &simClient{id: fmt.Sprintf("c%d", s.nextID)}
		if rapid.Bool().Draw(rt, "static") {
			// Two live processes never share an instance id; one that
			// crashed may still hold it at the coordinator.
			c.instance = fmt.Sprintf("i%d", rapid.IntRange(1, 3).Draw(rt, "instance"))
			for _, o := range live {
				if o.instance == c.instance {
					c.instance = ""
				}
			}
		}
		s.drawSubscription(rt, c)
		s.clients = append(s.clients, c)
		s.send(rt, c, false)
	case 1, 2, 3, 4: // a heartbeat, whose response may be lost
		if len(live) == 0 {
			return
		}
		c := rapid.SampledFrom(live).Draw(rt, "client")
		if c.state == paused && !rapid.Bool().Draw(rt, "resume") {
			return
		}
		c.state = running
		s.send(rt, c, rapid.IntRange(0, 9).Draw(rt, "lose") == 0)
	case 5: // a subscription change
		if len(live) == 0 {
			return
		}
		c := rapid.SampledFrom(live).Draw(rt, "client")
		s.drawSubscription(rt, c)
		c.subChanged = true
	case 6: // time passes, deadlines fire
		s.advance(time.Duration(rapid.IntRange(0, 20000).Draw(rt, "ms")) * time.Millisecond)
	case 7: // a clean leave: -1, or -2 for a static member
		if len(live) == 0 {
			return
		}
		c := rapid.SampledFrom(live).Draw(rt, "client")
		if !c.joined {
			return
		}
		epoch := leaveEpoch
		if c.instance != "" && rapid.Bool().Draw(rt, "temporary") {
			epoch = staticLeaveEpoch
		}
		s.leave(c, epoch)
	case 8: // a crash: the process is gone, the coordinator finds out later
		if len(live) == 0 {
			return
		}
		c := rapid.SampledFrom(live).Draw(rt, "client")
		c.state, c.owned = gone, nil
	case 9: // a pause: alive and owning, but silent
		if len(live) == 0 {
			return
		}
		rapid.SampledFrom(live).Draw(rt, "client").state = paused
	case 10: // a static member restarts under a new member id
		var static []*simClient
		for _, c := range s.clients {
			if c.instance != "" && c.state == gone {
				static = append(static, c)
			}
		}
		if len(static) == 0 || len(live) >= 6 {
			return
		}
		old := rapid.SampledFrom(static).Draw(rt, "restart")
		s.nextID++
		c := &simClient{id: fmt.Sprintf("c%d", s.nextID), instance: old.instance, names: old.names, regex: old.regex}
		old.instance = "" // one process per instance id
		s.clients = append(s.clients, c)
		s.send(rt, c, false)
	case 11: // topics change
		name := rapid.SampledFrom(simTopicNames).Draw(rt, "topic")
		t, ok := s.topics[name]
		switch {
		case !ok:
			s.setTopic(name, rapid.Int32Range(1, 6).Draw(rt, "partitions"))
		case rapid.Bool().Draw(rt, "delete"):
			delete(s.topics, name)
		default:
			s.setTopic(name, t.Partitions+rapid.Int32Range(1, 3).Draw(rt, "more"))
		}
		s.pushTopics()
	}
}

// send makes the client's next request: a join while it is not in the
// group, else a heartbeat, full after a lost response or when its
// subscription changed.
func (s *sim) send(rt *rapid.T, c *simClient, lose bool) {
	s.sendReporting(rt, c, lose, false)
}

// sendReporting is send; with report the heartbeat always says what the
// client owns, as a client does once it has revoked something.
func (s *sim) sendReporting(rt *rapid.T, c *simClient, lose, report bool) {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group = "g"
	req.MemberID = c.id
	if c.instance != "" {
		req.InstanceID = &c.instance
	}
	if !c.joined {
		req.MemberEpoch = 0
		req.RebalanceTimeoutMillis = 30000
		req.SubscribedTopicNames = slices.Clone(c.names)
		re := c.regex
		req.SubscribedTopicRegex = &re
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	} else {
		req.MemberEpoch = c.epoch
		full := c.needFull
		if full || c.subChanged {
			req.SubscribedTopicNames = slices.Clone(c.names)
			re := c.regex
			req.SubscribedTopicRegex = &re
		}
		if full {
			req.RebalanceTimeoutMillis = 30000
		}
		if full || report || rapid.Bool().Draw(rt, "report owned") {
			req.Topics = ownedList(c.owned)
		}
	}
	s.reqID++
	out := s.m.Step(s.now, Request{ID: s.reqID, ClientID: c.id, ClientHost: "/sim", Msg: req})
	s.apply(out)
	resp := out.Replies[0].Msg.(*kmsg.ConsumerGroupHeartbeatResponse)
	rt.Logf("@%d %s epoch=%d owned=%v subscription=%v/%v -> %s epoch=%d assignment=%v lost=%v",
		ms(s.now), c.id, req.MemberEpoch, req.Topics != nil, req.SubscribedTopicNames, deref(req.SubscribedTopicRegex),
		errName(resp.ErrorCode), resp.MemberEpoch, resp.Assignment != nil, lose)
	if lose {
		c.needFull = true
		return
	}
	s.receive(rt, c, req, resp)
}

func ownedList(p partSet) []kmsg.ConsumerGroupHeartbeatRequestTopic {
	out := []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	for _, t := range p {
		rt := kmsg.NewConsumerGroupHeartbeatRequestTopic()
		rt.TopicID = t.id
		rt.Partitions = slices.Clone(t.parts)
		out = append(out, rt)
	}
	return out
}

func (s *sim) receive(rt *rapid.T, c *simClient, req *kmsg.ConsumerGroupHeartbeatRequest, resp *kmsg.ConsumerGroupHeartbeatResponse) {
	switch resp.ErrorCode {
	case 0:
	case kerr.FencedMemberEpoch.Code, kerr.UnknownMemberID.Code:
		// Give everything up and rejoin with the same member id.
		c.owned, c.epoch, c.joined, c.lastEpoch = nil, 0, false, 0
		return
	case kerr.UnreleasedInstanceID.Code:
		return // the previous incarnation is still there; retry later
	case kerr.FencedInstanceID.Code:
		c.state, c.owned = gone, nil
		return
	default:
		rt.Fatalf("%s: unexpected %s", c.id, errName(resp.ErrorCode))
	}
	if resp.MemberEpoch < req.MemberEpoch || resp.MemberEpoch < c.lastEpoch {
		rt.Fatalf("%s sent epoch %d, had been told %d, got %d", c.id, req.MemberEpoch, c.lastEpoch, resp.MemberEpoch)
	}
	c.epoch, c.lastEpoch, c.joined, c.needFull = resp.MemberEpoch, resp.MemberEpoch, true, false
	if req.SubscribedTopicNames != nil {
		c.subChanged = false
	}
	if resp.Assignment != nil {
		b := newPartBuilder(false)
		topics := slices.Clone(resp.Assignment.Topics)
		slices.SortFunc(topics, func(x, y kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic) int {
			return compareIDs(x.TopicID, y.TopicID)
		})
		for _, t := range topics {
			ps := slices.Clone(t.Partitions)
			slices.Sort(ps)
			for _, p := range ps {
				b.add(t.TopicID, p, -1)
			}
		}
		c.owned = b.done()
	}
}

func (s *sim) leave(c *simClient, epoch int32) {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group = "g"
	req.MemberID = c.id
	req.MemberEpoch = epoch
	if c.instance != "" {
		req.InstanceID = &c.instance
	}
	s.reqID++
	s.apply(s.m.Step(s.now, Request{ID: s.reqID, ClientID: c.id, ClientHost: "/sim", Msg: req}))
	c.state, c.owned = gone, nil
}

func (s *sim) advance(d time.Duration) {
	to := s.now.Add(d)
	for {
		var next TimerKey
		var at time.Time
		found := false
		keys := make([]TimerKey, 0, len(s.timers))
		for k := range s.timers {
			keys = append(keys, k)
		}
		sortTimerKeys(keys)
		for _, k := range keys {
			if dl := s.timers[k]; !dl.After(to) && (!found || dl.Before(at)) {
				next, at, found = k, dl, true
			}
		}
		if !found {
			break
		}
		if at.After(s.now) {
			s.now = at
		}
		s.apply(s.m.Step(s.now, Timer{Key: next}))
	}
	s.now = to
}

// check is run after every step.
func (s *sim) check(rt *rapid.T) {
	if err := s.m.checkInvariants(); err != nil {
		rt.Fatal(err)
	}
	g := s.m.groups["g"]
	if g == nil {
		return
	}
	if g.epoch < s.groupEpoch || g.assignmentEpoch < s.assignmentEpoch {
		rt.Fatalf("epochs went back: group %d->%d, assignment %d->%d", s.groupEpoch, g.epoch, s.assignmentEpoch, g.assignmentEpoch)
	}
	s.groupEpoch, s.assignmentEpoch = g.epoch, g.assignmentEpoch
	for id, e := range s.memberEpochs {
		mem := g.members[id]
		switch {
		case mem == nil:
			delete(s.memberEpochs, id)
		case mem.epoch < e && mem.epoch != staticLeaveEpoch:
			rt.Fatalf("member %s epoch went back from %d to %d", id, e, mem.epoch)
		}
	}
	for id, mem := range g.members {
		s.memberEpochs[id] = mem.epoch
	}
	// Acknowledged ownership: a client owns what it was given and has not
	// given up, for as long as the coordinator counts it as a member.
	holder := map[tp]string{}
	for _, c := range s.clients {
		mem := g.members[c.id]
		if c.state == gone || mem == nil {
			continue
		}
		may := union(mem.assigned, mem.pending)
		var err error
		c.owned.each(func(id TopicID, p, _ int32) {
			if !may.contains(id, p) && err == nil {
				err = fmt.Errorf("client %s owns %s-%d, the coordinator gave it %s", c.id, id, p, fmtParts(may, s.topicName))
			}
			if other, ok := holder[tp{id, p}]; ok && err == nil {
				err = fmt.Errorf("%s-%d owned by %s and %s", id, p, other, c.id)
			}
			holder[tp{id, p}] = c.id
		})
		if err != nil {
			rt.Fatal(err)
		}
	}
}

// quiet reports whether the group is Stable (or Empty) and every live
// client owns exactly what the coordinator assigned it.
func (s *sim) quiet() bool {
	g := s.m.groups["g"]
	if g == nil {
		return true
	}
	if st := g.state(); st != Stable && st != Empty {
		return false
	}
	for _, c := range s.live() {
		mem := g.members[c.id]
		if mem == nil || !c.owned.samePartitions(mem.assigned) {
			return false
		}
	}
	return true
}

func (s *sim) topicName(id TopicID) string {
	for _, t := range s.topics {
		if t.ID == id {
			return t.Name
		}
	}
	return id.String()
}

// quiesce stops all faults: paused clients resume, and every live client
// heartbeats each interval and reports what it owns. Within a bounded time
// (long enough for departed members' sessions and stuck revocations to run
// out) the group must be Stable, with every subscribed partition assigned
// once and owned by its member.
func (s *sim) quiesce(rt *rapid.T) {
	for _, c := range s.live() {
		c.state = running
	}
	for round := 0; round < 40 && !s.quiet(); round++ {
		for _, c := range s.live() {
			s.sendReporting(rt, c, false, true)
			s.check(rt)
		}
		s.advance(5 * time.Second)
		s.check(rt)
	}
	g := s.m.groups["g"]
	if g == nil {
		return
	}
	if st := g.state(); st != Stable && st != Empty {
		rt.Fatalf("group not quiet after the quiet phase: %s\n%s", st, s.m.dump(s.topicName))
	}
	owner := map[tp]string{}
	for _, mem := range g.sortedMembers() {
		if !mem.assigned.samePartitions(g.target[mem.id]) {
			rt.Fatalf("member %s holds %s, target %s", mem.id, fmtParts(mem.assigned, s.topicName), fmtParts(g.target[mem.id], s.topicName))
		}
		for _, n := range g.memberTopics(mem) {
			t, ok := s.topics[n]
			if !ok {
				continue
			}
			for p := int32(0); p < t.Partitions; p++ {
				owner[tp{t.ID, p}] = ""
			}
		}
	}
	for _, mem := range g.members {
		mem.assigned.each(func(id TopicID, p, _ int32) { owner[tp{id, p}] = mem.id })
	}
	for k, o := range owner {
		if o == "" {
			rt.Fatalf("subscribed partition %s-%d is not assigned\n%s", s.topicName(k.id), k.p, s.m.dump(s.topicName))
		}
	}
	for _, c := range s.live() {
		if mem := g.members[c.id]; mem != nil && !c.owned.samePartitions(mem.assigned) {
			rt.Fatalf("client %s owns %s, the coordinator says %s", c.id, fmtParts(c.owned, s.topicName), fmtParts(mem.assigned, s.topicName))
		}
	}
	// Everything the group went through replays to the same state.
	fresh := New(s.m.cfg)
	fresh.Step(s.now, TopicsChanged{Topics: s.m.topicList()})
	if _, err := fresh.Replay(s.now, s.records); err != nil {
		rt.Fatal(err)
	}
	if a, b := fresh.dump(s.topicName), s.m.dump(s.topicName); a != b {
		rt.Fatalf("replay differs\nlive:\n%s\nreplayed:\n%s", b, a)
	}
}
