package consumer

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// seedRecords runs a small scenario and returns every record it wrote:
// all types, tombstones, static members, revocations.
func seedRecords() []Record {
	m := New(Config{NewMemberID: SequentialMemberIDs("m")})
	var recs []Record
	step := func(ev Event) {
		recs = append(recs, m.Step(epoch0, ev).Records...)
	}
	var id1, id2 TopicID
	id1[0], id2[0] = 1, 2
	step(TopicsChanged{Topics: []Topic{{Name: "t", ID: id1, Partitions: 4}, {Name: "u", ID: id2, Partitions: 2}}})
	hb := func(member string, epoch int32, instance string, owned []kmsg.ConsumerGroupHeartbeatRequestTopic) {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Version = 1
		req.Group, req.MemberID, req.MemberEpoch = "g", member, epoch
		if instance != "" {
			req.InstanceID = &instance
		}
		if epoch == 0 {
			req.RebalanceTimeoutMillis = 1000
			req.SubscribedTopicNames = []string{"t", "u"}
			re := "v.*"
			req.SubscribedTopicRegex = &re
			req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		} else {
			req.Topics = owned
		}
		step(Request{ID: 1, ClientID: "c", ClientHost: "/h", Msg: req})
	}
	hb("a", 0, "ia", nil)
	hb("b", 0, "", nil)
	hb("a", 1, "ia", nil)
	hb("a", -2, "ia", nil)
	hb("a2", 0, "ia", nil)
	// A classic member joins, then a classic static member replaces
	// the consumer-protocol one: member metadata with its classic part.
	join := func(member, instance string) {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Version = 9
		req.Group, req.MemberID, req.ProtocolType = "g", member, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 1000
		if instance != "" {
			req.InstanceID = &instance
		}
		md := kmsg.NewConsumerMemberMetadata()
		md.Version = 1
		md.Topics = []string{"t"}
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: md.AppendTo(nil)}}
		step(Request{ID: 2, ClientID: "c", ClientHost: "/h", Msg: req})
	}
	join("c", "")
	join("", "ia")
	hb("b", -1, "", nil)
	return recs
}

// FuzzDecodeRecord checks that the record decoder never panics, that what
// it accepts encodes back to the same bytes, and that applying an accepted
// record to a machine fails cleanly or not at all.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range seedRecords() {
		f.Add(r.Key(), r.Value())
	}
	f.Add([]byte{0, byte(RecordCurrentAssignment), 1, 'g', 1, 'm'}, []byte{0, 0, 2, 2, 0x7f, 1})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		r, err := DecodeRecord(key, value)
		if err != nil {
			return
		}
		if string(r.Key()) != string(key) {
			t.Fatalf("key %x re-encoded as %x", key, r.Key())
		}
		if value != nil && string(r.Value()) != string(value) {
			t.Fatalf("value %x re-encoded as %x", value, r.Value())
		}
		m := New(Config{})
		if _, err := m.Replay(epoch0, append(seedRecords(), r)); err == nil {
			if err := m.checkInvariants(); err != nil {
				t.Fatalf("replay accepted %+v but: %v", r, err)
			}
		}
	})
}

// FuzzHeartbeat feeds ConsumerGroupHeartbeat requests decoded from arbitrary
// bytes (the path a request from the network takes) to a machine holding a
// group: it must answer exactly once, with a response that encodes, and
// keep its bookkeeping straight.
func FuzzHeartbeat(f *testing.F) {
	for _, v := range []int16{0, 1} {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Version = v
		req.Group, req.MemberID, req.MemberEpoch = "g", "a", 0
		req.RebalanceTimeoutMillis = 5000
		req.SubscribedTopicNames = []string{"t"}
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		f.Add(byte(v), req.AppendTo(nil))
		req.MemberEpoch = 1
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: TopicID{1}, Partitions: []int32{0, 3, 3, -1}}}
		f.Add(byte(v), req.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, version byte, body []byte) {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Version = int16(version % 2)
		if err := req.ReadFrom(body); err != nil {
			return
		}
		m := New(Config{NewMemberID: SequentialMemberIDs("m")})
		m.Step(epoch0, TopicsChanged{Topics: []Topic{{Name: "t", ID: TopicID{1}, Partitions: 4}}})
		if _, err := m.Replay(epoch0, seedRecords()); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			out := m.Step(epoch0.Add(time.Duration(i)*time.Second), Request{ID: 7, ClientID: "c", ClientHost: "/h", Msg: req})
			if len(out.Replies) != 1 || out.Replies[0].ID != 7 {
				t.Fatalf("replies %v", out.Replies)
			}
			resp := out.Replies[0].Msg.(*kmsg.ConsumerGroupHeartbeatResponse)
			var back kmsg.ConsumerGroupHeartbeatResponse
			back.Version = resp.Version
			if err := back.ReadFrom(resp.AppendTo(nil)); err != nil {
				t.Fatalf("response does not encode: %v", err)
			}
			if err := m.checkInvariants(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// FuzzClassicJoin feeds JoinGroup requests decoded from arbitrary bytes,
// with their embedded ConsumerProtocol subscriptions, to a machine holding
// a group with classic and consumer-protocol members: it must answer
// exactly once with a response that encodes and keep its bookkeeping
// straight, and the member's SyncGroup must serialize its assignment.
func FuzzClassicJoin(f *testing.F) {
	for _, owned := range [][]int32{nil, {0, 1}, {3, 9, -1}} {
		md := kmsg.NewConsumerMemberMetadata()
		md.Topics = []string{"t", "u"}
		if owned != nil {
			md.Version = 1
			md.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "t", Partitions: owned}}
		}
		req := kmsg.NewPtrJoinGroupRequest()
		req.Version = 9
		req.Group, req.MemberID, req.ProtocolType = "g", "c", "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 1000
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: md.AppendTo(nil)}}
		f.Add(req.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Version = 9
		if err := req.ReadFrom(body); err != nil {
			return
		}
		m := New(Config{NewMemberID: SequentialMemberIDs("m")})
		m.Step(epoch0, TopicsChanged{Topics: []Topic{{Name: "t", ID: TopicID{1}, Partitions: 4}, {Name: "u", ID: TopicID{2}, Partitions: 2}}})
		if _, err := m.Replay(epoch0, seedRecords()); err != nil {
			t.Fatal(err)
		}
		out := m.Step(epoch0, Request{ID: 7, ClientID: "c", ClientHost: "/h", Msg: req})
		if len(out.Replies) != 1 || out.Replies[0].ID != 7 {
			t.Fatalf("replies %v", out.Replies)
		}
		resp := out.Replies[0].Msg.(*kmsg.JoinGroupResponse)
		back := kmsg.NewPtrJoinGroupResponse()
		back.Version = resp.Version
		if err := back.ReadFrom(resp.AppendTo(nil)); err != nil {
			t.Fatalf("response does not encode: %v", err)
		}
		if err := m.checkInvariants(); err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode != 0 || m.groups["g"] == nil {
			return
		}
		sync := kmsg.NewPtrSyncGroupRequest()
		sync.Version = 5
		sync.Group, sync.MemberID, sync.Generation = "g", resp.MemberID, resp.Generation
		out = m.Step(epoch0, Request{ID: 8, ClientID: "c", ClientHost: "/h", Msg: sync})
		sr := out.Replies[0].Msg.(*kmsg.SyncGroupResponse)
		if sr.ErrorCode == 0 {
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(sr.MemberAssignment); err != nil {
				t.Fatalf("assignment %x does not parse: %v", sr.MemberAssignment, err)
			}
		}
	})
}

// FuzzUpgrade converts a classic group whose member carries arbitrary
// subscription and assignment bytes: the conversion either refuses with
// GROUP_ID_NOT_FOUND and changes nothing, or yields a group that keeps its
// invariants (no partition held twice, whatever the assignment said).
func FuzzUpgrade(f *testing.F) {
	md := kmsg.NewConsumerMemberMetadata()
	md.Topics = []string{"t"}
	a := kmsg.NewConsumerMemberAssignment()
	a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "t", Partitions: []int32{0, 1, 1, 7}}, {Topic: "nope", Partitions: []int32{0}}}
	f.Add(md.AppendTo(nil), a.AppendTo(nil), []byte{})
	f.Add([]byte("custom"), []byte{}, a.AppendTo(nil))
	f.Fuzz(func(t *testing.T, meta, asg1, asg2 []byte) {
		m := New(Config{NewMemberID: SequentialMemberIDs("m")})
		m.Step(epoch0, TopicsChanged{Topics: []Topic{{Name: "t", ID: TopicID{1}, Partitions: 4}}})
		hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		hb.Version = 1
		hb.Group, hb.MemberID = "g", "x"
		hb.RebalanceTimeoutMillis, hb.SubscribedTopicNames = 1000, []string{"t"}
		hb.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		u := Upgrade{Group: "g", Generation: 3, Protocol: "range", Heartbeat: Request{ID: 9, Msg: hb}}
		for i, asg := range [][]byte{asg1, asg2} {
			u.Members = append(u.Members, ClassicMember{ID: string(rune('a' + i)), SessionTimeoutMs: 10000, RebalanceTimeoutMs: 1000,
				Protocols: []ClassicProtocol{{Name: "range", Metadata: meta}}, Assignment: asg})
		}
		out := m.Step(epoch0, u)
		if len(out.Replies) != 1 {
			t.Fatalf("replies %v", out.Replies)
		}
		resp := out.Replies[0].Msg.(*kmsg.ConsumerGroupHeartbeatResponse)
		if resp.ErrorCode != 0 {
			if m.Has("g") || len(out.Records) != 0 {
				t.Fatalf("refused upgrade left %d records", len(out.Records))
			}
			return
		}
		if err := m.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	})
}
