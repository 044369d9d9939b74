package api

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.DeleteRecords, 0, 2, (*Handler).deleteRecords) }

// deleteRecords moves each partition's log start offset up to the offset
// given (-1: the high watermark), durably, before it answers; segments
// wholly below it are deleted.
func (h *Handler) deleteRecords(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.DeleteRecordsRequest)
	if h.cl != nil {
		return h.clusterDeleteRecords(ctx, req)
	}
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewDeleteRecordsResponseTopic()
		st.Topic = rt.Topic
		t, topicOK := h.b.Topic(rt.Topic)
		_, internal := h.b.OffsetsTopic()
		internal = internal && rt.Topic == broker.OffsetsTopicName
		for _, rp := range rt.Partitions {
			sp := kmsg.NewDeleteRecordsResponseTopicPartition()
			sp.Partition, sp.LowWatermark = rp.Partition, -1
			var l *partition.Log
			if topicOK {
				l = t.Partition(rp.Partition)
			}
			switch {
			case internal:
				sp.ErrorCode = kerr.InvalidTopicException.Code
			case l == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			default:
				start, err := l.DeleteRecords(rp.Offset)
				switch {
				case errors.Is(err, partition.ErrOffsetOutOfRange):
					sp.ErrorCode = kerr.OffsetOutOfRange.Code
				case errors.Is(err, partition.ErrClosed):
					sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				case err != nil:
					h.log.Error("delete records", "topic", rt.Topic, "partition", rp.Partition, "err", err)
					sp.ErrorCode = kerr.KafkaStorageError.Code
				default:
					sp.LowWatermark = start
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
