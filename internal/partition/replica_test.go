package partition

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/partition/partitiontest"
)

// stored is a batch as a leader stored it: n records from base, stamped
// with epoch.
func stored(base int64, epoch int32, n int) []byte {
	b := plain(n, 1000+base, 0)
	batch.SetBaseOffset(b, base)
	batch.SetPartitionLeaderEpoch(b, epoch)
	return b
}

// header parses a stored batch's header.
func header(t testing.TB, b []byte) batch.Header {
	t.Helper()
	h, err := batch.Check(b)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// replicaBatches reads the whole log up to its log end through
// ReadReplica and returns its batches, checking their CRCs and that their
// offsets rise.
func replicaBatches(t testing.TB, l *Log) [][]byte {
	t.Helper()
	var out [][]byte
	off := l.LogStartOffset()
	for off < l.LogEndOffset() {
		data, err := l.ReadReplica(off, 700)
		if err != nil {
			t.Fatalf("read replica at %d: %v", off, err)
		}
		if len(data) == 0 {
			t.Fatalf("empty replica read at %d below the log end %d", off, l.LogEndOffset())
		}
		parts, err := batch.Split(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			if err := batch.VerifyCRC(p); err != nil {
				t.Fatal(err)
			}
			h := header(t, p)
			if h.LastOffset() < off {
				t.Fatalf("batch %d..%d read at %d", h.BaseOffset, h.LastOffset(), off)
			}
			off = h.LastOffset() + 1
			out = append(out, p)
		}
	}
	return out
}

// follow copies the leader's log into the follower through ReadReplica
// and AppendReplicated, a few batches at a time, as a fetcher does.
func follow(t testing.TB, leader, follower *Log) {
	t.Helper()
	for follower.LogEndOffset() < leader.LogEndOffset() {
		data, err := leader.ReadReplica(follower.LogEndOffset(), 400)
		if err != nil {
			t.Fatal(err)
		}
		leo, err := follower.AppendReplicated(data)
		if err != nil {
			t.Fatalf("append replicated at %d: %v", follower.LogEndOffset(), err)
		}
		if leo != follower.LogEndOffset() {
			t.Fatalf("AppendReplicated returned %d, log end %d", leo, follower.LogEndOffset())
		}
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestSingleNodeHighWatermarkIsLogEnd: without Replicated, the high
// watermark is the log end after appends (leader and replicated),
// truncations and reopens, and SetHighWatermark changes nothing.
func TestSingleNodeHighWatermarkIsLogEnd(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{SegmentBytes: 400})
	same := func(what string) {
		t.Helper()
		if l.HighWatermark() != l.LogEndOffset() {
			t.Fatalf("%s: high watermark %d, log end %d", what, l.HighWatermark(), l.LogEndOffset())
		}
	}
	same("empty")
	for i := range 6 {
		mustAppend(t, l, plain(2, int64(i), 0))
		same("append")
	}
	l.SetHighWatermark(3)
	l.SetHighWatermark(100)
	if l.HighWatermark() != 12 {
		t.Fatalf("SetHighWatermark moved a single node's high watermark to %d", l.HighWatermark())
	}
	if _, err := l.AppendReplicated(stored(12, 0, 3)); err != nil {
		t.Fatal(err)
	}
	same("replicated append")
	if err := l.TruncateTo(7); err != nil {
		t.Fatal(err)
	}
	same("truncation")
	if l.LogEndOffset() != 6 {
		t.Fatalf("log end %d after truncating inside the batch at 6", l.LogEndOffset())
	}
	l.Close()
	l = openT(t, dir, Options{SegmentBytes: 400})
	same("reopen")
	if cp := readCP(t, dir); cp.hasHW {
		t.Fatalf("a single node's checkpoint carries a high watermark: %+v", cp)
	}
	if raw, _ := os.ReadFile(filepath.Join(dir, checkpointName)); raw[4] != 2 {
		t.Fatalf("a single node wrote checkpoint version %d, want 2", raw[4])
	}
}

// TestReplicatedHighWatermark: a replica's high watermark moves only by
// SetHighWatermark (up, at most to the log end), bounds Read (a batch
// past it is not returned, offsets past it are out of range), not
// ReadReplica, and survives a reopen as checkpointed, never higher.
func TestReplicatedHighWatermark(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Replicated: true}
	l := openT(t, dir, opts)
	bs := [][]byte{plain(2, 1, 0), plain(3, 2, batch.CodecZstd), plain(1, 3, 0)}
	for _, b := range bs {
		mustAppend(t, l, b)
	}
	if l.LogEndOffset() != 6 || l.HighWatermark() != 0 {
		t.Fatalf("log end %d, high watermark %d after appends, want 6 and 0", l.LogEndOffset(), l.HighWatermark())
	}
	if data, err := l.Read(0, 1<<20, true); err != nil || len(data) != 0 || data == nil {
		t.Fatalf("read at the high watermark: %d bytes, %v", len(data), err)
	}
	if _, err := l.Read(1, 1<<20, true); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read past the high watermark: %v", err)
	}
	l.SetHighWatermark(5) // the last batch (5) starts at it
	if l.HighWatermark() != 5 {
		t.Fatalf("high watermark %d, want 5", l.HighWatermark())
	}
	data, err := l.Read(0, 1<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	if parts, _ := batch.Split(data); len(parts) != 2 || header(t, parts[1]).LastOffset() != 4 {
		t.Fatalf("read below the high watermark returned %d batches", len(parts))
	}
	if data, err := l.Read(2, 1<<20, false); err != nil || len(data) == 0 {
		t.Fatalf("read of the second batch: %v", err)
	}
	if data, err := l.Read(5, 1<<20, true); err != nil || len(data) != 0 {
		t.Fatalf("read at the high watermark: %d bytes, %v", len(data), err)
	}
	if got := replicaBatches(t, l); len(got) != 3 {
		t.Fatalf("ReadReplica read %d batches, want all 3", len(got))
	}
	if data, err := l.ReadReplica(6, 100); err != nil || len(data) != 0 {
		t.Fatalf("replica read at the log end: %d bytes, %v", len(data), err)
	}
	if _, err := l.ReadReplica(7, 100); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("replica read past the log end: %v", err)
	}
	// ReadReplica returns a first batch larger than the limit whole.
	if data, err := l.ReadReplica(2, 10); err != nil || len(data) != len(bs[1]) {
		t.Fatalf("replica read with a small limit: %d bytes, %v", len(data), err)
	}

	l.SetHighWatermark(2)
	l.SetHighWatermark(-1)
	if l.HighWatermark() != 5 {
		t.Fatalf("a lower high watermark was taken: %d", l.HighWatermark())
	}
	l.SetHighWatermark(100)
	if l.HighWatermark() != 6 {
		t.Fatalf("high watermark %d, want it clamped to the log end 6", l.HighWatermark())
	}

	// Checkpointed lazily: a crash before a checkpoint starts lower.
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if cp := readCP(t, dir); !cp.hasHW || cp.hw != 6 {
		t.Fatalf("checkpoint %+v, want high watermark 6", cp)
	}
	mustAppend(t, l, plain(2, 4, 0))
	l.SetHighWatermark(8)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	crash(l)
	l = openT(t, dir, opts)
	if l.HighWatermark() != 6 || l.LogEndOffset() != 8 {
		t.Fatalf("after a crash: high watermark %d, log end %d, want 6 (as checkpointed) and 8", l.HighWatermark(), l.LogEndOffset())
	}
	l.SetHighWatermark(8)
	l.Close()
	l = openT(t, dir, opts)
	if l.HighWatermark() != 8 {
		t.Fatalf("after a clean close: high watermark %d, want 8", l.HighWatermark())
	}
	l.Close()

	// A checkpoint from before (version 2, no high watermark) reads as 0.
	c := readCP(t, dir)
	c.hasHW, c.hw = false, 0
	if err := writeCheckpoint(dir, c); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(filepath.Join(dir, checkpointName)); raw[4] != 2 {
		t.Fatalf("wrote version %d", raw[4])
	}
	l = openT(t, dir, opts)
	if l.HighWatermark() != 0 || l.LogEndOffset() != 8 {
		t.Fatalf("from a version 2 checkpoint: high watermark %d, log end %d", l.HighWatermark(), l.LogEndOffset())
	}
}

// TestWaitOnHighWatermark: Wait fires when the high watermark moves (a
// consumer long-polling at it), when the log end moves (a follower), and
// on a truncation; not on a SetHighWatermark that changes nothing.
func TestWaitOnHighWatermark(t *testing.T) {
	l := openT(t, t.TempDir(), Options{Replicated: true})
	mustAppend(t, l, plain(2, 1, 0))
	ch := l.Wait()
	l.SetHighWatermark(0)
	if closed(ch) {
		t.Fatal("an unchanged high watermark fired Wait")
	}
	l.SetHighWatermark(2)
	if !closed(ch) {
		t.Fatal("a high watermark move did not fire Wait")
	}
	ch = l.Wait()
	l.SetHighWatermark(5) // clamped to 2: no move
	if closed(ch) {
		t.Fatal("a clamped high watermark fired Wait")
	}
	if _, err := l.AppendReplicated(stored(2, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if !closed(ch) {
		t.Fatal("a replicated append did not fire Wait")
	}
	ch = l.Wait()
	if err := l.TruncateTo(2); err != nil {
		t.Fatal(err)
	}
	if !closed(ch) {
		t.Fatal("a truncation did not fire Wait")
	}
}

// TestLeaderEpochStamping: appends stamp the newest assigned epoch (0 on
// a log nobody assigned one to, recorded at its first offset); AssignEpoch
// refuses older epochs and starts past the log end, takes the same epoch
// again as a no-op, and records a start below the log end at the log end.
func TestLeaderEpochStamping(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Replicated: true, SegmentBytes: 500}
	l := openT(t, dir, opts)
	if _, ok := l.Latest(); ok {
		t.Fatal("a new log has an epoch")
	}
	if _, err := os.Stat(filepath.Join(dir, epochFileName)); !os.IsNotExist(err) {
		t.Fatalf("a new log wrote an epoch file: %v", err)
	}
	mustAppend(t, l, plain(2, 1, 0))
	if got := l.LeaderEpochs(); !slices.Equal(got, [][2]int64{{0, 0}}) {
		t.Fatalf("epochs %v after the first append, want [{0 0}]", got)
	}
	if err := l.AssignEpoch(3, 2); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, plain(1, 2, 0), plain(2, 3, 0))
	if err := l.AssignEpoch(3, 5); err != nil {
		t.Fatalf("same epoch again: %v", err)
	}
	if err := l.AssignEpoch(2, 5); err == nil {
		t.Fatal("an older epoch was assigned")
	}
	if err := l.AssignEpoch(7, 6); err == nil {
		t.Fatal("an epoch starting past the log end was assigned")
	}
	if err := l.AssignEpoch(7, 4); err != nil {
		t.Fatal(err)
	}
	// Epoch 9 at the log end replaces 7, in which nothing was written.
	if err := l.AssignEpoch(9, 5); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, plain(3, 4, 0))
	want := [][2]int64{{0, 0}, {3, 2}, {9, 5}}
	if got := l.LeaderEpochs(); !slices.Equal(got, want) {
		t.Fatalf("epochs %v, want %v", got, want)
	}
	wantStamps := []int32{0, 3, 3, 9}
	check := func(l *Log) {
		t.Helper()
		var stamps []int32
		for _, b := range replicaBatches(t, l) {
			stamps = append(stamps, header(t, b).PartitionLeaderEpoch)
		}
		if !slices.Equal(stamps, wantStamps) {
			t.Fatalf("stamped epochs %v, want %v", stamps, wantStamps)
		}
		if got := l.LeaderEpochs(); !slices.Equal(got, want) {
			t.Fatalf("epochs %v, want %v", got, want)
		}
		if e, ok := l.Latest(); !ok || e != 9 {
			t.Fatalf("latest epoch %d %v", e, ok)
		}
		for _, c := range []struct {
			ask, found int32
			end        int64
			ok         bool
		}{{0, 0, 2, true}, {2, 0, 2, true}, {3, 3, 5, true}, {8, 3, 5, true}, {9, 9, l.LogEndOffset(), true}, {12, 9, l.LogEndOffset(), true}, {-1, 0, 0, false}} {
			found, end, ok := l.EndOffsetFor(c.ask)
			if found != c.found || end != c.end || ok != c.ok {
				t.Errorf("EndOffsetFor(%d) = %d, %d, %v; want %d, %d, %v", c.ask, found, end, ok, c.found, c.end, c.ok)
			}
		}
	}
	check(l)
	if raw, _ := os.ReadFile(filepath.Join(dir, epochFileName)); string(raw) != "0\n3\n0 0\n3 2\n9 5\n" {
		t.Fatalf("leader-epoch-checkpoint holds %q", raw)
	}
	l.Close()
	l = openT(t, dir, opts)
	check(l)
	// After the reopen, appends go on stamping the newest epoch.
	mustAppend(t, l, plain(1, 5, 0))
	wantStamps = append(wantStamps, 9)
	check(l)
}

// TestEpochCacheAsKafka: the cache's operations on the cases of Kafka's
// LeaderEpochFileCacheTest.
func TestEpochCacheAsKafka(t *testing.T) {
	mk := func(es ...epochEntry) *epochCache { return &epochCache{entries: es} }
	type q struct {
		ask, found int32
		end        int64
		ok         bool
	}
	for _, c := range []struct {
		name  string
		cache *epochCache
		leo   int64
		qs    []q
	}{
		{"empty", mk(), 10, []q{{0, 0, 0, false}, {5, 0, 0, false}}},
		{"latest gets the log end", mk(epochEntry{2, 6}, epochEntry{3, 8}, epochEntry{4, 11}), 20,
			[]q{{4, 4, 20, true}, {3, 3, 11, true}, {2, 2, 8, true}}},
		{"undefined epoch", mk(epochEntry{2, 6}), 10, []q{{-1, 0, 0, false}}},
		{"older than every epoch", mk(epochEntry{5, 11}), 20, []q{{4, 0, 0, false}}},
		{"no exact epoch: the one below, ending where the next starts", mk(epochEntry{0, 10}, epochEntry{2, 13}, epochEntry{4, 17}), 30,
			[]q{{1, 0, 13, true}, {3, 2, 17, true}, {5, 4, 30, true}}},
	} {
		for _, q := range c.qs {
			found, end, ok := c.cache.endOffsetFor(q.ask, c.leo)
			if found != q.found || end != q.end || ok != q.ok {
				t.Errorf("%s: endOffsetFor(%d) = %d, %d, %v; want %d, %d, %v", c.name, q.ask, found, end, ok, q.found, q.end, q.ok)
			}
		}
	}

	base := func() *epochCache { return mk(epochEntry{2, 6}, epochEntry{3, 8}, epochEntry{4, 11}) }
	for _, c := range []struct {
		name      string
		fromStart bool
		offset    int64
		want      []epochEntry
		changed   bool
	}{
		{"start before the first", true, 5, []epochEntry{{2, 6}, {3, 8}, {4, 11}}, false},
		{"start at the first", true, 6, []epochEntry{{2, 6}, {3, 8}, {4, 11}}, false},
		{"start at an epoch", true, 8, []epochEntry{{3, 8}, {4, 11}}, true},
		{"start inside an epoch", true, 9, []epochEntry{{3, 9}, {4, 11}}, true},
		{"start inside the last", true, 12, []epochEntry{{4, 12}}, true},
		{"end past the last start", false, 12, []epochEntry{{2, 6}, {3, 8}, {4, 11}}, false},
		{"end at the last start", false, 11, []epochEntry{{2, 6}, {3, 8}}, true},
		{"end inside an epoch", false, 9, []epochEntry{{2, 6}, {3, 8}}, true},
		{"end at an epoch", false, 8, []epochEntry{{2, 6}}, true},
		{"end before the first", false, 0, nil, true},
	} {
		cache := base()
		var changed bool
		if c.fromStart {
			changed = cache.truncateFromStart(c.offset)
		} else {
			changed = cache.truncateFromEnd(c.offset)
		}
		if !slices.Equal(cache.entries, c.want) || changed != c.changed {
			t.Errorf("%s: %v (changed %v), want %v (changed %v)", c.name, cache.entries, changed, c.want, c.changed)
		}
	}

	// A newer epoch at the newest one's start replaces it (no record was
	// written in it).
	cache := base()
	cache.add(epochEntry{6, 11})
	if want := []epochEntry{{2, 6}, {3, 8}, {6, 11}}; !slices.Equal(cache.entries, want) {
		t.Errorf("add at the newest start: %v, want %v", cache.entries, want)
	}
}

// TestEpochCacheFile: the cache survives reopens in Kafka's format; a log
// without the file (as groupd wrote before keeping one) gets it from the
// batch headers; an unreadable file stops the open naming it, or is set
// aside with a quarantine and rebuilt; the log start cuts it.
func TestEpochCacheFile(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Replicated: true, SegmentBytes: 400}
	l := openT(t, dir, opts)
	mustAppend(t, l, plain(2, 1, 0))
	if err := l.AssignEpoch(2, 2); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, plain(3, 2, 0))
	if err := l.AssignEpoch(4, 5); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		mustAppend(t, l, plain(2, int64(3+i), 0))
	}
	want := [][2]int64{{0, 0}, {2, 2}, {4, 5}}
	l.Close()
	path := filepath.Join(dir, epochFileName)
	if raw, _ := os.ReadFile(path); string(raw) != "0\n3\n0 0\n2 2\n4 5\n" {
		t.Fatalf("file holds %q", raw)
	}

	// Missing: rebuilt from the headers, and written back.
	os.Remove(path)
	lines := &logLines{}
	opts.Logger = slog.New(lines)
	l = openT(t, dir, opts)
	if got := l.LeaderEpochs(); !slices.Equal(got, want) {
		t.Fatalf("rebuilt epochs %v, want %v", got, want)
	}
	if _, _, ok := lines.find("rebuilt the leader-epoch cache from batch headers"); !ok {
		t.Fatal("the rebuild was not logged")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the rebuilt cache was not written: %v", err)
	}

	// DeleteRecords moves the start of the epoch covering the new log
	// start up and drops those below it.
	l.SetHighWatermark(l.LogEndOffset())
	if _, err := l.DeleteRecords(6); err != nil {
		t.Fatal(err)
	}
	want = [][2]int64{{4, 6}}
	if got := l.LeaderEpochs(); !slices.Equal(got, want) {
		t.Fatalf("epochs after DeleteRecords %v, want %v", got, want)
	}
	l.Close()
	if raw, _ := os.ReadFile(path); string(raw) != "0\n1\n4 6\n" {
		t.Fatalf("file after DeleteRecords holds %q", raw)
	}

	// Unreadable: refused, named, nothing changed.
	for _, bad := range []string{"0\n2\n4 6\n", "1\n1\n4 6\n", "0\n2\n4 6\n3 9\n", "0\n1\n4 06\n", "0\n1\n4 6", "0\n1\n-4 6\n", "0\n1\n4  6\n"} {
		os.WriteFile(path, []byte(bad), 0o644)
		before := partitiontest.Snapshot(t, dir)
		_, err := Open(dir, Options{Replicated: true})
		wantDamage(t, err, path, -1)
		partitiontest.Same(t, "after the refused open", before, partitiontest.Snapshot(t, dir))
	}
	// With a quarantine: moved aside, rebuilt, logged.
	qdir := filepath.Join(t.TempDir(), "q")
	lines = &logLines{}
	l = openT(t, dir, Options{Replicated: true, QuarantineDir: qdir, Logger: slog.New(lines)})
	if kept, err := os.ReadFile(filepath.Join(qdir, epochFileName)); err != nil || string(kept) != "0\n1\n4  6\n" {
		t.Fatalf("the unreadable file was not kept in the quarantine: %q %v", kept, err)
	}
	if _, _, ok := lines.find("moved an unreadable leader-epoch checkpoint to the quarantine; the cache is rebuilt from the batch headers"); !ok {
		t.Fatal("setting the file aside was not logged")
	}
	if got := l.LeaderEpochs(); !slices.Equal(got, [][2]int64{{4, 6}}) {
		t.Fatalf("rebuilt epochs %v", got)
	}
}

// TestSingleNodeLogEpochs: a log written by a single node before the
// leader-epoch cache existed (every batch stamped 0, no file) gets {0,
// log start}.
func TestSingleNodeLogEpochs(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{SegmentBytes: 300})
	for i := range 8 {
		mustAppend(t, l, plain(2, int64(i), 0))
	}
	if _, err := l.DeleteRecords(5); err != nil {
		t.Fatal(err)
	}
	l.Close()
	os.Remove(filepath.Join(dir, epochFileName))
	l = openT(t, dir, Options{SegmentBytes: 300})
	if got := l.LeaderEpochs(); !slices.Equal(got, [][2]int64{{0, 5}}) {
		t.Fatalf("epochs %v, want [{0 5}]", got)
	}
	for _, b := range replicaBatches(t, l) {
		if e := header(t, b).PartitionLeaderEpoch; e != 0 {
			t.Fatalf("a single node stamped epoch %d", e)
		}
	}
}

// TestAppendReplicated: a follower copying a leader's log through
// ReadReplica and AppendReplicated holds the same bytes, the same epochs
// and producer state that, once it leads, answers a retry as a duplicate
// and a gap as out of order; batches that do not continue the log, with a
// bad CRC or larger than a segment are refused without a trace.
func TestAppendReplicated(t *testing.T) {
	leader := openT(t, t.TempDir(), Options{Replicated: true, SegmentBytes: 1000})
	fdir := t.TempDir()
	fopts := Options{Replicated: true, SegmentBytes: 600}
	follower := openT(t, fdir, fopts)
	if err := leader.AssignEpoch(1, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		mustAppend(t, leader, idem(7, 0, int32(i*2), 2))
		mustAppend(t, leader, plain(1, int64(i), batch.CodecGzip))
	}
	if err := leader.AssignEpoch(3, leader.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		mustAppend(t, leader, idem(7, 0, int32(8+i), 1), idem(8, 2, int32(i), 1))
	}
	follow(t, leader, follower)
	lb, fb := replicaBatches(t, leader), replicaBatches(t, follower)
	if len(lb) != len(fb) {
		t.Fatalf("follower holds %d batches, leader %d", len(fb), len(lb))
	}
	for i := range lb {
		if !bytes.Equal(lb[i], fb[i]) {
			t.Fatalf("batch %d differs", i)
		}
	}
	if follower.Segments() < 3 {
		t.Fatalf("the follower did not roll: %d segments", follower.Segments())
	}
	if got, want := follower.LeaderEpochs(), leader.LeaderEpochs(); !slices.Equal(got, want) {
		t.Fatalf("follower epochs %v, leader %v", got, want)
	}
	if follower.HighWatermark() != 0 {
		t.Fatalf("AppendReplicated moved a replica's high watermark to %d", follower.HighWatermark())
	}

	refused := func(what string, data []byte, sentinel error) {
		t.Helper()
		leo, size := follower.LogEndOffset(), follower.Size()
		got, err := follower.AppendReplicated(data)
		if !errors.Is(err, sentinel) || got != leo || follower.LogEndOffset() != leo || follower.Size() != size {
			t.Fatalf("%s: %v (log end %d, want %d), want %v", what, err, got, leo, sentinel)
		}
	}
	end := follower.LogEndOffset()
	refused("a gap", stored(end+1, 3, 1), ErrUnexpectedAppendOffset)
	refused("an overlap", stored(end-1, 3, 1), ErrUnexpectedAppendOffset)
	refused("a second batch that does not continue the first", append(stored(end, 3, 2), stored(end+1, 3, 1)...), ErrUnexpectedAppendOffset)
	bad := stored(end, 3, 2)
	bad[len(bad)-1] ^= 1
	refused("a bad CRC", append(stored(end, 3, 1), bad...), batch.ErrCorrupt)
	refused("a torn batch", stored(end, 3, 2)[:70], batch.ErrCorrupt)
	refused("nothing", nil, batch.ErrInvalidRecord)
	big := stored(end, 3, 40)
	refused("a batch larger than a segment", big, ErrRecordListTooLarge)

	// The follower becomes leader: producer 7 and 8 go on in sequence.
	if err := follower.AssignEpoch(5, follower.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	if r := mustAppend(t, follower, idem(7, 0, 11, 1)); !r.Duplicate || r.BaseOffset != end-2 {
		t.Fatalf("retry of producer 7's last batch: %+v", r)
	}
	if r := mustAppend(t, follower, idem(8, 2, 2, 1)); !r.Duplicate {
		t.Fatalf("retry of producer 8's third batch: %+v", r)
	}
	if _, err := follower.Append([][]byte{idem(7, 0, 13, 1)}); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap in producer 7's sequence: %v", err)
	}
	if r := mustAppend(t, follower, idem(7, 0, 12, 1)); r.Duplicate || r.BaseOffset != end {
		t.Fatalf("producer 7's next batch: %+v", r)
	}
	if got := header(t, replicaBatches(t, follower)[len(fb)]).PartitionLeaderEpoch; got != 5 {
		t.Fatalf("the new leader stamped epoch %d, want 5", got)
	}

	// A reopen sees the same log, epochs and producers.
	epochs := follower.LeaderEpochs()
	follower.Close()
	follower = openT(t, fdir, fopts)
	if got := follower.LeaderEpochs(); !slices.Equal(got, epochs) {
		t.Fatalf("epochs after reopen %v, want %v", got, epochs)
	}
	if r := mustAppend(t, follower, idem(7, 0, 12, 1)); !r.Duplicate {
		t.Fatalf("retry after reopen: %+v", r)
	}
}

// TestAppendReplicatedCompacted: on a compacted topic a follower takes
// the gaps the leader's cleaner left, records them, and a reopen accepts
// them.
func TestAppendReplicatedCompacted(t *testing.T) {
	dir := t.TempDir()
	cfg := withConfig(DefaultConfig(), func(c *Config) { c.Compact, c.Delete, c.SegmentBytes = true, false, 400 })
	opts := Options{Replicated: true, Config: cfg}
	l := openT(t, dir, opts)
	gapped := append(append(stored(0, 1, 2), stored(5, 1, 2)...), stored(7, 1, 1)...)
	for i := range 4 {
		gapped = append(gapped, stored(int64(10+i*3), 1, 2)...)
	}
	if _, err := l.AppendReplicated(gapped); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendReplicated(stored(23, 2, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendReplicated(stored(20, 2, 1)); !errors.Is(err, ErrUnexpectedAppendOffset) {
		t.Fatalf("a batch below the log end: %v", err)
	}
	want := replicaBatches(t, l)
	if len(want) != 8 || l.LogEndOffset() != 24 || l.Segments() < 2 {
		t.Fatalf("%d batches, log end %d, %d segments", len(want), l.LogEndOffset(), l.Segments())
	}
	if cp := readCP(t, dir); cp.gapsBelow < 24 {
		t.Fatalf("gaps not recorded: %+v", cp)
	}
	crash(l)
	l = openT(t, dir, opts)
	if got := replicaBatches(t, l); len(got) != len(want) || l.LogEndOffset() != 24 {
		t.Fatalf("after reopening: %d batches, log end %d", len(got), l.LogEndOffset())
	}
	if got := l.LeaderEpochs(); !slices.Equal(got, [][2]int64{{1, 0}, {2, 23}}) {
		t.Fatalf("epochs %v", got)
	}
}

// FuzzLeaderEpochCheckpoint: the leader-epoch-checkpoint decoder takes
// only what the encoder writes, and Open either refuses a file naming it,
// changing nothing, or opens with a cache that holds together.
func FuzzLeaderEpochCheckpoint(f *testing.F) {
	f.Add([]byte("0\n0\n"))
	f.Add([]byte("0\n2\n0 0\n3 4\n"))
	f.Add([]byte("0\n3\n0 0\n3 4\n5 100\n"))
	f.Add([]byte("0\n1\n2147483647 9223372036854775807\n"))
	f.Add([]byte("0\n2\n3 4\n0 0\n"))
	f.Add([]byte("0\n1\n+1 4\n"))
	seg := append(stored(0, 0, 2), stored(2, 3, 2)...)
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := decodeEpochs(data)
		if err == nil {
			if !bytes.Equal(encodeEpochs(entries), data) {
				t.Fatalf("decoded %v does not encode back to %q", entries, data)
			}
			for i, e := range entries {
				if e.epoch < 0 || e.start < 0 || i > 0 && (e.epoch <= entries[i-1].epoch || e.start <= entries[i-1].start) {
					t.Fatalf("accepted %v", entries)
				}
			}
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "00000000000000000000.log"), seg, 0o644); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, epochFileName)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		before := partitiontest.Snapshot(t, dir)
		l, oerr := Open(dir, Options{Sync: SyncNever, Replicated: true})
		if err != nil {
			var d *DamageError
			if !errors.As(oerr, &d) || d.File != path {
				t.Fatalf("open with an unreadable epoch file: %v", oerr)
			}
			partitiontest.Same(t, "after the refused open", before, partitiontest.Snapshot(t, dir))
			return
		}
		if oerr != nil {
			t.Fatalf("open: %v", oerr)
		}
		defer l.Close()
		got := l.LeaderEpochs()
		for i, e := range got {
			if e[1] > l.LogEndOffset() || e[1] < l.LogStartOffset() || i > 0 && (e[0] <= got[i-1][0] || e[1] <= got[i-1][1]) {
				t.Fatalf("cache %v on a log of [%d, %d)", got, l.LogStartOffset(), l.LogEndOffset())
			}
		}
		if _, err := l.Append([][]byte{plain(1, 1, 0)}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReplicaClean: a replica's cleaner cleans only segments below its
// high watermark, and the batches it rewrites keep their leader epoch.
func TestReplicaClean(t *testing.T) {
	clk := newClock(50_000_000)
	cfg := withConfig(DefaultConfig(), func(c *Config) {
		c.SegmentBytes, c.Compact, c.Delete, c.MinCleanableDirtyRatio = 700, true, false, 0.01
	})
	l := openT(t, t.TempDir(), Options{Now: clk.now, Config: cfg, Replicated: true})
	if err := l.AssignEpoch(3, 0); err != nil {
		t.Fatal(err)
	}
	last := compactedLog(t, l, 12, 10, 0, clk.ms.Load())
	// Supersede half of a batch, so that the cleaner rewrites it.
	kv := func(k, v string) [][]byte { return [][]byte{[]byte(k), []byte(v)} }
	half := append(kv("h0", "a"), append(kv("h1", "a"), append(kv("h2", "a"), kv("h3", "a")...)...)...)
	mustAppend(t, l, keyed(clk.ms.Load(), batch.CodecNone, half...))
	r := mustAppend(t, l, keyed(clk.ms.Load(), batch.CodecNone, append(kv("h0", "b"), kv("h1", "b")...)...))
	last["h0"] = batch.Record{Offset: r.BaseOffset, Key: []byte("h0"), Value: []byte("b")}
	last["h1"] = batch.Record{Offset: r.BaseOffset + 1, Key: []byte("h1"), Value: []byte("b")}
	last["h2"] = batch.Record{Offset: r.BaseOffset - 2, Key: []byte("h2"), Value: []byte("a")}
	last["h3"] = batch.Record{Offset: r.BaseOffset - 1, Key: []byte("h3"), Value: []byte("a")}
	l.wmu.Lock()
	l.roll()
	l.wmu.Unlock()
	end := l.LogEndOffset()
	if res, err := l.Clean(NewKeyMap(1 << 20)); err != nil || res.Segments != 0 {
		t.Fatalf("clean with the high watermark at 0: %+v %v", res, err)
	}
	l.SetHighWatermark(end)
	res, err := l.Clean(NewKeyMap(1 << 20))
	if err != nil || res.Segments == 0 {
		t.Fatalf("clean: %+v %v", res, err)
	}
	l.SetHighWatermark(end) // reads of Read go to the high watermark
	checkCompacted(t, l, last, true, end)
	for _, b := range replicaBatches(t, l) {
		if e := header(t, b).PartitionLeaderEpoch; e != 3 {
			t.Fatalf("a cleaned batch carries leader epoch %d, want 3", e)
		}
	}
}

// TestReplicaRetention: a replica deletes only segments wholly below its
// high watermark, and the leader-epoch cache follows the log start.
func TestReplicaRetention(t *testing.T) {
	cfg := withConfig(DefaultConfig(), func(c *Config) { c.SegmentBytes = 300; c.RetentionBytes = 1; c.RetentionMs = -1 })
	l := openT(t, t.TempDir(), Options{Config: cfg, Replicated: true})
	for i := range 12 {
		if i == 6 {
			if err := l.AssignEpoch(2, l.LogEndOffset()); err != nil {
				t.Fatal(err)
			}
		}
		mustAppend(t, l, plain(2, int64(i), 0))
	}
	segs := l.Segments()
	if res, err := l.EnforceRetention(); err != nil || res.Segments != 0 {
		t.Fatalf("retention with the high watermark at 0: %+v %v", res, err)
	}
	views, _ := l.snapshot()
	l.SetHighWatermark(views[2].base)
	res, err := l.EnforceRetention()
	if err != nil || res.Segments != 2 || res.LogStart != views[2].base || l.Segments() != segs-2 {
		t.Fatalf("retention with the high watermark at the third segment: %+v %v", res, err)
	}
	want := [][2]int64{{0, views[2].base}, {2, 12}}
	if views[2].base >= 12 {
		want = [][2]int64{{2, views[2].base}}
	}
	if got := l.LeaderEpochs(); !slices.Equal(got, want) {
		t.Fatalf("epochs %v, want %v", got, want)
	}
}
