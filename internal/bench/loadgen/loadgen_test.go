package main

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFrame decodes a prepared frame back: header, then the body with
// kmsg, after the correlation id is patched in.
func TestFrame(t *testing.T) {
	req := plainHeartbeat("g", "m", 7)
	p := prepare(req)
	binary.BigEndian.PutUint32(p.frame[8:], 42) // as send does
	f := p.frame
	if n := int(binary.BigEndian.Uint32(f)); n != len(f)-4 {
		t.Fatalf("size %d, frame of %d", n, len(f)-4)
	}
	if key, v := int16(binary.BigEndian.Uint16(f[4:])), int16(binary.BigEndian.Uint16(f[6:])); key != 68 || v != 1 {
		t.Fatalf("key %d version %d", key, v)
	}
	if corr := binary.BigEndian.Uint32(f[8:]); corr != 42 {
		t.Fatalf("correlation id %d", corr)
	}
	idLen := int(binary.BigEndian.Uint16(f[12:]))
	if string(f[14:14+idLen]) != clientID {
		t.Fatalf("client id %q", f[14:14+idLen])
	}
	body, err := skipTags(f[14+idLen:])
	if err != nil {
		t.Fatal(err)
	}
	got := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	got.Version = 1
	if err := got.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	if got.Group != "g" || got.MemberID != "m" || got.MemberEpoch != 7 || got.Topics != nil || got.SubscribedTopicNames != nil {
		t.Fatalf("decoded %+v", got)
	}
}

func assignment(id [16]byte, parts ...int32) *kmsg.ConsumerGroupHeartbeatResponse {
	r := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	r.Version = 1
	r.Assignment = &kmsg.ConsumerGroupHeartbeatResponseAssignment{}
	t := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
	t.TopicID, t.Partitions = id, parts
	r.Assignment.Topics = []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{t}
	return r
}

// TestMemberReconciles walks a member through a join, a new assignment
// that takes two partitions away and gives one, and the acknowledgment.
func TestMemberReconciles(t *testing.T) {
	id := [16]byte{1}
	g := newGroup("g", "t", id, 4)
	m := g.add("m1", nil)
	if p, encoded := m.request(); encoded || p.req.(*kmsg.ConsumerGroupHeartbeatRequest).MemberEpoch != 0 {
		t.Fatalf("first request %+v (encoded now: %v), want the prepared join", p.req, encoded)
	}
	m.sent()
	resp := assignment(id, 0, 1, 2)
	resp.MemberID, resp.MemberEpoch = kmsg.StringPtr("m1"), 3
	changed, revoked, err := m.apply(resp)
	if err != nil || !changed || revoked != 0 || !slices.Equal(m.owned, []int32{0, 1, 2}) || !m.tell {
		t.Fatalf("after join: changed %v revoked %d err %v owned %v", changed, revoked, err, m.owned)
	}
	if d := m.ack(changed); d != 0 || m.ackEpoch != -1 {
		t.Fatalf("acknowledged a join: %d, epoch %d", d, m.ackEpoch)
	}
	// The next heartbeat reports what it owns; the answer changes nothing.
	p, encoded := m.request()
	req := p.req.(*kmsg.ConsumerGroupHeartbeatRequest)
	if !encoded || len(req.Topics) != 1 || !slices.Equal(req.Topics[0].Partitions, []int32{0, 1, 2}) {
		t.Fatalf("report %+v", req)
	}
	m.sent()
	plain := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	plain.MemberEpoch = 3
	changed, _, _ = m.apply(plain)
	if d := m.ack(changed); d != 0 || m.ackEpoch != 3 || m.ackParts != 3 {
		t.Fatalf("ack: %d, epoch %d parts %d (a group of one with 4 partitions is not settled with 3)", d, m.ackEpoch, m.ackParts)
	}
	// Revoke first: 0 and 2 go, 3 comes.
	m.preparePlain(3)
	p, encoded = m.request()
	if encoded || p.req.(*kmsg.ConsumerGroupHeartbeatRequest).Topics != nil {
		t.Fatalf("plain heartbeat %+v (encoded now: %v)", p.req, encoded)
	}
	m.sent()
	resp = assignment(id, 1, 3)
	resp.MemberEpoch = 4
	changed, revoked, err = m.apply(resp)
	if err != nil || !changed || revoked != 2 || !slices.Equal(m.owned, []int32{1, 3}) {
		t.Fatalf("changed %v revoked %d err %v owned %v", changed, revoked, err, m.owned)
	}
	if d := m.ack(changed); d != 0 || m.ackEpoch != -1 {
		t.Fatalf("still acknowledged after a change: %d, epoch %d", d, m.ackEpoch)
	}
	// An error fails the member; an epoch going back too.
	bad := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	bad.ErrorCode = 110
	if _, _, err := m.apply(bad); err == nil {
		t.Fatal("error 110 accepted")
	}
	bad = kmsg.NewPtrConsumerGroupHeartbeatResponse()
	bad.MemberEpoch = 2
	if _, _, err := m.apply(bad); err == nil {
		t.Fatal("epoch 4 to 2 accepted")
	}
}

// TestGroupSettles: a group settles when every member acknowledged one
// epoch above its floor and they own every partition, and unsettles when
// one moves on.
func TestGroupSettles(t *testing.T) {
	id := [16]byte{2}
	g := newGroup("g", "t", id, 4)
	a, b := g.add("a", nil), g.add("b", nil)
	g.reset(4)
	settle := func(m *cgMember, epoch int32, parts ...int32) int {
		m.joined, m.epoch, m.owned, m.tell = true, epoch, parts, false
		m.sentEpoch = epoch
		return m.ack(false)
	}
	if d := settle(a, 5, 0, 1); d != 0 {
		t.Fatalf("settled with one member: %d", d)
	}
	if d := settle(b, 4, 2, 3); d != 0 {
		t.Fatalf("settled at two epochs: %d", d)
	}
	if d := settle(b, 5, 2); d != 0 {
		t.Fatalf("settled with 3 of 4 partitions: %d", d)
	}
	if d := settle(b, 5, 2, 3); d != 1 || !g.settled {
		t.Fatalf("not settled: %d", d)
	}
	if d := settle(a, 6, 0, 1); d != -1 || g.settled {
		t.Fatalf("still settled with a member at another epoch: %d", d)
	}
	// At the floor's epoch nothing settles.
	g.reset(6)
	settle(a, 6, 0, 1)
	if d := settle(b, 6, 2, 3); d != 0 {
		t.Fatalf("settled at the floor: %d", d)
	}
	// A server that assigns nothing (the naive floor): members only.
	f := newGroup("f", "t", id, 0)
	x := f.add("x", nil)
	x.joined, x.epoch, x.sentEpoch = true, 1, 1
	if d := x.ack(false); d != 1 {
		t.Fatalf("floor group not settled: %d", d)
	}
}

func TestStats(t *testing.T) {
	if m := median([]float64{5, 1, 3}); m != 3 {
		t.Errorf("median %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median %v", m)
	}
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := percentile(d, 50); p != 6 {
		t.Errorf("p50 %v", p)
	}
	if p := percentile(d, 99); p != 10 {
		t.Errorf("p99 %v", p)
	}
	if p := percentile(nil, 99); p != 0 {
		t.Errorf("p99 of nothing %v", p)
	}
}

func TestDefaults(t *testing.T) {
	for name := range run {
		if _, ok := defaults[name]; !ok {
			t.Errorf("scenario %s has no defaults", name)
		}
	}
	o := options{scenario: "commit", inflight: 16}
	o.fillDefaults()
	if o.inflight != 16 || o.conns != 32 || o.groups != 1000 || o.partitions != 10 {
		t.Errorf("commit options %+v", o)
	}
}

func TestRecordValues(t *testing.T) {
	v := recordValues(512)
	if len(v) != valuePool || len(v[0]) != 512 || string(v[0]) == string(v[1]) {
		t.Fatalf("%d values of %d bytes", len(v), len(v[0]))
	}
	if w := recordValues(512); string(w[7]) != string(v[7]) {
		t.Fatal("values differ between calls: the sides would not get the same load")
	}
}
