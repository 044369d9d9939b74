package consumer

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// What the machine answers for the group APIs it shares with classic
// groups: package group owns the offsets and the group ids of both types,
// and asks the consumer machine about its groups' members through these.

// Has reports whether a consumer group of that id exists.
func (m *Machine) Has(groupID string) bool { return m.groups[groupID] != nil }

// Members returns how many members a group has (0 for an unknown group). A
// static member that left with epoch -2 still counts until its session
// runs out.
func (m *Machine) Members(groupID string) int {
	if g := m.groups[groupID]; g != nil {
		return len(g.members)
	}
	return 0
}

// Subscribed reports whether some member subscribes to a topic, by name or
// through a regular expression (Kafka's isSubscribedToTopic), which keeps
// its offsets from expiring and from OffsetDelete.
func (m *Machine) Subscribed(groupID, topic string) bool {
	g := m.groups[groupID]
	if g == nil {
		return false
	}
	if g.names[topic] > 0 {
		return true
	}
	for _, rs := range g.regexes {
		if _, ok := slices.BinarySearch(rs.topics, topic); ok {
			return true
		}
	}
	return false
}

// InvalidHeartbeat returns the error answer to a ConsumerGroupHeartbeat that
// fails the checks made before the group is looked at, or nil: so that a
// request for a group id held by a classic group is refused with the same
// precedence as Kafka's.
func (m *Machine) InvalidHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	err := m.validateHeartbeat(req)
	if err == nil {
		return nil
	}
	return heartbeatError(req.Version, err)
}

func heartbeatError(version int16, err *apiError) *kmsg.ConsumerGroupHeartbeatResponse {
	resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	resp.Version = version
	resp.ErrorCode = err.code
	resp.ErrorMessage = &err.msg
	return resp
}

// NotConsumerGroup is the answer to a ConsumerGroupHeartbeat for a group id
// that a classic group holds and that is not converted: the migration
// policy forbids it, the group does not use the consumer protocol or is
// too large, or the request is not a join.
func NotConsumerGroup(req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	return heartbeatError(req.Version, errorf(kerr.GroupIDNotFound, "Group %s is not a consumer group.", req.Group))
}

// DescribeGroup describes one group for ConsumerGroupDescribe.
func (m *Machine) DescribeGroup(id string) kmsg.ConsumerGroupDescribeResponseGroup {
	dg := kmsg.NewConsumerGroupDescribeResponseGroup()
	dg.Group = id
	dg.AuthorizedOperations = authorizedOpsOmitted
	g := m.groups[id]
	switch {
	case id == "":
		dg.ErrorCode = kerr.InvalidGroupID.Code
	case g == nil:
		dg.ErrorCode = kerr.GroupIDNotFound.Code
		msg := "Group " + id + " not found."
		dg.ErrorMessage = &msg
	default:
		m.describeGroup(g, &dg)
	}
	return dg
}

// Full reports whether a group has no room for a member it does not have
// yet (group.consumer.max.size).
func (m *Machine) Full(groupID, memberID string) bool {
	g := m.groups[groupID]
	return g != nil && len(g.members) >= m.cfg.MaxSize && (memberID == "" || g.members[memberID] == nil)
}

// CommitCheck answers per partition for an offset commit whose member
// epoch is behind the member's: 0 to accept the partition, or an error
// code.
type CommitCheck func(topic string, partition int32) int16

// ValidateOffsetCommit checks an OffsetCommit to a consumer group, as
// Kafka 4.3's ConsumerGroup.validateOffsetCommit. It returns an error code
// for the whole request, or 0 and, when the request's epoch is behind the
// member's, a check per partition (KIP-1251): a commit at an older epoch is
// accepted for a partition the member holds (assigned or still revoking)
// since that epoch or earlier, so that a member committing while a
// rebalance moves its epoch on is not refused for partitions it keeps.
func (m *Machine) ValidateOffsetCommit(groupID, memberID string, epoch int32, version int16) (int16, CommitCheck) {
	g := m.groups[groupID]
	if g == nil {
		return kerr.GroupIDNotFound.Code, nil
	}
	// Epoch -1 comes from an admin client or a consumer that assigns
	// partitions itself; it may commit while the group has no members.
	if epoch < 0 && len(g.members) == 0 {
		return 0, nil
	}
	mem := g.members[memberID]
	if mem == nil {
		return kerr.UnknownMemberID.Code, nil
	}
	if mem.meta.classic != nil {
		// A classic member commits with any version, its member epoch
		// as the generation, which must be exact.
		if epoch != mem.epoch {
			return kerr.IllegalGeneration.Code, nil
		}
		return 0, nil
	}
	if version < 9 {
		// Only OffsetCommit v9 carries a member epoch.
		return kerr.UnsupportedVersion.Code, nil
	}
	switch {
	case epoch > mem.epoch:
		return kerr.StaleMemberEpoch.Code, nil
	case epoch == mem.epoch:
		return 0, nil
	}
	return 0, func(topic string, p int32) int16 {
		t, ok := m.topics.byName[topic]
		if !ok {
			return kerr.StaleMemberEpoch.Code
		}
		given, held := assignmentEpoch(mem.assigned, t.ID, p)
		if !held {
			given, held = assignmentEpoch(mem.pending, t.ID, p)
		}
		if !held || epoch < given {
			return kerr.StaleMemberEpoch.Code
		}
		return 0
	}
}

// assignmentEpoch returns the epoch at which a partition of s was given.
func assignmentEpoch(s partSet, id TopicID, p int32) (int32, bool) {
	i := s.find(id)
	if i < 0 {
		return 0, false
	}
	j, ok := slices.BinarySearch(s[i].parts, p)
	if !ok {
		return 0, false
	}
	return epochAt(s[i].epochs, j), true
}

// ValidateOffsetFetch checks the member of an OffsetFetch (v9+) to a
// consumer group, as Kafka's ConsumerGroup.validateOffsetFetch: a request
// without member id and with a negative epoch is an admin's; any other
// must name a member (UNKNOWN_MEMBER_ID) at its current epoch
// (STALE_MEMBER_EPOCH).
func (m *Machine) ValidateOffsetFetch(groupID string, memberID *string, epoch int32) int16 {
	if memberID == nil && epoch < 0 {
		return 0
	}
	g := m.groups[groupID]
	var mem *member
	if g != nil && memberID != nil {
		mem = g.members[*memberID]
	}
	switch {
	case mem == nil:
		return kerr.UnknownMemberID.Code
	case epoch != mem.epoch && mem.meta.classic != nil:
		return kerr.IllegalGeneration.Code
	case epoch != mem.epoch:
		return kerr.StaleMemberEpoch.Code
	}
	return 0
}

// deleteGroup writes the tombstones of a group without members, in
// Kafka's order (createGroupTombstoneRecords), the group epoch last so
// that the group exists until its last record goes.
func (m *Machine) deleteGroup(id string) {
	g := m.groups[id]
	if g == nil || len(g.members) > 0 {
		return
	}
	for _, mid := range sortedKeys(g.target) {
		m.emit(Record{Type: RecordTargetMember, Group: id, Member: mid})
	}
	m.emit(Record{Type: RecordTargetEpoch, Group: id})
	m.emit(Record{Type: RecordGroupEpoch, Group: id})
}

func sortedKeys[V any](mp map[string]V) []string {
	ks := make([]string, 0, len(mp))
	for k := range mp {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// GroupFull is the answer to a ConsumerGroupHeartbeat joining a group that
// has no room for it (group.consumer.max.size).
func GroupFull(req *kmsg.ConsumerGroupHeartbeatRequest, maxSize int) *kmsg.ConsumerGroupHeartbeatResponse {
	return heartbeatError(req.Version, errorf(kerr.GroupMaxSizeReached, "The consumer group has reached its maximum capacity of %d members.", maxSize))
}
