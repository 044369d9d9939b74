package cluster

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
)

// A reassignment is written with its adding and removing replicas; the
// controller adds its target to the assignment; with no data plane here
// the new replica never joins the ISR, so the move stays under way until
// it is cancelled, which reverts the partition to its original replicas
// at once. A cancellation with none under way is refused.
func TestReassignThenCancelReverts(t *testing.T) {
	c := newTestCluster(t)
	c.startThree()
	id := meta.ID{9}
	tp := view.TP{Topic: id, Partition: 0}
	c.createTopic("moves", id, [][]int32{{1, 2}})
	c.eventually("the topic", func(v *view.View) bool { _, ok := v.States[tp]; return ok })
	ctx := context.Background()
	n := c.nodes[3]

	if rev, err := n.Reassign(ctx, tp, []int32{1, 2}); err != nil || rev != 0 {
		t.Fatalf("a reassignment to the current replicas: rev %d, %v; want nothing written", rev, err)
	}
	if _, err := n.Reassign(ctx, tp, nil); !errors.Is(err, kerr.NoReassignmentInProgress) {
		t.Fatalf("cancel with none under way: %v", err)
	}
	if _, err := n.Reassign(ctx, tp, []int32{2, 3}); err != nil {
		t.Fatal(err)
	}
	c.eventually("the target added to the assignment", func(v *view.View) bool {
		_, ok := v.Reassignments[tp]
		return ok && slices.Equal(v.Replicas(tp), []int32{2, 3, 1})
	})
	r := n.View().Reassignments[tp]
	if !slices.Equal(r.Target, []int32{2, 3}) || !slices.Equal(r.Adding, []int32{3}) || !slices.Equal(r.Removing, []int32{1}) || r.Revert {
		t.Fatalf("reassignment %+v", r.Reassignment)
	}
	st := n.View().States[tp]
	if st.Leader != 1 || !slices.Equal(st.ISR, []int32{1, 2}) {
		t.Fatalf("while under way: %+v", st)
	}

	if _, err := n.Reassign(ctx, tp, nil); err != nil {
		t.Fatal(err)
	}
	c.eventually("the original replicas back, the reassignment gone", func(v *view.View) bool {
		_, ok := v.Reassignments[tp]
		return !ok && len(v.Replicas(tp)) == 2
	})
	v := n.View()
	// As in Kafka, the original replicas keep their order in the
	// assignment under way: [2 3 1] without 3.
	if got := v.Replicas(tp); !slices.Equal(got, []int32{2, 1}) {
		t.Fatalf("replicas after the revert: %v", got)
	}
	if st := v.States[tp]; st.Leader != 1 || !slices.Equal(st.ISR, []int32{1, 2}) || st.LeaderEpoch != 0 {
		t.Fatalf("state after the revert: %+v", st)
	}
	if _, err := n.Reassign(ctx, tp, nil); !errors.Is(err, kerr.NoReassignmentInProgress) {
		t.Fatalf("cancel after the revert: %v", err)
	}
}

// An election request is deleted by the controller once done: a preferred
// election moves leadership back to the first replica at a new epoch.
func TestRequestedPreferredElection(t *testing.T) {
	c := newTestCluster(t)
	c.startThree()
	id := meta.ID{8}
	tp := view.TP{Topic: id, Partition: 0}
	// The second replica leads: the state is written as if leadership
	// had moved.
	c.createTopic("elect", id, [][]int32{{2, 3}})
	c.eventually("the topic", func(v *view.View) bool { _, ok := v.States[tp]; return ok })
	if _, err := c.nodes[1].Reassign(context.Background(), tp, []int32{3, 2}); err != nil {
		t.Fatal(err)
	}
	c.eventually("the replicas reordered", func(v *view.View) bool {
		_, ok := v.Reassignments[tp]
		return !ok && slices.Equal(v.Replicas(tp), []int32{3, 2})
	})
	if st := c.nodes[1].View().States[tp]; st.Leader != 2 {
		t.Fatalf("after the reorder: %+v", st)
	}
	rev, err := c.nodes[1].RequestElection(context.Background(), tp, meta.ElectPreferred)
	if err != nil {
		t.Fatal(err)
	}
	c.eventually("the election done and its request gone", func(v *view.View) bool {
		_, ok := v.Elections[tp]
		return v.Revision > rev && !ok
	})
	if st := c.nodes[1].View().States[tp]; st.Leader != 3 || st.LeaderEpoch != 1 {
		t.Fatalf("after the election: %+v", st)
	}
}
