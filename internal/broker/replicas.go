package broker

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/groupd/groupd/internal/partition"
)

// Replica logs are the partitions of a cluster's topics that this node
// holds a copy of. Where topics live and who leads them is the cluster's
// to say (etcd holds it), not meta.json's, so their logs are kept apart
// from the single node's topics:
//
//	replicas/<topic id>/<partition>/   one replica's log
//
// A replica log is opened with partition.Options.Replicated: its high
// watermark is what the replica machine publishes, not its log end.

const replicasDirName = "replicas"

// ReplicaKey names one replica log: its topic's id and the partition.
type ReplicaKey struct {
	Topic     TopicID
	Partition int32
}

// replicaLog is an open replica with the name it is logged under.
type replicaLog struct {
	topic string
	part  int32
	log   *partition.Log
}

func (b *Broker) replicaDir(k ReplicaKey) string {
	return filepath.Join(b.cfg.DataDir, replicasDirName, k.Topic.String(), strconv.Itoa(int(k.Partition)))
}

// OpenReplica returns the log of replica k of topic (named for the log
// lines), opening it, or creating it empty, on first use; overrides are
// the topic's configs. A log already open keeps its configs: SetReplicaConfigs
// changes them.
func (b *Broker) OpenReplica(k ReplicaKey, topic string, overrides map[string]string) (*partition.Log, error) {
	b.repMu.Lock()
	defer b.repMu.Unlock()
	if b.repClosed {
		return nil, partition.ErrClosed
	}
	if r, ok := b.replicas[k]; ok {
		return r.log, nil
	}
	if c, ok := b.repConfigs[k.Topic]; ok {
		overrides = c
	}
	o := b.cfg.Log
	if o.Logger == nil {
		o.Logger = b.log
	}
	o.Logger = o.Logger.With("topic", topic, "partition", k.Partition)
	c := b.logConfigOf(overrides)
	o.Config = &c
	o.Replicated = true
	if b.cfg.QuarantineDamagedSegments {
		o.QuarantineDir = filepath.Join(b.cfg.DataDir, quarantineName, replicasDirName, k.Topic.String(), strconv.Itoa(int(k.Partition)))
	}
	dir := b.replicaDir(k)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	l, err := partition.Open(dir, o)
	if err != nil {
		if errors.Is(err, partition.ErrDamaged) {
			return nil, fmt.Errorf("open replica %s-%d: %w; to move the damaged file aside and serve the rest, start with --quarantine-damaged-segments", topic, k.Partition, err)
		}
		return nil, fmt.Errorf("open replica %s-%d: %w", topic, k.Partition, err)
	}
	b.replicas[k] = replicaLog{topic: topic, part: k.Partition, log: l}
	return l, nil
}

// SetReplicaConfigs gives every open replica of topic the log config of
// the configs set on the topic (overrides), and every replica of it opened
// later, whatever configs its opener read: the cluster's view of the
// topic changed, and the newest view wins.
func (b *Broker) SetReplicaConfigs(topic TopicID, overrides map[string]string) {
	b.repMu.Lock()
	defer b.repMu.Unlock()
	if b.repConfigs == nil {
		b.repConfigs = map[TopicID]map[string]string{}
	}
	b.repConfigs[topic] = maps.Clone(overrides)
	c := b.logConfigOf(overrides)
	for k, r := range b.replicas {
		if k.Topic == topic {
			r.log.SetConfig(c)
		}
	}
}

// Replica returns the open log of replica k.
func (b *Broker) Replica(k ReplicaKey) (*partition.Log, bool) {
	b.repMu.Lock()
	defer b.repMu.Unlock()
	r, ok := b.replicas[k]
	return r.log, ok
}

// DropReplica closes and deletes the log of replica k (its topic was
// deleted, or the replica moved to another node). A replica not open is
// deleted from disk if it is there.
func (b *Broker) DropReplica(k ReplicaKey) error {
	b.repMu.Lock()
	r, ok := b.replicas[k]
	delete(b.replicas, k)
	b.repMu.Unlock()
	if ok {
		return r.log.Delete()
	}
	return os.RemoveAll(b.replicaDir(k))
}

// ReplicaKeys lists the replica logs on disk, open or not, so that a node
// can drop those the cluster no longer places on it.
func (b *Broker) ReplicaKeys() ([]ReplicaKey, error) {
	root := filepath.Join(b.cfg.DataDir, replicasDirName)
	topics, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ReplicaKey
	for _, t := range topics {
		id, ok := parseTopicID(t.Name())
		if !ok || !t.IsDir() {
			return nil, fmt.Errorf("%s: not a replica directory", filepath.Join(root, t.Name()))
		}
		parts, err := os.ReadDir(filepath.Join(root, t.Name()))
		if err != nil {
			return nil, err
		}
		for _, p := range parts {
			n, err := strconv.ParseInt(p.Name(), 10, 32)
			if err != nil || n < 0 || !p.IsDir() {
				return nil, fmt.Errorf("%s: not a replica directory", filepath.Join(root, t.Name(), p.Name()))
			}
			out = append(out, ReplicaKey{id, int32(n)})
		}
	}
	return out, nil
}

// replicaLogs lists the open replicas, for maintenance, in a stable order.
func (b *Broker) replicaLogs() []replicaLog {
	b.repMu.Lock()
	defer b.repMu.Unlock()
	keys := make([]ReplicaKey, 0, len(b.replicas))
	for k := range b.replicas {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, c ReplicaKey) int {
		if d := slices.Compare(a.Topic[:], c.Topic[:]); d != 0 {
			return d
		}
		return int(a.Partition - c.Partition)
	})
	out := make([]replicaLog, len(keys))
	for i, k := range keys {
		out[i] = b.replicas[k]
	}
	return out
}

// closeReplicas closes every replica log; no more open after it.
func (b *Broker) closeReplicas() error {
	b.repMu.Lock()
	defer b.repMu.Unlock()
	b.repClosed = true
	var errs []error
	for _, r := range b.replicas {
		errs = append(errs, r.log.Close())
	}
	clear(b.replicas)
	return errors.Join(errs...)
}

// namedLog is a log of a topic or of a replica, for the maintenance loops.
type namedLog struct {
	topic string
	part  int
	log   *partition.Log
}

// allLogs lists the single node's partition logs, then the replicas'.
func (b *Broker) allLogs() []namedLog {
	var out []namedLog
	for _, t := range b.Topics() {
		for p, l := range t.Partitions() {
			out = append(out, namedLog{t.Name, p, l})
		}
	}
	for _, r := range b.replicaLogs() {
		out = append(out, namedLog{r.topic, int(r.part), r.log})
	}
	return out
}
