package api

import (
	"cmp"
	"context"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/server"
)

// ListPartitionReassignments (KIP-455): the reassignments under way, of
// the partitions asked for or of all (null topics), with each partition's
// current replicas and the replicas being added and removed. Unknown
// topics and partitions without a reassignment are left out, as Kafka
// leaves them out. A single node never has one.
func init() {
	register(kmsg.ListPartitionReassignments, 0, 0, (*Handler).listPartitionReassignments)
}

func (h *Handler) listPartitionReassignments(_ context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.ListPartitionReassignmentsRequest)
	resp := req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	resp.Topics = []kmsg.ListPartitionReassignmentsResponseTopic{}
	if h.cl == nil {
		return resp, nil
	}
	v := h.cl.Node.View()
	add := func(t view.Topic, partitions []int32) {
		st := kmsg.NewListPartitionReassignmentsResponseTopic()
		st.Topic = t.Name
		for _, p := range partitions {
			tp := view.TP{Topic: t.ID, Partition: p}
			ra, ok := v.Reassignments[tp]
			if !ok {
				continue
			}
			sp := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
			sp.Partition = p
			sp.Replicas = slices.Clone(v.Replicas(tp))
			sp.AddingReplicas = nonNil(ra.Adding)
			sp.RemovingReplicas = nonNil(ra.Removing)
			if ra.Revert {
				sp.AddingReplicas = []int32{}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		if len(st.Partitions) > 0 {
			resp.Topics = append(resp.Topics, st)
		}
	}
	if req.Topics == nil {
		byTopic := map[string][]int32{}
		for tp := range v.Reassignments {
			if t, ok := v.TopicByID(tp.Topic); ok && int(tp.Partition) < len(t.Partitions) {
				byTopic[t.Name] = append(byTopic[t.Name], tp.Partition)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(byTopic)) {
			ps := byTopic[name]
			slices.SortFunc(ps, cmp.Compare)
			add(v.Topics[name], ps)
		}
		return resp, nil
	}
	for _, rt := range req.Topics {
		if t, ok := v.Topic(rt.Topic); ok {
			add(t, rt.Partitions)
		}
	}
	return resp, nil
}

func nonNil(ns []int32) []int32 {
	if ns == nil {
		return []int32{}
	}
	return slices.Clone(ns)
}
