// Package coordlog is the coordinator's store in a cluster: each shard's
// records are the records of one partition of __consumer_offsets, as in
// Kafka.
//
// Apply encodes a shard's batch with Kafka's schemas (package
// offsetstopic) into one record batch, appends it to the partition as its
// leader and returns once the in-sync replicas have it: an acks=all
// append. So a reply the coordinator releases after Apply (durable before
// visible) is durable on every in-sync replica, and a node that lost the
// partition cannot acknowledge anything: its append cannot reach the ISR
// at the new leader epoch. Load reads the shard back from this node's
// replica of the partition, from its log start to its log end, which the
// partition's new leader does when it takes over the shard. The topic is
// compacted, so what is read is about one record per key.
//
// Kafka's coordinator skips the record types it does not know, with a
// warning; Load does the same for key versions that are neither Kafka's
// offset commits and group metadata nor groupd's own. Any other record
// that does not decode stops the load (store.UndecodableError): it is not
// ours to skip.
package coordlog

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/offsetstopic"
	"github.com/groupd/groupd/internal/store"
)

// Partition is this node's replica of one partition of __consumer_offsets.
type Partition interface {
	// Append appends record batches to the partition as its leader and
	// returns the channel its acknowledgement comes on: nil once the
	// in-sync replicas have every offset appended, or the error (the
	// node does not lead the partition at the epoch it appended at, the
	// ISR is below min.insync.replicas, the deadline passed). An error
	// from Append itself means nothing was appended.
	Append(batches [][]byte, deadline time.Time) (<-chan error, error)
	// Leading reports nil if this node leads the partition now, or why
	// it does not.
	Leading() error
	// LogStart and LogEnd bound the replica's records.
	LogStart() int64
	LogEnd() int64
	// Read returns whole record batches from offset up to the log end,
	// at most about maxBytes of them but at least one.
	Read(offset int64, maxBytes int32) ([]byte, error)
}

// Config configures a Store.
type Config struct {
	// Partitions is the partition count of __consumer_offsets: the
	// store's shard count.
	Partitions int
	// Partition returns this node's replica of a partition, or an error
	// if it holds none.
	Partition func(p int32) (Partition, error)
	// Now stamps the records; time.Now if nil.
	Now func() time.Time
	// CommitTimeout is offsets.commit.timeout.ms: how long an Apply
	// waits for the in-sync replicas (default 5 s, Kafka's).
	CommitTimeout time.Duration
	// MaxBatchBytes bounds one record batch (default 1 MiB less room
	// for its header, Kafka's default max.message.bytes); an Apply that
	// is larger is appended as several batches in one append.
	MaxBatchBytes int
	// NodeID is this node: each batch's first record carries it in a
	// header (NodeHeader), so that the node that loads the partition
	// next knows which node wrote it last (LastWriter).
	NodeID int32
	Logger *slog.Logger
}

// NodeHeader is the record header that names the node that wrote a
// batch, in decimal. Kafka's readers of the topic ignore headers.
const NodeHeader = "groupd.node"

// Store is a store.Store over the partitions of __consumer_offsets.
type Store struct {
	cfg        Config
	nodeHeader []batch.RecordHeader

	mu      sync.Mutex
	writers map[int]int32 // the last writer of each shard, as of its Load
}

var _ store.Store = (*Store)(nil)

// ErrNoLeader is wrapped by the errors of a shard whose partition this
// node does not lead.
var ErrNoLeader = errors.New("coordlog: this node does not lead the shard's partition")

// New returns a Store.
func New(cfg Config) *Store {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CommitTimeout <= 0 {
		cfg.CommitTimeout = 5 * time.Second
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = 1<<20 - 1024
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Store{cfg: cfg, writers: map[int]int32{},
		nodeHeader: []batch.RecordHeader{{Key: NodeHeader, Value: strconv.AppendInt(nil, int64(cfg.NodeID), 10)}}}
}

// Shards is the partition count: the coordinator's shard count must be
// the same.
func (s *Store) Shards() int { return s.cfg.Partitions }

// ShardOf is the shard of a group: its partition, as Kafka computes it.
func ShardOf(groupID string, shards int) int {
	return int(offsetstopic.PartitionFor(groupID, shards))
}

// Apply appends recs, which must all be of one shard, to its partition
// and waits for the in-sync replicas.
func (s *Store) Apply(recs []group.Record) error {
	if len(recs) == 0 {
		return nil
	}
	shard := ShardOf(recs[0].Group, s.cfg.Partitions)
	for _, r := range recs[1:] {
		if ShardOf(r.Group, s.cfg.Partitions) != shard {
			return fmt.Errorf("coordlog: one Apply for the groups of shards %d and %d", shard, ShardOf(r.Group, s.cfg.Partitions))
		}
	}
	p, err := s.cfg.Partition(int32(shard))
	if err != nil {
		return fmt.Errorf("%w: partition %d: %w", ErrNoLeader, shard, err)
	}
	now := s.cfg.Now()
	batches, err := s.encode(recs, now.UnixMilli())
	if err != nil {
		return err
	}
	ack, err := p.Append(batches, now.Add(s.cfg.CommitTimeout))
	if err != nil {
		return fmt.Errorf("coordlog: appending to partition %d: %w", shard, err)
	}
	if err := <-ack; err != nil {
		return fmt.Errorf("coordlog: partition %d: %w", shard, err)
	}
	return nil
}

// encode makes record batches of recs, starting a new one whenever the
// next record would take the current one past MaxBatchBytes.
func (s *Store) encode(recs []group.Record, ts int64) ([][]byte, error) {
	var out [][]byte
	var cur []batch.Record
	size := 0
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		b, err := batch.Encode(batch.Header{
			LastOffsetDelta: int32(len(cur) - 1), FirstTimestamp: ts, MaxTimestamp: ts,
			ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
		}, cur)
		if err != nil {
			return err
		}
		out = append(out, b)
		cur, size = nil, 0
		return nil
	}
	for _, r := range recs {
		k, v, err := offsetstopic.Encode(r)
		if err != nil {
			return nil, fmt.Errorf("coordlog: %w", err)
		}
		n := len(k) + len(v) + 32 // the record's framing, generously
		if len(cur) > 0 && size+n > s.cfg.MaxBatchBytes {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		br := batch.Record{OffsetDelta: int32(len(cur)), Timestamp: ts, Key: k, Value: v}
		if len(cur) == 0 {
			br.Headers = s.nodeHeader
		}
		cur = append(cur, br)
		size += n
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// readChunk is how much Load reads at a time.
const readChunk = 1 << 20

// Load reads the shard's records from this node's replica of its
// partition, which this node must lead.
func (s *Store) Load(shard int, fn func(group.Record) error) error {
	p, err := s.cfg.Partition(int32(shard))
	if err != nil {
		return fmt.Errorf("%w: partition %d: %w", ErrNoLeader, shard, err)
	}
	if err := awaitLeading(p); err != nil {
		return fmt.Errorf("%w: partition %d: %w", ErrNoLeader, shard, err)
	}
	skipped := 0
	writer := int32(-1)
	for off, end := p.LogStart(), p.LogEnd(); off < end; {
		data, err := p.Read(off, readChunk)
		if err != nil {
			return fmt.Errorf("coordlog: reading partition %d at %d: %w", shard, off, err)
		}
		bs, err := batch.Split(data)
		if err != nil || len(bs) == 0 {
			return &store.UndecodableError{Shard: shard, Err: fmt.Errorf("batches at offset %d: %v", off, err)}
		}
		for _, b := range bs {
			h, err := batch.ParseHeader(b)
			if err != nil {
				return &store.UndecodableError{Shard: shard, Err: fmt.Errorf("batch at offset %d: %w", off, err)}
			}
			off = h.LastOffset() + 1
			if batch.IsControl(h.Attributes) {
				continue
			}
			rs, err := batch.Records(b)
			if err != nil {
				return &store.UndecodableError{Shard: shard, Err: fmt.Errorf("batch at offset %d: %w", h.BaseOffset, err)}
			}
			for _, r := range rs {
				if n, ok := nodeOf(r.Headers); ok {
					writer = n
				}
				rec, err := offsetstopic.Decode(r.Key, r.Value)
				var unknown *offsetstopic.UnknownKeyError
				switch {
				case errors.As(err, &unknown):
					skipped++
					continue
				case err != nil:
					return &store.UndecodableError{Shard: shard, Key: r.Key, Err: fmt.Errorf("offset %d: %w", r.Offset, err)}
				}
				if err := fn(rec); err != nil {
					return err
				}
			}
		}
	}
	s.mu.Lock()
	if writer >= 0 {
		s.writers[shard] = writer
	} else {
		delete(s.writers, shard)
	}
	s.mu.Unlock()
	if skipped > 0 {
		s.cfg.Logger.Warn("skipped records of a type groupd does not know; they stay in the log", "partition", shard, "records", skipped)
	}
	return nil
}

// leadingWait bounds how long Load waits for a replica that has just
// been made leader to take its leadership: the state that makes it leader
// and the lease that lets it act on it arrive one after the other.
const leadingWait = time.Second

// awaitLeading waits, up to leadingWait, until p is led by this node.
func awaitLeading(p Partition) error {
	deadline := time.Now().Add(leadingWait)
	for {
		err := p.Leading()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nodeOf is the node a record's NodeHeader names.
func nodeOf(hs []batch.RecordHeader) (int32, bool) {
	for _, h := range hs {
		if h.Key == NodeHeader {
			n, err := strconv.ParseInt(string(h.Value), 10, 32)
			return int32(n), err == nil
		}
	}
	return 0, false
}

// LastWriter is the node that wrote the last batch of the shard that
// carried its id, as of the shard's last Load.
func (s *Store) LastWriter(shard int) (int32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.writers[shard]
	return n, ok
}

// Close does nothing: the partitions are the cluster's.
func (s *Store) Close() error { return nil }
