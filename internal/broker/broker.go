// Package broker holds the single node's data-plane state: the topics with
// their stable ids and partition logs, the cluster identity, and producer
// id allocation. Its metadata lives in one small file in the data directory
// that is replaced atomically on every change; the partition logs live in
// internal/partition.
package broker

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/partition"
)

// Config configures a Broker.
type Config struct {
	DataDir string
	// NodeID is this broker's id in Metadata and FindCoordinator.
	NodeID            int32
	AutoCreateTopics  bool
	DefaultPartitions int32
	Log               partition.Options
	Logger            *slog.Logger
}

// TopicID is a Kafka topic id (a UUID).
type TopicID [16]byte

func (id TopicID) String() string { return hex.EncodeToString(id[:]) }

// Topic is one topic. Its partition list only grows (CreatePartitions), and
// is replaced as a whole so readers need no lock.
type Topic struct {
	Name    string
	ID      TopicID
	Configs map[string]string

	parts atomic.Pointer[[]*partition.Log]
}

// Partitions returns the topic's partition logs, indexed by partition.
func (t *Topic) Partitions() []*partition.Log { return *t.parts.Load() }

// Partition returns one partition's log, or nil if it does not exist.
func (t *Topic) Partition(p int32) *partition.Log {
	ps := t.Partitions()
	if p < 0 || int(p) >= len(ps) {
		return nil
	}
	return ps[p]
}

// Broker is safe for concurrent use.
type Broker struct {
	cfg Config
	log *slog.Logger

	mu        sync.RWMutex // guards topics, byID, meta and the metadata file
	topics    map[string]*Topic
	byID      map[TopicID]*Topic
	clusterID string

	pidMu    sync.Mutex
	nextPID  int64
	pidLimit int64 // end of the block recorded durably; ids below it may have been handed out
}

// producerIDBlock is how many producer ids are reserved per durable write:
// ids are never reused after a crash, and most InitProducerID calls do not
// touch the disk.
const producerIDBlock = 1000

type topicMeta struct {
	Name       string            `json:"name"`
	ID         string            `json:"id"`
	Partitions int32             `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
}

type metaFile struct {
	ClusterID       string      `json:"cluster_id"`
	ProducerIDLimit int64       `json:"producer_id_limit"`
	Topics          []topicMeta `json:"topics"`
}

const metaName = "meta.json"

// Open loads the broker's metadata and opens every partition log.
func Open(cfg Config) (*Broker, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = 1
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "logs"), 0o755); err != nil {
		return nil, err
	}
	b := &Broker{
		cfg:    cfg,
		log:    cfg.Logger,
		topics: make(map[string]*Topic),
		byID:   make(map[TopicID]*Topic),
	}
	var m metaFile
	raw, err := os.ReadFile(filepath.Join(cfg.DataDir, metaName))
	switch {
	case errors.Is(err, os.ErrNotExist):
		m.ClusterID = newClusterID()
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("broker metadata %s: %w", metaName, err)
		}
	}
	b.clusterID = m.ClusterID
	b.nextPID, b.pidLimit = m.ProducerIDLimit, m.ProducerIDLimit
	for _, tm := range m.Topics {
		idb, err := hex.DecodeString(tm.ID)
		if err != nil || len(idb) != 16 {
			b.closeAll()
			return nil, fmt.Errorf("topic %q: bad id %q", tm.Name, tm.ID)
		}
		t := &Topic{Name: tm.Name, Configs: tm.Configs}
		copy(t.ID[:], idb)
		parts := make([]*partition.Log, 0, tm.Partitions)
		t.parts.Store(&parts)
		b.topics[t.Name], b.byID[t.ID] = t, t
		if err := b.openPartitions(t, tm.Partitions); err != nil {
			b.closeAll()
			return nil, err
		}
	}
	if err := b.removeOrphans(); err != nil {
		b.closeAll()
		return nil, err
	}
	if err := b.persistLocked(); err != nil {
		b.closeAll()
		return nil, err
	}
	return b, nil
}

func newClusterID() string {
	var u [16]byte
	rand.Read(u[:])
	return base64.RawURLEncoding.EncodeToString(u[:])
}

func (b *Broker) topicDir(t *Topic) string {
	return filepath.Join(b.cfg.DataDir, "logs", t.ID.String())
}

// openPartitions grows t to n partitions, opening (or creating) their logs.
func (b *Broker) openPartitions(t *Topic, n int32) error {
	old := t.Partitions()
	parts := slices.Clone(old)
	for p := int32(len(old)); p < n; p++ {
		l, err := partition.Open(filepath.Join(b.topicDir(t), strconv.Itoa(int(p))), b.cfg.Log)
		if err != nil {
			for _, l := range parts[len(old):] {
				l.Close()
			}
			return fmt.Errorf("open %s-%d: %w", t.Name, p, err)
		}
		parts = append(parts, l)
	}
	t.parts.Store(&parts)
	return nil
}

// removeOrphans deletes partition directories of topics that are no longer
// in the metadata: a crash between recording a deletion and removing the
// files leaves them behind.
func (b *Broker) removeOrphans() error {
	dir := filepath.Join(b.cfg.DataDir, "logs")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		var id TopicID
		raw, err := hex.DecodeString(e.Name())
		if err == nil && len(raw) == 16 {
			copy(id[:], raw)
			if _, ok := b.byID[id]; ok {
				continue
			}
		}
		b.log.Info("removing data of a deleted topic", "dir", e.Name())
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// persistLocked writes the metadata file atomically: write a temporary
// file, sync it, rename it over the old one and sync the directory.
func (b *Broker) persistLocked() error {
	m := metaFile{ClusterID: b.clusterID, ProducerIDLimit: b.pidLimit}
	for _, t := range b.sortedTopicsLocked() {
		m.Topics = append(m.Topics, topicMeta{Name: t.Name, ID: t.ID.String(), Partitions: int32(len(t.Partitions())), Configs: t.Configs})
	}
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(b.cfg.DataDir, metaName), raw)
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (b *Broker) sortedTopicsLocked() []*Topic {
	ts := make([]*Topic, 0, len(b.topics))
	for _, t := range b.topics {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *Topic) int { return strings.Compare(a.Name, b.Name) })
	return ts
}

// NodeID is this broker's node id.
func (b *Broker) NodeID() int32 { return b.cfg.NodeID }

// ClusterID is the id generated when the data directory was created.
func (b *Broker) ClusterID() string { return b.clusterID }

// AutoCreateTopics reports whether Metadata may create missing topics.
func (b *Broker) AutoCreateTopics() bool { return b.cfg.AutoCreateTopics }

// Topic returns the named topic.
func (b *Broker) Topic(name string) (*Topic, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	t, ok := b.topics[name]
	return t, ok
}

// TopicByID returns the topic with the given id.
func (b *Broker) TopicByID(id TopicID) (*Topic, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	t, ok := b.byID[id]
	return t, ok
}

// Topics returns every topic, sorted by name.
func (b *Broker) Topics() []*Topic {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.sortedTopicsLocked()
}

// CreateTopic creates a topic with n partitions (n <= 0 means the default).
// With validateOnly nothing is changed. Errors are *kerr.Error values.
func (b *Broker) CreateTopic(name string, n int32, configs map[string]string, validateOnly bool) (*Topic, error) {
	if err := ValidateTopicName(name); err != nil {
		return nil, err
	}
	if n == -1 {
		n = b.cfg.DefaultPartitions
	}
	if n <= 0 {
		return nil, kerr.InvalidPartitions
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[name]; ok {
		return nil, kerr.TopicAlreadyExists
	}
	// Kafka refuses names that differ only by '.' versus '_', because they
	// collide in metric names.
	norm := strings.ReplaceAll(name, ".", "_")
	for other := range b.topics {
		if strings.ReplaceAll(other, ".", "_") == norm {
			return nil, kerr.InvalidTopicException
		}
	}
	if validateOnly {
		return nil, nil
	}
	t := &Topic{Name: name, Configs: configs}
	rand.Read(t.ID[:])
	empty := []*partition.Log{}
	t.parts.Store(&empty)
	if err := b.openPartitions(t, n); err != nil {
		return nil, err
	}
	b.topics[name], b.byID[t.ID] = t, t
	if err := b.persistLocked(); err != nil {
		delete(b.topics, name)
		delete(b.byID, t.ID)
		closeLogs(t.Partitions())
		os.RemoveAll(b.topicDir(t))
		return nil, err
	}
	b.log.Info("created topic", "topic", name, "partitions", n, "id", t.ID.String())
	return t, nil
}

// DeleteTopic deletes a topic and its data.
func (b *Broker) DeleteTopic(name string) error {
	b.mu.Lock()
	t, ok := b.topics[name]
	if !ok {
		b.mu.Unlock()
		return kerr.UnknownTopicOrPartition
	}
	delete(b.topics, name)
	delete(b.byID, t.ID)
	if err := b.persistLocked(); err != nil {
		b.topics[name], b.byID[t.ID] = t, t
		b.mu.Unlock()
		return err
	}
	b.mu.Unlock()
	// The deletion is durable; removing the files can only be finished,
	// here or by removeOrphans on the next start.
	for _, l := range t.Partitions() {
		l.Close()
	}
	if err := os.RemoveAll(b.topicDir(t)); err != nil {
		b.log.Warn("removing deleted topic's data", "topic", name, "err", err)
	}
	b.log.Info("deleted topic", "topic", name, "id", t.ID.String())
	return nil
}

// CreatePartitions grows a topic to count partitions.
func (b *Broker) CreatePartitions(name string, count int32, validateOnly bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[name]
	if !ok {
		return kerr.UnknownTopicOrPartition
	}
	if have := int32(len(t.Partitions())); count <= have {
		return kerr.InvalidPartitions
	}
	if validateOnly {
		return nil
	}
	old := t.Partitions()
	if err := b.openPartitions(t, count); err != nil {
		return err
	}
	if err := b.persistLocked(); err != nil {
		closeLogs(t.Partitions()[len(old):])
		t.parts.Store(&old)
		return err
	}
	return nil
}

// NextProducerID allocates a producer id that was never handed out before,
// even across crashes.
func (b *Broker) NextProducerID() (int64, error) {
	b.pidMu.Lock()
	defer b.pidMu.Unlock()
	if b.nextPID >= b.pidLimit {
		b.mu.Lock()
		b.pidLimit = b.nextPID + producerIDBlock
		err := b.persistLocked()
		b.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
	id := b.nextPID
	b.nextPID++
	return id, nil
}

// Close flushes and closes every partition log.
func (b *Broker) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closeAll()
}

func (b *Broker) closeAll() error {
	var errs []error
	for _, t := range b.topics {
		errs = append(errs, closeLogs(t.Partitions()))
	}
	return errors.Join(errs...)
}

func closeLogs(ls []*partition.Log) error {
	var errs []error
	for _, l := range ls {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// ValidateTopicName applies Kafka's topic name rules.
func ValidateTopicName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 249 {
		return kerr.InvalidTopicException
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return kerr.InvalidTopicException
		}
	}
	return nil
}

// DefaultPartitions is the partition count of topics created without one.
func (b *Broker) DefaultPartitions() int32 { return b.cfg.DefaultPartitions }
