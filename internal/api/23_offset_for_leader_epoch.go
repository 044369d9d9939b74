package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.OffsetForLeaderEpoch, 0, 4, (*Handler).offsetForLeaderEpoch) }

// offsetForLeaderEpoch answers from the single leader epoch this node has
// ever had, 0: its end offset is the high watermark.
func (h *Handler) offsetForLeaderEpoch(_ context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.OffsetForLeaderEpochRequest)
	if h.cl != nil {
		return h.clusterOffsetForLeaderEpoch(req)
	}
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		t, ok := h.b.Topic(rt.Topic)
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.LeaderEpoch, sp.EndOffset = -1, -1
			switch {
			case !ok || t.Partition(rp.Partition) == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case rp.CurrentLeaderEpoch > 0:
				sp.ErrorCode = kerr.UnknownLeaderEpoch.Code
			case rp.LeaderEpoch == 0:
				sp.LeaderEpoch, sp.EndOffset = 0, t.Partition(rp.Partition).HighWatermark()
			default:
				// An epoch this node never had is answered with the
				// undefined epoch and offset, as Kafka does.
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
