package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.OffsetCommit, 0, 10, (*Handler).offsetCommit) }

// offsetCommit serves v10, which names topics by id, by resolving the ids
// here: the coordinator keeps offsets by topic name and serves v9, whose
// semantics v10 shares.
func (h *Handler) offsetCommit(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.OffsetCommitRequest)
	if req.Version < 10 {
		return h.coordinate(ctx, r)
	}
	byName := kmsg.NewPtrOffsetCommitRequest()
	*byName = *req
	byName.Version = 9
	byName.Topics = nil
	var unknown []kmsg.OffsetCommitResponseTopic
	for _, t := range req.Topics {
		name, ok := h.topicNameOf(t.TopicID)
		if !ok {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.TopicID = t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.UnknownTopicID.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			unknown = append(unknown, rt)
			continue
		}
		t.Topic = name
		byName.Topics = append(byName.Topics, t)
	}
	sub := *r
	sub.Msg = byName
	return h.coordinateThen(ctx, &sub, func(resp kmsg.Response) kmsg.Response {
		out := resp.(*kmsg.OffsetCommitResponse)
		out.Version = req.Version
		for i := range out.Topics {
			if id, ok := h.topicIDOf(out.Topics[i].Topic); ok {
				out.Topics[i].TopicID = id
			}
		}
		out.Topics = append(out.Topics, unknown...)
		return out
	}), nil
}
