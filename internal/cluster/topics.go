package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
)

// Place assigns replicas to new partitions as Kafka's rack-aware
// assignment does: partition p's replicas start at node (start+p) in the
// nodes' order and take the next nodes, first one per rack when racks are
// known, so that the preferred leaders spread over the nodes and a
// partition's replicas over the racks. from is the first new partition's
// number (CreatePartitions continues the rotation).
func Place(nodes []meta.NodeInfo, from, count, rf int, start int) ([][]int32, error) {
	if rf < 1 || rf > len(nodes) {
		return nil, fmt.Errorf("%w: replication factor %d with %d live nodes", kerr.InvalidReplicationFactor, rf, len(nodes))
	}
	ns := slices.Clone(nodes)
	slices.SortFunc(ns, func(a, b meta.NodeInfo) int { return cmp.Compare(a.ID, b.ID) })
	// Interleave the racks (rack a's first node, rack b's first, rack
	// a's second...), so that consecutive nodes sit in different racks.
	byRack := map[string][]meta.NodeInfo{}
	for _, n := range ns {
		byRack[n.Rack] = append(byRack[n.Rack], n)
	}
	racks := slices.Sorted(maps.Keys(byRack))
	rack := map[int32]string{}
	for _, n := range ns {
		rack[n.ID] = n.Rack
	}
	var order []int32
	for i := 0; len(order) < len(ns); i++ {
		for _, r := range racks {
			if i < len(byRack[r]) {
				order = append(order, byRack[r][i].ID)
			}
		}
	}
	out := make([][]int32, count)
	for i := range count {
		p := from + i
		first := (start + p) % len(order)
		// Followers are shifted by a step that depends on the
		// partition, as Kafka does, so that one node's partitions do
		// not all follow the same next node.
		shift := 1 + (p/len(order))%max(len(order)-1, 1)
		rs := []int32{order[first]}
		used := map[string]bool{rack[order[first]]: true}
		for j := 1; len(rs) < rf; j++ {
			// The candidates in turn, from the shifted one on: the
			// first not taken whose rack has no replica yet, or, once
			// every rack has one, the first not taken.
			var pick int32 = -1
			for k := range order {
				n := order[(first+shift*j+k)%len(order)]
				if slices.Contains(rs, n) {
					continue
				}
				if !used[rack[n]] || len(used) == len(racks) {
					pick = n
					break
				}
				if pick < 0 {
					pick = n
				}
			}
			rs = append(rs, pick)
			used[rack[pick]] = true
		}
		out[i] = rs
	}
	return out, nil
}

// CreateTopic writes a new topic's key; the controller then writes its
// partitions' first states. It fails with TOPIC_ALREADY_EXISTS if the
// name is taken. rf and partitions must be valid (the caller checks
// Kafka's rules and answers their errors).
func (n *Node) CreateTopic(ctx context.Context, name string, partitions, rf int, configs map[string]string) (meta.Topic, error) {
	v := n.View()
	if _, ok := v.Topic(name); ok {
		return meta.Topic{}, kerr.TopicAlreadyExists
	}
	var start [1]byte
	rand.Read(start[:])
	assign, err := Place(v.SortedNodes(), 0, partitions, rf, int(start[0]))
	if err != nil {
		return meta.Topic{}, err
	}
	var id meta.ID
	rand.Read(id[:])
	t := meta.Topic{Name: name, ID: id, Partitions: assign, Configs: configs}
	data, err := t.Encode()
	if err != nil {
		return meta.Topic{}, err
	}
	ok, _, err := n.cfg.KV.Txn(ctx, []kv.Cond{kv.Absent(n.keys.Topic(name))}, []kv.Op{kv.Put(n.keys.Topic(name), data, 0)})
	if err != nil {
		return meta.Topic{}, err
	}
	if !ok {
		return meta.Topic{}, kerr.TopicAlreadyExists
	}
	return t, nil
}

// WaitTopic waits until the node's view has the topic with a leader for
// every partition (or ctx ends), so that a client told the topic was
// created finds it in this node's Metadata.
func (n *Node) WaitTopic(ctx context.Context, name string, partitions int) error {
	changed, unsubscribe := n.subscribe()
	defer unsubscribe()
	for {
		if t, ok := n.View().Topic(name); ok && len(t.Partitions) >= partitions {
			ready := true
			for p := range t.Partitions {
				if s, ok := n.View().States[view.TP{Topic: t.ID, Partition: int32(p)}]; !ok || s.Leader == meta.NoLeader {
					ready = false
					break
				}
			}
			if ready {
				return nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// DeleteTopic deletes a topic's key, its partitions' states, its
// reassignments and the elections asked for on it in one transaction.
func (n *Node) DeleteTopic(ctx context.Context, name string) error {
	t, ok := n.View().Topic(name)
	if !ok {
		return kerr.UnknownTopicOrPartition
	}
	ok, _, err := n.cfg.KV.Txn(ctx, []kv.Cond{kv.ModRevisionIs(n.keys.Topic(name), t.Revision)}, []kv.Op{
		kv.Delete(n.keys.Topic(name)),
		kv.DeletePrefix(n.keys.TopicPartitionsPrefix(t.ID)),
		kv.DeletePrefix(n.keys.ReassignmentsPrefix() + t.ID.String() + "/"),
		kv.DeletePrefix(n.keys.ElectionsPrefix() + t.ID.String() + "/"),
	})
	if err != nil {
		return err
	}
	if !ok {
		return errStale
	}
	return nil
}

// errStale is a write refused because the view it was decided on is
// stale; the caller reads again and retries, or answers a retriable error.
var errStale = errors.New("cluster state changed meanwhile")

// CreatePartitions adds partitions to a topic, up to count in all.
func (n *Node) CreatePartitions(ctx context.Context, name string, count int) error {
	t, ok := n.View().Topic(name)
	if !ok {
		return kerr.UnknownTopicOrPartition
	}
	have := len(t.Partitions)
	if count <= have {
		return fmt.Errorf("%w: the topic has %d partitions, %d asked", kerr.InvalidPartitions, have, count)
	}
	rf := len(t.Partitions[0])
	more, err := Place(n.View().SortedNodes(), have, count-have, rf, int(t.ID[0]))
	if err != nil {
		return err
	}
	nt := t.Topic
	nt.Partitions = append(slices.Clone(nt.Partitions), more...)
	data, err := nt.Encode()
	if err != nil {
		return err
	}
	ok, _, err = n.cfg.KV.Txn(ctx, []kv.Cond{kv.ModRevisionIs(n.keys.Topic(name), t.Revision)}, []kv.Op{kv.Put(n.keys.Topic(name), data, 0)})
	if err != nil {
		return err
	}
	if !ok {
		return errStale
	}
	return nil
}

// UpdateTopicConfigs changes a topic's config overrides to what change
// makes of them, by compare-and-swap on the topic's revision. A write
// refused because the view it was decided on was stale is decided again
// on a newer view. It returns once the node's own view shows the change,
// so that the node answers DescribeConfigs with it.
func (n *Node) UpdateTopicConfigs(ctx context.Context, name string, change func(map[string]string) (map[string]string, error)) error {
	changed, unsubscribe := n.subscribe()
	defer unsubscribe()
	var wrote int64
	for {
		v := n.View()
		if wrote != 0 && v.Revision >= wrote {
			return nil
		}
		if wrote == 0 {
			t, ok := v.Topic(name)
			if !ok {
				return kerr.UnknownTopicOrPartition
			}
			configs, err := change(maps.Clone(t.Configs))
			if err != nil {
				return err
			}
			nt := t.Topic
			nt.Configs = configs
			data, err := nt.Encode()
			if err != nil {
				return err
			}
			ok, rev, err := n.cfg.KV.Txn(ctx, []kv.Cond{kv.ModRevisionIs(n.keys.Topic(name), t.Revision)}, []kv.Op{kv.Put(n.keys.Topic(name), data, 0)})
			if err != nil {
				return err
			}
			if ok {
				wrote = rev
				continue
			}
			// Stale: decide again once the view has moved on.
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ProducerIDBlock is how many producer ids a node takes from etcd at once.
const ProducerIDBlock = 1000

// NextProducerIDBlock takes the next block of producer ids from the
// cluster's counter (KIP-730: no two nodes hand out the same id), and
// returns its first id; the node owns [first, first+ProducerIDBlock).
func (n *Node) NextProducerIDBlock(ctx context.Context) (int64, error) {
	key := n.keys.ProducerIDs()
	for {
		v, found, err := n.cfg.KV.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		var cur meta.ProducerIDs
		if found {
			if cur, err = meta.DecodeProducerIDs(key, v.Data); err != nil {
				return 0, err
			}
		}
		data, err := meta.ProducerIDs{Next: cur.Next + ProducerIDBlock}.Encode()
		if err != nil {
			return 0, err
		}
		ok, _, err := n.cfg.KV.Txn(ctx, []kv.Cond{kv.ModRevisionIs(key, v.ModRevision)}, []kv.Op{kv.Put(key, data, 0)})
		if err != nil {
			return 0, err
		}
		if ok {
			return cur.Next, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
