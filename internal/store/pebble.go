package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/groupd/groupd/internal/group"
)

// Options configure OpenPebble.
type Options struct {
	// Shards is the number of coordinator shards keys are routed over
	// (DefaultShards if 0). It is recorded in the store on first open;
	// opening with a different count fails, because every key embeds its
	// shard.
	Shards int
	// Sync true: Apply returns after the write-ahead log is fsynced, so
	// acknowledged records survive power loss. Sync false: Apply returns
	// after the batch is written to the operating system (write(2)), so
	// acknowledged records survive the process being killed (kill -9, a
	// panic) but not the machine losing power, unless SyncInterval bounds
	// what a power loss takes.
	Sync bool
	// SyncInterval, with Sync false, fsyncs the write-ahead log in the
	// background every SyncInterval (if anything was written since the
	// last time), so a power loss takes at most the records acknowledged
	// in the last interval or so. 0 leaves the log to the operating
	// system.
	SyncInterval time.Duration
	// SkipUndecodable makes Load skip a stored record that does not
	// decode, logging its key, instead of failing with an
	// *UndecodableError. The record stays in the store.
	SkipUndecodable bool
	// Logger receives pebble's messages (informational ones at Debug) and
	// the store's own. Nil discards them.
	Logger *slog.Logger
	// FoldBytes is how much a shard's log grows before it is folded
	// (DefaultFoldBytes if 0); see log.go.
	FoldBytes int64
	// ManualFold turns background folding off: logs are folded only when
	// the caller calls Fold. With DisableCompactions as well, nothing
	// changes the database except the calls made to the store (and the
	// memtable flushes those calls cause), which a simulation needs to
	// replay a run.
	ManualFold bool
	// DisableCompactions turns pebble's automatic compactions off.
	DisableCompactions bool
	// FS is the filesystem the database lives on (the operating system's
	// if nil). Tests pass pebble's in-memory, crashable or
	// error-injecting ones.
	FS vfs.FS
}

// Pebble is a Store on cockroachdb/pebble.
//
// Every Apply is one pebble batch committed with pebble.Sync, holding one log
// entry per shard it touches (log.go). Pebble's commit
// pipeline is a group commit: a committing batch appends its WAL record and
// queues a sync request; the WAL's single flush goroutine writes everything
// queued so far and issues one fsync for all waiting requests. Concurrent
// Applies therefore share syncs, which WALSyncs makes visible.
//
// Pebble has no "write the WAL to the OS but do not fsync" commit mode:
// with pebble.NoSync a commit returns once the batch is in the WAL's
// in-process buffer, which a kill -9 loses. So Sync false is implemented
// below pebble: the store still commits with pebble.Sync (waiting until the
// flush goroutine has written the batch to the WAL file) but opens the
// database on a filesystem whose WAL files ignore Sync. Sstables, the
// manifest and directories keep real syncs, so the database stays
// consistent; only the tail of the WAL is at the mercy of the page cache,
// and SyncInterval fsyncs it on a timer.
//
// Pebble treats a failed WAL write or fsync as fatal: the batch is already
// in its memtable, readable, while it may not be on disk, and the log takes
// no further writes. The store catches that (pebble reports it through
// Logger.Fatalf, which panics), fails the Apply, and reopens the database
// from its files, as a restart of the process would: the reopened database
// holds what reached the log file, made durable by pebble's recovery, and
// nothing else. Whether the failed batch is among it is unknown to the
// caller, which must read the store again (the coordinator reloads the
// shard). If the database cannot be reopened, every call fails until one
// manages to reopen it.
type Pebble struct {
	dir             string
	shards          int
	fs              *walFS
	log             *slog.Logger
	foldBytes       int64
	manualFold      bool
	skipUndecodable bool
	disableCompact  bool

	logs       []shardLog // by shard
	foldq      chan int   // shards whose log is to be folded
	folderDone chan struct{}
	stopSync   chan struct{} // closed by Close to stop the interval syncer
	syncerDone chan struct{}

	mu     sync.RWMutex // held shared by Apply, Load and Fold, exclusively by Close and reopen
	db     *pebble.DB   // nil while a reopen is needed
	gen    uint64       // counts reopen attempts, so concurrent failures reopen once
	closed bool
}

var _ Store = (*Pebble)(nil)

// scratchPool holds encoding buffers for Apply, which runs on several
// shards' writers at once.
var scratchPool = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// metaKey holds the shard count. Its prefix is above every shard's.
var metaKey = []byte("\xff\xffshards")

// walTickerFor creates the ticker driving SyncInterval fsyncs; tests
// replace it to drive the syncer by hand.
var walTickerFor = func(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// OpenPebble opens (creating if needed) a store in dir.
func OpenPebble(dir string, opts Options) (*Pebble, error) {
	if opts.Shards == 0 {
		opts.Shards = DefaultShards
	}
	if opts.Shards < 1 || opts.Shards > MaxShards {
		return nil, fmt.Errorf("store: shard count %d out of range [1, %d]", opts.Shards, MaxShards)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	base := opts.FS
	if base == nil {
		base = vfs.Default
	}
	if opts.FoldBytes <= 0 {
		opts.FoldBytes = DefaultFoldBytes
	}
	p := &Pebble{
		dir: dir, shards: opts.Shards, log: logger, foldBytes: opts.FoldBytes,
		fs:              &walFS{FS: base, sync: opts.Sync, interval: !opts.Sync && opts.SyncInterval > 0},
		manualFold:      opts.ManualFold,
		skipUndecodable: opts.SkipUndecodable,
		disableCompact:  opts.DisableCompactions,
		logs:            make([]shardLog, opts.Shards),
		// Room for every shard: a shard has at most one fold queued or
		// running, so Apply never blocks on the queue.
		foldq:      make(chan int, opts.Shards),
		folderDone: make(chan struct{}),
		stopSync:   make(chan struct{}),
		syncerDone: make(chan struct{}),
	}
	db, err := pebble.Open(dir, p.pebbleOptions())
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	p.db = db
	if err := p.checkShards(); err != nil {
		db.Close()
		return nil, err
	}
	if err := p.resumeLogs(); err != nil {
		db.Close()
		return nil, err
	}
	if p.manualFold {
		close(p.folderDone)
	} else {
		go p.folder()
	}
	if p.fs.interval {
		tick, stop := walTickerFor(opts.SyncInterval)
		go p.syncLoop(tick, stop)
	} else {
		close(p.syncerDone)
	}
	return p, nil
}

func (p *Pebble) pebbleOptions() *pebble.Options {
	o := &pebble.Options{
		FS:                          p.fs,
		Logger:                      pebbleLogger{p.log},
		DisableAutomaticCompactions: p.disableCompact,
	}
	if p.disableCompact {
		// Pebble stops writes while level 0 holds too many files (12 by
		// default), waiting for a compaction to bring it down. With
		// compactions off none ever comes: every memtable flush adds a
		// file, and the store's writes would stall for good after the
		// twelfth. Reads merely get slower as files pile up.
		o.L0StopWritesThreshold = math.MaxInt32
	}
	return o
}

func (p *Pebble) checkShards() error {
	v, closer, err := p.db.Get(metaKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return p.db.Set(metaKey, binary.BigEndian.AppendUint16(nil, uint16(p.shards)), pebble.Sync)
	case err != nil:
		return fmt.Errorf("store: read shard count: %w", err)
	}
	defer closer.Close()
	if len(v) != 2 {
		return fmt.Errorf("store: corrupt shard count %x", v)
	}
	if n := int(binary.BigEndian.Uint16(v)); n != p.shards {
		return fmt.Errorf("store: store has %d shards, opened with %d", n, p.shards)
	}
	return nil
}

// resumeLogs sets each shard's next log sequence number past the last entry
// in the database, so an Apply never overwrites an entry, whether or not
// the shard was loaded first. p.mu is held exclusively, or not yet shared.
func (p *Pebble) resumeLogs() error {
	for sh := range p.logs {
		it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: logPrefix(sh), UpperBound: shardPrefix(sh + 1)})
		if err != nil {
			return fmt.Errorf("store: shard %d: %w", sh, err)
		}
		var next uint64
		if it.Last() && len(it.Key()) == 3+8 {
			next = binary.BigEndian.Uint64(it.Key()[3:]) + 1
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("store: shard %d: %w", sh, err)
		}
		l := &p.logs[sh]
		l.mu.Lock()
		l.next = max(l.next, next)
		l.mu.Unlock()
	}
	return nil
}

// Shards returns the shard count keys are routed by.
func (p *Pebble) Shards() int { return p.shards }

// acquire takes p.mu shared with the database open, reopening it first if
// an earlier failure closed it. It returns the reopen generation seen.
func (p *Pebble) acquire() (uint64, error) {
	for {
		p.mu.RLock()
		if p.closed {
			p.mu.RUnlock()
			return 0, ErrClosed
		}
		if p.db != nil {
			return p.gen, nil
		}
		gen := p.gen
		p.mu.RUnlock()
		if err := p.reopen(gen, nil); err != nil {
			return 0, err
		}
	}
}

// errDBFailed marks an error after which the database must be reopened.
var errDBFailed = errors.New("store: database failed")

// fatalPanic is what pebbleLogger.Fatalf panics with.
type fatalPanic struct{ msg string }

func (f fatalPanic) Error() string { return "pebble: " + f.msg }

// commit commits b with pebble.Sync, turning pebble's fatal commit error
// (see Pebble) into an error wrapping errDBFailed. p.mu is held shared.
func (p *Pebble) commit(b *pebble.Batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatalPanic)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("%w: %s", errDBFailed, f.msg)
		}
	}()
	return b.Commit(pebble.Sync)
}

// afterFailure reopens the database if err says it failed; gen is the
// generation the failing call ran under. p.mu is not held.
func (p *Pebble) afterFailure(gen uint64, err error) {
	if errors.Is(err, errDBFailed) {
		p.reopen(gen, err)
	}
}

// reopen closes the database and opens it again from its files, unless
// another call did so since generation gen was seen.
func (p *Pebble) reopen(gen uint64, cause error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.gen != gen {
		return nil
	}
	p.gen++
	if p.db != nil {
		// Closing reports the failure again; what matters is that
		// the files are released for the reopen.
		if err := p.db.Close(); err != nil {
			p.log.Debug("closing the failed coordinator store", "err", err)
		}
		p.db = nil
	}
	db, err := pebble.Open(p.dir, p.pebbleOptions())
	if err != nil {
		p.log.Error("reopening the coordinator store failed; the next call tries again", "err", err, "cause", cause)
		return fmt.Errorf("store: reopen %s: %w", p.dir, err)
	}
	p.db = db
	if err := p.resumeLogs(); err != nil {
		db.Close()
		p.db = nil
		return err
	}
	if cause != nil {
		p.log.Warn("coordinator store reopened from its files after a failed write", "cause", cause)
	}
	return nil
}

// Apply commits recs as one atomic batch; see Pebble for what "durable"
// means under each sync policy. The records of each shard become one entry
// of that shard's log. Applies to the same shard are serialized, so that a
// shard's log order is its commit order (a fold relies on it); the
// coordinator has one writer per shard anyway, and Applies to different
// shards still share syncs.
func (p *Pebble) Apply(recs []group.Record) error {
	if len(recs) == 0 {
		return nil
	}
	gen, err := p.acquire()
	if err != nil {
		return err
	}
	err = p.applyLocked(recs)
	p.mu.RUnlock()
	p.afterFailure(gen, err)
	return err
}

func (p *Pebble) applyLocked(recs []group.Record) error {
	// Encode each shard's records into one buffer, in order. A batch
	// almost always holds one shard (the coordinator writes per shard).
	type entry struct {
		shard int
		buf   *[]byte
	}
	var one [1]entry
	entries := one[:0]
	for _, r := range recs {
		sh := ShardOf(r.Group, p.shards)
		i := 0
		for i < len(entries) && entries[i].shard != sh {
			i++
		}
		if i == len(entries) {
			entries = append(entries, entry{shard: sh, buf: scratchPool.Get().(*[]byte)})
			*entries[i].buf = (*entries[i].buf)[:0]
		}
		*entries[i].buf = appendLogRecord(*entries[i].buf, r)
	}
	defer func() {
		for _, e := range entries {
			scratchPool.Put(e.buf)
		}
	}()
	// Lock the shards' logs in shard order, so that Applies spanning
	// several shards cannot deadlock, and hold them until the commit is
	// visible: sequence numbers are taken in commit order.
	slices.SortFunc(entries, func(a, b entry) int { return a.shard - b.shard })
	for _, e := range entries {
		p.logs[e.shard].mu.Lock()
	}
	defer func() {
		for _, e := range entries {
			p.logs[e.shard].mu.Unlock()
		}
	}()
	b := p.db.NewBatch()
	defer b.Close()
	var key []byte
	for _, e := range entries {
		key = binary.BigEndian.AppendUint64(append(key[:0], logPrefix(e.shard)...), p.logs[e.shard].next)
		// The batch copies key and value into its own representation.
		if err := b.Set(key, *e.buf, nil); err != nil {
			return fmt.Errorf("store: batch: %w", err)
		}
	}
	if err := p.commit(b); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	for _, e := range entries {
		p.logs[e.shard].next++
		p.grewLocked(e.shard, int64(len(*e.buf)))
	}
	return nil
}

// grewLocked counts bytes appended to a shard's log and queues a fold when
// the log has grown enough and no fold of it is pending. The shard's log
// mutex is held.
func (p *Pebble) grewLocked(shard int, n int64) {
	l := &p.logs[shard]
	l.bytes += n
	if p.manualFold || l.bytes < p.foldBytes || l.folding {
		return
	}
	l.bytes, l.folding = 0, true
	p.foldq <- shard
}

// Load scans the shard's key range with one iterator: its folded records
// in key order, then its log in the order it was applied. A later record
// for the same key supersedes an earlier one; a tombstone deletes it.
func (p *Pebble) Load(shard int, fn func(group.Record) error) error {
	if err := checkShard(shard, p.shards); err != nil {
		return err
	}
	if _, err := p.acquire(); err != nil {
		return err
	}
	defer p.mu.RUnlock()
	it, err := p.db.NewIter(&pebble.IterOptions{
		LowerBound: shardPrefix(shard),
		UpperBound: shardPrefix(shard + 1),
	})
	if err != nil {
		return fmt.Errorf("store: load shard %d: %w", shard, err)
	}
	var logBytes int64
	next := uint64(0)
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("store: load shard %d: key %x: %w", shard, it.Key(), err)
		}
		key := it.Key()
		switch {
		case !isLogKey(key):
			var rec group.Record
			rec, err = decode(shard, key, v)
			if err == nil {
				err = fn(rec)
			} else {
				err = p.undecodable(err)
			}
		case len(key) != 3+8:
			err = p.undecodable(&UndecodableError{Shard: shard, Entry: bytes.Clone(key), Err: errMalformedLogKey})
		default:
			next = binary.BigEndian.Uint64(key[3:]) + 1
			logBytes += int64(len(v))
			err = decodeLogEntry(shard, key, v, fn, p.undecodable)
		}
		if err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: load shard %d: %w", shard, err)
	}
	// Appends continue after the last entry. An empty log may restart at
	// zero: the fold that emptied it deleted only keys that existed then,
	// and pebble orders a later write above an earlier range deletion.
	l := &p.logs[shard]
	l.mu.Lock()
	l.next = max(l.next, next)
	l.bytes = logBytes
	l.mu.Unlock()
	return nil
}

var errMalformedLogKey = errors.New("malformed log key")

// undecodable decides what Load does with a record that does not decode:
// fail (the default), or log it and go on (Options.SkipUndecodable).
func (p *Pebble) undecodable(err error) error {
	var ue *UndecodableError
	if !p.skipUndecodable || !errors.As(err, &ue) {
		return err
	}
	p.log.Warn("skipping a coordinator record that does not decode; it stays in the store",
		"shard", ue.Shard, "key", fmt.Sprintf("%x", ue.Key), "log_entry", fmt.Sprintf("%x", ue.Entry), "err", ue.Err)
	return nil
}

// Close closes the database. It waits for running Apply and Load calls.
func (p *Pebble) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	// Once closed is set no Apply queues a fold, and a queued fold
	// returns at once; let the folder and the syncer finish before the
	// database goes.
	p.closed = true
	p.mu.Unlock()
	close(p.foldq)
	<-p.folderDone
	close(p.stopSync)
	<-p.syncerDone
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.db == nil {
		return nil
	}
	err := p.db.Close()
	p.db = nil
	return err
}

// syncLoop fsyncs the WAL on every tick until Close.
func (p *Pebble) syncLoop(tick <-chan time.Time, stop func()) {
	defer close(p.syncerDone)
	defer stop()
	for {
		select {
		case <-tick:
			if err := p.fs.syncWAL(); err != nil {
				p.log.Error("fsync of the coordinator log failed", "err", err)
			}
		case <-p.stopSync:
			return
		}
	}
}

// WALSyncs returns how many times the WAL was synced (or, with Sync false,
// would have been). Comparing it with the number of Apply calls shows how
// many commits each sync carried.
func (p *Pebble) WALSyncs() int64 { return p.fs.syncs.Load() }

// walFS hands out WAL files that count syncs and, when sync is false, skip
// them. Pebble's WAL files, and only they, end in ".log". With interval set
// it keeps the open WAL files so syncWAL can fsync them on a timer, and
// fsyncs a WAL file before it is closed (when pebble moves to a new log), so
// no acknowledged record is left behind in a file the timer no longer sees.
type walFS struct {
	vfs.FS
	sync     bool
	interval bool
	syncs    atomic.Int64

	mu   sync.Mutex // held while syncing, so a file is not closed under a sync
	open map[*walFile]struct{}
}

func (fs *walFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	w := &walFile{File: f, fs: fs}
	if fs.interval {
		fs.mu.Lock()
		if fs.open == nil {
			fs.open = map[*walFile]struct{}{}
		}
		fs.open[w] = struct{}{}
		fs.mu.Unlock()
	}
	return w, nil
}

func (fs *walFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return fs.wrap(name, f, err)
}

func (fs *walFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return fs.wrap(newname, f, err)
}

func (fs *walFS) Unwrap() vfs.FS { return fs.FS }

// syncWAL fsyncs every open WAL file written since its last fsync.
func (fs *walFS) syncWAL() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var errs []error
	for f := range fs.open {
		if f.dirty.Swap(false) {
			errs = append(errs, f.File.Sync())
		}
	}
	return errors.Join(errs...)
}

type walFile struct {
	vfs.File
	fs    *walFS
	dirty atomic.Bool // written since the last real fsync (interval only)
}

func (f *walFile) Write(b []byte) (int, error) {
	f.dirty.Store(true)
	return f.File.Write(b)
}

func (f *walFile) WriteAt(b []byte, off int64) (int, error) {
	f.dirty.Store(true)
	return f.File.WriteAt(b, off)
}

func (f *walFile) Close() error {
	if f.fs.interval {
		f.fs.mu.Lock()
		delete(f.fs.open, f)
		var err error
		if f.dirty.Swap(false) {
			err = f.File.Sync()
		}
		f.fs.mu.Unlock()
		if err != nil {
			f.File.Close()
			return err
		}
	}
	return f.File.Close()
}

func (f *walFile) Sync() error {
	f.fs.syncs.Add(1)
	if !f.fs.sync {
		return nil
	}
	return f.File.Sync()
}

func (f *walFile) SyncData() error {
	f.fs.syncs.Add(1)
	if !f.fs.sync {
		return nil
	}
	return f.File.SyncData()
}

func (f *walFile) SyncTo(length int64) (bool, error) {
	f.fs.syncs.Add(1)
	if !f.fs.sync {
		// Claiming a full sync keeps pebble from following up with one.
		return true, nil
	}
	return f.File.SyncTo(length)
}

// pebbleLogger adapts slog to pebble's logger.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf is called by pebble on states it cannot continue from; it must not
// return.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble", "fatal", true)
	panic(fatalPanic{msg})
}
