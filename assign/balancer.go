package assign

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Balancer adapts a classic assignor to franz-go's kgo.GroupBalancer, so a
// Go application can let groupd's assignors balance its group:
//
//	kgo.Balancers(assign.Balancer(assign.CooperativeSticky()))
//
// The JoinGroup metadata is a version 3 ConsumerProtocolSubscription. The
// cooperative assignor reports owned partitions there; the eager sticky
// assignor also writes StickyAssignor user data, since Java's StickyAssignor
// reads its previous assignment only from there. Any member in the group may
// become leader, so the bytes are what Java and franz-go members expect.
//
// Server-side assignors ([Uniform], [ServerRange]) are not classic client
// protocols; wrapping them works but no other client would recognise their
// names.
func Balancer(a Assignor) kgo.GroupBalancer {
	return &balancer{a: a, cooperative: a.Name() == "cooperative-sticky", sticky: a.Name() == "sticky"}
}

type balancer struct {
	a           Assignor
	cooperative bool
	sticky      bool
}

func (b *balancer) ProtocolName() string { return b.a.Name() }
func (b *balancer) IsCooperative() bool  { return b.cooperative }

func (b *balancer) JoinGroupMetadata(topics []string, current map[string][]int32, generation int32) []byte {
	md := Metadata{Topics: topics, Generation: generation}
	var owned []TopicPartitions
	if b.cooperative || b.sticky {
		owned = make([]TopicPartitions, 0, len(current))
		for t, ps := range current {
			owned = append(owned, TopicPartitions{Topic: t, Partitions: ps})
		}
		// Sorted, so an unchanged assignment yields unchanged bytes and
		// the coordinator does not see a metadata change (KAFKA-12898).
		slices.SortFunc(owned, func(x, y TopicPartitions) int {
			if x.Topic < y.Topic {
				return -1
			}
			if x.Topic > y.Topic {
				return 1
			}
			return 0
		})
	}
	switch {
	case b.cooperative:
		md.Owned = owned
	case b.sticky:
		md.UserData = EncodeStickyUserData(StickyUserData{Owned: owned, Generation: generation})
	}
	return md.Encode(MaxMetadataVersion)
}

func (b *balancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	_, tps, _, err := DecodeAssignment(assignment)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]int32, len(tps))
	for _, x := range tps {
		out[x.Topic] = append(out[x.Topic], x.Partitions...)
	}
	return out, nil
}

func (b *balancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	mb, err := newMemberBalancer(b.a, members)
	if err != nil {
		return nil, nil, err
	}
	topics := make(map[string]struct{})
	for i := range mb.members {
		for _, t := range mb.members[i].Topics {
			topics[t] = struct{}{}
		}
	}
	return mb, topics, nil
}

// memberBalancer holds the decoded members of one JoinGroup response.
type memberBalancer struct {
	a       Assignor
	members []Member
}

func newMemberBalancer(a Assignor, members []kmsg.JoinGroupResponseMember) (*memberBalancer, error) {
	in := &interner{}
	ms := make([]Member, 0, len(members))
	for i := range members {
		jm := &members[i]
		md, err := decodeMetadata(jm.ProtocolMetadata, in)
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", jm.MemberID, err)
		}
		var inst string
		if jm.InstanceID != nil {
			inst = *jm.InstanceID
		}
		ms = append(ms, md.Member(jm.MemberID, inst))
	}
	return &memberBalancer{a: a, members: ms}, nil
}

// Balance satisfies kgo.GroupMemberBalancer; kgo calls BalanceOrError.
func (m *memberBalancer) Balance(topics map[string]int32) kgo.IntoSyncAssignment {
	p, _ := m.BalanceOrError(topics)
	return p
}

func (m *memberBalancer) BalanceOrError(topics map[string]int32) (kgo.IntoSyncAssignment, error) {
	return syncPlan(m.a.Assign(m.members, topics)), nil
}

// syncPlan encodes an Assignment as SyncGroup member assignments.
type syncPlan Assignment

// IntoSyncAssignment encodes every member's assignment (version 3,
// no user data) into one shared buffer, sorted by member id.
func (p syncPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment {
	ids := make([]string, 0, len(p))
	size := 0
	for id, tps := range p {
		ids = append(ids, id)
		size += assignmentSize(tps, nil)
	}
	slices.Sort(ids)
	buf := make([]byte, 0, size)
	out := make([]kmsg.SyncGroupRequestGroupAssignment, len(ids))
	for i, id := range ids {
		start := len(buf)
		buf = AppendAssignment(buf, MaxMetadataVersion, p[id], nil)
		out[i] = kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: buf[start:len(buf):len(buf)]}
	}
	return out
}
