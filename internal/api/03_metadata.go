package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.Metadata, 0, 13, (*Handler).metadata) }

// authorizedOpsOmitted is Kafka's "not requested" value for the
// authorized-operations fields.
const authorizedOpsOmitted = -2147483648

func (h *Handler) metadata(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.MetadataRequest)
	if h.cl != nil {
		return h.clusterMetadata(ctx, req)
	}
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	node := h.b.NodeID()

	br := kmsg.NewMetadataResponseBroker()
	br.NodeID, br.Host, br.Port = node, h.host, h.port
	resp.Brokers = append(resp.Brokers, br)
	resp.ClusterID = strp(h.b.ClusterID())
	resp.ControllerID = node
	resp.AuthorizedOperations = authorizedOpsOmitted

	// A null topic list (v1+) or an empty one at v0 asks for every topic.
	if req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0) {
		ot, internal := h.b.OffsetsTopic()
		for _, t := range h.b.Topics() {
			if internal && t.Name > broker.OffsetsTopicName {
				resp.Topics = append(resp.Topics, h.metadataOffsetsTopic(ot))
				internal = false
			}
			resp.Topics = append(resp.Topics, h.metadataTopic(t))
		}
		if internal {
			resp.Topics = append(resp.Topics, h.metadataOffsetsTopic(ot))
		}
		return resp, nil
	}
	// Before v4 a request could not opt out of auto-creation.
	autoCreate := h.b.AutoCreateTopics() && (req.Version < 4 || req.AllowAutoTopicCreation)
	for _, rt := range req.Topics {
		var (
			t   *broker.Topic
			ok  bool
			err error
		)
		switch {
		case rt.Topic == nil:
			t, ok = h.b.TopicByID(rt.TopicID)
			if ot, internal := h.b.OffsetsTopic(); !ok && internal && ot.ID == rt.TopicID {
				resp.Topics = append(resp.Topics, h.metadataOffsetsTopic(ot))
				continue
			}
			if !ok {
				mt := kmsg.NewMetadataResponseTopic()
				mt.TopicID = rt.TopicID
				mt.ErrorCode = kerr.UnknownTopicID.Code
				mt.Partitions = []kmsg.MetadataResponseTopicPartition{}
				resp.Topics = append(resp.Topics, mt)
				continue
			}
		case *rt.Topic == broker.OffsetsTopicName:
			// As Kafka creates its internal topic when asked for it.
			ot, internal := h.b.OffsetsTopic()
			if !internal && autoCreate {
				ot, err = h.b.EnsureOffsetsTopic()
				internal = err == nil
			}
			if internal {
				resp.Topics = append(resp.Topics, h.metadataOffsetsTopic(ot))
				continue
			}
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic = strp(broker.OffsetsTopicName)
			mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			mt.Partitions = []kmsg.MetadataResponseTopicPartition{}
			resp.Topics = append(resp.Topics, mt)
			continue
		default:
			name := *rt.Topic
			if err = broker.ValidateTopicName(name); err == nil {
				t, ok = h.b.Topic(name)
				if !ok {
					err = kerr.UnknownTopicOrPartition
					if autoCreate {
						t, err = h.b.CreateTopic(name, -1, nil, false)
						if err == kerr.TopicAlreadyExists { // raced with another creator
							t, _ = h.b.Topic(name)
							err = nil
						}
					}
				}
			}
			if err != nil {
				mt := kmsg.NewMetadataResponseTopic()
				mt.Topic = strp(name)
				mt.ErrorCode = errCode(err)
				mt.Partitions = []kmsg.MetadataResponseTopicPartition{}
				resp.Topics = append(resp.Topics, mt)
				continue
			}
		}
		resp.Topics = append(resp.Topics, h.metadataTopic(t))
	}
	return resp, nil
}

func (h *Handler) metadataTopic(t *broker.Topic) kmsg.MetadataResponseTopic {
	return h.metadataPartitions(t.Name, t.ID, len(t.Partitions()))
}

// metadataOffsetsTopic describes __consumer_offsets, internal, with its
// partitions led by this node like any other.
func (h *Handler) metadataOffsetsTopic(ot broker.OffsetsTopic) kmsg.MetadataResponseTopic {
	mt := h.metadataPartitions(broker.OffsetsTopicName, ot.ID, int(ot.Partitions))
	mt.IsInternal = true
	return mt
}

func (h *Handler) metadataPartitions(name string, id broker.TopicID, n int) kmsg.MetadataResponseTopic {
	node := h.b.NodeID()
	mt := kmsg.NewMetadataResponseTopic()
	mt.Topic = strp(name)
	mt.TopicID = id
	mt.AuthorizedOperations = authorizedOpsOmitted
	mt.Partitions = make([]kmsg.MetadataResponseTopicPartition, 0, n)
	for p := range n {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = int32(p)
		mp.Leader = node
		mp.LeaderEpoch = 0
		mp.Replicas = []int32{node}
		mp.ISR = []int32{node}
		mp.OfflineReplicas = []int32{}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}
