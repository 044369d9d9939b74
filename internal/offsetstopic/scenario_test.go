package offsetstopic

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/group"
)

var t0 = time.UnixMilli(1_700_000_000_000).UTC()

// scenario drives a real group.Machine through classic and consumer
// groups and returns every record it wrote, in order, and the machine.
// It covers group metadata (with members, and Empty), offset commits
// with and without an expire timestamp, offset tombstones, rebalance
// history and the consumer-group records, tombstones included.
func scenario() ([]group.Record, *group.Machine) {
	m := group.New(group.Config{InitialRebalanceDelay: -1})
	now := t0
	var recs []group.Record
	// step applies ev, then fires the timers it set that are already due
	// (the join phase with no initial delay, the history's own step),
	// and returns the output of ev with the replies of those firings.
	var step func(ev group.Event) group.Output
	step = func(ev group.Event) group.Output {
		out := m.Step(now, ev)
		recs = append(recs, out.Records...)
		for _, tu := range out.Timers {
			if !tu.Cancel && !tu.Deadline.After(now) {
				fired := step(group.Timer{Key: tu.Key})
				out.Replies = append(out.Replies, fired.Replies...)
			}
		}
		return out
	}
	req := func(msg kmsg.Request) group.Output {
		return step(group.Request{ID: 1, ClientID: "client", ClientHost: "/10.0.0.1", Msg: msg})
	}
	sub := kmsg.NewConsumerMemberMetadata()
	sub.Topics = []string{"t"}
	join := func(memberID, instance string) string {
		j := kmsg.NewPtrJoinGroupRequest()
		j.Version = 5
		j.Group, j.MemberID, j.ProtocolType = "classic", memberID, "consumer"
		j.SessionTimeoutMillis, j.RebalanceTimeoutMillis = 10000, 30000
		if instance != "" {
			j.InstanceID = &instance
		}
		j.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: sub.AppendTo(nil)}}
		out := req(j)
		for _, r := range out.Replies {
			if resp, ok := r.Msg.(*kmsg.JoinGroupResponse); ok {
				return resp.MemberID
			}
		}
		return ""
	}
	a := join("", "static-a")
	asg := kmsg.NewConsumerMemberAssignment()
	asg.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "t", Partitions: []int32{0, 1, 2}}}
	s := kmsg.NewPtrSyncGroupRequest()
	s.Version = 3
	s.Group, s.Generation, s.MemberID = "classic", 1, a
	inst := "static-a"
	s.InstanceID = &inst
	s.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: a, MemberAssignment: asg.AppendTo(nil)}}
	req(s)

	commit := func(version int16, retention int64, offset int64) {
		c := kmsg.NewPtrOffsetCommitRequest()
		c.Version = version
		c.Group, c.Generation, c.MemberID = "classic", 1, a
		c.RetentionTimeMillis = retention
		meta := "meta"
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Partition, p.Offset, p.LeaderEpoch, p.Metadata = 0, offset, 5, &meta
		c.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{p}}}
		req(c)
	}
	now = now.Add(time.Second)
	commit(8, -1, 100)
	now = now.Add(time.Second)
	commit(2, 60_000, 101) // an old client's retention: an expire timestamp
	// Manual assignment: a simple group's commit, without group metadata.
	sc := kmsg.NewPtrOffsetCommitRequest()
	sc.Version = 8
	sc.Group, sc.Generation = "simple", -1
	sp := kmsg.NewOffsetCommitRequestTopicPartition()
	sp.Partition, sp.Offset, sp.LeaderEpoch = 3, 7, -1
	sc.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "u", Partitions: []kmsg.OffsetCommitRequestTopicPartition{sp}}}
	req(sc)
	// Delete the simple group's offset: a tombstone.
	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Version = 0
	od.Group = "simple"
	od.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "u", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 3}}}}
	req(od)

	// The static member leaves: the group ends Empty.
	now = now.Add(time.Second)
	l := kmsg.NewPtrLeaveGroupRequest()
	l.Version = 3
	l.Group = "classic"
	l.Members = []kmsg.LeaveGroupRequestMember{{MemberID: a, InstanceID: &inst}}
	req(l)

	// A consumer (KIP-848) group.
	var tid [16]byte
	tid[0] = 7
	step(group.TopicsChanged{Topics: []group.Topic{{Name: "t", ID: tid, Partitions: 3}}})
	hb := func(member string, epoch int32) string {
		h := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		h.Version = 0
		h.Group, h.MemberID, h.MemberEpoch = "modern", member, epoch
		if epoch == 0 {
			h.RebalanceTimeoutMillis = 30000
			h.SubscribedTopicNames = []string{"t"}
			h.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		}
		out := req(h)
		for _, r := range out.Replies {
			if resp, ok := r.Msg.(*kmsg.ConsumerGroupHeartbeatResponse); ok && resp.MemberID != nil {
				return *resp.MemberID
			}
		}
		return member
	}
	now = now.Add(time.Second)
	c1 := hb("", 0)
	now = now.Add(time.Second)
	hb(c1, -1) // leaves: the member's records are tombstoned
	return recs, m
}
