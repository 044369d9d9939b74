package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/inspect"
)

// mixedClient is one client of FuzzMigration: a classic consumer (eager or
// cooperative) or a consumer-protocol one, following the answers it gets.
type mixedClient struct {
	name        string
	consumer    bool // speaks ConsumerGroupHeartbeat
	cooperative bool
	instance    string // "" for a dynamic member
	memberID    string
	gen         int32 // generation or member epoch
	owned       []int32
	leaderOf    []string // the members a leader's JoinGroup listed
}

// mixedWorld drives a group of mixed clients through a machine.
type mixedWorld struct {
	t       *testing.T
	h       *harness
	clients []*mixedClient
	sentBy  map[RequestID]*mixedClient
}

func (w *mixedWorld) send(c *mixedClient, req kmsg.Request) {
	w.h.nextID++
	w.sentBy[w.h.nextID] = c
	w.absorb(w.h.m.Step(w.h.now, Request{ID: w.h.nextID, ClientID: c.name, ClientHost: "/h", Msg: req}))
}

// absorb applies an output to the harness's store and timers and hands
// each reply to the client that sent the request.
func (w *mixedWorld) absorb(out Output) {
	w.h.applyNoT(out)
	for _, r := range out.Replies {
		c := w.sentBy[r.ID]
		if c == nil {
			w.t.Fatalf("reply to unknown request %d", r.ID)
		}
		delete(w.sentBy, r.ID)
		c.answer(r.Msg)
	}
}

func parseOwned(b []byte) []int32 {
	var a kmsg.ConsumerMemberAssignment
	if a.ReadFrom(b) != nil {
		return nil
	}
	var out []int32
	for _, t := range a.Topics {
		out = append(out, t.Partitions...)
	}
	return out
}

func (c *mixedClient) answer(msg kmsg.Response) {
	switch r := msg.(type) {
	case *kmsg.JoinGroupResponse:
		switch r.ErrorCode {
		case 0:
			c.memberID, c.gen, c.leaderOf = r.MemberID, r.Generation, nil
			if r.LeaderID == r.MemberID {
				for _, m := range r.Members {
					c.leaderOf = append(c.leaderOf, m.MemberID)
				}
			}
		case kerr.MemberIDRequired.Code:
			c.memberID = r.MemberID
		case kerr.UnknownMemberID.Code, kerr.FencedInstanceID.Code:
			c.memberID, c.owned = "", nil
		}
	case *kmsg.SyncGroupResponse:
		if r.ErrorCode == 0 {
			c.owned = parseOwned(r.MemberAssignment)
		}
	case *kmsg.HeartbeatResponse:
		switch r.ErrorCode {
		case kerr.RebalanceInProgress.Code:
			if !c.cooperative {
				c.owned = nil
			}
		case kerr.UnknownMemberID.Code, kerr.FencedInstanceID.Code:
			c.memberID, c.owned = "", nil
		}
	case *kmsg.ConsumerGroupHeartbeatResponse:
		switch {
		case r.ErrorCode == 0 && c.gen >= 0 && r.MemberEpoch >= 0:
			c.gen = r.MemberEpoch
			if r.Assignment != nil {
				c.owned = nil
				for _, t := range r.Assignment.Topics {
					c.owned = append(c.owned, t.Partitions...)
				}
			}
		case r.ErrorCode != 0:
			c.gen, c.owned = 0, nil
		}
	}
}

func (w *mixedWorld) classicJoin(c *mixedClient) {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 9
	req.Group, req.MemberID, req.ProtocolType = "g1", c.memberID, "consumer"
	req.InstanceID = optStr(c.instance)
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 20000
	md := kmsg.NewConsumerMemberMetadata()
	md.Topics = []string{"t"}
	name := "range"
	if c.cooperative {
		name = "cooperative-sticky"
		md.Version = 1
		if len(c.owned) > 0 {
			md.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "t", Partitions: c.owned}}
		}
	} else {
		c.owned = nil // an eager member gives everything up to join
	}
	// Every client offers both, so that eager and cooperative members
	// share a protocol.
	other := "cooperative-sticky"
	if c.cooperative {
		other = "range"
	}
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: name, Metadata: md.AppendTo(nil)}, {Name: other, Metadata: md.AppendTo(nil)}}
	w.send(c, req)
}

func (w *mixedWorld) classicSync(c *mixedClient) {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = 3
	req.Group, req.MemberID, req.Generation = "g1", c.memberID, c.gen
	req.InstanceID = optStr(c.instance)
	for i, id := range c.leaderOf {
		a := kmsg.NewConsumerMemberAssignment()
		var ps []int32
		for p := int32(i); p < 4; p += int32(len(c.leaderOf)) {
			ps = append(ps, p)
		}
		a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "t", Partitions: ps}}
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: a.AppendTo(nil)})
	}
	w.send(c, req)
}

func (w *mixedWorld) step(op, arg byte) {
	c := w.clients[int(arg)%len(w.clients)]
	h := w.h
	switch op % 8 {
	case 0, 1:
		if c.consumer {
			req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			req.Version = 1
			req.Group, req.MemberID, req.MemberEpoch = "g1", c.memberID, c.gen
			req.InstanceID = optStr(c.instance)
			req.RebalanceTimeoutMillis = -1
			if c.gen == 0 {
				req.RebalanceTimeoutMillis, req.SubscribedTopicNames = 20000, []string{"t"}
				req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			} else {
				req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: topicID("t"), Partitions: c.owned}}
			}
			w.send(c, req)
		} else {
			w.classicJoin(c)
		}
	case 2:
		if c.consumer {
			req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			req.Version = 1
			req.Group, req.MemberID, req.MemberEpoch = "g1", c.memberID, -1
			req.InstanceID = optStr(c.instance)
			req.RebalanceTimeoutMillis = -1
			w.send(c, req)
			c.gen, c.owned = 0, nil
		} else {
			w.classicSync(c)
		}
	case 3:
		if !c.consumer {
			req := kmsg.NewPtrHeartbeatRequest()
			req.Version = 4
			req.Group, req.MemberID, req.Generation = "g1", c.memberID, c.gen
			req.InstanceID = optStr(c.instance)
			w.send(c, req)
		}
	case 4:
		if !c.consumer && c.memberID != "" {
			req := kmsg.NewPtrLeaveGroupRequest()
			req.Version = 5
			req.Group = "g1"
			req.Members = []kmsg.LeaveGroupRequestMember{{MemberID: c.memberID, InstanceID: optStr(c.instance)}}
			w.send(c, req)
			c.memberID, c.owned = "", nil
		}
	case 5:
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version = 7
		if c.consumer {
			req.Version = 9
		}
		req.Group, req.MemberID, req.Generation = "g1", c.memberID, c.gen
		req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: int32(arg % 4), Offset: int64(arg)}}}}
		w.send(c, req)
	case 6:
		w.advance(h.now.Add(time.Duration(arg%30) * time.Second))
	case 7:
		w.restart()
	}
}

// advance fires the due deadlines in order, as the harness does.
func (w *mixedWorld) advance(to time.Time) {
	for {
		var next *TimerKey
		var at time.Time
		for _, u := range w.h.m.Deadlines() {
			if !u.Deadline.After(to) && (next == nil || u.Deadline.Before(at)) {
				k := u.Key
				next, at = &k, u.Deadline
			}
		}
		if next == nil {
			break
		}
		if at.After(w.h.now) {
			w.h.now = at
		}
		w.absorb(w.h.m.Step(w.h.now, Timer{Key: *next}))
	}
	w.h.now = to
}

// restart reloads the machine from the store: it must load, as one type,
// and (unless a classic rebalance was in flight, which is not durable)
// be the group the live machine held. Parked requests are lost with the
// old machine, as they are with a real restart.
func (w *mixedWorld) restart() {
	h := w.h
	m, err := replayStore(h, h.store)
	if err != nil {
		w.t.Fatalf("replay: %v\n%s", err, h.buf)
	}
	st, _ := h.m.GroupState("g1")
	if typ := h.m.GroupType("g1"); typ == inspect.TypeConsumer || st == Stable {
		if got, want := durableView(m, "g1"), durableView(h.m, "g1"); got != want {
			w.t.Fatalf("replayed\n%s\nlive\n%s", got, want)
		}
	}
	h.m = m
	h.timers = map[TimerKey]time.Time{}
	for _, u := range m.Deadlines() {
		h.timers[u.Key] = u.Deadline
	}
	w.sentBy = map[RequestID]*mixedClient{}
}

// FuzzMigration drives classic (eager and cooperative) and
// consumer-protocol clients of one group through joins, syncs,
// heartbeats, leaves, commits, deadlines and restarts, so that the group
// is upgraded and downgraded in every order the input finds. The machine
// must never panic (it does on a partition held twice in a consumer
// group), keep its counts, and load back from its store after any step.
func FuzzMigration(f *testing.F) {
	// Two classic members form a group, sync, a consumer-protocol member
	// upgrades it, the classic members rejoin, the consumer one leaves.
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 1, 6, 0, 2, 0, 2, 1, 0, 3, 3, 0, 0, 0, 0, 1, 0, 3, 2, 0, 2, 1, 5, 0, 7, 0, 2, 3, 3, 0, 0, 0, 7, 0})
	f.Add([]byte{0, 3, 0, 0, 0, 0, 6, 0, 2, 0, 0, 3, 0, 1, 0, 1, 2, 3, 6, 25, 7, 0})
	f.Add([]byte{0, 0, 6, 0, 2, 0, 0, 4, 0, 4, 3, 0, 0, 0, 6, 29, 6, 29, 7, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 200 {
			return
		}
		h, _ := newMigrationHarness()
		w := newMixedWorld(t, h)
		for i := 0; i+1 < len(ops); i += 2 {
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("op %d (%d %d): panic %v\n%s", i/2, ops[i], ops[i+1], r, h.buf)
					}
				}()
				w.step(ops[i], ops[i+1])
			}()
			h.buf.Reset()
		}
		w.restart()
	})
}

// TestMigrationWalk runs FuzzMigration's steps on fixed pseudo-random
// walks, and checks that they convert the group both ways.
func TestMigrationWalk(t *testing.T) {
	x := uint32(1)
	next := func() byte {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		return byte(x)
	}
	upgrades, downgrades := 0, 0
	for walk := 0; walk < 30; walk++ {
		h, _ := newMigrationHarness()
		w := newMixedWorld(t, h)
		prev := ""
		for i := 0; i < 150; i++ {
			w.step(next(), next())
			h.buf.Reset()
			switch typ := h.m.GroupType("g1"); {
			case prev == inspect.TypeClassic && typ == inspect.TypeConsumer:
				upgrades++
			case prev == inspect.TypeConsumer && typ == inspect.TypeClassic:
				downgrades++
			}
			prev = h.m.GroupType("g1")
		}
		w.restart()
	}
	if upgrades == 0 || downgrades == 0 {
		t.Fatalf("the walks upgraded %d and downgraded %d times", upgrades, downgrades)
	}
	t.Logf("%d upgrades, %d downgrades", upgrades, downgrades)
}

func newMixedWorld(t *testing.T, h *harness) *mixedWorld {
	return &mixedWorld{t: t, h: h, sentBy: map[RequestID]*mixedClient{}, clients: []*mixedClient{
		{name: "a"}, {name: "b", cooperative: true}, {name: "c", cooperative: true},
		{name: "x", consumer: true, memberID: "x"}, {name: "y", consumer: true, memberID: "y"},
		// One instance id, claimed by a classic and a consumer-protocol
		// client in turn: static replacements across the protocols.
		{name: "s", instance: "is"}, {name: "z", consumer: true, memberID: "z", instance: "is"},
	}}
}
