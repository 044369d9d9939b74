// Package partition is groupd's data plane: a durable, append-only log of
// record batches for one topic partition.
//
// A Log lives in its own directory as a sequence of segment files named
// after the offset of their first record ("00000000000000000000.log"), each
// with a sparse index ("….index") of batch offset → file position plus the
// running maximum timestamp, used by reads and by timestamp lookups.
// Batches are stored as the producer sent them once every record has been
// validated (as Kafka's LogValidator does); only the base offset and the
// partition leader epoch (the newest in the leader-epoch cache, 0 on a
// single node), both outside the CRC, are patched, and for LogAppendTime
// topics, or a header whose MaxTimestamp is not its records' largest, the
// timestamp with its CRC. Fetches return stored bytes unchanged.
//
// Appends are serialized; reads run concurrently with them and never see a
// batch before it is completely written: the log end offset and segment
// sizes are published only after the bytes are in the file. Reads use
// pread on the segment files, so memory does not grow with stored data.
//
// A replica of a replicated partition (Options.Replicated) keeps its high
// watermark apart from its log end: consumers read below the former
// (Read), followers fetching from it up to the latter (ReadReplica). It
// keeps Kafka's leader-epoch cache ("leader-epoch-checkpoint", epochs.go),
// appends a leader's batches as they are (AppendReplicated) and drops a
// diverging tail (TruncateTo, truncate.go).
//
// A topic's Config drives the log's life: the active segment rolls by size
// and age, EnforceRetention deletes the oldest segments by age and size and
// moves the log start offset (so does DeleteRecords), and Clean compacts a
// log whose cleanup policy says so, keeping the last record of each key.
//
// Each partition keeps a recovery checkpoint ("recovery-checkpoint"): the
// offset below which every record is known to be fsynced, the log start
// offset, where the cleaner stopped, any offset ranges an operator chose
// to set aside, and for a replica its high watermark and any truncation in
// progress. It is rewritten when a segment is rolled, when the
// log start moves, after a clean, on Checkpoint (called periodically by
// the broker) and on Close, so a clean shutdown leaves a recovery point at
// the log end. Idempotent-producer state is snapshotted ("<offset>.snapshot")
// at each roll and on Close, with a summary of the sealed segments; Open
// reads the newest usable snapshot, trusts the sealed segments it describes
// when their files are unchanged (size, modification time, index, first
// and last indexed batch headers), and reads every batch header only of
// the rest. Batches from the recovery point on are CRC-checked too. A torn
// tail past the recovery point in the last segment is truncated; anything
// wrong below it, or in an older segment, stops the open with a DamageError
// naming the file and offset, or, with Options.QuarantineDir, moves the
// segment aside and records the gap.
package partition

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/groupd/groupd/internal/batch"
)

// Errors returned by Log methods. Batch validation failures wrap the
// sentinel errors of package batch (ErrCorrupt, ErrUnsupportedMagic,
// ErrInvalidRecord, ErrUnsupportedCompression).
var (
	// ErrOffsetOutOfRange: Kafka's OFFSET_OUT_OF_RANGE.
	ErrOffsetOutOfRange = errors.New("offset out of range")
	// ErrOutOfOrderSequence: Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER.
	ErrOutOfOrderSequence = errors.New("out of order sequence number")
	// ErrInvalidProducerEpoch: Kafka's INVALID_PRODUCER_EPOCH.
	ErrInvalidProducerEpoch = errors.New("invalid producer epoch")
	// ErrClosed is returned after Close or Delete.
	ErrClosed = errors.New("partition log closed")
	// ErrFailed is wrapped by every append after a write or fsync failed
	// in a way that leaves the file state unknown; the log must be
	// reopened (which recovers it).
	ErrFailed = errors.New("partition log failed")
	// ErrMessageTooLarge: a batch larger than max.message.bytes, Kafka's
	// MESSAGE_TOO_LARGE.
	ErrMessageTooLarge = errors.New("message too large")
	// ErrRecordListTooLarge: a batch larger than a segment, Kafka's
	// RECORD_LIST_TOO_LARGE.
	ErrRecordListTooLarge = errors.New("record list too large")
)

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// AppendResult describes a successful Append.
type AppendResult struct {
	// BaseOffset is the offset of the first record of the first batch;
	// for a duplicate, the offset originally assigned to it.
	BaseOffset int64
	// LastOffset is the offset of the last record appended (or of the
	// duplicate batch's last record).
	LastOffset int64
	// Duplicate is set when the call was a retry of batches already in
	// the log (idempotent producer): nothing was written and Kafka
	// answers success with the original offsets.
	Duplicate bool
	// LogAppendTime is the broker time stamped on the batches of a
	// LogAppendTime topic, -1 when timestamps are the producer's.
	LogAppendTime  int64
	LogStartOffset int64
}

// Log is one partition's log. Its methods are safe for concurrent use.
type Log struct {
	dir  string
	opts Options
	log  *slog.Logger

	// wmu serializes writers (Append, roll, Close). Held without mu while
	// writing bytes so readers are not blocked by disk writes.
	wmu       sync.Mutex
	producers map[int64]*producerEntry // guarded by wmu
	wbuf      []byte                   // guarded by wmu
	failed    error                    // guarded by wmu

	// mu guards the published state below.
	mu     sync.RWMutex
	segs   []*segment
	waitCh chan struct{}
	closed bool

	// leo is the log end offset, the offset the next record gets; hw is
	// the high watermark, below which consumers read: leo on a single
	// node, what SetHighWatermark gave for a replica (Options.Replicated).
	// Both move under mu.
	leo   atomic.Int64
	hw    atomic.Int64
	start atomic.Int64
	dirty atomic.Bool // appended since the last fsync

	// syncMu serializes the fsyncs of Sync and SyncTo, and TruncateTo,
	// which lowers synced; synced is the offset below which every record
	// is known to be fsynced.
	syncMu sync.Mutex
	synced atomic.Int64

	maxMu    sync.Mutex // guards maxCache
	maxCache struct{ batchOffset, ts, offset int64 }

	done     chan struct{}
	syncerWG sync.WaitGroup

	// cpMu serializes checkpoint writes; cp is the checkpoint last read
	// or written (on disk if cpOnDisk). Its gaps are fixed after Open;
	// its log start and cleaned-to offset move under maintMu.
	cpMu     sync.Mutex
	cp       checkpoint
	cpOnDisk bool

	cfg atomic.Pointer[Config]

	// maintMu serializes the maintenance that removes or rewrites sealed
	// segments: retention, DeleteRecords and the cleaner.
	maintMu sync.Mutex
	// closing stops a clean in progress when the log closes.
	closing atomic.Bool
	// retired holds the files of segments deleted or rewritten while
	// readers may still hold them; they are closed a while later.
	retiredMu sync.Mutex
	retired   []retiredFiles
	// tombstoneDue is the earliest delete horizon among the tombstones the
	// cleaner kept, at which the log becomes cleanable again (Unix ms).
	tombstoneDue atomic.Int64
	// snapshots are the offsets of the producer-state snapshot files,
	// ascending (guarded by wmu).
	snapshots []int64
	// snapshotAt is the offset of the snapshot Open loaded producer state
	// from; only batches from it on are replayed.
	snapshotAt int64

	reads readHints // where recent reads ended (readhint.go)

	// epochMu guards the leader-epoch cache (epochs.go) and serializes
	// its edits with the file's writes.
	epochMu sync.Mutex
	epochs  epochCache
	// stamp is the epoch appends stamp in their batches: the newest
	// cached one, 0 with an empty cache (stampKnown false), when the
	// first append records {0, its offset} (guarded by wmu).
	stamp      int32
	stampKnown bool

	// stopAt, set by tests only, stops a TruncateTo at the named step
	// when it returns true, as a crash there would (truncate.go).
	stopAt func(step string) bool
}

// tickerFor creates the ticker driving SyncInterval fsyncs; tests replace
// it to drive the loop by hand.
var tickerFor = func(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// Open opens or creates the log in dir, recovering it if it was not closed
// cleanly. Recovery truncates a torn tail past the recovery point in the
// last segment (logging what was dropped), refuses damage anywhere else
// with an error wrapping ErrDamaged (or sets it aside, see
// Options.QuarantineDir), rebuilds any missing or stale index and replays
// producer state from batch headers. It loads the leader-epoch cache,
// dropping the epochs past the log end; without its file, it rebuilds it
// from the batch headers; an unreadable one is refused (or set aside). A
// truncation that a stop interrupted is finished (truncate.go).
func Open(dir string, opts Options) (*Log, error) {
	opts = opts.withDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	l := &Log{
		dir:       dir,
		opts:      opts,
		log:       opts.Logger.With("dir", dir),
		producers: make(map[int64]*producerEntry),
		waitCh:    make(chan struct{}),
		done:      make(chan struct{}),
	}
	l.maxCache.batchOffset = -1
	l.cfg.Store(opts.Config)
	l.tombstoneDue.Store(math.MaxInt64)
	// The leader-epoch cache is read before anything changes, so that an
	// unreadable one refuses the open with the directory as it was.
	epochs, haveEpochs, err := readEpochFile(dir)
	var bad *DamageError
	if errors.As(err, &bad) && opts.QuarantineDir != "" {
		if err = quarantineFile(opts.QuarantineDir, bad.File); err == nil {
			l.log.Error("moved an unreadable leader-epoch checkpoint to the quarantine; the cache is rebuilt from the batch headers",
				"file", bad.File, "reason", bad.Reason, "quarantine", opts.QuarantineDir)
		}
	}
	if err == nil {
		err = l.recover()
	}
	if err == nil {
		l.start.Store(max(l.cp.logStart, l.segs[0].base))
		last := l.segs[len(l.segs)-1]
		l.leo.Store(last.stats.next)
		l.hw.Store(last.stats.next)
		if opts.Replicated {
			// A replica's high watermark is the one it last
			// checkpointed (none in a checkpoint from before: 0), never
			// past its end.
			l.hw.Store(min(l.cp.hw, last.stats.next))
		}
		// Only the recovery point is known durable: what lies past it
		// was read back from the page cache and still needs an fsync.
		l.synced.Store(l.cp.recoveryPoint)
		l.dirty.Store(l.cp.recoveryPoint < last.stats.next)
		err = l.loadEpochs(epochs, haveEpochs)
	}
	if err == nil && l.cp.truncating {
		err = l.finishTruncation()
	}
	if err != nil {
		for _, s := range l.segs {
			s.close()
		}
		l.closeRetired(true)
		return nil, err
	}
	if l.cp.cleanedTo > 0 {
		// When the kept tombstones fall due is not kept across a stop:
		// the first clean after a start finds out.
		l.tombstoneDue.Store(0)
	}
	if opts.Sync == SyncInterval {
		tick, stop := tickerFor(opts.SyncInterval)
		l.syncerWG.Add(1)
		go l.syncLoop(tick, stop)
	}
	return l, nil
}

// SetConfig changes the topic settings the log follows from its next
// append, retention pass or clean on.
func (l *Log) SetConfig(c Config) {
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	l.cfg.Store(&c)
}

// Config returns the topic settings the log follows.
func (l *Log) Config() Config { return *l.cfg.Load() }

func (l *Log) nowMs() int64 { return l.opts.Now().UnixMilli() }

// replayProducer rebuilds idempotent-producer state from one batch header
// at or past the producer snapshot Open started from (snapshotAt).
func (l *Log) replayProducer(h batch.Header, _ int64) {
	if h.ProducerID < 0 || h.BaseOffset < l.snapshotAt {
		return
	}
	e := l.producers[h.ProducerID]
	if e == nil {
		e = &producerEntry{epoch: h.ProducerEpoch}
		l.producers[h.ProducerID] = e
	}
	e.add(h, h.BaseOffset)
}

// reconcileIndex rewrites the segment's index file if it differs from the
// index rebuilt by the scan (missing, stale, torn or written with another
// IndexIntervalBytes).
func (l *Log) reconcileIndex(s *segment) error {
	if s.idx == nil {
		idx, err := os.OpenFile(segmentName(l.dir, s.base, indexSuffix), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		s.idx = idx
	}
	want := encodeIndex(s.entries)
	have, err := io.ReadAll(io.NewSectionReader(s.idx, 0, math.MaxInt64))
	if err != nil {
		return err
	}
	s.idxWritten = len(s.entries)
	if bytes.Equal(have, want) {
		return nil
	}
	l.log.Info("rebuilding segment index", "segment", s.base, "entries", len(s.entries))
	if err := s.idx.Truncate(0); err != nil {
		return err
	}
	if _, err := s.idx.WriteAt(want, 0); err != nil {
		return err
	}
	return s.idx.Sync()
}

// openSegment opens an existing segment. Its index is opened (or created)
// by reconcileIndex, once the segment is known to belong to the log, so a
// refused open leaves the directory as it found it.
func (l *Log) openSegment(base int64) (*segment, error) {
	f, err := os.OpenFile(segmentName(l.dir, base, logSuffix), os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	return &segment{base: base, f: f, stats: newSegStats(base), created: l.nowMs()}, nil
}

func (l *Log) createSegment(base int64) (*segment, error) {
	f, err := os.OpenFile(segmentName(l.dir, base, logSuffix), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	idx, err := os.OpenFile(segmentName(l.dir, base, indexSuffix), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &segment{base: base, f: f, idx: idx, stats: newSegStats(base), created: l.nowMs()}, nil
}

func (s *segment) close() error {
	err := s.f.Close()
	if s.idx == nil {
		return err
	}
	if e := s.idx.Close(); err == nil {
		err = e
	}
	return err
}

// Checkpoint records the current recovery point durably if it moved since
// the last checkpoint. It costs two fsyncs (file and directory) when it
// writes, so the broker calls it periodically rather than per append; a
// stale checkpoint only means more of the log is CRC-checked on open.
func (l *Log) Checkpoint() error {
	l.cpMu.Lock()
	defer l.cpMu.Unlock()
	if l.isClosed() {
		return nil
	}
	return l.checkpointLocked()
}

// checkpointLocked writes the checkpoint if it changed; caller holds cpMu.
func (l *Log) checkpointLocked() error { return l.recordLocked(l.cp) }

// recordLocked makes c, with the current recovery point (and a replica's
// high watermark), the checkpoint on disk unless it already is; caller
// holds cpMu.
func (l *Log) recordLocked(c checkpoint) error {
	c.recoveryPoint = max(l.synced.Load(), c.logStart)
	c.hw, c.hasHW = 0, l.opts.Replicated
	if l.opts.Replicated {
		c.hw = l.hw.Load()
	}
	if l.cpOnDisk && c.equal(l.cp) {
		return nil
	}
	if err := writeCheckpoint(l.dir, c); err != nil {
		return err
	}
	l.cp, l.cpOnDisk = c, true
	return nil
}

// RecoveryPoint is the offset below which every record is known to be
// fsynced.
func (l *Log) RecoveryPoint() int64 { return l.synced.Load() }

// SyncDir fsyncs a directory, making the entries created in it durable.
func SyncDir(dir string) error { return syncDir(dir) }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Append validates batches (structure, CRC, magic v2, producer rules),
// assigns them consecutive offsets and writes them with one write. The
// caller's slices are not modified. Either all batches are appended or none
// is. If any batch is a retry of one of its producer's last five batches,
// nothing is written and the result carries that batch's original offsets
// with Duplicate set, as Kafka does.
func (l *Log) Append(batches [][]byte) (AppendResult, error) {
	return l.append(batches, l.opts.Sync == SyncAlways, false)
}

// AppendDeferred appends like Append but never waits for an fsync. Under
// SyncAlways the caller makes the append durable with SyncTo before it
// acknowledges it: a connection's pipelined produce requests then append
// in order without each waiting for its own fsync, and share the fsyncs.
// The records are readable before they are fsynced, as in Kafka, where
// consumers read data the broker has not flushed.
func (l *Log) AppendDeferred(batches [][]byte) (AppendResult, error) {
	return l.append(batches, false, false)
}

// AppendOwned appends like AppendDeferred, but the log may modify the
// caller's batches: it patches their offsets (and, where due, their
// timestamps and CRC) in place and writes a single batch straight from
// the caller's memory instead of copying it first. The caller must not
// use the batches' bytes as the producer sent them afterwards; a produce
// request, whose frame is dropped once answered, never does. A batch of
// a megabyte is then read once by validation and once by the write,
// not also copied in between.
func (l *Log) AppendOwned(batches [][]byte) (AppendResult, error) {
	return l.append(batches, false, true)
}

// SyncTo returns once every record below offset end is fsynced.
// Concurrent callers share fsyncs: each fsync covers everything appended
// before it started, and a caller it did not cover starts the next one.
func (l *Log) SyncTo(end int64) error {
	if l.synced.Load() >= end {
		return nil
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.synced.Load() >= end {
		return nil
	}
	// Everything below the log end has been written. Segments before
	// the active one were fsynced when they were rolled, so one fsync of
	// the active segment covers it all.
	target := l.leo.Load()
	f, err := l.activeFile()
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		// As in append: after a failed fsync the page cache state is
		// unknown, so the log stops taking writes.
		l.wmu.Lock()
		l.failed = fmt.Errorf("fsync: %w", err)
		l.wmu.Unlock()
		return err
	}
	l.advanceSynced(target)
	return nil
}

// activeFile returns the active segment's file, or ErrClosed.
func (l *Log) activeFile() (*os.File, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, ErrClosed
	}
	return l.segs[len(l.segs)-1].f, nil
}

// advanceSynced records that every record below end is fsynced.
func (l *Log) advanceSynced(end int64) {
	for {
		cur := l.synced.Load()
		if cur >= end || l.synced.CompareAndSwap(cur, end) {
			return
		}
	}
}

// checked is a batch that passed validation, with the timestamp its
// header must carry once stored.
type checked struct {
	h     batch.Header
	maxTS int64
	fixTS bool // the stored header's MaxTimestamp (and CRC) must change
}

// validate applies the topic's rules to batches arriving from a producer:
// structure, CRC, size, the producer rules and every record (see
// batch.ValidateRecords). It takes no lock, so a partition's appends
// serialize only for the write.
func (l *Log) validate(batches [][]byte, cfg *Config, now int64) ([]checked, error) {
	if len(batches) == 0 {
		return nil, fmt.Errorf("%w: no batches", batch.ErrInvalidRecord)
	}
	out := make([]checked, len(batches))
	opts := batch.ValidateOptions{
		Now: now, LogAppendTime: cfg.LogAppendTime, RequireKeys: cfg.Compact,
		TimestampBeforeMax: cfg.TimestampBeforeMaxMs, TimestampAfterMax: cfg.TimestampAfterMaxMs,
	}
	for i, b := range batches {
		h, err := batch.Check(b)
		if err == nil {
			err = batch.VerifyCRC(b)
		}
		if err == nil && h.Size() > cfg.MaxMessageBytes {
			err = errorf(ErrMessageTooLarge, "the batch is %d bytes, larger than the topic's max.message.bytes %d", h.Size(), cfg.MaxMessageBytes)
		}
		if err == nil && h.Size() > cfg.SegmentBytes {
			err = errorf(ErrRecordListTooLarge, "the batch is %d bytes, larger than the topic's segment.bytes %d", h.Size(), cfg.SegmentBytes)
		}
		if err == nil {
			err = batch.ValidateProduce(h)
		}
		var v batch.Validated
		if err == nil {
			if l.opts.HeaderOnlyCompressed && h.Codec() != batch.CodecNone && !cfg.Compact {
				v, err = batch.ValidateCompressedHeader(b, h, opts)
			} else {
				v, err = batch.ValidateRecords(b, h, opts)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("batch %d: %w", i, err)
		}
		c := checked{h: h, maxTS: v.MaxTimestamp}
		if cfg.LogAppendTime {
			c.maxTS = now
		}
		c.fixTS = c.maxTS != h.MaxTimestamp || cfg.LogAppendTime
		c.h.MaxTimestamp = c.maxTS
		out[i] = c
	}
	return out, nil
}

func (l *Log) append(batches [][]byte, syncInline, owned bool) (AppendResult, error) {
	cfg := l.cfg.Load()
	now := l.nowMs()
	checks, err := l.validate(batches, cfg, now)
	if err != nil {
		return AppendResult{}, err
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.isClosed() {
		return AppendResult{}, ErrClosed
	}
	if l.failed != nil {
		return AppendResult{}, fmt.Errorf("%w: %v", ErrFailed, l.failed)
	}
	res := AppendResult{LogAppendTime: -1, LogStartOffset: l.start.Load()}
	if cfg.LogAppendTime {
		res.LogAppendTime = now
	}
	var total int64
	for _, c := range checks {
		total += c.h.Size()
	}

	// Producer checks run against copies so a rejected call leaves the
	// state untouched.
	next := l.leo.Load()
	var pending map[int64]*producerEntry
	for i, c := range checks {
		h := c.h
		base := next
		next += int64(h.LastOffsetDelta) + 1
		if h.ProducerID < 0 {
			continue
		}
		e, ok := pending[h.ProducerID]
		if !ok {
			e = l.producers[h.ProducerID]
		}
		if dup, ok := e.findDuplicate(h); ok {
			res.BaseOffset, res.LastOffset, res.Duplicate = dup.firstOffset, dup.lastOffset, true
			return res, nil
		}
		if err := e.check(h); err != nil {
			return AppendResult{}, fmt.Errorf("batch %d: %w", i, err)
		}
		if e == nil {
			e = &producerEntry{epoch: h.ProducerEpoch}
		} else if !ok {
			e = e.clone()
		}
		e.add(h, base)
		if pending == nil {
			pending = make(map[int64]*producerEntry)
		}
		pending[h.ProducerID] = e
	}

	seg := l.active()
	if seg.stats.size > 0 && (seg.stats.size+total > cfg.SegmentBytes || segmentAged(seg, cfg, checks, now)) {
		var err error
		if seg, err = l.roll(); err != nil {
			return AppendResult{}, err
		}
	}

	// The first append of a log with no leader epoch records epoch 0 at
	// its offset, before the records that carry it.
	if !l.stampKnown {
		if err := l.startEpochZero(); err != nil {
			return AppendResult{}, err
		}
	}

	// Build the write: one buffer, offsets patched in the copy; or, for
	// a single batch the caller handed over, the batch itself, patched
	// in place.
	first := l.leo.Load()
	stamp := l.stamp
	inPlace := owned && len(batches) == 1
	var buf []byte
	if !inPlace {
		buf = l.wbuf[:0]
	}
	stats := seg.stats
	var newEntries []indexEntry
	off := first
	for i, b := range batches {
		pos := stats.size
		if !inPlace {
			start := len(buf)
			buf = append(buf, b...)
			b = buf[start:]
		}
		batch.SetBaseOffset(b, off)
		batch.SetPartitionLeaderEpoch(b, stamp)
		c := checks[i]
		if c.fixTS {
			batch.SetMaxTimestamp(b, c.maxTS, cfg.LogAppendTime)
		}
		h := c.h
		h.BaseOffset = off
		if e, ok := stats.add(h, pos, int64(l.opts.IndexIntervalBytes)); ok {
			newEntries = append(newEntries, e)
		}
		off = h.LastOffset() + 1
	}
	if inPlace {
		buf = batches[0]
	} else if cap(buf) <= 4<<20 {
		l.wbuf = buf // keep modest buffers for reuse, let huge ones go
	}
	if _, err := seg.f.WriteAt(buf, seg.stats.size); err != nil {
		// Cut any partial write so the file matches the published size.
		if terr := seg.f.Truncate(seg.stats.size); terr != nil {
			l.failed = fmt.Errorf("write: %v; truncate: %v", err, terr)
		}
		return AppendResult{}, err
	}
	if syncInline {
		if err := seg.f.Sync(); err != nil {
			// After a failed fsync the page cache state is unknown
			// (the kernel may have dropped the dirty pages), so the log
			// stops accepting writes, like Kafka taking the log dir
			// offline.
			l.failed = fmt.Errorf("fsync: %w", err)
			return AppendResult{}, err
		}
	} else {
		l.dirty.Store(true)
	}
	if len(newEntries) > 0 {
		// The index is rebuilt on Open if stale, so a failed write here
		// only costs a rebuild.
		if _, err := seg.idx.WriteAt(encodeIndex(newEntries), int64(seg.idxWritten)*indexEntrySize); err != nil {
			l.log.Warn("index write failed", "segment", seg.base, "err", err)
		}
		seg.idxWritten += len(newEntries)
	}
	for id, e := range pending {
		l.producers[id] = e
	}

	// Publish: only now can readers see the new bytes.
	l.mu.Lock()
	seg.sealed = nil // the active segment of a clean start grows again
	seg.stats = stats
	seg.entries = append(seg.entries, newEntries...)
	l.leo.Store(off)
	if !l.opts.Replicated {
		l.hw.Store(off)
	}
	if syncInline {
		l.advanceSynced(off)
	}
	l.wakeLocked()
	l.mu.Unlock()

	res.BaseOffset, res.LastOffset = first, off-1
	return res, nil
}

// segmentAged reports whether seg is due to roll by segment.ms before the
// batches in checks are appended. As in Kafka, the age is measured in
// record time, from the segment's first batch to the newest of the
// incoming ones, so a producer's clock does not roll a segment per append;
// without timestamps it is the segment's age on the broker's clock.
func segmentAged(seg *segment, cfg *Config, checks []checked, now int64) bool {
	if cfg.SegmentMs <= 0 {
		return false
	}
	if seg.stats.firstTS >= 0 {
		newest := int64(batch.NoTimestamp)
		for _, c := range checks {
			newest = max(newest, c.maxTS)
		}
		if newest >= 0 {
			return newest-seg.stats.firstTS > cfg.SegmentMs
		}
	}
	return now-seg.created > cfg.SegmentMs
}

func (l *Log) isClosed() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.closed
}

// active returns the last segment. Callers hold wmu, which keeps it the
// last one; maintenance may change the segments before it meanwhile.
func (l *Log) active() *segment {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.segs[len(l.segs)-1]
}

// roll seals the active segment (fsync of data and index) and starts a new
// one at the current log end, then records the recovery point and a
// producer-state snapshot at the new segment's base. Caller holds wmu.
func (l *Log) roll() (*segment, error) {
	old := l.active()
	if err := old.f.Sync(); err != nil {
		l.failed = fmt.Errorf("fsync on roll: %w", err)
		return nil, err
	}
	l.advanceSynced(old.stats.next)
	if err := old.idx.Sync(); err != nil {
		l.log.Warn("index fsync failed", "segment", old.base, "err", err)
	}
	if err := old.seal(); err != nil {
		l.log.Warn("reading a sealed segment's modification time", "segment", old.base, "err", err)
	}
	s, err := l.createSegment(old.stats.next)
	if err != nil {
		return nil, err
	}
	if err := syncDir(l.dir); err != nil {
		s.close()
		return nil, err
	}
	l.mu.Lock()
	l.segs = append(l.segs, s)
	l.mu.Unlock()
	l.log.Debug("rolled segment", "segment", s.base)
	// With the recovery point at the new segment, damage in any older
	// one is never mistaken for a torn write. A failure here only leaves
	// the checkpoint stale.
	l.cpMu.Lock()
	if err := l.checkpointLocked(); err != nil {
		l.log.Warn("writing the recovery checkpoint", "err", err)
	}
	l.cpMu.Unlock()
	// After the checkpoint, so a snapshot is never ahead of the recovery
	// point on disk. A failure only makes the next start read more.
	if err := l.writeSnapshot(s.base); err != nil {
		l.log.Warn("writing the producer snapshot", "err", err)
	}
	return s, nil
}

// HighWatermark is the offset below which records are committed, the
// end of what consumers read (Read). On a single node every appended
// record is committed, so it is the log end offset; a replica's
// (Options.Replicated) is what SetHighWatermark last gave.
func (l *Log) HighWatermark() int64 { return l.hw.Load() }

// LogEndOffset is the offset the next appended record will get (LEO).
func (l *Log) LogEndOffset() int64 { return l.leo.Load() }

// SetHighWatermark moves a replica's high watermark up to hw, at most to
// the log end offset, and wakes the waiters of Wait. A value below the
// current one is ignored: only TruncateTo lowers it. On a single node the
// high watermark is the log end already, and this changes nothing. The
// new value is made durable with the next checkpoint (Checkpoint, a
// roll, Close), so after a crash a replica may start from a lower one,
// never a higher one.
func (l *Log) SetHighWatermark(hw int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if hw = min(hw, l.leo.Load()); hw > l.hw.Load() {
		l.hw.Store(hw)
		l.wakeLocked()
	}
}

// wakeLocked releases the waiters of Wait; caller holds mu.
func (l *Log) wakeLocked() {
	close(l.waitCh)
	l.waitCh = make(chan struct{})
}

// LogStartOffset is the first offset still in the log.
func (l *Log) LogStartOffset() int64 { return l.start.Load() }

// Wait returns a channel closed by the next change of the log end offset
// or the high watermark (an append, SetHighWatermark, TruncateTo) or by
// Close, so a fetch at the end can wait without polling: a consumer at
// the high watermark, a follower at the log end. Take the channel before
// checking HighWatermark (or LogEndOffset) to avoid missing a change.
func (l *Log) Wait() <-chan struct{} {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.waitCh
}

// segView is a reader's snapshot of one segment.
type segView struct {
	base    int64
	f       *os.File
	stats   segStats
	entries []indexEntry
}

func (s *segment) view() segView {
	return segView{base: s.base, f: s.f, stats: s.stats, entries: s.entries}
}

// snapshot copies the published segment state. Entries are shared: the
// writer only appends past the snapshot's length.
func (l *Log) snapshot() ([]segView, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, ErrClosed
	}
	out := make([]segView, len(l.segs))
	for i, s := range l.segs {
		out[i] = s.view()
	}
	return out, nil
}

// segmentFor returns the segment holding offset or, if offset falls in a
// gap left by a set-aside segment, the first later segment holding data,
// as Kafka reads on from the next segment; ok is false past the data.
func (l *Log) segmentFor(offset int64) (segView, bool, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return segView{}, false, ErrClosed
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].stats.next > offset })
	if i == len(l.segs) {
		return segView{}, false, nil
	}
	return l.segs[i].view(), true, nil
}

func readErr(err error) error {
	if errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	return err
}

// findBatch returns the position and header of the batch containing offset
// in segment v.
func findBatch(v segView, offset int64) (int64, batch.Header, bool, error) {
	sc := newScanner(v.f, v.stats.size)
	buf := scanBufs.Get().(*[scanWindow]byte)
	defer scanBufs.Put(buf)
	sc.buf = buf[:]
	for pos := lookup(v.entries, offset); pos+batch.HeaderLen <= v.stats.size; {
		hb, err := sc.at(pos, batch.HeaderLen)
		if err != nil {
			return 0, batch.Header{}, false, readErr(err)
		}
		h, err := batch.ParseHeader(hb)
		if err != nil {
			return 0, batch.Header{}, false, fmt.Errorf("segment %d position %d: %w", v.base, pos, err)
		}
		if h.LastOffset() >= offset {
			return pos, h, true, nil
		}
		pos += h.Size()
	}
	return 0, batch.Header{}, false, nil
}

// Read returns whole stored batches starting with the one containing
// offset, at most maxBytes in total. If the first batch alone is larger
// than maxBytes it is returned whole when minOneBatch is set (KIP-74) and
// nothing is returned otherwise. Reads stay within one segment, so fewer
// bytes than maxBytes may come back even if more data exists. The first
// batch may start before offset; clients skip the records before it. An
// offset in a gap left by a set-aside segment reads the next batch after
// the gap.
// Reading at the high watermark returns an empty, non-nil slice; offsets
// below LogStartOffset or above HighWatermark are ErrOffsetOutOfRange.
// No batch starting at or past the high watermark is returned (a
// replica's high watermark falls between batches, as followers copy
// whole batches).
func (l *Log) Read(offset int64, maxBytes int32, minOneBatch bool) ([]byte, error) {
	return l.read(offset, maxBytes, minOneBatch, l.hw.Load())
}

// ReadReplica is Read for a follower's fetch: bounded by the log end
// offset instead of the high watermark, and with the first batch always
// returned whole however large (as Kafka reads for replicas).
func (l *Log) ReadReplica(offset int64, maxBytes int32) ([]byte, error) {
	return l.read(offset, maxBytes, true, l.leo.Load())
}

// read is Read up to bound: offsets past it are out of range, and batches
// starting at or past it are left out.
func (l *Log) read(offset int64, maxBytes int32, minOneBatch bool, bound int64) ([]byte, error) {
	start := l.start.Load()
	if offset < start || offset > bound {
		return nil, errorf(ErrOffsetOutOfRange, "offset %d not in [%d, %d]", offset, start, bound)
	}
	if offset == bound {
		return []byte{}, nil
	}
	from := offset
	v, pos, first, err := l.locate(offset)
	if err != nil || v.f == nil {
		return []byte{}, err
	}
	limit := max(int64(maxBytes), 0)
	n := min(limit, v.stats.size-pos)
	if first > limit {
		// KIP-74: a first batch larger than the limit is returned
		// whole, or not at all.
		if !minOneBatch {
			return []byte{}, nil
		}
		n = first
	}
	if first < 0 {
		// Found by a hint: the first batch's size is in its own header,
		// which this read fetches along with the rest (locate checked
		// that a whole header is there).
		n = max(n, batch.HeaderLen)
	}
	buf := make([]byte, n)
	if _, err := v.f.ReadAt(buf, pos); err != nil {
		return nil, readErr(err)
	}
	if first < 0 {
		if first = batch.LogOverhead + int64(int32(beUint32(buf[8:]))); first > limit {
			if !minOneBatch {
				return []byte{}, nil
			}
			if first > n {
				buf = make([]byte, first)
				if _, err := v.f.ReadAt(buf, pos); err != nil {
					return nil, readErr(err)
				}
			}
			n = first
		}
	}
	// Cut after the last batch that fits whole and starts below the
	// bound (the segment may have grown since the bound was read).
	end, last := int64(0), int64(-1)
	for end+batch.LogOverhead <= n {
		sz := batch.LogOverhead + int64(int32(beUint32(buf[end+8:])))
		if sz < batch.HeaderLen || end+sz > n || int64(beUint64(buf[end:])) >= bound {
			break
		}
		last = end
		end += sz
	}
	if last >= 0 {
		// The next read of this consumer starts after the last batch
		// returned: remember where that is.
		if h, err := batch.ParseHeader(buf[last:end]); err == nil {
			l.reads.record(v.f, from, h.LastOffset()+1, pos+end)
		}
	}
	return buf[:end], nil
}

// locate finds the segment and position of the first batch holding offset
// or a later one, from a hint left by an earlier read or else by scanning
// from the index entry before it. first is that batch's size when it was
// read (-1 when a hint gave the position); v.f is nil when no batch
// follows offset.
func (l *Log) locate(offset int64) (v segView, pos, first int64, err error) {
	for {
		var ok bool
		v, ok, err = l.segmentFor(offset)
		if err != nil || !ok {
			return segView{}, 0, 0, err
		}
		if pos, ok := l.reads.find(v.f, offset); ok && pos+batch.HeaderLen <= v.stats.size {
			return v, pos, -1, nil
		}
		var h batch.Header
		pos, h, ok, err = findBatch(v, offset)
		if err != nil {
			return segView{}, 0, 0, err
		}
		if ok {
			return v, pos, h.Size(), nil
		}
		// The cleaner removed every batch from offset to the end of
		// this segment: read on from the next one.
		offset = v.stats.next
	}
}

func beUint64(b []byte) uint64 {
	return uint64(beUint32(b))<<32 | uint64(beUint32(b[4:]))
}

func beUint32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// OffsetForTimestamp implements ListOffsets by timestamp: the earliest
// offset whose record timestamp is >= ts, and that record's timestamp. For
// LogAppendTime batches every record has the batch MaxTimestamp. ok is
// false if no record qualifies (Kafka then answers offset -1). The special
// timestamps -1 (latest), -2 (earliest) and -3 (max) are the caller's:
// HighWatermark, LogStartOffset and MaxTimestamp. Segments and index
// entries are skipped by their maximum timestamps; candidate batches are
// decoded (and decompressed) to find the exact record.
func (l *Log) OffsetForTimestamp(ts int64) (offset, timestamp int64, ok bool, err error) {
	views, err := l.snapshot()
	if err != nil {
		return -1, -1, false, err
	}
	for _, v := range views {
		if v.stats.maxTSOffset < 0 || v.stats.maxTS < ts {
			continue
		}
		// Start at the last index entry before which every batch is
		// older than ts.
		j := sort.Search(len(v.entries), func(i int) bool { return v.entries[i].maxTSBefore >= ts }) - 1
		pos := int64(0)
		if j >= 0 {
			pos = v.entries[j].pos
		}
		sc := newScanner(v.f, v.stats.size)
		for pos+batch.HeaderLen <= v.stats.size {
			hb, err := sc.at(pos, batch.HeaderLen)
			if err != nil {
				return -1, -1, false, readErr(err)
			}
			h, err := batch.ParseHeader(hb)
			if err != nil {
				return -1, -1, false, err
			}
			if h.MaxTimestamp >= ts {
				b, err := sc.at(pos, int(h.Size()))
				if err != nil {
					return -1, -1, false, readErr(err)
				}
				recs, err := batch.Records(b)
				if err != nil {
					return -1, -1, false, fmt.Errorf("offset %d: %w", h.BaseOffset, err)
				}
				for _, r := range recs {
					if r.Timestamp >= ts && r.Offset >= l.start.Load() {
						return r.Offset, r.Timestamp, true, nil
					}
				}
			}
			pos += h.Size()
		}
	}
	return -1, -1, false, nil
}

// MaxTimestamp returns the offset and timestamp of the record with the
// largest timestamp (the first such record on ties), as ListOffsets with
// timestamp -3 (MAX_TIMESTAMP) answers since Kafka 3.8; (-1, -1) for an
// empty log. Batch MaxTimestamp headers are trusted to find the batch; the
// exact record is found by decoding that batch once and cached. If that
// batch cannot be read, its base offset is returned.
func (l *Log) MaxTimestamp() (offset, ts int64) {
	views, err := l.snapshot()
	if err != nil {
		return -1, -1
	}
	bo, ts := int64(-1), int64(math.MinInt64)
	for _, v := range views {
		if v.stats.maxTSOffset >= 0 && (bo < 0 || v.stats.maxTS > ts) {
			bo, ts = v.stats.maxTSOffset, v.stats.maxTS
		}
	}
	if bo < 0 {
		return -1, -1
	}
	l.maxMu.Lock()
	defer l.maxMu.Unlock()
	if c := l.maxCache; c.batchOffset == bo && c.ts == ts {
		return c.offset, ts
	}
	off, err := l.maxRecordOffset(bo, ts)
	if err != nil {
		l.log.Warn("max timestamp lookup failed", "batch_offset", bo, "err", err)
		return bo, ts
	}
	l.maxCache.batchOffset, l.maxCache.ts, l.maxCache.offset = bo, ts, off
	return off, ts
}

func (l *Log) maxRecordOffset(batchOffset, ts int64) (int64, error) {
	v, ok, err := l.segmentFor(batchOffset)
	if err != nil || !ok {
		return 0, errors.Join(err, errors.New("segment not found"))
	}
	pos, h, ok, err := findBatch(v, batchOffset)
	if err != nil || !ok {
		return 0, errors.Join(err, errors.New("batch not found"))
	}
	b := make([]byte, h.Size())
	if _, err := v.f.ReadAt(b, pos); err != nil {
		return 0, err
	}
	recs, err := batch.Records(b)
	if err != nil {
		return 0, err
	}
	for _, r := range recs {
		if r.Timestamp >= ts {
			return r.Offset, nil
		}
	}
	return h.BaseOffset, nil
}

// Sync fsyncs the active segment if anything was appended since the last
// fsync. Earlier segments were fsynced when they were rolled.
func (l *Log) Sync() error {
	if !l.dirty.Swap(false) {
		return nil
	}
	// Serialized with SyncTo and TruncateTo, which must not see the
	// recovery point move past an end it lowered.
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	// Appends publish the log end after writing their bytes, so
	// everything below target is in the file the fsync covers.
	target := l.leo.Load()
	f, err := l.activeFile()
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		l.dirty.Store(true)
		return readErr(err)
	}
	l.advanceSynced(target)
	return nil
}

func (l *Log) syncLoop(tick <-chan time.Time, stop func()) {
	defer l.syncerWG.Done()
	defer stop()
	for {
		select {
		case <-tick:
			if err := l.Sync(); err != nil && !errors.Is(err, ErrClosed) {
				l.log.Error("background fsync failed", "err", err)
			}
		case <-l.done:
			return
		}
	}
}

// Close waits for an in-flight append, fsyncs the active segment and its
// index and closes all files. Waiters on Wait are released. Further calls
// return ErrClosed (Close itself is idempotent).
func (l *Log) Close() error {
	// A clean in progress stops at its next batch; retention and
	// DeleteRecords finish first.
	l.closing.Store(true)
	l.maintMu.Lock()
	defer l.maintMu.Unlock()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.waitCh)
	l.mu.Unlock()
	close(l.done)
	l.syncerWG.Wait()

	var errs []error
	act := l.active()
	if err := act.f.Sync(); err != nil {
		errs = append(errs, err)
	} else {
		// Everything is fsynced: the checkpoint written now is the
		// clean-shutdown mark, and the next Open checks no CRCs.
		l.advanceSynced(l.leo.Load())
		l.cpMu.Lock()
		if err := l.checkpointLocked(); err != nil {
			errs = append(errs, err)
		}
		l.cpMu.Unlock()
		// The snapshot describes every segment, so the next Open reads
		// no batch header.
		if err := act.idx.Sync(); err != nil {
			errs = append(errs, err)
		} else if err := act.seal(); err != nil {
			errs = append(errs, err)
		} else if err := l.writeSnapshot(l.leo.Load()); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range l.segs {
		if err := s.close(); err != nil {
			errs = append(errs, err)
		}
	}
	l.closeRetired(true)
	return errors.Join(errs...)
}

// Delete closes the log and removes its directory, for topic deletion.
func (l *Log) Delete() error {
	err := l.Close()
	return errors.Join(err, os.RemoveAll(l.dir))
}

// Dir is the log's directory.
func (l *Log) Dir() string { return l.dir }

// SyncsAppends reports whether appends must be fsynced before they are
// acknowledged (SyncAlways): callers of AppendDeferred then call SyncTo.
func (l *Log) SyncsAppends() bool { return l.opts.Sync == SyncAlways }
