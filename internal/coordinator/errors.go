package coordinator

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SetErrorCode sets code in every error field of a group response: the
// top-level code, and the code of each group, topic partition or member it
// holds, so that a client reading any level sees the error. It reports
// whether resp is a group response it knows.
func SetErrorCode(resp kmsg.Response, code int16) bool {
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		r.ErrorCode = code
	case *kmsg.SyncGroupResponse:
		r.ErrorCode = code
	case *kmsg.HeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.LeaveGroupResponse:
		r.ErrorCode = code
		for i := range r.Members {
			r.Members[i].ErrorCode = code
		}
	case *kmsg.OffsetCommitResponse:
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				r.Topics[i].Partitions[j].ErrorCode = code
			}
		}
	case *kmsg.OffsetFetchResponse:
		// v0-1 carry errors only per partition, v2-7 also at the top,
		// v8+ per group; setting all of them is right for every version
		// because unused fields are not encoded.
		r.ErrorCode = code
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				r.Topics[i].Partitions[j].ErrorCode = code
			}
		}
		for i := range r.Groups {
			r.Groups[i].ErrorCode = code
			for j := range r.Groups[i].Topics {
				for k := range r.Groups[i].Topics[j].Partitions {
					r.Groups[i].Topics[j].Partitions[k].ErrorCode = code
				}
			}
		}
	case *kmsg.OffsetDeleteResponse:
		r.ErrorCode = code
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				r.Topics[i].Partitions[j].ErrorCode = code
			}
		}
	case *kmsg.DescribeGroupsResponse:
		for i := range r.Groups {
			r.Groups[i].ErrorCode = code
		}
	case *kmsg.DeleteGroupsResponse:
		for i := range r.Groups {
			r.Groups[i].ErrorCode = code
		}
	case *kmsg.ListGroupsResponse:
		r.ErrorCode = code
	case *kmsg.ConsumerGroupHeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.ConsumerGroupDescribeResponse:
		for i := range r.Groups {
			r.Groups[i].ErrorCode = code
		}
	default:
		return false
	}
	return true
}

// ErrorResponse builds the response to req that fails all of it with code,
// echoing the groups, topics and partitions the request named (as Kafka's
// getErrorResponse does) so a client can match every entry it asked about.
func ErrorResponse(req kmsg.Request, code int16) kmsg.Response {
	resp := req.ResponseKind()
	if d, ok := resp.(interface{ Default() }); ok {
		d.Default()
	}
	resp.SetVersion(req.GetVersion())
	switch r := req.(type) {
	case *kmsg.OffsetCommitRequest:
		out := resp.(*kmsg.OffsetCommitResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition = p.Partition
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
	case *kmsg.OffsetFetchRequest:
		out := resp.(*kmsg.OffsetFetchResponse)
		if r.Version < 8 {
			for _, t := range r.Topics {
				rt := kmsg.NewOffsetFetchResponseTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseTopicPartition()
					rp.Partition = p
					rp.Offset = -1
					rp.LeaderEpoch = -1
					rt.Partitions = append(rt.Partitions, rp)
				}
				out.Topics = append(out.Topics, rt)
			}
		}
		for _, g := range r.Groups {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group = g.Group
			out.Groups = append(out.Groups, rg)
		}
	case *kmsg.OffsetDeleteRequest:
		out := resp.(*kmsg.OffsetDeleteResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewOffsetDeleteResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetDeleteResponseTopicPartition()
				rp.Partition = p.Partition
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
	case *kmsg.DescribeGroupsRequest:
		out := resp.(*kmsg.DescribeGroupsResponse)
		for _, id := range r.Groups {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group = id
			rg.AuthorizedOperations = -2147483648 // not computed
			out.Groups = append(out.Groups, rg)
		}
	case *kmsg.ConsumerGroupDescribeRequest:
		out := resp.(*kmsg.ConsumerGroupDescribeResponse)
		for _, id := range r.Groups {
			rg := kmsg.NewConsumerGroupDescribeResponseGroup()
			rg.Group = id
			rg.AuthorizedOperations = -2147483648 // not computed
			out.Groups = append(out.Groups, rg)
		}
	case *kmsg.DeleteGroupsRequest:
		out := resp.(*kmsg.DeleteGroupsResponse)
		for _, id := range r.Groups {
			rg := kmsg.NewDeleteGroupsResponseGroup()
			rg.Group = id
			out.Groups = append(out.Groups, rg)
		}
	}
	SetErrorCode(resp, code)
	return resp
}
