package api

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.CreateTopics, 0, 7, (*Handler).createTopics) }

func (h *Handler) createTopics(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)

	// Kafka rejects every copy of a topic named twice in one request.
	seen := make(map[string]int, len(req.Topics))
	for _, rt := range req.Topics {
		seen[rt.Topic]++
	}
	for _, rt := range req.Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		st.NumPartitions, st.ReplicationFactor = -1, -1
		var err error
		switch {
		case h.cl != nil && seen[rt.Topic] > 1:
			err = detail(kerr.InvalidRequest, "topic %q is named more than once in the request", rt.Topic)
		case h.cl != nil:
			err = h.clusterCreateTopic(ctx, rt, req.ValidateOnly, time.Duration(req.TimeoutMillis)*time.Millisecond, &st)
		default:
			err = h.createTopic(rt, req.ValidateOnly, seen[rt.Topic] > 1, &st)
		}
		if err != nil {
			st.ErrorCode = errCode(err)
			st.ErrorMessage = errMessage(err)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

type detailedError struct {
	code *kerr.Error
	msg  string
}

func (e *detailedError) Error() string { return e.code.Message + ": " + e.msg }
func (e *detailedError) Unwrap() error { return e.code }

func detail(code *kerr.Error, format string, args ...any) error {
	return &detailedError{code, fmt.Sprintf(format, args...)}
}

// requestedConfigs are the configs a CreateTopics topic sets.
func requestedConfigs(rt kmsg.CreateTopicsRequestTopic) map[string]string {
	configs := make(map[string]string, len(rt.Configs))
	for _, c := range rt.Configs {
		if c.Value != nil {
			configs[c.Name] = *c.Value
		}
	}
	return configs
}

// answerTopicConfigs gives a new topic's configs in its answer (v5+), as
// DescribeConfigs would; it fails if they do not resolve.
func (h *Handler) answerTopicConfigs(configs map[string]string, st *kmsg.CreateTopicsResponseTopic) error {
	values, err := h.b.ResolveConfigs(configs)
	if err != nil {
		return err
	}
	st.Configs = make([]kmsg.CreateTopicsResponseTopicConfig, 0, len(values))
	for _, v := range values {
		c := kmsg.NewCreateTopicsResponseTopicConfig()
		c.Name, c.Value, c.Source = v.Def.Name, strp(v.Value), int8(v.Source)
		st.Configs = append(st.Configs, c)
	}
	return nil
}

func (h *Handler) createTopic(rt kmsg.CreateTopicsRequestTopic, validateOnly, duplicate bool, st *kmsg.CreateTopicsResponseTopic) error {
	if duplicate {
		return detail(kerr.InvalidRequest, "topic %q is named more than once in the request", rt.Topic)
	}
	n, rf := rt.NumPartitions, rt.ReplicationFactor
	if len(rt.ReplicaAssignment) > 0 {
		if n != -1 || rf != -1 {
			return detail(kerr.InvalidRequest, "both replica assignment and partition count or replication factor were given")
		}
		for i, a := range rt.ReplicaAssignment {
			if a.Partition != int32(i) {
				return detail(kerr.InvalidReplicaAssignment, "partitions must be numbered 0..%d in order", len(rt.ReplicaAssignment)-1)
			}
			if len(a.Replicas) != 1 || a.Replicas[0] != h.b.NodeID() {
				return detail(kerr.InvalidReplicaAssignment, "this cluster has one broker, node %d", h.b.NodeID())
			}
		}
		n, rf = int32(len(rt.ReplicaAssignment)), 1
	}
	switch {
	case n == 0 || n < -1:
		return detail(kerr.InvalidPartitions, "number of partitions must be larger than 0, or -1 for the default")
	case rf == 0 || rf < -1:
		return detail(kerr.InvalidReplicationFactor, "replication factor must be larger than 0, or -1 for the default")
	case rf > 1:
		return detail(kerr.InvalidReplicationFactor, "replication factor: %d larger than available brokers: 1", rf)
	}
	configs := requestedConfigs(rt)
	t, err := h.b.CreateTopic(rt.Topic, n, configs, validateOnly)
	if err != nil {
		return err
	}
	if err := h.answerTopicConfigs(configs, st); err != nil {
		return err
	}
	st.ReplicationFactor = 1
	if t != nil {
		st.TopicID = t.ID
		st.NumPartitions = int32(len(t.Partitions()))
	} else if n == -1 {
		st.NumPartitions = h.b.DefaultPartitions()
	} else {
		st.NumPartitions = n
	}
	return nil
}
