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
	"github.com/groupd/groupd/internal/datadir"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// QuarantineDamagedSegments moves partition segments found damaged
	// on start to quarantine/ in the data directory and serves the rest,
	// instead of refusing to start.
	QuarantineDamagedSegments bool
	// CheckpointInterval is how often the partitions' recovery points
	// are written (default DefaultCheckpointInterval); they are also
	// written on segment roll and on Close.
	CheckpointInterval time.Duration
	// TopicDefaults are the broker's defaults for topic configs, by topic
	// config name (Kafka's static broker configs, such as
	// log.retention.ms for retention.ms), as set by flags. Configs not
	// named keep groupd's defaults (see ConfigDefs); Log.SegmentBytes, if
	// set, is the default segment.bytes.
	TopicDefaults map[string]string
	// RetentionCheckInterval is how often retention runs and idempotent
	// producers expire (log.retention.check.interval.ms; default 5
	// minutes).
	RetentionCheckInterval time.Duration
	// CleanerBackoff is how long the log cleaner sleeps when no
	// compacted log is due (log.cleaner.backoff.ms; default 15 s).
	CleanerBackoff time.Duration
	// CleanerBufferBytes is the memory of the cleaner's key map
	// (log.cleaner.dedupe.buffer.size; default 128 MiB), allocated when
	// a compacted log is first cleaned.
	CleanerBufferBytes int
	// OffsetsTopicPartitions is the partition count __consumer_offsets
	// shows when it is created (offsets.topic.num.partitions; default 50).
	OffsetsTopicPartitions int32
	Logger                 *slog.Logger
	// TopicsChanged, if set, is called after a topic is created or
	// deleted or gains partitions, possibly with the broker's lock held:
	// it must not call the broker, only tell someone who will.
	TopicsChanged func()
}

// DefaultCheckpointInterval matches Kafka's
// log.flush.offset.checkpoint.interval.ms.
const DefaultCheckpointInterval = time.Minute

// TopicID is a Kafka topic id (a UUID).
type TopicID [16]byte

func (id TopicID) String() string { return hex.EncodeToString(id[:]) }

// Topic is one topic. Its partition list only grows (CreatePartitions), and
// is replaced as a whole so readers need no lock; so are its configs.
type Topic struct {
	Name string
	ID   TopicID

	configs atomic.Pointer[map[string]string]
	parts   atomic.Pointer[[]*partition.Log]
}

// Configs returns the configs set on the topic (its overrides of the
// broker defaults). The map must not be changed.
func (t *Topic) Configs() map[string]string {
	if m := t.configs.Load(); m != nil {
		return *m
	}
	return nil
}

func (t *Topic) setConfigs(m map[string]string) { t.configs.Store(&m) }

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
	// lock is the data directory's, held from Open to Close.
	lock *datadir.Lock

	mu        sync.RWMutex // guards topics, byID, removals and the metadata file
	topics    map[string]*Topic
	byID      map[TopicID]*Topic
	removals  []removal
	clusterID string

	pidMu    sync.Mutex
	nextPID  int64
	pidLimit int64 // end of the block recorded durably; ids below it may have been handed out

	stopOnce        sync.Once
	stopCheckpoints chan struct{}
	checkpointsDone chan struct{}
	maintenance     sync.WaitGroup

	// offsetsTopic is __consumer_offsets once created; pendingCleanups
	// are deleted topics whose group offsets are still to be removed
	// (both guarded by mu, and persisted).
	offsetsTopic    *OffsetsTopic
	pendingCleanups []string
	offsetsCreated  atomic.Bool

	// replicas are the open replica logs of a cluster's partitions
	// (replicas.go); repClosed refuses new ones once Close began.
	repMu    sync.Mutex
	replicas map[ReplicaKey]replicaLog
	// repConfigs are the configs set on each topic with replicas here,
	// as the cluster's view last gave them (SetReplicaConfigs).
	repConfigs map[TopicID]map[string]string
	repClosed  bool
}

// producerIDBlock is how many producer ids are reserved per durable write:
// ids are never reused after a crash, and most InitProducerID calls do not
// touch the disk.
const producerIDBlock = 1000

// Open loads the broker's metadata, finishes or undoes the directory
// changes it records as pending, checks that every directory under logs/
// is accounted for, and opens every partition log. It deletes nothing it
// cannot account for: missing or unreadable metadata with partition data
// present, an unknown directory, or a missing partition stops it with an
// error naming the path. It first locks the data directory (datadir),
// until Close; a directory another process holds is an *datadir.InUseError
// and is left untouched.
func Open(cfg Config) (*Broker, error) {
	// Nothing in the directory is read or written before it is locked.
	lock, err := datadir.Acquire(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	b, err := openLocked(cfg)
	if err != nil {
		lock.Release()
		return nil, err
	}
	b.lock = lock
	return b, nil
}

// openLocked is Open with the data directory locked.
func openLocked(cfg Config) (*Broker, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = 1
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = DefaultCheckpointInterval
	}
	if cfg.RetentionCheckInterval <= 0 {
		cfg.RetentionCheckInterval = DefaultRetentionCheckInterval
	}
	if cfg.CleanerBackoff <= 0 {
		cfg.CleanerBackoff = DefaultCleanerBackoff
	}
	if cfg.CleanerBufferBytes <= 0 {
		cfg.CleanerBufferBytes = DefaultCleanerBufferBytes
	}
	if cfg.OffsetsTopicPartitions <= 0 {
		cfg.OffsetsTopicPartitions = DefaultOffsetsTopicPartitions
	}
	defaults, err := brokerDefaults(cfg)
	if err != nil {
		return nil, err
	}
	cfg.TopicDefaults = defaults
	logsDir := filepath.Join(cfg.DataDir, logsDirName)
	if err := os.MkdirAll(logsDir, 0o755); err != nil {
		return nil, err
	}
	b := &Broker{
		cfg:      cfg,
		log:      cfg.Logger,
		topics:   make(map[string]*Topic),
		byID:     make(map[TopicID]*Topic),
		replicas: make(map[ReplicaKey]replicaLog),
	}
	metaPath := filepath.Join(cfg.DataDir, metaName)
	m, ok, err := readMeta(cfg.DataDir)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %s is unreadable (%v); groupd will not start from metadata it does not understand. Move it aside and rebuild it from the partition directories with `groupd recover --data-dir %s`", ErrMetadata, metaPath, err, cfg.DataDir)
	case !ok:
		ents, err := os.ReadDir(logsDir)
		if err != nil {
			return nil, err
		}
		if len(ents) > 0 {
			return nil, fmt.Errorf("%w: %s is missing but %s holds partition data (%d entries, e.g. %s); refusing to start so that nothing is deleted. Rebuild it from the partition directories with `groupd recover --data-dir %s`", ErrMetadata, metaPath, logsDir, len(ents), ents[0].Name(), cfg.DataDir)
		}
		m.ClusterID = newClusterID()
	}
	b.clusterID = m.ClusterID
	b.nextPID, b.pidLimit = m.ProducerIDLimit, m.ProducerIDLimit
	b.removals = m.PendingRemovals
	b.pendingCleanups = m.PendingOffsetCleanups
	if m.OffsetsTopic != nil {
		id, _ := parseTopicID(m.OffsetsTopic.ID)
		b.offsetsTopic = &OffsetsTopic{ID: id, Partitions: m.OffsetsTopic.Partitions}
		b.offsetsCreated.Store(true)
	}
	for _, tm := range m.Topics {
		id, _ := parseTopicID(tm.ID)
		t := &Topic{Name: tm.Name, ID: id}
		t.setConfigs(tm.Configs)
		b.warnUnknownConfigs(t)
		parts := make([]*partition.Log, 0, tm.Partitions)
		t.parts.Store(&parts)
		b.topics[t.Name], b.byID[t.ID] = t, t
	}
	if err := b.finishRemovals(); err != nil {
		return nil, err
	}
	counts := make(map[TopicID]int32, len(m.Topics))
	for _, tm := range m.Topics {
		id, _ := parseTopicID(tm.ID)
		counts[id] = tm.Partitions
	}
	if err := b.checkLogsDir(counts); err != nil {
		return nil, err
	}
	for _, t := range b.sortedTopicsLocked() {
		if err := b.openPartitions(t, counts[t.ID]); err != nil {
			b.closeAll()
			return nil, err
		}
	}
	if err := b.persistLocked(); err != nil {
		b.closeAll()
		return nil, err
	}
	b.stopCheckpoints, b.checkpointsDone = make(chan struct{}), make(chan struct{})
	go b.checkpointLoop()
	b.maintenance.Go(b.retentionLoop)
	b.maintenance.Go(b.cleanerLoop)
	return b, nil
}

// removeAll removes the directories of recorded removals; tests replace it
// to stop a removal half way, as a crash would.
var removeAll = os.RemoveAll

// ErrMetadata is wrapped by Open's error when meta.json is missing while
// partition data exists, or cannot be read.
var ErrMetadata = errors.New("broker metadata")

// finishRemovals removes the directories of the recorded pending removals
// (deletions and creations that did not finish) and forgets them.
func (b *Broker) finishRemovals() error {
	for _, r := range b.removals {
		dir := filepath.Join(b.cfg.DataDir, logsDirName, r.ID)
		if r.FromPartition == 0 {
			b.log.Info("removing the directory of a recorded change that did not finish", "topic", r.Topic, "dir", dir, "reason", r.Reason)
			if err := removeAll(dir); err != nil {
				return err
			}
			continue
		}
		parts, _, err := partitionDirs(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for p := range parts {
			if p < r.FromPartition {
				continue
			}
			pdir := filepath.Join(dir, strconv.Itoa(int(p)))
			b.log.Info("removing a partition of a recorded change that did not finish", "topic", r.Topic, "dir", pdir, "reason", r.Reason)
			if err := removeAll(pdir); err != nil {
				return err
			}
		}
	}
	b.removals = nil
	return nil
}

// checkLogsDir makes sure every entry under logs/ is a known topic's
// directory holding exactly its partitions, and that each known topic's
// directory has an up-to-date descriptor.
func (b *Broker) checkLogsDir(counts map[TopicID]int32) error {
	logsDir := filepath.Join(b.cfg.DataDir, logsDirName)
	ents, err := os.ReadDir(logsDir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		path := filepath.Join(logsDir, e.Name())
		id, ok := parseTopicID(e.Name())
		if !ok || !e.IsDir() {
			return &UnknownDirError{Path: path, Reason: "not a topic directory", DataDir: b.cfg.DataDir}
		}
		if _, ok := b.byID[id]; !ok {
			reason := "no topic in " + metaName + " has this id and no removal of it is recorded"
			if d, err := readDescriptor(path); err == nil {
				reason = fmt.Sprintf("it holds topic %q (by its %s), which %s does not list and whose removal is not recorded", d.Name, descriptorName, metaName)
			}
			return &UnknownDirError{Path: path, Reason: reason, DataDir: b.cfg.DataDir}
		}
	}
	for _, t := range b.sortedTopicsLocked() {
		dir := b.topicDir(t)
		n := counts[t.ID]
		parts, other, err := partitionDirs(dir)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: the directory %s of topic %q is missing; restore it, or create it empty (with its partition directories 0 to %d) to accept that its records are lost", ErrMetadata, dir, t.Name, n-1)
		}
		if err != nil {
			return err
		}
		for p := range n {
			if !parts[p] {
				pdir := filepath.Join(dir, strconv.Itoa(int(p)))
				return fmt.Errorf("%w: partition directory %s of topic %q is missing; restore it, or create it empty (mkdir) to accept that its records are lost", ErrMetadata, pdir, t.Name)
			}
		}
		for p := range parts {
			if p >= n {
				other = append(other, strconv.Itoa(int(p)))
			}
		}
		if len(other) > 0 {
			slices.Sort(other)
			return &UnknownDirError{Path: filepath.Join(dir, other[0]),
				Reason: fmt.Sprintf("topic %q has %d partitions in %s and no removal of this entry is recorded", t.Name, n, metaName), DataDir: b.cfg.DataDir}
		}
		if err := b.ensureDescriptor(t, n); err != nil {
			return err
		}
	}
	return nil
}

func (b *Broker) descriptorOf(t *Topic, partitions int32) descriptor {
	return descriptor{Name: t.Name, ID: t.ID.String(), Partitions: partitions, Configs: t.Configs(), ClusterID: b.clusterID}
}

// ensureDescriptor writes t's descriptor unless it is already up to date.
func (b *Broker) ensureDescriptor(t *Topic, partitions int32) error {
	want := b.descriptorOf(t, partitions)
	if have, err := readDescriptor(b.topicDir(t)); err == nil && have.equal(want) {
		return nil
	}
	return writeDescriptor(b.topicDir(t), want)
}

func newClusterID() string {
	var u [16]byte
	rand.Read(u[:])
	return base64.RawURLEncoding.EncodeToString(u[:])
}

func (b *Broker) topicDir(t *Topic) string {
	return filepath.Join(b.cfg.DataDir, logsDirName, t.ID.String())
}

// logOptions are the partition options for partition p of t.
func (b *Broker) logOptions(t *Topic, p int32) partition.Options {
	o := b.cfg.Log
	if o.Logger == nil {
		o.Logger = b.log
	}
	c := b.logConfigOf(t.Configs())
	o.Config = &c
	if b.cfg.QuarantineDamagedSegments {
		o.QuarantineDir = filepath.Join(b.cfg.DataDir, quarantineName, t.ID.String(), strconv.Itoa(int(p)))
	}
	return o
}

// openPartitions grows t to n partitions, opening (or creating) their logs.
func (b *Broker) openPartitions(t *Topic, n int32) error {
	old := t.Partitions()
	parts := slices.Clone(old)
	for p := int32(len(old)); p < n; p++ {
		l, err := partition.Open(filepath.Join(b.topicDir(t), strconv.Itoa(int(p))), b.logOptions(t, p))
		if err != nil {
			for _, l := range parts[len(old):] {
				l.Close()
			}
			if errors.Is(err, partition.ErrDamaged) {
				return fmt.Errorf("open %s-%d: %w; nothing was changed. To move the damaged file to %s and serve the rest, start with --quarantine-damaged-segments", t.Name, p, err, filepath.Join(b.cfg.DataDir, quarantineName))
			}
			return fmt.Errorf("open %s-%d: %w", t.Name, p, err)
		}
		parts = append(parts, l)
	}
	t.parts.Store(&parts)
	return nil
}

// persistLocked writes the metadata file atomically: write a temporary
// file, sync it, rename it over the old one and sync the directory.
func (b *Broker) persistLocked() error {
	m := metaFile{ClusterID: b.clusterID, ProducerIDLimit: b.pidLimit, PendingRemovals: b.removals, PendingOffsetCleanups: b.pendingCleanups}
	if ot := b.offsetsTopic; ot != nil {
		m.OffsetsTopic = &offsetsTopicMeta{ID: ot.ID.String(), Partitions: ot.Partitions}
	}
	for _, t := range b.sortedTopicsLocked() {
		m.Topics = append(m.Topics, topicMeta{Name: t.Name, ID: t.ID.String(), Partitions: int32(len(t.Partitions())), Configs: t.Configs()})
	}
	return writeMeta(b.cfg.DataDir, m)
}

func writeMeta(dataDir string, m metaFile) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return partition.WriteFileAtomic(filepath.Join(dataDir, metaName), raw)
}

// recordRemoval adds r to the pending removals and persists; the caller
// holds mu.
func (b *Broker) recordRemoval(r removal) error {
	b.removals = append(b.removals, r)
	if err := b.persistLocked(); err != nil {
		b.removals = b.removals[:len(b.removals)-1]
		return err
	}
	return nil
}

// dropRemoval forgets the pending removal for id (in memory; the next
// persist records it). The caller holds mu.
func (b *Broker) dropRemoval(id TopicID) {
	b.removals = slices.DeleteFunc(b.removals, func(r removal) bool { return r.ID == id.String() })
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
	if err := ValidateConfigs(configs); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[name]; ok || (name == OffsetsTopicName && b.offsetsTopic != nil) {
		return nil, kerr.TopicAlreadyExists
	}
	if name == OffsetsTopicName {
		return nil, errInternalTopic("created by the group coordinator when it first serves a group")
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
	t := &Topic{Name: name}
	t.setConfigs(configs)
	rand.Read(t.ID[:])
	empty := []*partition.Log{}
	t.parts.Store(&empty)
	// The creation is recorded as a removal first, so a crash before it
	// commits leaves a directory the next start knows it may remove.
	if err := b.recordRemoval(removal{Topic: name, ID: t.ID.String(), Reason: "create"}); err != nil {
		return nil, err
	}
	if err := b.createTopicDir(t, n); err != nil {
		closeLogs(t.Partitions())
		b.undoLocked(t.ID, b.topicDir(t))
		return nil, err
	}
	b.topics[name], b.byID[t.ID] = t, t
	b.dropRemoval(t.ID)
	if err := b.persistLocked(); err != nil {
		delete(b.topics, name)
		delete(b.byID, t.ID)
		closeLogs(t.Partitions())
		b.undoLocked(t.ID, b.topicDir(t))
		return nil, err
	}
	b.log.Info("created topic", "topic", name, "partitions", n, "id", t.ID.String())
	b.notifyTopicsChanged()
	return t, nil
}

// createTopicDir makes t's directory, partitions and descriptor durable.
func (b *Broker) createTopicDir(t *Topic, n int32) error {
	if err := os.MkdirAll(b.topicDir(t), 0o755); err != nil {
		return err
	}
	if err := partition.SyncDir(filepath.Join(b.cfg.DataDir, logsDirName)); err != nil {
		return err
	}
	if err := b.openPartitions(t, n); err != nil {
		return err
	}
	// Written last, it also makes the partition directories' entries
	// durable (the write fsyncs the topic directory).
	return writeDescriptor(b.topicDir(t), b.descriptorOf(t, n))
}

// undoLocked removes path, which belongs to the pending removal recorded
// for id, and forgets that removal if the removal worked (otherwise the
// next start finishes it). Caller holds mu.
func (b *Broker) undoLocked(id TopicID, paths ...string) {
	for _, p := range paths {
		if err := removeAll(p); err != nil {
			b.log.Warn("undoing a failed topic change; the next start finishes it", "path", p, "err", err)
			return
		}
	}
	b.dropRemoval(id)
	if err := b.persistLocked(); err != nil {
		b.log.Warn("recording an undone topic change; the next start finishes it", "err", err)
	}
}

// DeleteTopic deletes a topic and its data. The deletion is recorded in
// the metadata before any file is removed, so a crash in between is
// finished by the next start.
func (b *Broker) DeleteTopic(name string) error {
	b.mu.Lock()
	t, ok := b.topics[name]
	if !ok {
		b.mu.Unlock()
		return kerr.UnknownTopicOrPartition
	}
	delete(b.topics, name)
	delete(b.byID, t.ID)
	// The topic's group offsets are to be removed, in the same write
	// that records the deletion, so a stop in between cannot forget them.
	cleanups := b.pendingCleanups
	if !slices.Contains(cleanups, name) {
		b.pendingCleanups = append(slices.Clone(cleanups), name)
	}
	if err := b.recordRemoval(removal{Topic: name, ID: t.ID.String(), Reason: "delete"}); err != nil {
		b.topics[name], b.byID[t.ID] = t, t
		b.pendingCleanups = cleanups
		b.mu.Unlock()
		return err
	}
	b.mu.Unlock()
	for _, l := range t.Partitions() {
		l.Close()
	}
	b.mu.Lock()
	b.undoLocked(t.ID, b.topicDir(t))
	b.mu.Unlock()
	b.log.Info("deleted topic", "topic", name, "id", t.ID.String())
	b.notifyTopicsChanged()
	return nil
}

// notifyTopicsChanged calls Config.TopicsChanged, if set.
func (b *Broker) notifyTopicsChanged() {
	if f := b.cfg.TopicsChanged; f != nil {
		f()
	}
}

// CreatePartitions grows a topic to count partitions. The new partitions
// are recorded as a pending removal until the new count is committed.
func (b *Broker) CreatePartitions(name string, count int32, validateOnly bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[name]
	if !ok {
		return kerr.UnknownTopicOrPartition
	}
	have := int32(len(t.Partitions()))
	if count <= have {
		return kerr.InvalidPartitions
	}
	if validateOnly {
		return nil
	}
	if err := b.recordRemoval(removal{Topic: name, ID: t.ID.String(), FromPartition: have, Reason: "create-partitions"}); err != nil {
		return err
	}
	old := t.Partitions()
	undo := func() {
		closeLogs(t.Partitions()[len(old):])
		t.parts.Store(&old)
		var dirs []string
		for p := have; p < count; p++ {
			dirs = append(dirs, filepath.Join(b.topicDir(t), strconv.Itoa(int(p))))
		}
		if err := writeDescriptor(b.topicDir(t), b.descriptorOf(t, have)); err != nil {
			b.log.Warn("undoing a failed partition creation; the next start finishes it", "topic", name, "err", err)
			return
		}
		b.undoLocked(t.ID, dirs...)
	}
	if err := b.openPartitions(t, count); err != nil {
		undo()
		return err
	}
	if err := writeDescriptor(b.topicDir(t), b.descriptorOf(t, count)); err != nil {
		undo()
		return err
	}
	b.dropRemoval(t.ID)
	if err := b.persistLocked(); err != nil {
		undo()
		return err
	}
	b.notifyTopicsChanged()
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

// CheckpointLogs records every partition's recovery point (see
// partition.Log.Checkpoint); the broker calls it every CheckpointInterval.
func (b *Broker) CheckpointLogs() error {
	var errs []error
	for _, nl := range b.allLogs() {
		if err := nl.log.Checkpoint(); !errors.Is(err, partition.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (b *Broker) checkpointLoop() {
	defer close(b.checkpointsDone)
	tick := time.NewTicker(b.cfg.CheckpointInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := b.CheckpointLogs(); err != nil {
				b.log.Warn("writing recovery checkpoints", "err", err)
			}
		case <-b.stopCheckpoints:
			return
		}
	}
}

// Close flushes and closes every partition log, which also records their
// recovery points at the log ends.
func (b *Broker) Close() error {
	// The loop takes mu to list the topics, so it is stopped first.
	b.stopOnce.Do(func() {
		close(b.stopCheckpoints)
		<-b.checkpointsDone
		b.maintenance.Wait()
	})
	rerr := b.closeReplicas()
	b.mu.Lock()
	defer b.mu.Unlock()
	return errors.Join(rerr, b.closeAll(), b.lock.Release())
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
