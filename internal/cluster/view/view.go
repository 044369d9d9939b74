// Package view keeps a node's picture of the cluster as etcd holds it: the
// live nodes, the controller, the topics and their assignments, every
// partition's leadership with the revision it was written at, the
// reassignments under way, the leader elections asked for and the nodes
// shutting down. A node builds it
// from one listing of the cluster's prefix and then applies the watch's
// changes, in revision order, so that it is always the cluster as of one
// revision.
//
// A View is a value: Apply returns a new one and never changes the old, so
// a reader holding a View (the API answering Metadata) sees one revision
// throughout, with no lock. A value that does not decode stops the node:
// it never acts on a value it does not understand (meta's strict
// decoding), and the error names the key.
package view

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/meta"
)

// TP names one partition.
type TP struct {
	Topic     meta.ID
	Partition int32
}

// State is a partition's leadership and the etcd revision it was written
// at, which a compare-and-swap of it compares.
type State struct {
	meta.PartitionState
	Revision int64
}

// Controller is the controller key's value and its create revision, which
// the controller's writes compare to fence a controller that lost its key.
type Controller struct {
	meta.Controller
	CreateRevision int64
}

// Topic is a topic's value and its revision.
type Topic struct {
	meta.Topic
	Revision int64
}

// Reassignment is a reassignment's value and its revision, which the
// controller's writes that carry it on compare.
type Reassignment struct {
	meta.Reassignment
	Revision int64
}

// Election is an election asked for and its revision, which the
// controller's write that answers it compares.
type Election struct {
	meta.Election
	Revision int64
}

// View is the cluster as of Revision.
type View struct {
	Revision int64
	Nodes    map[int32]meta.NodeInfo
	// Registered is the create revision of each live node's key: when
	// its current process registered. A partition state written before
	// it speaks for an earlier process of the node (Registration).
	Registered map[int32]int64
	Controller *Controller // nil: none elected
	// ControllerEpoch is the last controller epoch written, and its
	// revision.
	ControllerEpoch         int32
	ControllerEpochRevision int64
	Topics                  map[string]Topic // by name
	ByID                    map[meta.ID]string
	States                  map[TP]State
	Reassignments           map[TP]Reassignment
	Elections               map[TP]Election
	Shutdowns               map[int32]meta.ControlledShutdown
}

// Empty is the view of an empty cluster.
func Empty() *View {
	return &View{
		Nodes:         map[int32]meta.NodeInfo{},
		Registered:    map[int32]int64{},
		Topics:        map[string]Topic{},
		ByID:          map[meta.ID]string{},
		States:        map[TP]State{},
		Reassignments: map[TP]Reassignment{},
		Elections:     map[TP]Election{},
		Shutdowns:     map[int32]meta.ControlledShutdown{},
	}
}

// FromListing builds the view of a listing of the cluster's prefix.
func FromListing(keys meta.Keys, vs []kv.Value, revision int64) (*View, error) {
	v := Empty()
	v.Revision = revision
	for _, kvv := range vs {
		if err := v.put(keys, kvv); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// Apply returns the view after one revision's changes; v is unchanged.
func (v *View) Apply(keys meta.Keys, ev kv.WatchEvent) (*View, error) {
	n := v.clone()
	for _, c := range ev.Changes {
		var err error
		if c.Type == kv.ChangeDelete {
			err = n.delete(keys, c.Value.Key)
		} else {
			err = n.put(keys, c.Value)
		}
		if err != nil {
			return nil, err
		}
	}
	n.Revision = ev.Revision
	return n, nil
}

func (v *View) clone() *View {
	n := *v
	n.Nodes = maps.Clone(v.Nodes)
	n.Registered = maps.Clone(v.Registered)
	n.Topics = maps.Clone(v.Topics)
	n.ByID = maps.Clone(v.ByID)
	n.States = maps.Clone(v.States)
	n.Reassignments = maps.Clone(v.Reassignments)
	n.Elections = maps.Clone(v.Elections)
	n.Shutdowns = maps.Clone(v.Shutdowns)
	return &n
}

func (v *View) put(keys meta.Keys, kvv kv.Value) error {
	k, err := keys.Parse(kvv.Key)
	if err != nil {
		return err
	}
	switch k.Kind {
	case meta.KindNode:
		n, err := meta.DecodeNodeInfo(kvv.Key, kvv.Data)
		if err != nil {
			return err
		}
		if n.ID != k.Node {
			return fmt.Errorf("%w value at %q: node id %d", meta.ErrInvalid, kvv.Key, n.ID)
		}
		v.Nodes[k.Node] = n
		v.Registered[k.Node] = kvv.CreateRevision
	case meta.KindController:
		c, err := meta.DecodeController(kvv.Key, kvv.Data)
		if err != nil {
			return err
		}
		v.Controller = &Controller{Controller: c, CreateRevision: kvv.CreateRevision}
	case meta.KindControllerEpoch:
		e, err := meta.DecodeControllerEpoch(kvv.Key, kvv.Data)
		if err != nil {
			return err
		}
		v.ControllerEpoch, v.ControllerEpochRevision = e.Epoch, kvv.ModRevision
	case meta.KindTopic:
		t, err := meta.DecodeTopic(kvv.Key, kvv.Data)
		if err != nil {
			return err
		}
		if t.Name != k.Topic {
			return fmt.Errorf("%w value at %q: topic %q", meta.ErrInvalid, kvv.Key, t.Name)
		}
		if old, ok := v.Topics[t.Name]; ok && old.ID != t.ID {
			delete(v.ByID, old.ID)
		}
		v.Topics[t.Name] = Topic{Topic: t, Revision: kvv.ModRevision}
		v.ByID[t.ID] = t.Name
	case meta.KindPartition:
		s, err := meta.DecodePartitionState(kvv.Key, kvv.Data)
		if err != nil {
			return err
		}
		v.States[TP{k.TopicID, k.Partition}] = State{PartitionState: s, Revision: kvv.ModRevision}
	case meta.KindReassignment:
		r, err := meta.DecodeReassignment(kvv.Key, kvv.Data)
		if err != nil {
			return err
		}
		v.Reassignments[TP{k.TopicID, k.Partition}] = Reassignment{Reassignment: r, Revision: kvv.ModRevision}
	case meta.KindElection:
		e, err := meta.DecodeElection(kvv.Key, kvv.Data)
		if err != nil {
			return err
		}
		v.Elections[TP{k.TopicID, k.Partition}] = Election{Election: e, Revision: kvv.ModRevision}
	case meta.KindControlledShutdown:
		s, err := meta.DecodeControlledShutdown(kvv.Key, kvv.Data)
		if err != nil {
			return err
		}
		v.Shutdowns[k.Node] = s
	}
	return nil
}

func (v *View) delete(keys meta.Keys, key string) error {
	k, err := keys.Parse(key)
	if err != nil {
		return err
	}
	switch k.Kind {
	case meta.KindNode:
		delete(v.Nodes, k.Node)
		delete(v.Registered, k.Node)
	case meta.KindController:
		v.Controller = nil
	case meta.KindControllerEpoch:
		v.ControllerEpoch, v.ControllerEpochRevision = 0, 0
	case meta.KindTopic:
		if t, ok := v.Topics[k.Topic]; ok {
			delete(v.ByID, t.ID)
			delete(v.Topics, k.Topic)
		}
	case meta.KindPartition:
		delete(v.States, TP{k.TopicID, k.Partition})
	case meta.KindReassignment:
		delete(v.Reassignments, TP{k.TopicID, k.Partition})
	case meta.KindElection:
		delete(v.Elections, TP{k.TopicID, k.Partition})
	case meta.KindControlledShutdown:
		delete(v.Shutdowns, k.Node)
	}
	return nil
}

// Topic returns the topic named name.
func (v *View) Topic(name string) (Topic, bool) {
	t, ok := v.Topics[name]
	return t, ok
}

// TopicByID returns the topic with id.
func (v *View) TopicByID(id meta.ID) (Topic, bool) {
	name, ok := v.ByID[id]
	if !ok {
		return Topic{}, false
	}
	return v.Topics[name], true
}

// SortedTopics returns the topics in name order.
func (v *View) SortedTopics() []Topic {
	ts := slices.Collect(maps.Values(v.Topics))
	slices.SortFunc(ts, func(a, b Topic) int { return cmp.Compare(a.Name, b.Name) })
	return ts
}

// SortedNodes returns the live nodes in id order.
func (v *View) SortedNodes() []meta.NodeInfo {
	ns := slices.Collect(maps.Values(v.Nodes))
	slices.SortFunc(ns, func(a, b meta.NodeInfo) int { return cmp.Compare(a.ID, b.ID) })
	return ns
}

// ControllerID is the controller's node id, -1 with none.
func (v *View) ControllerID() int32 {
	if v.Controller == nil {
		return -1
	}
	return v.Controller.NodeID
}

// Replicas returns a partition's replicas, nil if there is no such
// partition.
func (v *View) Replicas(tp TP) []int32 {
	t, ok := v.TopicByID(tp.Topic)
	if !ok || tp.Partition < 0 || int(tp.Partition) >= len(t.Partitions) {
		return nil
	}
	return t.Partitions[tp.Partition]
}

// Alive reports whether node is registered.
func (v *View) Alive(node int32) bool {
	_, ok := v.Nodes[node]
	return ok
}

// Registration is the create revision of node's key, 0 if it is not
// registered: the revision its current process registered at. Every
// write of a partition state compares the registrations it assumed (see
// package cluster), so a state at revision r names, as leader or in its
// ISR, only processes registered before r; a node registered after r has
// restarted or registered again since (Kafka's "bounced broker").
func (v *View) Registration(node int32) int64 { return v.Registered[node] }

// RegistrationsFor gives, for each of replicas, the revision its node
// registered at as v tells (this node's: registered, 0 without a lease),
// for replica.Partition.Registrations: a state older than a replica's
// registration speaks for an earlier process of it (Kafka's bounced
// broker), and a restarted node does not take its old leaderships from
// the listing.
func (v *View) RegistrationsFor(me int32, registered int64, replicas []int32) []int64 {
	out := make([]int64, len(replicas))
	for i, r := range replicas {
		out[i] = v.Registration(r)
		if r == me {
			out[i] = registered
		}
	}
	return out
}

// RegistrationConds are the conditions of a write of a partition state
// naming leader and isr: each of them is still registered as the writer
// knows it (v, and registered for me), or still absent. A state written
// under them names only registrations older than itself, so a node that
// registers after it is known to have bounced since (Registration),
// as Kafka's controller checks broker epochs in AlterPartition (KIP-903).
func (v *View) RegistrationConds(keys meta.Keys, me int32, registered int64, leader int32, isr []int32) []kv.Cond {
	var conds []kv.Cond
	var seen []int32
	for _, id := range append([]int32{leader}, isr...) {
		if id < 0 || slices.Contains(seen, id) {
			continue
		}
		seen = append(seen, id)
		reg := v.Registration(id)
		if id == me && registered != 0 {
			reg = registered
		}
		conds = append(conds, kv.CreateRevisionIs(keys.Node(id), reg))
	}
	return conds
}
