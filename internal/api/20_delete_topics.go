package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.DeleteTopics, 0, 6, (*Handler).deleteTopics) }

func (h *Handler) deleteTopics(_ context.Context, r *server.Request) (kmsg.Response, error) {
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
	for _, rt := range targets {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		var err error
		switch {
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
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
