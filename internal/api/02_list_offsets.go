package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.ListOffsets, 0, 11, (*Handler).listOffsets) }

// Special timestamps of ListOffsets.
const (
	tsLatest        = -1
	tsEarliest      = -2
	tsMax           = -3 // v7+: the record with the largest timestamp
	tsEarliestLocal = -4 // v8+: without tiered storage, the log start
	tsLatestTiered  = -5 // v9+: without tiered storage, none
)

func (h *Handler) listOffsets(_ context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		t, ok := h.b.Topic(rt.Topic)
		ot, internal := h.b.OffsetsTopic()
		internal = internal && rt.Topic == broker.OffsetsTopicName
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Offset, sp.Timestamp, sp.LeaderEpoch = -1, -1, 0
			var l *partition.Log
			if ok {
				l = t.Partition(rp.Partition)
			}
			var hw int64
			if l != nil {
				hw = l.HighWatermark()
			}
			if h.cl != nil {
				internal = false
				l, hw, sp.ErrorCode = h.clusterListLog(rt.Topic, rp.Partition, rp.CurrentLeaderEpoch)
			}
			switch {
			case sp.ErrorCode != 0:
			case internal && rp.Partition >= 0 && rp.Partition < ot.Partitions:
				// __consumer_offsets reads as empty: every special
				// offset is 0, and no record has a timestamp.
				if rp.Timestamp < 0 {
					sp.Offset = 0
				}
			case l == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case rp.CurrentLeaderEpoch > 0 && h.cl == nil:
				sp.ErrorCode = kerr.UnknownLeaderEpoch.Code
			default:
				switch ts := rp.Timestamp; {
				case ts == tsLatest:
					// Every offset below the high watermark is stable:
					// there are no transactions, so read_committed and
					// read_uncommitted agree.
					sp.Offset = hw
				case ts == tsEarliest || (ts == tsEarliestLocal && req.Version >= 8):
					sp.Offset = l.LogStartOffset()
				case ts == tsMax && req.Version >= 7:
					sp.Offset, sp.Timestamp = l.MaxTimestamp()
				case ts == tsLatestTiered && req.Version >= 9:
					// No tiered storage: nothing has been uploaded.
				case ts >= 0:
					off, found, ok, err := l.OffsetForTimestamp(ts)
					switch {
					case err != nil:
						h.log.Error("list offsets by timestamp", "topic", rt.Topic, "partition", rp.Partition, "err", err)
						sp.ErrorCode = kerr.KafkaStorageError.Code
					case ok:
						sp.Offset, sp.Timestamp = off, found
					}
				default:
					sp.ErrorCode = kerr.InvalidRequest.Code
				}
			}
			if req.Version == 0 && sp.ErrorCode == 0 && sp.Offset >= 0 {
				sp.OldStyleOffsets = []int64{sp.Offset}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
