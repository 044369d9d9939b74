package e2e

import (
	"context"
	"flag"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/server"
)

// benchFloor replaces groupd in the group benchmarks by the floor: groupd's
// network edge (internal/server) in front of a handler that does the least
// each benchmark needs (no coordinator, no store, no checks), e.g.
//
//	go test ./internal/e2e -run '^$' -bench 'Rebalance|Commits/fsync=never' -count 3 -args -floor
//
// It bounds what any coordinator behind this edge can reach on the machine
// at hand: the client, the kernel's loopback and the edge cost the same
// with or without the coordinator's work.
var benchFloor = flag.Bool("floor", false, "benchmark the network edge with a no-op coordinator in place of groupd")

// floorAddr serves the floor handler on a loopback port.
func floorAddr(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := server.New(server.Config{Handler: &floorHandler{}})
	go s.Serve(ln)
	b.Cleanup(func() { s.Shutdown(context.Background()) })
	return ln.Addr().String()
}

type floorHandler struct {
	groups sync.Map // group id -> *floorGroup
}

func (*floorHandler) Supports(key, version int16) bool { return true }

func (h *floorHandler) Handle(_ context.Context, r *server.Request) (kmsg.Response, error) {
	switch req := r.Msg.(type) {
	case *kmsg.OffsetCommitRequest:
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition = p.Partition
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil
	case *kmsg.HeartbeatRequest:
		return req.ResponseKind(), nil
	case *kmsg.JoinGroupRequest:
		return h.group(req.Group).join(req), nil
	case *kmsg.SyncGroupRequest:
		return h.group(req.Group).sync(req), nil
	case *kmsg.DescribeGroupsRequest:
		resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, id := range req.Groups {
			dg := kmsg.NewDescribeGroupsResponseGroup()
			dg.Group = id
			g := h.group(id)
			g.mu.Lock()
			dg.Members = make([]kmsg.DescribeGroupsResponseGroupMember, len(g.members))
			g.mu.Unlock()
			resp.Groups = append(resp.Groups, dg)
		}
		return resp, nil
	case *kmsg.LeaveGroupRequest:
		h.groups.Delete(req.Group)
		resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
		for _, m := range req.Members {
			lm := kmsg.NewLeaveGroupResponseMember()
			lm.MemberID = m.MemberID
			resp.Members = append(resp.Members, lm)
		}
		return resp, nil
	}
	return r.Msg.ResponseKind(), nil
}

func (h *floorHandler) group(id string) *floorGroup {
	g, _ := h.groups.LoadOrStore(id, &floorGroup{})
	return g.(*floorGroup)
}

// floorGroup runs formGroup's script and nothing else: ids on the first
// join, a join phase completed by the first member's join (it is alone at
// first, then rejoins last), followers' syncs parked until the leader's.
type floorGroup struct {
	mu      sync.Mutex
	ids     int
	gen     int32
	members []string // in join order; the first is the leader
	joins   []*floorReply
	syncs   []*floorReply
	assign  map[string][]byte
}

// floorReply is a parked reply (server.Waiter).
type floorReply struct {
	kmsg.Response
	member string
	done   chan struct{}
}

func (w *floorReply) Wait() error { <-w.done; return nil }

func (g *floorGroup) join(req *kmsg.JoinGroupRequest) kmsg.Response {
	g.mu.Lock()
	defer g.mu.Unlock()
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	if req.MemberID == "" {
		g.ids++
		resp.ErrorCode = errMemberIDRequired
		resp.MemberID = fmt.Sprintf("m-%d", g.ids)
		return resp
	}
	w := &floorReply{Response: resp, member: req.MemberID, done: make(chan struct{})}
	g.joins = append(g.joins, w)
	if len(g.members) > 0 && req.MemberID != g.members[0] {
		g.members = append(g.members, req.MemberID)
		return w // parked until the leader rejoins
	}
	if len(g.members) == 0 {
		g.members = append(g.members, req.MemberID)
	}
	g.gen++
	g.assign = nil
	for _, j := range g.joins {
		jr := j.Response.(*kmsg.JoinGroupResponse)
		jr.Generation, jr.MemberID, jr.LeaderID = g.gen, j.member, g.members[0]
		jr.ProtocolType, jr.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
		if j.member == g.members[0] {
			jr.Members = make([]kmsg.JoinGroupResponseMember, len(g.members))
			for i, m := range g.members {
				jr.Members[i].MemberID, jr.Members[i].ProtocolMetadata = m, benchSubscription
			}
		}
		close(j.done)
	}
	g.joins = nil
	return w
}

func (g *floorGroup) sync(req *kmsg.SyncGroupRequest) kmsg.Response {
	g.mu.Lock()
	defer g.mu.Unlock()
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	resp.ProtocolType, resp.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	w := &floorReply{Response: resp, member: req.MemberID, done: make(chan struct{})}
	g.syncs = append(g.syncs, w)
	if req.MemberID == g.members[0] {
		g.assign = make(map[string][]byte, len(req.GroupAssignment))
		for _, a := range req.GroupAssignment {
			g.assign[a.MemberID] = a.MemberAssignment
		}
	}
	if g.assign != nil {
		for _, s := range g.syncs {
			s.Response.(*kmsg.SyncGroupResponse).MemberAssignment = g.assign[s.member]
			close(s.done)
		}
		g.syncs = nil
	}
	return w
}
