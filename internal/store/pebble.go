package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
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
	// Logger receives pebble's messages (informational ones at Debug).
	// Nil discards them.
	Logger *slog.Logger
}

// Pebble is a Store on cockroachdb/pebble.
//
// Every Apply is one pebble batch committed with pebble.Sync. Pebble's commit
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
	dir    string
	shards int
	fs     *walFS

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
	p := &Pebble{dir: dir, shards: opts.Shards, fs: fs, db: db}
	if err := p.checkShards(); err != nil {
		db.Close()
		return nil, err
	}
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
// means under each sync policy.
func (p *Pebble) Apply(recs []group.Record) error {
	if len(recs) == 0 {
		return nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	b := p.db.NewBatch()
	defer b.Close()
	// Keys and values are encoded into one reused buffer: the batch copies
	// them into its own representation, so per-record allocations would
	// only be garbage.
	sp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(sp)
	for _, r := range recs {
		buf := appendStoreKey((*sp)[:0], r, p.shards)
		klen := len(buf)
		var err error
		if r.Tombstone() {
			err = b.Delete(buf, nil)
		} else {
			buf = r.AppendValue(buf)
			err = b.Set(buf[:klen:klen], buf[klen:], nil)
		}
		*sp = buf
		if err != nil {
			return fmt.Errorf("store: batch: %w", err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

// Load scans the shard's key range.
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
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("store: load shard %d: key %x: %w", shard, it.Key(), err)
		}
		rec, err := decode(shard, it.Key(), v)
		if err == nil {
			err = fn(rec)
		}
		if err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: load shard %d: %w", shard, err)
	}
	return nil
}

// Close closes the database. It waits for running Apply and Load calls.
func (p *Pebble) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
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
