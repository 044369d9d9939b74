package group

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/inspect"
)

func (m *Machine) describeGroups(r Request, req *kmsg.DescribeGroupsRequest) {
	resp := kmsg.NewPtrDescribeGroupsResponse()
	resp.Version = req.Version
	defer m.reply(r.ID, resp)
	for _, id := range req.Groups {
		dg := kmsg.NewDescribeGroupsResponseGroup()
		dg.Group = id
		dg.AuthorizedOperations = -2147483648
		g := m.groups[id]
		if g == nil || g.consumer {
			dg.State = Dead.String()
			if req.Version >= 6 {
				// KIP-1043: unknown groups, and groups that are not
				// classic, are an error from v6.
				dg.ErrorCode = errGroupIDNotFound
				if g != nil {
					msg := "Group " + id + " is not a classic group."
					dg.ErrorMessage = &msg
				}
			}
			resp.Groups = append(resp.Groups, dg)
			continue
		}
		dg.State = g.state.String()
		dg.ProtocolType = g.protocolType
		if g.state == Stable {
			dg.Protocol = g.protocol
		}
		if ms := g.sortedMembers(); len(ms) > 0 {
			dg.Members = make([]kmsg.DescribeGroupsResponseGroupMember, 0, len(ms))
		}
		for _, mem := range g.sortedMembers() {
			dm := kmsg.NewDescribeGroupsResponseGroupMember()
			dm.MemberID = mem.id
			dm.InstanceID = optStr(mem.instanceID)
			dm.ClientID = mem.clientID
			dm.ClientHost = mem.clientHost
			// Metadata and assignment are only meaningful once Stable.
			if g.state == Stable {
				dm.ProtocolMetadata = mem.metadataFor(g.protocol)
				dm.MemberAssignment = mem.assignment
			}
			dg.Members = append(dg.Members, dm)
		}
		resp.Groups = append(resp.Groups, dg)
	}
}

func (m *Machine) listGroups(r Request, req *kmsg.ListGroupsRequest) {
	resp := kmsg.NewPtrListGroupsResponse()
	resp.Version = req.Version
	defer m.reply(r.ID, resp)
	// Kafka lower-cases and trims each state filter, and lower-cases
	// each type filter.
	states := map[string]bool{}
	for _, s := range req.StatesFilter {
		states[strings.TrimFunc(javaLower(s), isJavaTrimmed)] = true
	}
	types := map[string]bool{}
	for _, t := range req.TypesFilter {
		types[javaLower(t)] = true
	}
	for _, id := range m.Groups() {
		g := m.groups[id]
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group = id
		lg.ProtocolType = g.protocolType
		lg.GroupState = g.state.String()
		lg.GroupType = inspect.TypeClassic
		if g.consumer {
			state, _ := m.cons.GroupState(id)
			lg.ProtocolType = consumerProtocolType
			lg.GroupState = state.String()
			lg.GroupType = inspect.TypeConsumer
		}
		if len(types) > 0 && !types[lg.GroupType] {
			continue
		}
		if len(states) > 0 && !states[strings.ToLower(lg.GroupState)] {
			continue
		}
		resp.Groups = append(resp.Groups, lg)
	}
}

func (m *Machine) deleteGroups(r Request, req *kmsg.DeleteGroupsRequest) {
	resp := kmsg.NewPtrDeleteGroupsResponse()
	resp.Version = req.Version
	defer m.reply(r.ID, resp)
	for _, id := range req.Groups {
		dg := kmsg.NewDeleteGroupsResponseGroup()
		dg.Group = id
		g := m.groups[id]
		switch {
		case g == nil || g.state == Dead:
			dg.ErrorCode = errGroupIDNotFound
		case g.consumer:
			if m.cons.Members(id) > 0 {
				dg.ErrorCode = errNonEmptyGroup
				break
			}
			m.deleteConsumerGroup(g)
		case g.state != Empty:
			dg.ErrorCode = errNonEmptyGroup
		default:
			for _, tp := range g.offsets.sorted() {
				m.record(offsetRecord(id, tp.topic, tp.partition, nil))
			}
			m.record(Record{Type: RecordGroupMetadata, Group: id})
			m.removeGroup(g)
		}
		resp.Groups = append(resp.Groups, dg)
	}
}

func (m *Machine) offsetDelete(r Request, req *kmsg.OffsetDeleteRequest) {
	resp := kmsg.NewPtrOffsetDeleteResponse()
	resp.Version = req.Version
	defer m.reply(r.ID, resp)
	g := m.groups[req.Group]
	switch {
	case req.Group == "":
		// Even for a group "" that offset commits created.
		resp.ErrorCode = errInvalidGroupID
		return
	case g == nil || g.state == Dead:
		resp.ErrorCode = errGroupIDNotFound
		return
	case g.state != Empty && g.protocolType != consumerProtocolType:
		resp.ErrorCode = errNonEmptyGroup
		return
	}
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		subscribed := m.subscribed(g, t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			tp := topicPartition{t.Topic, p.Partition}
			if subscribed {
				rp.ErrorCode = errGroupSubscribedToTopic
			} else if g.offsets.delete(tp) {
				m.record(offsetRecord(g.id, t.Topic, p.Partition, nil))
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
}

// javaLower lower-cases s as Java's String.toLowerCase(Locale.ROOT) does
// for a comparison with an ASCII name. The one letter where Go differs is
// U+0130 (capital I with dot above), which Go lowers to "i" and Java to
// "i" and a combining dot, so that it never matches.
func javaLower(s string) string {
	return strings.ToLower(strings.ReplaceAll(s, "\u0130", "i\u0307"))
}

// isJavaTrimmed reports whether Java's String.trim removes r from an end:
// every control character and the space, and nothing else.
func isJavaTrimmed(r rune) bool { return r <= ' ' }
