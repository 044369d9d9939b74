package view

import (
	"strings"
	"testing"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/meta"
)

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestListingThenWatch(t *testing.T) {
	keys := meta.NewKeys("/groupd/test/")
	tid := meta.ID{7}
	topic := meta.Topic{Name: "orders", ID: tid, Partitions: [][]int32{{1, 2}, {2, 1}}}
	v, err := FromListing(keys, []kv.Value{
		{Key: keys.Node(1), Data: must(meta.NodeInfo{ID: 1, Host: "h1", Port: 9092, Incarnation: meta.ID{1}}.Encode()), ModRevision: 3},
		{Key: keys.Topic("orders"), Data: must(topic.Encode()), ModRevision: 4},
		{Key: keys.Partition(tid, 0), Data: must(meta.PartitionState{Leader: 1, LeaderEpoch: 2, ISR: []int32{1, 2}}.Encode()), ModRevision: 5},
		{Key: keys.Controller(), Data: must(meta.Controller{NodeID: 1, Epoch: 3}.Encode()), CreateRevision: 2, ModRevision: 2},
	}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if v.ControllerID() != 1 || v.Controller.CreateRevision != 2 || len(v.Nodes) != 1 || v.States[TP{tid, 0}].Revision != 5 {
		t.Fatalf("listing view: %+v", v)
	}
	if got := v.Replicas(TP{tid, 1}); len(got) != 2 || got[0] != 2 {
		t.Fatalf("replicas of partition 1: %v", got)
	}
	// One revision deletes the node and moves the leadership.
	w, err := v.Apply(keys, kv.WatchEvent{Revision: 6, Changes: []kv.Change{
		{Type: kv.ChangeDelete, Value: kv.Value{Key: keys.Node(1), ModRevision: 6}},
		{Type: kv.ChangePut, Value: kv.Value{Key: keys.Partition(tid, 0), Data: must(meta.PartitionState{Leader: 2, LeaderEpoch: 3, ISR: []int32{2}}.Encode()), ModRevision: 6}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if w.Revision != 6 || w.Alive(1) || w.States[TP{tid, 0}].Leader != 2 || w.States[TP{tid, 0}].Revision != 6 {
		t.Fatalf("after the change: %+v", w)
	}
	if v.Revision != 5 || !v.Alive(1) || v.States[TP{tid, 0}].Leader != 1 {
		t.Fatal("Apply changed the view it was called on")
	}
	// A value this node does not understand stops it, naming the key.
	_, err = w.Apply(keys, kv.WatchEvent{Revision: 7, Changes: []kv.Change{
		{Type: kv.ChangePut, Value: kv.Value{Key: keys.Partition(tid, 1), Data: []byte(`{"version":2}`), ModRevision: 7}},
	}})
	if err == nil || !strings.Contains(err.Error(), keys.Partition(tid, 1)) {
		t.Fatalf("an undecodable value: %v", err)
	}
	// A node value under another node's key is refused.
	_, err = w.Apply(keys, kv.WatchEvent{Revision: 8, Changes: []kv.Change{
		{Type: kv.ChangePut, Value: kv.Value{Key: keys.Node(3), Data: must(meta.NodeInfo{ID: 4, Host: "h", Port: 1, Incarnation: meta.ID{1}}.Encode()), ModRevision: 8}},
	}})
	if err == nil {
		t.Fatal("a node value under another node's key was taken")
	}
}

// Elections and reassignments come with the revision they were written
// at, which the controller's writes compare, and go when deleted.
func TestElectionsAndReassignments(t *testing.T) {
	keys := meta.NewKeys("/groupd/test/")
	tid := meta.ID{7}
	v, err := FromListing(keys, []kv.Value{
		{Key: keys.Election(tid, 1), Data: must(meta.Election{Type: meta.ElectPreferred}.Encode()), ModRevision: 4},
		{Key: keys.Reassignment(tid, 0), Data: must(meta.Reassignment{Target: []int32{2, 3}, Adding: []int32{3}, Removing: []int32{1}}.Encode()), ModRevision: 5},
	}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if e := v.Elections[TP{tid, 1}]; e.Type != meta.ElectPreferred || e.Revision != 4 {
		t.Fatalf("election: %+v", e)
	}
	if r := v.Reassignments[TP{tid, 0}]; r.Revision != 5 || len(r.Target) != 2 || r.Adding[0] != 3 {
		t.Fatalf("reassignment: %+v", r)
	}
	w, err := v.Apply(keys, kv.WatchEvent{Revision: 6, Changes: []kv.Change{
		{Type: kv.ChangeDelete, Value: kv.Value{Key: keys.Election(tid, 1), ModRevision: 6}},
		{Type: kv.ChangePut, Value: kv.Value{Key: keys.Election(tid, 0), Data: must(meta.Election{Type: meta.ElectUnclean}.Encode()), ModRevision: 6}},
		{Type: kv.ChangeDelete, Value: kv.Value{Key: keys.Reassignment(tid, 0), ModRevision: 6}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Elections[TP{tid, 1}]; ok {
		t.Fatal("a deleted election stays")
	}
	if e := w.Elections[TP{tid, 0}]; e.Type != meta.ElectUnclean || e.Revision != 6 {
		t.Fatalf("election put by the watch: %+v", e)
	}
	if len(w.Reassignments) != 0 || len(v.Reassignments) != 1 || len(v.Elections) != 1 {
		t.Fatalf("after: %v %v; before: %v %v", w.Reassignments, w.Elections, v.Reassignments, v.Elections)
	}
	_, err = w.Apply(keys, kv.WatchEvent{Revision: 7, Changes: []kv.Change{
		{Type: kv.ChangePut, Value: kv.Value{Key: keys.Election(tid, 2), Data: []byte(`{"version":1,"type":"sideways"}`), ModRevision: 7}},
	}})
	if err == nil || !strings.Contains(err.Error(), keys.Election(tid, 2)) {
		t.Fatalf("an undecodable election: %v", err)
	}
}
