package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

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
	// panic) but not the machine losing power.
	Sync bool
	// Logger receives pebble's messages (informational ones at Debug) and
	// the store's own. Nil discards them.
	Logger *slog.Logger
	// FoldBytes is how much a shard's log grows before it is folded
	// (DefaultFoldBytes if 0); see log.go.
	FoldBytes int64
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
// consistent; only the tail of the WAL is at the mercy of the page cache.
type Pebble struct {
	dir       string
	shards    int
	fs        *walFS
	log       *slog.Logger
	foldBytes int64

	logs       []shardLog // by shard
	foldq      chan int   // shards whose log is to be folded
	folderDone chan struct{}

	mu     sync.RWMutex // held shared by Apply and Load, exclusively by Close
	db     *pebble.DB
	closed bool
}

var _ Store = (*Pebble)(nil)

// scratchPool holds encoding buffers for Apply, which runs on several
// shards' writers at once.
var scratchPool = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// metaKey holds the shard count. Its prefix is above every shard's.
var metaKey = []byte("\xff\xffshards")

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
	fs := &walFS{FS: vfs.Default, sync: opts.Sync}
	db, err := pebble.Open(dir, &pebble.Options{
		FS:     fs,
		Logger: pebbleLogger{logger},
	})
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	if opts.FoldBytes <= 0 {
		opts.FoldBytes = DefaultFoldBytes
	}
	p := &Pebble{
		dir: dir, shards: opts.Shards, fs: fs, db: db, log: logger, foldBytes: opts.FoldBytes,
		logs: make([]shardLog, opts.Shards),
		// Room for every shard: a shard has at most one fold queued or
		// running, so Apply never blocks on the queue.
		foldq:      make(chan int, opts.Shards),
		folderDone: make(chan struct{}),
	}
	if err := p.checkShards(); err != nil {
		db.Close()
		return nil, err
	}
	go p.folder()
	return p, nil
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

// Shards returns the shard count keys are routed by.
func (p *Pebble) Shards() int { return p.shards }

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
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
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
	if err := b.Commit(pebble.Sync); err != nil {
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
	if l.bytes < p.foldBytes || l.folding {
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
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
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
		if isLogKey(key) {
			if len(key) != 3+8 {
				it.Close()
				return fmt.Errorf("store: shard %d: malformed log key %x", shard, key)
			}
			next = binary.BigEndian.Uint64(key[3:]) + 1
			logBytes += int64(len(v))
			err = decodeLogEntry(shard, key, v, fn)
		} else {
			var rec group.Record
			rec, err = decode(shard, key, v)
			if err == nil {
				err = fn(rec)
			}
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

// Close closes the database. It waits for running Apply and Load calls.
func (p *Pebble) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	// Once closed is set no Apply queues a fold, and a queued fold
	// returns at once; let the folder finish before the database goes.
	p.closed = true
	p.mu.Unlock()
	close(p.foldq)
	<-p.folderDone
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.db.Close()
}

// WALSyncs returns how many times the WAL was synced (or, with Sync false,
// would have been). Comparing it with the number of Apply calls shows how
// many commits each sync carried.
func (p *Pebble) WALSyncs() int64 { return p.fs.syncs.Load() }

// walFS hands out WAL files that count syncs and, when sync is false, skip
// them. Pebble's WAL files, and only they, end in ".log".
type walFS struct {
	vfs.FS
	sync  bool
	syncs atomic.Int64
}

func (fs *walFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &walFile{File: f, fs: fs}, nil
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

type walFile struct {
	vfs.File
	fs *walFS
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
	panic("pebble: " + msg)
}
