package broker

import (
	"crypto/rand"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
)

// OffsetsTopicName is Kafka's internal topic of group metadata and
// committed offsets.
const OffsetsTopicName = "__consumer_offsets"

// DefaultOffsetsTopicPartitions is Kafka's offsets.topic.num.partitions.
const DefaultOffsetsTopicPartitions = 50

// offsetsTopicConfigs are the configs Kafka gives __consumer_offsets.
var offsetsTopicConfigs = map[string]string{
	"cleanup.policy":   "compact",
	"compression.type": "producer",
	"segment.bytes":    "104857600",
}

// OffsetsTopic is __consumer_offsets as Metadata shows it: Kafka tools and
// clients expect it as an internal topic once a group coordinator serves.
// groupd keeps the coordinator's records in its own store, so the topic
// has no log: its partitions read as empty and cannot be written.
type OffsetsTopic struct {
	ID         TopicID
	Partitions int32
}

// errInternalTopic refuses a change to __consumer_offsets.
func errInternalTopic(why string) error {
	return &detailError{kerr.InvalidRequest, fmt.Sprintf("%s is an internal topic: %s", OffsetsTopicName, why)}
}

// detailError is a Kafka error with a message of its own.
type detailError struct {
	code *kerr.Error
	msg  string
}

func (e *detailError) Error() string { return e.code.Message + ": " + e.msg }
func (e *detailError) Unwrap() error { return e.code }

// OffsetsTopicPartitions is the partition count __consumer_offsets is
// created with (offsets.topic.num.partitions).
func (b *Broker) OffsetsTopicPartitions() int32 { return b.cfg.OffsetsTopicPartitions }

// OffsetsTopicConfigs are the configs __consumer_offsets is created with,
// as Kafka's.
func OffsetsTopicConfigs() map[string]string { return maps.Clone(offsetsTopicConfigs) }

// OffsetsTopic returns __consumer_offsets if it was created.
func (b *Broker) OffsetsTopic() (OffsetsTopic, bool) {
	if !b.offsetsCreated.Load() {
		return OffsetsTopic{}, false
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	return *b.offsetsTopic, true
}

// EnsureOffsetsTopic creates __consumer_offsets, durably, unless it
// exists; the coordinator's first group calls for it, as in Kafka.
func (b *Broker) EnsureOffsetsTopic() (OffsetsTopic, error) {
	if ot, ok := b.OffsetsTopic(); ok {
		return ot, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.offsetsTopic != nil {
		return *b.offsetsTopic, nil
	}
	if _, ok := b.topics[OffsetsTopicName]; ok {
		return OffsetsTopic{}, fmt.Errorf("a topic named %s exists", OffsetsTopicName)
	}
	ot := &OffsetsTopic{Partitions: b.cfg.OffsetsTopicPartitions}
	rand.Read(ot.ID[:])
	b.offsetsTopic = ot
	if err := b.persistLocked(); err != nil {
		b.offsetsTopic = nil
		return OffsetsTopic{}, err
	}
	b.offsetsCreated.Store(true)
	b.log.Info("created the internal topic", "topic", OffsetsTopicName, "partitions", ot.Partitions, "id", ot.ID.String())
	b.notifyTopicsChanged()
	return *ot, nil
}

// PendingOffsetCleanups are the deleted topics whose committed offsets are
// still to be removed from the groups.
func (b *Broker) PendingOffsetCleanups() []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return slices.Clone(b.pendingCleanups)
}

// OffsetsCleaned records, durably, that the groups no longer hold offsets
// of the named deleted topics. A name re-created as a topic meanwhile is
// forgotten all the same: its offsets were removed before it existed.
func (b *Broker) OffsetsCleaned(names []string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.pendingCleanups
	b.pendingCleanups = slices.DeleteFunc(slices.Clone(old), func(n string) bool { return slices.Contains(names, n) })
	if len(b.pendingCleanups) == len(old) {
		return nil
	}
	if err := b.persistLocked(); err != nil {
		b.pendingCleanups = old
		return err
	}
	return nil
}
