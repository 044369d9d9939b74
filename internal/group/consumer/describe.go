package consumer

import (
	"cmp"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// authorizedOpsOmitted is Kafka's value for authorized operations that were
// not computed.
const authorizedOpsOmitted = -2147483648

// describe serves ConsumerGroupDescribe (key 69) v0-v1.
func (m *Machine) describe(r Request, req *kmsg.ConsumerGroupDescribeRequest) {
	resp := kmsg.NewPtrConsumerGroupDescribeResponse()
	resp.Version = req.Version
	for _, id := range req.Groups {
		resp.Groups = append(resp.Groups, m.DescribeGroup(id))
	}
	m.reply(r.ID, resp)
}

func (m *Machine) describeGroup(g *group, dg *kmsg.ConsumerGroupDescribeResponseGroup) {
	dg.State = g.state().String()
	dg.Epoch = g.epoch
	dg.AssignmentEpoch = g.assignmentEpoch
	dg.AssignorName = g.preferredAssignor(m.cfg.Assignors)
	for _, mem := range g.sortedMembers() {
		dm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
		dm.MemberID = mem.id
		dm.InstanceID = optional(mem.meta.instanceID)
		dm.RackID = optional(mem.meta.rackID)
		dm.MemberEpoch = mem.epoch
		dm.ClientID = mem.meta.clientID
		dm.ClientHost = mem.meta.clientHost
		dm.SubscribedTopics = slices.Clone(mem.meta.names)
		if dm.SubscribedTopics == nil {
			dm.SubscribedTopics = []string{}
		}
		re := mem.meta.regex
		dm.SubscribedTopicRegex = &re
		dm.Assignment = m.describeAssignment(mem.assigned)
		dm.TargetAssignment = m.describeAssignment(g.target[mem.id])
		dm.MemberType = 1 // a consumer-protocol member (v1)
		if mem.meta.classic != nil {
			dm.MemberType = 0 // a classic member
		}
		dg.Members = append(dg.Members, dm)
	}
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// describeAssignment names the partitions' topics, sorted by name; topics
// that no longer exist are left out, as Kafka does.
func (m *Machine) describeAssignment(s partSet) kmsg.Assignment {
	a := kmsg.NewAssignment()
	a.TopicPartitions = []kmsg.AssignmentTopicPartition{}
	for _, t := range s {
		name, ok := m.topics.name(t.id)
		if !ok {
			continue
		}
		at := kmsg.NewAssignmentTopicPartition()
		at.TopicID = t.id
		at.Topic = name
		at.Partitions = slices.Clone(t.parts)
		a.TopicPartitions = append(a.TopicPartitions, at)
	}
	slices.SortFunc(a.TopicPartitions, func(x, y kmsg.AssignmentTopicPartition) int { return cmp.Compare(x.Topic, y.Topic) })
	return a
}
