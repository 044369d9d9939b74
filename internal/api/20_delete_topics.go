package api

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.DeleteTopics, 0, 6, (*Handler).deleteTopics) }

func (h *Handler) deleteTopics(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)

	// Before v6 topics are named in TopicNames; from v6 in Topics, by name
	// or by id.
	targets := req.Topics
	if req.Version < 6 {
		targets = nil
		for _, name := range req.TopicNames {
			t := kmsg.NewDeleteTopicsRequestTopic()
			t.Topic = strp(name)
			targets = append(targets, t)
		}
	}
	var deleted []string
	for _, rt := range targets {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		var err error
		ot, internal := h.b.OffsetsTopic()
		switch {
		case h.cl != nil:
			err = h.clusterDeleteTopic(ctx, rt, &st, time.Duration(req.TimeoutMillis)*time.Millisecond)
		case internal && ((rt.Topic != nil && *rt.Topic == broker.OffsetsTopicName) || (rt.Topic == nil && rt.TopicID == ot.ID)):
			st.Topic, st.TopicID = strp(broker.OffsetsTopicName), ot.ID
			err = detail(kerr.InvalidRequest, "%s is an internal topic: the group coordinator's records are in its store", broker.OffsetsTopicName)
		case rt.Topic == nil || *rt.Topic == "":
			if t, ok := h.b.TopicByID(rt.TopicID); ok {
				st.Topic = strp(t.Name)
				err = h.b.DeleteTopic(t.Name)
			} else {
				err = kerr.UnknownTopicID
			}
		default:
			if t, ok := h.b.Topic(*rt.Topic); ok {
				st.TopicID = t.ID
			}
			err = h.b.DeleteTopic(*rt.Topic)
		}
		if err != nil {
			st.ErrorCode = errCode(err)
			if req.Version >= 5 {
				st.ErrorMessage = errMessage(err)
			}
		} else {
			deleted = append(deleted, *st.Topic)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if h.cl == nil {
		// In a cluster every node removes the offsets of the groups it
		// coordinates when its view loses the topic (the app's).
		h.cleanupOffsets(ctx, deleted)
	}
	return resp, nil
}

// cleanupOffsets removes the committed offsets of deleted topics from every
// group before DeleteTopics answers, as Kafka does. The broker recorded
// the cleanup with each deletion, so one that fails here is retried on
// the next start.
func (h *Handler) cleanupOffsets(ctx context.Context, topics []string) {
	if len(topics) == 0 {
		return
	}
	if err := h.coord.DeleteTopicOffsets(ctx, topics); err != nil {
		h.log.Warn("removing the committed offsets of deleted topics; retried on the next start", "topics", topics, "err", err)
		return
	}
	if err := h.b.OffsetsCleaned(topics); err != nil {
		h.log.Warn("recording the removal of deleted topics' offsets; it is repeated on the next start", "topics", topics, "err", err)
	}
}
