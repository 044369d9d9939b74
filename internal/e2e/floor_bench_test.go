package e2e

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/server"
)

// benchFloor replaces groupd in the group benchmarks by a floor: a server
// that does the least each benchmark needs (no coordinator, no store, no
// checks), e.g.
//
//	go test ./internal/e2e -run '^$' -bench 'Rebalance|Commits/fsync=never' -count 5 -args -floor edge
//
// -floor edge is groupd's own network edge (internal/server) in front of
// such a handler: it bounds what any coordinator behind this edge can
// reach on the machine at hand, since the client, the kernel's loopback and
// the edge cost the same with or without the coordinator's work. -floor
// direct is the leanest alternative edge: one goroutine per connection
// that reads, handles and writes, a parked reply being written by the
// goroutine that completes it. It bounds what a different edge could reach.
var benchFloor = flag.String("floor", "", "benchmark a no-op server (edge or direct) in place of groupd")

// floorTarget starts a floor: edge or direct (what -floor asks for).
func floorTarget(b *testing.B, kind string) benchTarget {
	var groups floorGroups
	switch kind {
	case "edge":
		return benchTarget{"floor-edge", serveFloor(b, func(ln net.Listener) func() {
			s := server.New(server.Config{Handler: &edgeFloor{groups: &groups}})
			go s.Serve(ln)
			return func() { s.Shutdown(context.Background()) }
		})}
	case "direct":
		return benchTarget{"floor-direct", serveFloor(b, func(ln net.Listener) func() {
			go serveDirect(ln, &groups)
			return func() { ln.Close() }
		})}
	}
	b.Fatalf("-floor %q: want edge or direct", kind)
	return benchTarget{}
}

func serveFloor(b *testing.B, serve func(net.Listener) (stop func())) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(serve(ln))
	return ln.Addr().String()
}

// floorAnswer answers a request, at once or later (complete may be called
// from another goroutine, exactly once).
func floorAnswer(groups *floorGroups, r kmsg.Request, complete func(kmsg.Response)) {
	switch req := r.(type) {
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
		complete(resp)
	case *kmsg.JoinGroupRequest:
		groups.get(req.Group).join(req, complete)
	case *kmsg.SyncGroupRequest:
		groups.get(req.Group).sync(req, complete)
	case *kmsg.DescribeGroupsRequest:
		resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, id := range req.Groups {
			dg := kmsg.NewDescribeGroupsResponseGroup()
			dg.Group = id
			dg.Members = make([]kmsg.DescribeGroupsResponseGroupMember, groups.get(id).size())
			resp.Groups = append(resp.Groups, dg)
		}
		complete(resp)
	case *kmsg.LeaveGroupRequest:
		groups.m.Delete(req.Group)
		resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
		for _, m := range req.Members {
			lm := kmsg.NewLeaveGroupResponseMember()
			lm.MemberID = m.MemberID
			resp.Members = append(resp.Members, lm)
		}
		complete(resp)
	default:
		complete(r.ResponseKind()) // heartbeats and anything else: no error
	}
}

type floorGroups struct{ m sync.Map }

func (gs *floorGroups) get(id string) *floorGroup {
	g, _ := gs.m.LoadOrStore(id, &floorGroup{})
	return g.(*floorGroup)
}

// floorGroup runs formGroup's script and nothing else: ids on the first
// join, a join phase completed by the first member's join (it is alone at
// first, then rejoins last), followers' syncs parked until the leader's.
type floorGroup struct {
	mu      sync.Mutex
	ids     int
	gen     int32
	members []string // in join order; the first leads
	joins   []floorParked
	syncs   []floorParked
	assign  map[string][]byte
}

type floorParked struct {
	member   string
	resp     kmsg.Response
	complete func(kmsg.Response)
}

func (g *floorGroup) size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.members)
}

func (g *floorGroup) join(req *kmsg.JoinGroupRequest, complete func(kmsg.Response)) {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	g.mu.Lock()
	if req.MemberID == "" {
		g.ids++
		resp.ErrorCode = errMemberIDRequired
		resp.MemberID = fmt.Sprintf("m-%d", g.ids)
		g.mu.Unlock()
		complete(resp)
		return
	}
	g.joins = append(g.joins, floorParked{req.MemberID, resp, complete})
	if len(g.members) > 0 && req.MemberID != g.members[0] {
		g.members = append(g.members, req.MemberID)
		g.mu.Unlock()
		return // parked until the leader rejoins
	}
	if len(g.members) == 0 {
		g.members = append(g.members, req.MemberID)
	}
	g.gen++
	g.assign = nil
	joins, members, gen := g.joins, g.members, g.gen
	g.joins = nil
	g.mu.Unlock()
	// The leader, whose join completed the phase, is answered first.
	for i := len(joins) - 1; i >= 0; i-- {
		j := joins[i]
		jr := j.resp.(*kmsg.JoinGroupResponse)
		jr.Generation, jr.MemberID, jr.LeaderID = gen, j.member, members[0]
		jr.ProtocolType, jr.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
		if j.member == members[0] {
			jr.Members = make([]kmsg.JoinGroupResponseMember, len(members))
			for k, m := range members {
				jr.Members[k].MemberID, jr.Members[k].ProtocolMetadata = m, benchSubscription
			}
		}
		j.complete(jr)
	}
}

func (g *floorGroup) sync(req *kmsg.SyncGroupRequest, complete func(kmsg.Response)) {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	resp.ProtocolType, resp.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	g.mu.Lock()
	g.syncs = append(g.syncs, floorParked{req.MemberID, resp, complete})
	if req.MemberID == g.members[0] {
		g.assign = make(map[string][]byte, len(req.GroupAssignment))
		for _, a := range req.GroupAssignment {
			g.assign[a.MemberID] = a.MemberAssignment
		}
	}
	if g.assign == nil {
		g.mu.Unlock()
		return // parked until the leader's sync
	}
	syncs, assign := g.syncs, g.assign
	g.syncs = nil
	g.mu.Unlock()
	for _, s := range syncs {
		s.resp.(*kmsg.SyncGroupResponse).MemberAssignment = assign[s.member]
		s.complete(s.resp)
	}
}

// edgeFloor is the floor's handler behind internal/server.
type edgeFloor struct{ groups *floorGroups }

func (*edgeFloor) Supports(key, version int16) bool { return true }

func (h *edgeFloor) Handle(_ context.Context, r *server.Request) (kmsg.Response, error) {
	w := &floorWaiter{done: make(chan struct{})}
	floorAnswer(h.groups, r.Msg, func(resp kmsg.Response) {
		w.Response = resp
		close(w.done)
	})
	select {
	case <-w.done:
		return w.Response, nil
	default:
		return w, nil
	}
}

// floorWaiter is a parked reply (server.Waiter).
type floorWaiter struct {
	kmsg.Response
	done chan struct{}
}

func (w *floorWaiter) Wait() error { <-w.done; return nil }

// serveDirect is the direct floor: each connection's goroutine reads and
// answers; a reply is written by whichever goroutine completes the reply at
// the head of the connection's queue.
func serveDirect(ln net.Listener, groups *floorGroups) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer nc.Close()
			c := &directConn{bw: bufio.NewWriterSize(nc, 64<<10)}
			br := bufio.NewReaderSize(nc, 64<<10)
			var size [4]byte
			for {
				frame, err := server.ReadFrame(br, size[:], 100<<20)
				if err != nil {
					return
				}
				hdr, req, body, err := server.ParseHeader(frame)
				if err != nil || server.DecodeBody(req, body) != nil {
					return
				}
				s := &directSlot{c: c, corr: hdr.CorrelationID}
				c.mu.Lock()
				c.queue = append(c.queue, s)
				c.mu.Unlock()
				floorAnswer(groups, req, s.complete)
			}
		}()
	}
}

type directConn struct {
	mu    sync.Mutex
	bw    *bufio.Writer
	queue []*directSlot // replies in request order
	buf   []byte
}

type directSlot struct {
	c     *directConn
	corr  int32
	resp  kmsg.Response
	ready bool
}

func (s *directSlot) complete(resp kmsg.Response) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	s.resp, s.ready = resp, true
	n := 0
	for ; n < len(c.queue) && c.queue[n].ready; n++ {
		c.buf = server.AppendResponse(c.buf[:0], c.queue[n].corr, c.queue[n].resp)
		c.bw.Write(c.buf)
	}
	if n > 0 {
		c.queue = c.queue[n:]
		c.bw.Flush()
	}
}
