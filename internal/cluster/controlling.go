package cluster

import (
	"context"
	"fmt"

	"github.com/groupd/groupd/internal/cluster/controller"
	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
)

// controllerLoop campaigns for the controller key whenever the cluster has
// no controller, and while this node holds it, writes the controller's
// decisions on every new view.
func (n *Node) controllerLoop() {
	changed := n.Subscribe()
	var (
		mine       int64 // create revision of our controller key, 0 if not ours
		epoch      int32
		rebalance  = make(chan struct{}, 1)
		stopTicker func() bool
		due        bool
	)
	tick := func() {
		stopTicker = n.cfg.Clock.AfterFunc(n.cfg.LeaderImbalanceCheckInterval, func() {
			select {
			case rebalance <- struct{}{}:
			default:
			}
		})
	}
	defer func() {
		if stopTicker != nil {
			stopTicker()
		}
	}()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-changed:
		case <-rebalance:
			due = true
			tick()
		}
		v := n.View()
		lease := n.leaseID()
		_, registered := n.Registration()
		switch {
		case lease == 0:
			mine = 0
			continue
		case v.Controller == nil && mine != 0 && v.Revision < mine:
			continue // our key is not in the view yet
		case v.Controller == nil:
			mine, epoch = n.campaign(v, lease)
			if mine != 0 && n.cfg.AutoLeaderRebalance && stopTicker == nil {
				tick()
			}
			continue
		case mine == 0 && ownController(v, n.cfg.NodeID, registered):
			// A campaign that won although its answer was lost.
			mine, epoch = v.Controller.CreateRevision, v.Controller.Epoch
			n.log.Info("the controller key is this node's own", "controller_epoch", epoch)
			if n.cfg.AutoLeaderRebalance && stopTicker == nil {
				tick()
			}
		case v.Controller.NodeID != n.cfg.NodeID || v.Controller.CreateRevision != mine:
			if mine != 0 {
				n.log.Info("no longer the controller", "controller", v.Controller.NodeID)
			}
			mine = 0
			continue
		}
		if n.decide(v, mine, epoch, due) {
			due = false
		}
	}
}

// ownController reports whether the controller key in v was created by
// this node under the lease it registered with at registered: it names
// this node, and was created after that registration (a key of an
// earlier lease went with that lease, before this node could register
// again). A campaign whose answer was lost may have won: as Kafka's
// KafkaZkClient.registerControllerAndIncrementControllerEpoch checks the
// controller znode it finds, the node takes such a key as its own rather
// than leaving the cluster with a controller that does not act until its
// lease ends.
func ownController(v *view.View, me int32, registered int64) bool {
	return v.Controller != nil && v.Controller.NodeID == me && registered != 0 && v.Controller.CreateRevision > registered
}

// campaign tries to create the controller key under the node's lease, with
// the next controller epoch. It returns the key's create revision and the
// epoch if it won.
func (n *Node) campaign(v *view.View, lease kv.LeaseID) (int64, int32) {
	epoch := v.ControllerEpoch + 1
	cdata, err := meta.Controller{NodeID: n.cfg.NodeID, Epoch: epoch}.Encode()
	if err != nil {
		n.fail(err)
		return 0, 0
	}
	edata, err := meta.ControllerEpoch{Epoch: epoch}.Encode()
	if err != nil {
		n.fail(err)
		return 0, 0
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.SessionTimeout)
	defer cancel()
	ok, rev, err := n.cfg.KV.Txn(ctx,
		[]kv.Cond{kv.Absent(n.keys.Controller()), kv.ModRevisionIs(n.keys.ControllerEpoch(), v.ControllerEpochRevision)},
		[]kv.Op{kv.Put(n.keys.Controller(), cdata, lease), kv.Put(n.keys.ControllerEpoch(), edata, 0)})
	if err != nil {
		n.log.Warn("campaigning to be the controller", "err", err)
		return 0, 0
	}
	if !ok {
		return 0, 0 // another node won, or the view is stale: the watch tells
	}
	n.log.Info("elected controller", "controller_epoch", epoch)
	return rev, epoch
}

// decide writes the controller's decisions on v, each conditioned on the
// node still holding the controller key it created at mine and on the
// partition's state being the one decided on. It reports whether the
// decisions were taken (a preferred-leader check that was due is done).
func (n *Node) decide(v *view.View, mine int64, epoch int32, due bool) bool {
	cv := v.ControllerView(n.cfg.AutoLeaderRebalance, due)
	for _, w := range controller.Decide(cv) {
		tp := view.TP{Topic: meta.ID(w.TP.Topic), Partition: w.TP.Partition}
		t, ok := v.TopicByID(tp.Topic)
		if !ok {
			continue
		}
		conds, ops, err := decisionTxn(n.keys, v, t, mine, epoch, w)
		if err != nil {
			n.log.Error("a controller decision does not encode; skipped", "err", err, "reason", w.Reason)
			continue
		}
		st := w.State
		ctx, cancel := context.WithTimeout(n.ctx, n.cfg.SessionTimeout)
		ok, _, err = n.cfg.KV.Txn(ctx, conds, ops)
		cancel()
		switch {
		case err != nil:
			n.log.Warn("writing a controller decision", "err", err, "reason", w.Reason)
			return false
		case ok && w.DropElection:
			n.log.Info("controller decision", "reason", w.Reason, "topic", tp.Topic.String(), "partition", tp.Partition)
		case ok:
			n.log.Info("controller decision", "reason", w.Reason, "topic", tp.Topic.String(), "partition", tp.Partition,
				"leader", st.Leader, "leader_epoch", st.LeaderEpoch, "isr", st.ISR)
		}
		// Refused: the state moved on; the next view decides again.
	}
	return true
}

// decisionTxn is the transaction of one controller decision on v, for
// topic t: conditioned on the node still holding the controller key it
// created at mine, on the partition's state being the one decided on, on
// the topic being the one decided on (a topic deleted or changed
// meanwhile refuses the write, so that a partition's state is never
// written again after its topic's deletion removed it), on the nodes the
// state names being registered as the view tells, and on the
// reassignment or election the decision carries being unchanged. The
// simulator (internal/sim/cluster) makes the same transactions.
func decisionTxn(keys meta.Keys, v *view.View, t view.Topic, mine int64, epoch int32, w controller.Write) ([]kv.Cond, []kv.Op, error) {
	tp := view.TP{Topic: meta.ID(w.TP.Topic), Partition: w.TP.Partition}
	pkey := keys.Partition(tp.Topic, tp.Partition)
	conds := []kv.Cond{kv.CreateRevisionIs(keys.Controller(), mine), kv.ModRevisionIs(pkey, w.ExpectRevision),
		kv.ModRevisionIs(keys.Topic(t.Name), t.Revision)}
	var ops []kv.Op
	if w.ElectionRevision != 0 {
		ekey := keys.Election(tp.Topic, tp.Partition)
		conds = append(conds, kv.ModRevisionIs(ekey, w.ElectionRevision))
		ops = append(ops, kv.Delete(ekey))
	}
	if w.DropElection {
		return conds, ops, nil
	}
	st := meta.PartitionState{Leader: w.State.Leader, LeaderEpoch: w.State.LeaderEpoch, ISR: w.State.ISR,
		PartitionEpoch: w.State.PartitionEpoch, ControllerEpoch: epoch}
	data, err := st.Encode()
	if err != nil {
		return nil, nil, err
	}
	conds = append(conds, v.RegistrationConds(keys, -1, 0, st.Leader, st.ISR)...)
	ops = append(ops, kv.Put(pkey, data, 0))
	if w.ReassignRevision != 0 {
		conds = append(conds, kv.ModRevisionIs(keys.Reassignment(tp.Topic, tp.Partition), w.ReassignRevision))
	}
	if w.Replicas != nil {
		nt := t.Topic
		nt.Partitions = append([][]int32(nil), nt.Partitions...)
		nt.Partitions[tp.Partition] = w.Replicas
		tdata, err := nt.Encode()
		if err != nil {
			return nil, nil, fmt.Errorf("a reassignment: %w", err)
		}
		ops = append(ops, kv.Put(keys.Topic(t.Name), tdata, 0))
		if w.Finished {
			ops = append(ops, kv.Delete(keys.Reassignment(tp.Topic, tp.Partition)))
		}
	}
	return conds, ops, nil
}
