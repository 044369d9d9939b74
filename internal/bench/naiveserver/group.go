package main

import (
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka error codes the group answers with.
const (
	errIllegalGeneration   = 22
	errUnknownMemberID     = 25
	errRebalanceInProgress = 27
	errMemberIDRequired    = 79
)

// group is a classic group reduced to the rule that forms it: a join
// phase starts when a member joins a group that is not joining, and
// completes when every member the group knows has a JoinGroup pending;
// the leader (the earliest member still in the group) gets the member
// list, and every member's SyncGroup waits for the leader's, which carries
// the assignments. There are no timers: a member that never rejoins holds
// the phase open, and nothing expires. One mutex guards it; a parked
// request waits on a channel, holding its connection's goroutine.
type group struct {
	id string

	mu      sync.Mutex
	ids     int // member ids handed out
	gen     int32
	joining bool     // a join phase is open
	members []string // in order of their first join; members[0] leads
	meta    map[string][]byte
	joins   map[string]chan kmsg.Response // members with a JoinGroup pending
	syncs   map[string]chan syncResult    // members waiting for the leader's SyncGroup
	assign  map[string][]byte             // the current generation's, once the leader synced
	proto   string
}

func (g *group) join(req *kmsg.JoinGroupRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	g.mu.Lock()
	if req.MemberID == "" && req.Version >= 4 {
		g.ids++
		resp.ErrorCode = errMemberIDRequired
		resp.MemberID = fmt.Sprintf("%s-m%d", g.id, g.ids)
		g.mu.Unlock()
		return resp
	}
	id := req.MemberID
	if id == "" { // before v4 the id comes with the first answer
		g.ids++
		id = fmt.Sprintf("%s-m%d", g.id, g.ids)
	}
	if g.meta == nil {
		g.meta = map[string][]byte{}
		g.joins = map[string]chan kmsg.Response{}
		g.syncs = map[string]chan syncResult{}
	}
	if _, known := g.meta[id]; !known {
		g.members = append(g.members, id)
	}
	if len(req.Protocols) > 0 {
		g.proto = req.Protocols[0].Name
		g.meta[id] = req.Protocols[0].Metadata
	} else {
		g.meta[id] = nil
	}
	if !g.joining {
		g.joining = true
		g.assign = nil
		// Syncs of the generation that ends will not be answered with
		// an assignment: tell them to rejoin.
		for m, ch := range g.syncs {
			ch <- syncResult{}
			delete(g.syncs, m)
		}
	}
	if old, ok := g.joins[id]; ok { // a second join while one waits
		jr := kmsg.NewPtrJoinGroupResponse()
		jr.ErrorCode = errRebalanceInProgress
		old <- jr
	}
	ch := make(chan kmsg.Response, 1)
	g.joins[id] = ch
	g.completeJoin()
	g.mu.Unlock()
	r := <-ch
	jr := r.(*kmsg.JoinGroupResponse)
	jr.Version, jr.ThrottleMillis = req.Version, 0
	return jr
}

// completeJoin ends the join phase if every member has a join pending.
func (g *group) completeJoin() {
	if !g.joining || len(g.joins) < len(g.members) || len(g.members) == 0 {
		return
	}
	g.joining = false
	g.gen++
	leader := g.members[0]
	for _, m := range g.members {
		jr := kmsg.NewPtrJoinGroupResponse()
		jr.Generation, jr.MemberID, jr.LeaderID = g.gen, m, leader
		jr.ProtocolType, jr.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr(g.proto)
		if m == leader {
			jr.Members = make([]kmsg.JoinGroupResponseMember, len(g.members))
			for i, o := range g.members {
				jr.Members[i].Default()
				jr.Members[i].MemberID, jr.Members[i].ProtocolMetadata = o, g.meta[o]
			}
		}
		g.joins[m] <- jr
		delete(g.joins, m)
	}
}

// syncResult answers a parked SyncGroup: the member's assignment, or not
// ok if the generation ended before the leader synced.
type syncResult struct {
	assignment []byte
	ok         bool
}

func (g *group) sync(req *kmsg.SyncGroupRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	g.mu.Lock()
	resp.ProtocolType, resp.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr(g.proto)
	if _, known := g.meta[req.MemberID]; !known {
		g.mu.Unlock()
		resp.ErrorCode = errUnknownMemberID
		return resp
	}
	if g.joining {
		g.mu.Unlock()
		resp.ErrorCode = errRebalanceInProgress
		return resp
	}
	if req.Generation != g.gen {
		g.mu.Unlock()
		resp.ErrorCode = errIllegalGeneration
		return resp
	}
	if req.MemberID == g.members[0] && g.assign == nil {
		g.assign = make(map[string][]byte, len(req.GroupAssignment))
		for _, a := range req.GroupAssignment {
			g.assign[a.MemberID] = a.MemberAssignment
		}
		for m, ch := range g.syncs {
			ch <- syncResult{g.assign[m], true}
			delete(g.syncs, m)
		}
	}
	if g.assign != nil {
		resp.MemberAssignment = g.assign[req.MemberID]
		g.mu.Unlock()
		return resp
	}
	ch := make(chan syncResult, 1)
	g.syncs[req.MemberID] = ch
	g.mu.Unlock()
	r := <-ch
	if !r.ok {
		resp.ErrorCode = errRebalanceInProgress
	}
	resp.MemberAssignment = r.assignment
	return resp
}

func (g *group) leave(req *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	ids := []string{req.MemberID}
	if req.Version >= 3 {
		ids = ids[:0]
		for _, m := range req.Members {
			ids = append(ids, m.MemberID)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, id := range ids {
		lm := kmsg.NewLeaveGroupResponseMember()
		lm.MemberID = id
		if _, known := g.meta[id]; !known {
			lm.ErrorCode = errUnknownMemberID
		} else {
			delete(g.meta, id)
			for i, m := range g.members {
				if m == id {
					g.members = append(g.members[:i], g.members[i+1:]...)
					break
				}
			}
			if ch, ok := g.joins[id]; ok {
				jr := kmsg.NewPtrJoinGroupResponse()
				jr.ErrorCode = errUnknownMemberID
				ch <- jr
				delete(g.joins, id)
			}
			if ch, ok := g.syncs[id]; ok {
				ch <- syncResult{}
				delete(g.syncs, id)
			}
		}
		if req.Version >= 3 {
			resp.Members = append(resp.Members, lm)
		} else {
			resp.ErrorCode = lm.ErrorCode
		}
	}
	g.completeJoin()
	return resp
}

func (g *group) describe() kmsg.DescribeGroupsResponseGroup {
	d := kmsg.NewDescribeGroupsResponseGroup()
	d.Group = g.id
	g.mu.Lock()
	defer g.mu.Unlock()
	d.ProtocolType, d.Protocol = "consumer", g.proto
	switch {
	case len(g.members) == 0:
		d.State = "Empty"
	case g.joining:
		d.State = "PreparingRebalance"
	case g.assign == nil:
		d.State = "CompletingRebalance"
	default:
		d.State = "Stable"
	}
	for _, m := range g.members {
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID, dm.ProtocolMetadata = m, g.meta[m]
		d.Members = append(d.Members, dm)
	}
	return d
}
