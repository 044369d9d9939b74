package cluster

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
)

// The requests of ElectLeaders and AlterPartitionReassignments: any node
// writes them into etcd, where the controller (controller.Decide) acts on
// them; the node that wrote one reads the outcome from its view.

// WaitView waits until done holds of the node's view, the node fails, or
// ctx ends.
func (n *Node) WaitView(ctx context.Context, done func(*view.View) bool) error {
	changed, unsubscribe := n.subscribe()
	defer unsubscribe()
	for !done(n.View()) {
		select {
		case <-changed:
		case <-n.failed:
			return n.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// retryStale runs write on the node's view until it is not refused as
// stale: a refusal means etcd has moved past the view, so the view is
// waited for to move before write decides again.
func (n *Node) retryStale(ctx context.Context, write func(v *view.View) (int64, error)) (int64, error) {
	for {
		v := n.View()
		rev, err := write(v)
		if err != errStale {
			return rev, err
		}
		if err := n.catchUp(ctx, v.Revision+1); err != nil {
			return 0, err
		}
	}
}

// RequestElection asks the controller for an election of typ on tp, and
// returns the revision of the request: the controller deletes it once it
// has elected, or found that it cannot. The request holds only while the
// topic is the one the view shows, so that none outlives a deleted topic.
func (n *Node) RequestElection(ctx context.Context, tp view.TP, typ meta.ElectionType) (int64, error) {
	data, err := meta.Election{Type: typ}.Encode()
	if err != nil {
		return 0, err
	}
	return n.retryStale(ctx, func(v *view.View) (int64, error) {
		t, ok := v.TopicByID(tp.Topic)
		if !ok || tp.Partition < 0 || int(tp.Partition) >= len(t.Partitions) {
			return 0, kerr.UnknownTopicOrPartition
		}
		ok, rev, err := n.cfg.KV.Txn(ctx, []kv.Cond{kv.ModRevisionIs(n.keys.Topic(t.Name), t.Revision)},
			[]kv.Op{kv.Put(n.keys.Election(tp.Topic, tp.Partition), data, 0)})
		switch {
		case err != nil:
			return 0, err
		case !ok:
			return 0, errStale
		}
		return rev, nil
	})
}

// OriginalReplicas are the replicas tp had before the reassignment r under
// way: the current ones without those r adds (for a revert, its target).
// As in Kafka, the order is the current one.
func OriginalReplicas(current []int32, r meta.Reassignment) []int32 {
	if r.Revert {
		return slices.Clone(r.Target)
	}
	return slices.DeleteFunc(slices.Clone(current), func(x int32) bool { return slices.Contains(r.Adding, x) })
}

// Reassign moves tp to the replicas target, or, with target nil, cancels
// the reassignment under way. It returns the revision of its write (0 if
// there was nothing to write). The caller has checked target against
// Kafka's rules (distinct, registered nodes).
//
//   - A reassignment to the current replicas, with none under way, is
//     done already (as Kafka completes it at once).
//   - A new reassignment replaces one under way: its adding and removing
//     replicas are counted from the original replicas, and the replicas
//     the earlier one added leave when the new one completes.
//   - A cancellation of a reassignment that added nothing to the
//     assignment yet deletes it; one whose replicas were added becomes a
//     revert, which the controller does at once (see package controller).
//     With none under way it fails with NO_REASSIGNMENT_IN_PROGRESS.
//
// Each write compares the topic's and the reassignment's revisions.
func (n *Node) Reassign(ctx context.Context, tp view.TP, target []int32) (int64, error) {
	return n.retryStale(ctx, func(v *view.View) (int64, error) {
		t, ok := v.TopicByID(tp.Topic)
		if !ok || tp.Partition < 0 || int(tp.Partition) >= len(t.Partitions) {
			return 0, kerr.UnknownTopicOrPartition
		}
		current := t.Partitions[tp.Partition]
		r, inProgress := v.Reassignments[tp]
		key := n.keys.Reassignment(tp.Topic, tp.Partition)
		conds := []kv.Cond{kv.ModRevisionIs(n.keys.Topic(t.Name), t.Revision), kv.ModRevisionIs(key, r.Revision)}
		original := current
		if inProgress {
			original = OriginalReplicas(current, r.Reassignment)
		}
		var op kv.Op
		switch {
		case target == nil && !inProgress:
			return 0, kerr.NoReassignmentInProgress
		case target == nil && r.Revert:
			return r.Revision, nil // being cancelled already
		case target == nil && !slices.ContainsFunc(current, func(x int32) bool { return slices.Contains(r.Adding, x) }):
			op = kv.Delete(key)
		case target == nil:
			var removing []int32
			for _, x := range current {
				if slices.Contains(r.Adding, x) {
					removing = append(removing, x)
				}
			}
			data, err := meta.Reassignment{Target: original, Removing: removing, Revert: true}.Encode()
			if err != nil {
				return 0, err
			}
			op = kv.Put(key, data, 0)
		case !inProgress && slices.Equal(target, current),
			inProgress && !r.Revert && slices.Equal(target, r.Target):
			return r.Revision, nil
		default:
			nr := meta.Reassignment{Target: slices.Clone(target)}
			for _, x := range target {
				if !slices.Contains(original, x) {
					nr.Adding = append(nr.Adding, x)
				}
			}
			for _, x := range original {
				if !slices.Contains(target, x) {
					nr.Removing = append(nr.Removing, x)
				}
			}
			data, err := nr.Encode()
			if err != nil {
				return 0, err
			}
			op = kv.Put(key, data, 0)
		}
		ok, rev, err := n.cfg.KV.Txn(ctx, conds, []kv.Op{op})
		switch {
		case err != nil:
			return 0, err
		case !ok:
			return 0, errStale
		}
		return rev, nil
	})
}
