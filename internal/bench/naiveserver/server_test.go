package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func start(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go newServer(ln.Addr().(*net.TCPAddr)).serve(ln)
	return ln.Addr().String()
}

// rawConn sends one request at a time and decodes its answer.
type rawConn struct {
	t    *testing.T
	c    net.Conn
	r    *bufio.Reader
	corr int32
}

func dial(t *testing.T, addr string) *rawConn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

func (rc *rawConn) send(req kmsg.Request) {
	rc.corr++
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(rc.corr))
	b = binary.BigEndian.AppendUint16(b, 1)
	b = append(b, 't')
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if _, err := rc.c.Write(b); err != nil {
		rc.t.Error(err)
	}
}

func (rc *rawConn) recv(req kmsg.Request) kmsg.Response {
	frame, err := readFrame(rc.r, nil)
	if err != nil {
		rc.t.Errorf("read: %v", err)
		return nil
	}
	if corr := int32(binary.BigEndian.Uint32(frame)); corr != rc.corr {
		rc.t.Errorf("correlation id %d, want %d", corr, rc.corr)
	}
	body := frame[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() && resp.Key() != 0x12 {
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		rc.t.Errorf("decode %T: %v", resp, err)
	}
	return resp
}

func (rc *rawConn) do(req kmsg.Request) kmsg.Response {
	rc.send(req)
	return rc.recv(req)
}

// TestClientBootstraps checks what a kgo client needs to create a topic
// and read its metadata through the naive server.
func TestClientBootstraps(t *testing.T) {
	addr := start(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 4, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	td, err := adm.ListTopics(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if d := td["t"]; d.Err != nil || len(d.Partitions) != 4 || d.ID == ([16]byte{}) {
		t.Fatalf("topic t: %+v", d)
	}
}

func join(group, id string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version, req.Group, req.MemberID = 9, group, id
	req.ProtocolType = "consumer"
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", []byte{1}
	req.Protocols = []kmsg.JoinGroupRequestProtocol{p}
	return req
}

// TestGroupForms forms a group of three members, the way the load
// generator does: the first alone, then the others parked until it
// rejoins, then the syncs.
func TestGroupForms(t *testing.T) {
	addr := start(t)
	conns := []*rawConn{dial(t, addr), dial(t, addr), dial(t, addr)}
	ids := make([]string, len(conns))
	for i, c := range conns {
		jr := c.do(join("g", "")).(*kmsg.JoinGroupResponse)
		if jr.ErrorCode != errMemberIDRequired || jr.MemberID == "" {
			t.Fatalf("first join: %+v", jr)
		}
		ids[i] = jr.MemberID
	}
	if jr := conns[0].do(join("g", ids[0])).(*kmsg.JoinGroupResponse); jr.ErrorCode != 0 || jr.Generation != 1 || jr.LeaderID != ids[0] {
		t.Fatalf("lone join: %+v", jr)
	}
	for i := 1; i < 3; i++ {
		conns[i].send(join("g", ids[i]))
	}
	ctl := dial(t, addr)
	describe := func() kmsg.DescribeGroupsResponseGroup {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Version, req.Groups = 5, []string{"g"}
		return ctl.do(req).(*kmsg.DescribeGroupsResponse).Groups[0]
	}
	for d := describe(); len(d.Members) < 3 || d.State != "PreparingRebalance"; d = describe() {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	assignments := make([][]byte, 3)
	for i := range conns {
		wg.Go(func() {
			var jr *kmsg.JoinGroupResponse
			if i == 0 {
				jr = conns[0].do(join("g", ids[0])).(*kmsg.JoinGroupResponse)
			} else {
				jr = conns[i].recv(join("g", ids[i])).(*kmsg.JoinGroupResponse)
			}
			if jr.ErrorCode != 0 || jr.Generation != 2 || jr.LeaderID != ids[0] {
				t.Errorf("join of %s: %+v", ids[i], jr)
				return
			}
			sreq := kmsg.NewPtrSyncGroupRequest()
			sreq.Version, sreq.Group, sreq.MemberID, sreq.Generation = 5, "g", ids[i], jr.Generation
			if i == 0 {
				if len(jr.Members) != 3 {
					t.Errorf("leader got %d members", len(jr.Members))
				}
				for _, m := range jr.Members {
					k := slices.Index(ids, m.MemberID)
					sreq.GroupAssignment = append(sreq.GroupAssignment,
						kmsg.SyncGroupRequestGroupAssignment{MemberID: m.MemberID, MemberAssignment: []byte{byte(k + 1)}})
				}
			}
			sr := conns[i].do(sreq).(*kmsg.SyncGroupResponse)
			if sr.ErrorCode != 0 {
				t.Errorf("sync of %s: error %d", ids[i], sr.ErrorCode)
			}
			assignments[i] = sr.MemberAssignment
		})
	}
	wg.Wait()
	for i, a := range assignments {
		if len(a) != 1 || a[0] != byte(i+1) {
			t.Errorf("member %d assigned %v", i, a)
		}
	}
	if d := describe(); d.State != "Stable" || len(d.Members) != 3 {
		t.Errorf("group %s with %d members, want Stable with 3", d.State, len(d.Members))
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID, hb.Generation = 4, "g", ids[1], 2
	if r := conns[1].do(hb).(*kmsg.HeartbeatResponse); r.ErrorCode != 0 {
		t.Errorf("heartbeat: error %d", r.ErrorCode)
	}
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Version, leave.Group = 5, "g"
	for _, id := range ids {
		leave.Members = append(leave.Members, kmsg.LeaveGroupRequestMember{MemberID: id})
	}
	if r := ctl.do(leave).(*kmsg.LeaveGroupResponse); len(r.Members) != 3 || r.Members[2].ErrorCode != 0 {
		t.Errorf("leave: %+v", r)
	}
	if d := describe(); d.State != "Empty" {
		t.Errorf("group %s after the leave, want Empty", d.State)
	}
}

func TestCommitAndConsumerHeartbeat(t *testing.T) {
	c := dial(t, start(t))
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group, commit.Generation = 9, "c", -1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = "t"
	for p := range int32(3) {
		ct.Partitions = append(ct.Partitions, kmsg.OffsetCommitRequestTopicPartition{Partition: p, Offset: 7, LeaderEpoch: -1})
	}
	commit.Topics = []kmsg.OffsetCommitRequestTopic{ct}
	r := c.do(commit).(*kmsg.OffsetCommitResponse)
	if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 3 || r.Topics[0].Partitions[2].Partition != 2 {
		t.Errorf("commit: %+v", r)
	}
	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID, hb.MemberEpoch = 1, "cg", "m1", 0
	hb.SubscribedTopicNames = []string{"t"}
	jr := c.do(hb).(*kmsg.ConsumerGroupHeartbeatResponse)
	if jr.ErrorCode != 0 || jr.MemberEpoch != 1 || jr.Assignment == nil || *jr.MemberID != "m1" {
		t.Errorf("join: %+v", jr)
	}
	hb = kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID, hb.MemberEpoch = 1, "cg", "m1", 1
	if r := c.do(hb).(*kmsg.ConsumerGroupHeartbeatResponse); r.ErrorCode != 0 || r.MemberEpoch != 1 || r.Assignment != nil {
		t.Errorf("heartbeat: %+v", r)
	}
}

// TestUnsupportedApiVersions: a version the server cannot read gets
// UNSUPPORTED_VERSION in an ApiVersions v0 answer, as from Kafka.
func TestUnsupportedApiVersions(t *testing.T) {
	c := dial(t, start(t))
	// size 10; key 18, version 99, correlation id 1, null client id
	b := []byte{0, 0, 0, 10, 0, 0x12, 0, 99, 0, 0, 0, 1, 0xff, 0xff}
	if _, err := c.c.Write(b); err != nil {
		t.Fatal(err)
	}
	var size [4]byte
	if _, err := io.ReadFull(c.r, size[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.r, body); err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	if err := resp.ReadFrom(body[4:]); err != nil || resp.ErrorCode != 35 || len(resp.ApiKeys) != len(served) {
		t.Fatalf("answer %+v, %v", resp, err)
	}
}
