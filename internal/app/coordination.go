package app

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/cluster"
	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/coordinator"
	"github.com/groupd/groupd/internal/coordlog"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/replica"
)

// In a cluster the coordinator's shards are the partitions of
// __consumer_offsets, and a shard is served by the node that leads its
// partition: its records are that partition's (package coordlog), and
// shardOwners owns and disowns the shards as this node's leaderships
// come and go.

// shardOwners makes the coordinator's shards follow this node's
// leadership of the partitions of __consumer_offsets.
type shardOwners struct {
	log *slog.Logger

	mu    sync.Mutex
	coord *coordinator.Coordinator
	// leading is the leader epoch of each partition this node leads;
	// owned the epoch each owned shard was owned at.
	leading map[int32]int32
	owned   map[int32]int32
}

func newShardOwners(log *slog.Logger) *shardOwners {
	return &shardOwners{log: log, leading: map[int32]int32{}, owned: map[int32]int32{}}
}

// leadership is cluster.ReplicasConfig.Leadership: v names the topic.
func (o *shardOwners) leadership(v *view.View, tp view.TP, leading bool, epoch int32) {
	t, ok := v.TopicByID(tp.Topic)
	if !ok || t.Name != broker.OffsetsTopicName {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if leading {
		o.leading[tp.Partition] = epoch
	} else {
		delete(o.leading, tp.Partition)
	}
	o.syncLocked()
}

// setCoordinator starts the ownership of the shards this node leads.
func (o *shardOwners) setCoordinator(c *coordinator.Coordinator) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.coord = c
	o.syncLocked()
}

// syncLocked owns the shards led at a new epoch and disowns the shards no
// longer led. A shard led again at a new epoch is owned again, so it
// reloads: another node may have led it in between.
func (o *shardOwners) syncLocked() {
	if o.coord == nil {
		return
	}
	for p, epoch := range o.leading {
		if at, ok := o.owned[p]; ok && at == epoch {
			continue
		}
		o.owned[p] = epoch
		o.log.Info("coordinating the groups of a partition of "+broker.OffsetsTopicName, "partition", p, "leader_epoch", epoch)
		o.coord.Own(int(p))
	}
	for p := range o.owned {
		if _, ok := o.leading[p]; ok {
			continue
		}
		delete(o.owned, p)
		o.log.Info("no longer coordinating the groups of a partition of "+broker.OffsetsTopicName, "partition", p)
		o.coord.Disown(int(p))
	}
}

// offsetsPartitions is coordlog's Config.Partition: this node's replica
// of a partition of __consumer_offsets in the cluster.
func offsetsPartitions(cs *atomic.Pointer[clusterSide]) func(p int32) (coordlog.Partition, error) {
	return func(p int32) (coordlog.Partition, error) {
		c := cs.Load()
		if c == nil {
			return nil, errors.New("not in the cluster yet")
		}
		t, ok := c.node.View().Topic(broker.OffsetsTopicName)
		if !ok {
			return nil, fmt.Errorf("%s does not exist yet", broker.OffsetsTopicName)
		}
		s, ok := c.reps.Replica(view.TP{Topic: t.ID, Partition: p})
		if !ok {
			return nil, kerr.NotLeaderForPartition
		}
		l, ok := s.Log().(*partition.Log)
		if !ok {
			return nil, kerr.KafkaStorageError
		}
		return offsetsPartition{slot: s, log: l}, nil
	}
}

// offsetsPartition is a coordlog.Partition over a replica.
type offsetsPartition struct {
	slot *cluster.Slot
	log  *partition.Log
}

// Append is a produce with acks=all, as the API's: fsynced first under
// --fsync always, then acknowledged by the ISR.
func (p offsetsPartition) Append(batches [][]byte, deadline time.Time) (<-chan error, error) {
	if err := p.slot.CheckAppend(true); err != nil {
		return nil, err
	}
	res, err := p.log.Append(batches)
	if err != nil {
		p.slot.Appended(p.log.LogEndOffset())
		return nil, err
	}
	end := res.LastOffset + 1
	if p.log.SyncsAppends() {
		if err := p.log.SyncTo(end); err != nil {
			p.slot.Appended(p.log.LogEndOffset())
			return nil, fmt.Errorf("%w: %w", kerr.KafkaStorageError, err)
		}
	}
	return p.slot.Produced(end, true, deadline), nil
}

func (p offsetsPartition) Leading() error {
	if err := p.slot.CheckLeaderEpoch(-1); err != nil {
		return err
	}
	if p.slot.Role() != replica.RoleLeader {
		return kerr.NotLeaderForPartition
	}
	return nil
}

func (p offsetsPartition) LogStart() int64 { return p.log.LogStartOffset() }
func (p offsetsPartition) LogEnd() int64   { return p.log.LogEndOffset() }

func (p offsetsPartition) Read(offset int64, maxBytes int32) ([]byte, error) {
	return p.log.ReadReplica(offset, maxBytes)
}
