package api

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/cluster"
	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/server"
)

// AlterPartitionReassignments (KIP-455; v1 is KIP-860's
// allow_replication_factor_change). Cluster mode: each partition's
// target is checked as Kafka checks it (a non-empty list of distinct
// registered nodes) and written as reassignments/<topic id>/<p>, which
// the controller carries through; null replicas cancel the reassignment
// under way (see cluster.Node.Reassign). The answer comes once the write
// is durable and this node's view shows it, not once the reassignment is
// done, as in Kafka. On a single node the only valid replica list is
// this node alone, which the partitions have already; there is never a
// reassignment to cancel.
func init() {
	register(kmsg.AlterPartitionAssignments, 0, 1, (*Handler).alterPartitionReassignments)
}

func (h *Handler) alterPartitionReassignments(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.AlterPartitionAssignmentsRequest)
	resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	allowRF := req.Version < 1 || req.AllowReplicationFactorChange
	resp.AllowReplicationFactorChange = allowRF
	timeout := time.Duration(req.TimeoutMillis) * time.Millisecond
	if timeout <= 0 {
		timeout = adminTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last int64
	for _, rt := range req.Topics {
		st := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			sp.Partition = rp.Partition
			var err error
			if h.cl != nil {
				var rev int64
				rev, err = h.clusterReassign(ctx, rt.Topic, rp.Partition, rp.Replicas, allowRF)
				last = max(last, rev)
			} else {
				err = h.singleReassign(rt.Topic, rp.Partition, rp.Replicas)
			}
			if err != nil {
				if ctx.Err() != nil && errCode(err) == kerr.UnknownServerError.Code {
					err = kerr.RequestTimedOut
				}
				sp.ErrorCode, sp.ErrorMessage = errCode(err), errMessage(err)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if h.cl != nil && last > 0 {
		// So that this node's ListPartitionReassignments shows them.
		_ = h.cl.Node.WaitView(ctx, func(v *view.View) bool { return v.Revision >= last })
	}
	return resp, nil
}

// singleReassign answers a partition's reassignment on a single node.
func (h *Handler) singleReassign(topic string, p int32, replicas []int32) error {
	t, ok := h.b.Topic(topic)
	switch {
	case !ok || p < 0 || int(p) >= len(t.Partitions()):
		return kerr.UnknownTopicOrPartition
	case replicas == nil:
		return kerr.NoReassignmentInProgress
	case len(replicas) == 1 && replicas[0] == h.b.NodeID():
		return nil // the partition's replicas already
	}
	return detail(kerr.InvalidReplicaAssignment, "this cluster has one broker, node %d", h.b.NodeID())
}

// clusterReassign checks and writes one partition's reassignment; it
// returns the revision of the write (0 if none was needed).
func (h *Handler) clusterReassign(ctx context.Context, topic string, p int32, replicas []int32, allowRF bool) (int64, error) {
	v := h.cl.Node.View()
	t, ok := v.Topic(topic)
	if !ok || p < 0 || int(p) >= len(t.Partitions) {
		return 0, kerr.UnknownTopicOrPartition
	}
	tp := view.TP{Topic: t.ID, Partition: p}
	if replicas != nil {
		if len(replicas) == 0 {
			return 0, detail(kerr.InvalidReplicaAssignment, "the replica list of %s-%d is empty", topic, p)
		}
		for i, n := range replicas {
			if slices.Contains(replicas[:i], n) {
				return 0, detail(kerr.InvalidReplicaAssignment, "broker %d is listed twice for %s-%d", n, topic, p)
			}
			if !v.Alive(n) {
				return 0, detail(kerr.InvalidReplicaAssignment, "broker %d, a replica of %s-%d, is not registered", n, topic, p)
			}
		}
		original := t.Partitions[p]
		if r, ok := v.Reassignments[tp]; ok {
			original = cluster.OriginalReplicas(original, r.Reassignment)
		}
		if !allowRF && len(replicas) != len(original) {
			return 0, detail(kerr.InvalidReplicationFactor, "the replication factor of %s-%d would change from %d to %d", topic, p, len(original), len(replicas))
		}
	}
	return h.cl.Node.Reassign(ctx, tp, replicas)
}
