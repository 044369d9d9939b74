package api

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.CreatePartitions, 0, 3, (*Handler).createPartitions) }

func (h *Handler) createPartitions(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.CreatePartitionsRequest)
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	seen := make(map[string]int, len(req.Topics))
	for _, rt := range req.Topics {
		seen[rt.Topic]++
	}
	for _, rt := range req.Topics {
		st := kmsg.NewCreatePartitionsResponseTopic()
		st.Topic = rt.Topic
		var err error
		_, internal := h.b.OffsetsTopic()
		if h.cl != nil {
			if seen[rt.Topic] > 1 {
				err = detail(kerr.InvalidRequest, "topic %q is named more than once in the request", rt.Topic)
			} else {
				err = h.clusterCreatePartitions(ctx, rt, req.ValidateOnly, time.Duration(req.TimeoutMillis)*time.Millisecond)
			}
		} else if seen[rt.Topic] > 1 {
			err = detail(kerr.InvalidRequest, "topic %q is named more than once in the request", rt.Topic)
		} else if internal && rt.Topic == broker.OffsetsTopicName {
			err = detail(kerr.InvalidRequest, "%s is an internal topic: its partition count is fixed", rt.Topic)
		} else if t, ok := h.b.Topic(rt.Topic); !ok {
			err = kerr.UnknownTopicOrPartition
		} else if have := int32(len(t.Partitions())); rt.Count <= have {
			err = detail(kerr.InvalidPartitions, "topic currently has %d partitions, which is higher than or equal to the requested %d", have, rt.Count)
		} else {
			for _, a := range rt.Assignment {
				if len(a.Replicas) != 1 || a.Replicas[0] != h.b.NodeID() {
					err = detail(kerr.InvalidReplicaAssignment, "this cluster has one broker, node %d", h.b.NodeID())
				}
			}
			if err == nil {
				err = h.b.CreatePartitions(rt.Topic, rt.Count, req.ValidateOnly)
			}
		}
		if err != nil {
			st.ErrorCode = errCode(err)
			st.ErrorMessage = errMessage(err)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
