package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.OffsetFetch, 0, 10, (*Handler).offsetFetch) }

// offsetFetch serves v10, which names topics by id, by resolving the ids
// here and asking the coordinator at v9, whose semantics v10 shares.
func (h *Handler) offsetFetch(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.OffsetFetchRequest)
	if req.Version < 10 {
		return h.coordinate(ctx, r)
	}
	byName := kmsg.NewPtrOffsetFetchRequest()
	*byName = *req
	byName.Version = 9
	byName.Groups = make([]kmsg.OffsetFetchRequestGroup, len(req.Groups))
	// unknown holds, per group, the answers for topics whose ids are not
	// known; they are not sent to the coordinator.
	unknown := make(map[string][]kmsg.OffsetFetchResponseGroupTopic)
	for i, g := range req.Groups {
		byName.Groups[i] = g
		if g.Topics == nil { // all topics
			continue
		}
		byName.Groups[i].Topics = []kmsg.OffsetFetchRequestGroupTopic{}
		for _, t := range g.Topics {
			name, ok := h.topicNameOf(t.TopicID)
			if !ok {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.TopicID = t.TopicID
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
					rp.ErrorCode = kerr.UnknownTopicID.Code
					rt.Partitions = append(rt.Partitions, rp)
				}
				unknown[g.Group] = append(unknown[g.Group], rt)
				continue
			}
			t.Topic = name
			byName.Groups[i].Topics = append(byName.Groups[i].Topics, t)
		}
	}
	sub := *r
	sub.Msg = byName
	return h.coordinateThen(ctx, &sub, func(resp kmsg.Response) kmsg.Response {
		out := resp.(*kmsg.OffsetFetchResponse)
		out.Version = req.Version
		for i := range out.Groups {
			g := &out.Groups[i]
			kept := g.Topics[:0]
			for _, t := range g.Topics {
				// A v10 reply can only name topics by id: offsets of a
				// topic that no longer exists cannot be expressed.
				if id, ok := h.topicIDOf(t.Topic); ok {
					t.TopicID = id
					kept = append(kept, t)
				}
			}
			g.Topics = append(kept, unknown[g.Group]...)
		}
		return out
	}), nil
}
