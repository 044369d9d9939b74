package store

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/store/storetest"
)

// syncCountFS counts the fsyncs that reach WAL files below the store's own
// wrapper, i.e. the ones that really happen.
type syncCountFS struct {
	vfs.FS
	walSyncs atomic.Int64
}

func (fs *syncCountFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &syncCountFile{File: f, n: &fs.walSyncs}, nil
}

func (fs *syncCountFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *syncCountFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	return fs.wrap(name, f, err)
}

type syncCountFile struct {
	vfs.File
	n *atomic.Int64
}

func (f *syncCountFile) Sync() error     { f.n.Add(1); return f.File.Sync() }
func (f *syncCountFile) SyncData() error { f.n.Add(1); return f.File.SyncData() }
func (f *syncCountFile) SyncTo(n int64) (bool, error) {
	f.n.Add(1)
	return f.File.SyncTo(n)
}

// manualWALTicker replaces the interval syncer's ticker with a channel the
// test sends on. The channel is unbuffered, so a send returns once the
// syncer took the tick; tick sends twice, and the second send returns only
// after the syncer finished the first tick's work.
func manualWALTicker(t *testing.T) (tick func()) {
	t.Helper()
	ch := make(chan time.Time)
	old := walTickerFor
	walTickerFor = func(time.Duration) (<-chan time.Time, func()) { return ch, func() {} }
	t.Cleanup(func() { walTickerFor = old })
	return func() {
		ch <- time.Time{}
		ch <- time.Time{}
	}
}

func TestPebbleIntervalSyncsWALPerTickNotPerApply(t *testing.T) {
	tick := manualWALTicker(t)
	fs := &syncCountFS{FS: vfs.NewMem()}
	s, err := OpenPebble("db", Options{Shards: 2, SyncInterval: time.Second, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := fs.walSyncs.Load()
	for i := range 20 {
		if err := s.Apply([]group.Record{offsetRec("g", "t", 0, int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if n := fs.walSyncs.Load() - before; n != 0 {
		t.Fatalf("%d WAL fsyncs for 20 Applies under interval; want none until the tick", n)
	}
	if s.WALSyncs() < 20 {
		t.Fatalf("pebble asked for %d syncs for 20 Applies; the counter should see each request", s.WALSyncs())
	}
	tick()
	if n := fs.walSyncs.Load() - before; n != 1 {
		t.Fatalf("%d WAL fsyncs after one tick, want 1", n)
	}
	tick()
	if n := fs.walSyncs.Load() - before; n != 1 {
		t.Fatalf("%d WAL fsyncs after a tick with nothing written, want still 1", n)
	}
	if err := s.Apply([]group.Record{metaRec("g", 1)}); err != nil {
		t.Fatal(err)
	}
	tick()
	if n := fs.walSyncs.Load() - before; n != 2 {
		t.Fatalf("%d WAL fsyncs after a write and a tick, want 2", n)
	}
}

// TestPebblePowerLossPerSyncPolicy takes a crash clone of an in-memory
// filesystem (what a power loss leaves: only what was fsynced) after
// acknowledged Applies under each policy.
func TestPebblePowerLossPerSyncPolicy(t *testing.T) {
	for _, c := range []struct {
		name     string
		opts     Options
		tick     bool
		survives bool
	}{
		{"always", Options{Sync: true}, false, true},
		{"interval before its tick", Options{SyncInterval: time.Second}, false, false},
		{"interval after its tick", Options{SyncInterval: time.Second}, true, true},
		{"never", Options{}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tick := manualWALTicker(t)
			mem := vfs.NewCrashableMem()
			opts := c.opts
			opts.Shards, opts.FS = 1, mem
			s, err := OpenPebble("db", opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Apply([]group.Record{offsetRec("g", "t", 0, 42)}); err != nil {
				t.Fatal(err)
			}
			if c.tick {
				tick()
			}
			clone := mem.CrashClone(vfs.CrashCloneCfg{})
			s.Close()
			s2, err := OpenPebble("db", Options{Shards: 1, FS: clone})
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			got := loadAll(t, s2, 1)[0]
			if survived := len(got) == 1; survived != c.survives {
				t.Fatalf("after power loss: %d records, want survival %v", len(got), c.survives)
			}
		})
	}
}

// TestPebbleFailedWALWriteReopens: pebble cannot go on after a failed WAL
// write or fsync; the store fails that Apply, reopens the database from its
// files and goes on. A batch whose write failed is gone; one whose fsync
// failed was written and is kept, durably; neither is overwritten by the
// next Apply.
func TestPebbleFailedWALWriteReopens(t *testing.T) {
	for _, c := range []struct {
		name string
		mode int
		kept bool
	}{{"write fails", storetest.FailWrite, false}, {"fsync fails", storetest.FailSync, true}} {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			fault := &storetest.WALFaults{}
			var logs bytes.Buffer
			s, err := OpenPebble("db", Options{Shards: 1, Sync: true, FS: errorfs.Wrap(mem, fault),
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Apply([]group.Record{offsetRec("g", "t", 0, 1)}); err != nil {
				t.Fatal(err)
			}
			fault.Arm(c.mode)
			err = s.Apply([]group.Record{offsetRec("g", "t", 1, 2)})
			if !errors.Is(err, errDBFailed) {
				t.Fatalf("Apply with a failing WAL = %v, want a database failure", err)
			}
			if !strings.Contains(logs.String(), "reopened") {
				t.Errorf("no log line about the reopen:\n%s", logs.String())
			}
			if err := s.Apply([]group.Record{offsetRec("g", "t", 2, 3)}); err != nil {
				t.Fatalf("Apply after the reopen: %v", err)
			}
			want := map[int32]int64{0: 1, 2: 3}
			if c.kept {
				want[1] = 2
			}
			check := func(s Store, when string) {
				got := map[int32]int64{}
				for _, r := range loadAll(t, s, 1)[0] {
					got[r.Partition] = r.Offset.Offset
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s: offsets %v, want %v", when, got, want)
				}
			}
			check(s, "after the reopen")
			clone := mem.CrashClone(vfs.CrashCloneCfg{})
			s2, err := OpenPebble("db", Options{Shards: 1, FS: clone})
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			check(s2, "after a power loss")
		})
	}
}

func TestPebbleUndecodableRecordFailsOrIsSkipped(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenPebble(dir, Options{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	good := []group.Record{offsetRec("g", "t", 0, 5), metaRec("g", 2)}
	if err := s.Apply(good); err != nil {
		t.Fatal(err)
	}
	badFolded := storeKey(offsetRec("g", "t", 9, 0), 1)
	if err := s.db.Set(badFolded, []byte{0, 7, 1}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	// A log entry whose second record has a value of an unknown version.
	bad := offsetRec("g", "t", 3, 1)
	entry := appendLogRecord(nil, offsetRec("g", "t", 1, 8))
	entry = appendSized(entry, bad.AppendKey)
	entry = appendSized(entry, func(b []byte) []byte { return append(b, 0, 99) })
	entry = appendLogRecord(entry, offsetRec("g", "t", 2, 9))
	if err := s.db.Set(logKey(0, 100), entry, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = OpenPebble(dir, Options{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Load(0, func(group.Record) error { return nil })
	var ue *UndecodableError
	if !errors.As(err, &ue) || !bytes.Equal(ue.Key, badFolded) || !strings.Contains(err.Error(), fmt.Sprintf("%x", badFolded)) {
		t.Fatalf("Load = %v, want an *UndecodableError naming key %x", err, badFolded)
	}
	s.Close()

	var logs bytes.Buffer
	s, err = OpenPebble(dir, Options{Shards: 1, SkipUndecodable: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := map[int32]int64{}
	if err := s.Load(0, func(r group.Record) error {
		if r.Type == group.RecordOffsetCommit {
			got[r.Partition] = r.Offset.Offset
		}
		return nil
	}); err != nil {
		t.Fatalf("Load skipping undecodable records: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(map[int32]int64{0: 5, 1: 8, 2: 9}) {
		t.Fatalf("loaded offsets %v; want every decodable record, the log entry's after the bad one too", got)
	}
	for _, k := range [][]byte{badFolded, bad.Key()} {
		if !strings.Contains(logs.String(), fmt.Sprintf("%x", k)) {
			t.Errorf("no log line names skipped key %x:\n%s", k, logs.String())
		}
	}
	// Skipping deletes nothing.
	if _, closer, err := s.db.Get(badFolded); err != nil {
		t.Fatalf("the skipped record is gone from the store: %v", err)
	} else {
		closer.Close()
	}
}

// TestPebbleManualFold: with ManualFold the log grows until Fold is
// called, and Load gives the same records before and after.
func TestPebbleManualFold(t *testing.T) {
	s, err := OpenPebble("db", Options{Shards: 1, FoldBytes: 64, ManualFold: true, DisableCompactions: true, FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 50 {
		if err := s.Apply([]group.Record{offsetRec("g", "t", int32(i%5), int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if n := logEntries(t, s, 0); n != 50 {
		t.Fatalf("%d log entries before Fold, want 50 (no background fold)", n)
	}
	before := loadAll(t, s, 1)
	if err := s.Fold(0); err != nil {
		t.Fatal(err)
	}
	if n := logEntries(t, s, 0); n != 0 {
		t.Fatalf("%d log entries after Fold, want 0", n)
	}
	if after := loadAll(t, s, 1); !reflect.DeepEqual(after, before) {
		t.Fatalf("Fold changed what Load returns:\n%+v\n%+v", before, after)
	}
}

// TestPebbleConcurrentFailuresReopenOnce: Applies of several shards failing
// on the same broken WAL reopen the database once between them, and the
// store serves afterwards.
func TestPebbleConcurrentFailuresReopenOnce(t *testing.T) {
	fault := &storetest.WALFaults{}
	var logs bytes.Buffer
	var logMu sync.Mutex
	s, err := OpenPebble("db", Options{Shards: 4, Sync: true, FS: errorfs.Wrap(vfs.NewMem(), fault),
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fault.Arm(storetest.FailSync)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			s.Apply([]group.Record{offsetRec(fmt.Sprintf("g%d", i), "t", 0, 1)})
		})
	}
	wg.Wait()
	logMu.Lock()
	reopens := strings.Count(logs.String(), "reopened")
	logMu.Unlock()
	if reopens != 1 {
		t.Fatalf("%d reopens for one failed fsync, want 1:\n%s", reopens, logs.String())
	}
	if err := s.Apply([]group.Record{offsetRec("g", "t", 0, 1)}); err != nil {
		t.Fatalf("Apply after the reopen: %v", err)
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestPebbleNoCompactionsNoStall: with compactions off, level 0 only
// grows, one file per memtable flush; writes must go on past the count at
// which pebble would wait for a compaction that never comes.
func TestPebbleNoCompactionsNoStall(t *testing.T) {
	s, err := OpenPebble("db", Options{Shards: 1, ManualFold: true, DisableCompactions: true, FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	const flushes = 30 // pebble's default stop is at 12 files
	done := make(chan error, 1)
	go func() {
		for i := range flushes {
			if err := s.Apply([]group.Record{offsetRec("g", "t", 0, int64(i))}); err != nil {
				done <- err
				return
			}
			// Folding rewrites the same keys each time, so that every
			// flushed file overlaps the others and stacks on them.
			if err := s.Fold(0); err != nil {
				done <- err
				return
			}
			if err := s.db.Flush(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		// Not closed: closing waits for the stalled write.
		t.Fatalf("writes stalled (hang guard); read amplification %d", s.db.Metrics().ReadAmp())
	}
	defer s.Close()
	if got := s.db.Metrics().ReadAmp(); got < flushes {
		t.Fatalf("read amplification %d after %d overlapping flushes: compactions ran", got, flushes)
	}
}
