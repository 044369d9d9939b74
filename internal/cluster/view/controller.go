package view

import (
	"github.com/groupd/groupd/internal/cluster/controller"
	"github.com/groupd/groupd/internal/cluster/meta"
)

// ControllerView is the cluster as the controller decides on it
// (controller.Decide): the node runtime and the simulator both build it
// here, so that they cannot differ.
func (v *View) ControllerView(autoRebalance, due bool) controller.View {
	cv := controller.View{
		Alive:               map[int32]string{},
		Registered:          map[int32]int64{},
		EmptyDisk:           map[int32]bool{},
		ShuttingDown:        map[int32]bool{},
		States:              map[controller.TP]controller.PartitionState{},
		Reassign:            map[controller.TP]controller.Reassignment{},
		Elections:           map[controller.TP]controller.Election{},
		AutoLeaderRebalance: autoRebalance,
		RebalanceDue:        due,
	}
	for id, ni := range v.Nodes {
		cv.Alive[id] = ni.Rack
		cv.Registered[id] = v.Registration(id)
		cv.EmptyDisk[id] = ni.EmptyDisk
	}
	for id, s := range v.Shutdowns {
		if ni, ok := v.Nodes[id]; ok && ni.Incarnation == s.Incarnation {
			cv.ShuttingDown[id] = true
		}
	}
	for _, t := range v.SortedTopics() {
		cv.Topics = append(cv.Topics, controller.Topic{ID: controller.TopicID(t.ID), Name: t.Name, Replicas: t.Partitions,
			UncleanLeaderElection: t.Configs["unclean.leader.election.enable"] == "true"})
	}
	for tp, s := range v.States {
		cv.States[controller.TP{Topic: controller.TopicID(tp.Topic), Partition: tp.Partition}] = controller.PartitionState{
			Leader: s.Leader, LeaderEpoch: s.LeaderEpoch, ISR: s.ISR, PartitionEpoch: s.PartitionEpoch, Revision: s.Revision}
	}
	for tp, r := range v.Reassignments {
		cv.Reassign[controller.TP{Topic: controller.TopicID(tp.Topic), Partition: tp.Partition}] = controller.Reassignment{
			Target: r.Target, Revert: r.Revert, Revision: r.Revision}
	}
	for tp, e := range v.Elections {
		typ := controller.ElectPreferred
		if e.Type == meta.ElectUnclean {
			typ = controller.ElectUnclean
		}
		cv.Elections[controller.TP{Topic: controller.TopicID(tp.Topic), Partition: tp.Partition}] = controller.Election{Type: typ, Revision: e.Revision}
	}
	return cv
}
