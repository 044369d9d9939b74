package sim

import (
	"fmt"
	"strings"

	"github.com/groupd/groupd/assign"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// describeRequest is a request's one-line form in the trace.
func describeRequest(r kmsg.Request) string {
	inst := func(p *string) string {
		if p == nil {
			return ""
		}
		return " inst=" + *p
	}
	switch q := r.(type) {
	case *kmsg.JoinGroupRequest:
		names := make([]string, len(q.Protocols))
		for i, p := range q.Protocols {
			names[i] = p.Name
		}
		return fmt.Sprintf("v%d member=%q%s protos=%s", q.Version, q.MemberID, inst(q.InstanceID), strings.Join(names, ","))
	case *kmsg.SyncGroupRequest:
		return fmt.Sprintf("v%d gen=%d member=%q%s assignments=%d", q.Version, q.Generation, q.MemberID, inst(q.InstanceID), len(q.GroupAssignment))
	case *kmsg.HeartbeatRequest:
		return fmt.Sprintf("v%d gen=%d member=%q%s", q.Version, q.Generation, q.MemberID, inst(q.InstanceID))
	case *kmsg.LeaveGroupRequest:
		if q.Version < 3 {
			return fmt.Sprintf("v%d member=%q", q.Version, q.MemberID)
		}
		return fmt.Sprintf("v%d member=%q%s", q.Version, q.Members[0].MemberID, inst(q.Members[0].InstanceID))
	case *kmsg.OffsetCommitRequest:
		var parts []string
		for _, t := range q.Topics {
			for _, p := range t.Partitions {
				parts = append(parts, fmt.Sprintf("%s/%d=%d", t.Topic, p.Partition, p.Offset))
			}
		}
		return fmt.Sprintf("v%d gen=%d member=%q%s %s", q.Version, q.Generation, q.MemberID, inst(q.InstanceID), strings.Join(parts, " "))
	case *kmsg.OffsetFetchRequest:
		var parts []string
		for _, t := range q.Topics {
			for _, p := range t.Partitions {
				parts = append(parts, fmt.Sprintf("%s/%d", t.Topic, p))
			}
		}
		return fmt.Sprintf("v%d %s", q.Version, strings.Join(parts, " "))
	case *kmsg.ConsumerGroupHeartbeatRequest:
		s := fmt.Sprintf("v%d member=%q epoch=%d%s", q.Version, q.MemberID, q.MemberEpoch, inst(q.InstanceID))
		if q.RebalanceTimeoutMillis != -1 {
			s += fmt.Sprintf(" rebalance=%dms", q.RebalanceTimeoutMillis)
		}
		if q.SubscribedTopicNames != nil {
			s += fmt.Sprintf(" names=%v", q.SubscribedTopicNames)
		}
		if q.SubscribedTopicRegex != nil {
			s += fmt.Sprintf(" regex=%q", *q.SubscribedTopicRegex)
		}
		if q.ServerAssignor != nil {
			s += " assignor=" + *q.ServerAssignor
		}
		if q.Topics != nil {
			n := 0
			for _, t := range q.Topics {
				n += len(t.Partitions)
			}
			s += fmt.Sprintf(" owned=%d", n)
		}
		return s
	}
	return fmt.Sprintf("%T", r)
}

// describeResponse is a response's one-line form in the trace.
func describeResponse(r kmsg.Response) string {
	switch q := r.(type) {
	case *kmsg.JoinGroupResponse:
		s := fmt.Sprintf("%s gen=%d member=%q leader=%q", errName(q.ErrorCode), q.Generation, q.MemberID, q.LeaderID)
		if len(q.Members) > 0 {
			s += fmt.Sprintf(" members=%d", len(q.Members))
		}
		if q.Protocol != nil && *q.Protocol != "" {
			s += " protocol=" + *q.Protocol
		}
		if q.SkipAssignment {
			s += " skip-assignment"
		}
		return s
	case *kmsg.SyncGroupResponse:
		if q.ErrorCode != 0 {
			return errName(q.ErrorCode)
		}
		_, parts, _, err := assign.DecodeAssignment(q.MemberAssignment)
		if err != nil {
			return "NONE <undecodable assignment>"
		}
		return "NONE " + fmtTPs(toTPs(parts))
	case *kmsg.HeartbeatResponse:
		return errName(q.ErrorCode)
	case *kmsg.LeaveGroupResponse:
		code := q.ErrorCode
		for _, m := range q.Members {
			if m.ErrorCode != 0 {
				code = m.ErrorCode
			}
		}
		return errName(code)
	case *kmsg.OffsetCommitResponse:
		code, _ := replyCode(q)
		return errName(code)
	case *kmsg.OffsetFetchResponse:
		var parts []string
		for _, t := range q.Topics {
			for _, p := range t.Partitions {
				parts = append(parts, fmt.Sprintf("%s/%d=%d", t.Topic, p.Partition, p.Offset))
			}
		}
		return errName(q.ErrorCode) + " " + strings.Join(parts, " ")
	case *kmsg.ConsumerGroupHeartbeatResponse:
		if q.ErrorCode != 0 {
			return errName(q.ErrorCode)
		}
		s := fmt.Sprintf("NONE epoch=%d", q.MemberEpoch)
		if q.MemberID != nil {
			s += fmt.Sprintf(" member=%q", *q.MemberID)
		}
		if a := q.Assignment; a != nil {
			var parts []string
			for _, t := range a.Topics {
				for _, p := range t.Partitions {
					parts = append(parts, fmt.Sprintf("%x/%d", t.TopicID[14:], p))
				}
			}
			s += " assignment=[" + strings.Join(parts, " ") + "]"
		}
		return s
	}
	return fmt.Sprintf("%T", r)
}
