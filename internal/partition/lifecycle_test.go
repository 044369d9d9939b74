package partition

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/batch/batchtest"
)

// clock is a virtual clock for Options.Now, in Unix milliseconds.
type clock struct{ ms atomic.Int64 }

func newClock(ms int64) *clock {
	c := &clock{}
	c.ms.Store(ms)
	return c
}

func (c *clock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// at builds a non-idempotent batch of n records stamped ts.
func at(ts int64, n int) []byte {
	recs := make([]batchtest.Record, n)
	for i := range recs {
		recs[i] = batchtest.Record{Value: []byte("0123456789abcdef")}
	}
	return batchtest.Build(batchtest.NonIdempotent(ts, recs...))
}

func segmentCount(t *testing.T, dir string) int {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	return len(logs)
}

func withConfig(c Config, edit func(*Config)) *Config {
	edit(&c)
	return &c
}

func TestAppendSizeLimits(t *testing.T) {
	l := openT(t, t.TempDir(), Options{Config: withConfig(DefaultConfig(), func(c *Config) {
		c.MaxMessageBytes = 250
		c.SegmentBytes = 280
	})})
	big := at(1, 10) // about 300 bytes
	_, err := l.Append([][]byte{big})
	if !errors.Is(err, ErrMessageTooLarge) || !strings.Contains(err.Error(), "max.message.bytes 250") {
		t.Fatalf("a %d-byte batch over max.message.bytes: %v", len(big), err)
	}
	cfg := l.Config()
	cfg.MaxMessageBytes = 1 << 20
	l.SetConfig(cfg)
	if _, err := l.Append([][]byte{big}); !errors.Is(err, ErrRecordListTooLarge) {
		t.Fatalf("a batch larger than a segment: %v", err)
	}
	if l.HighWatermark() != 0 {
		t.Fatalf("hw %d after refused appends", l.HighWatermark())
	}
}

func TestLogAppendTimeAndMaxTimestampStamped(t *testing.T) {
	clk := newClock(5_000)
	l := openT(t, t.TempDir(), Options{Now: clk.now, Config: withConfig(DefaultConfig(), func(c *Config) { c.LogAppendTime = true })})
	res := mustAppend(t, l, plain(3, 100, batch.CodecLZ4))
	if res.LogAppendTime != 5_000 {
		t.Fatalf("log append time %d", res.LogAppendTime)
	}
	cfg := l.Config()
	cfg.LogAppendTime = false
	l.SetConfig(cfg)
	// A header claiming a smaller maximum than its records hold is
	// corrected, as Kafka does.
	lying := plain(2, 200, 0)
	copy(lying[35:43], []byte{0, 0, 0, 0, 0, 0, 0, 1})
	batchtest.Fix(lying)
	mustAppend(t, l, lying)
	got := readAll(t, l)
	h0, _ := batch.Check(got[0])
	h1, _ := batch.Check(got[1])
	if !batch.IsLogAppendTime(h0.Attributes) || h0.MaxTimestamp != 5_000 || batch.VerifyCRC(got[0]) != nil {
		t.Fatalf("log append time batch: %+v", h0)
	}
	if batch.IsLogAppendTime(h1.Attributes) || h1.MaxTimestamp != 201 || batch.VerifyCRC(got[1]) != nil {
		t.Fatalf("corrected batch: %+v", h1)
	}
	recs := allRecords(t, l)
	if recs[0].Timestamp != 5_000 || recs[4].Timestamp != 201 {
		t.Fatalf("record timestamps %d, %d", recs[0].Timestamp, recs[4].Timestamp)
	}
}

func TestSegmentMsRolls(t *testing.T) {
	clk := newClock(1_000_000)
	dir := t.TempDir()
	l := openT(t, dir, Options{Now: clk.now, Config: withConfig(DefaultConfig(), func(c *Config) { c.SegmentMs = 60_000 })})
	mustAppend(t, l, at(1_000_000, 1))
	mustAppend(t, l, at(1_030_000, 1))
	if n := segmentCount(t, dir); n != 1 {
		t.Fatalf("%d segments within segment.ms", n)
	}
	// Record time, not the broker's clock, ages a segment.
	clk.advance(time.Hour)
	mustAppend(t, l, at(1_050_000, 1))
	if n := segmentCount(t, dir); n != 1 {
		t.Fatalf("%d segments: the broker's clock rolled a segment", n)
	}
	mustAppend(t, l, at(1_070_001, 1))
	if n := segmentCount(t, dir); n != 2 {
		t.Fatalf("%d segments after a batch more than segment.ms past the first", n)
	}
}

func TestDeleteRecords(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{SegmentBytes: 300})
	for i := range 10 {
		mustAppend(t, l, plain(2, int64(i), 0))
	}
	segs := segmentCount(t, dir)
	if _, err := l.DeleteRecords(21); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("past the high watermark: %v", err)
	}
	start, err := l.DeleteRecords(9)
	if err != nil || start != 9 || l.LogStartOffset() != 9 {
		t.Fatalf("DeleteRecords(9) = %d, %v; log start %d", start, err, l.LogStartOffset())
	}
	if _, err := l.Read(8, 1000, true); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below the log start: %v", err)
	}
	if data, err := l.Read(9, 1000, true); err != nil || len(data) == 0 {
		t.Fatalf("read at the log start: %d bytes, %v", len(data), err)
	}
	if n := segmentCount(t, dir); n >= segs {
		t.Fatalf("%d segments, had %d: none deleted", n, segs)
	}
	if start, _ := l.DeleteRecords(3); start != 9 {
		t.Fatalf("a lower offset moved the log start to %d", start)
	}
	l.Close()
	l = openT(t, dir, Options{SegmentBytes: 300})
	if l.LogStartOffset() != 9 || l.HighWatermark() != 20 {
		t.Fatalf("after reopen: log start %d, hw %d", l.LogStartOffset(), l.HighWatermark())
	}
	if start, err := l.DeleteRecords(-1); err != nil || start != 20 {
		t.Fatalf("DeleteRecords(-1) = %d, %v", start, err)
	}
	mustAppend(t, l, plain(1, 99, 0))
	if data, err := l.Read(20, 1000, true); err != nil || len(data) == 0 {
		t.Fatalf("read after deleting everything and appending: %v", err)
	}
}

// TestDeletionFinishedAfterCrash: a stop after the new log start was
// recorded but before the segments below it were deleted leaves them;
// the next open deletes them, as the checkpoint says.
func TestDeletionFinishedAfterCrash(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{SegmentBytes: 300})
	for i := range 10 {
		mustAppend(t, l, plain(2, int64(i), 0))
	}
	segs := segmentCount(t, dir)
	l.maintMu.Lock()
	if err := l.setLogStart(12); err != nil {
		t.Fatal(err)
	}
	l.maintMu.Unlock()
	crash(l)
	if n := segmentCount(t, dir); n != segs {
		t.Fatalf("%d segments before reopening, want all %d", n, segs)
	}
	l = openT(t, dir, Options{SegmentBytes: 300})
	if l.LogStartOffset() != 12 || segmentCount(t, dir) >= segs {
		t.Fatalf("log start %d, %d of %d segments left", l.LogStartOffset(), segmentCount(t, dir), segs)
	}
	first, _, _ := l.segmentFor(12)
	if first.base > 12 {
		t.Fatalf("the segment holding the log start was deleted (first segment %d)", first.base)
	}
}

func TestRetentionByTime(t *testing.T) {
	clk := newClock(10_000_000)
	dir := t.TempDir()
	cfg := withConfig(DefaultConfig(), func(c *Config) { c.SegmentBytes = 300; c.RetentionMs = 60_000 })
	l := openT(t, dir, Options{Now: clk.now, Config: cfg})
	for i := range 6 {
		mustAppend(t, l, plain(2, 10_000_000+int64(i)*1000, 0)) // old
	}
	clk.advance(2 * time.Minute)
	for i := range 6 {
		mustAppend(t, l, plain(2, clk.ms.Load()+int64(i), 0)) // new
	}
	res, err := l.EnforceRetention()
	if err != nil {
		t.Fatal(err)
	}
	if res.Segments == 0 || res.LogStart == 0 || res.LogStart > 12 || l.LogStartOffset() != res.LogStart {
		t.Fatalf("retention by time: %+v, log start %d", res, l.LogStartOffset())
	}
	// Only whole segments of old records go.
	for _, r := range allRecords(t, l) {
		if r.Offset < 12 && r.Timestamp >= 10_000_000+60_000 {
			t.Fatalf("record %+v", r)
		}
	}
	// Once everything is old, the active segment rolls and goes too:
	// the log keeps its end.
	clk.advance(time.Hour)
	if res, err = l.EnforceRetention(); err != nil || res.LogStart != 24 || l.HighWatermark() != 24 {
		t.Fatalf("everything expired: %+v, %v, hw %d", res, err, l.HighWatermark())
	}
	if r := mustAppend(t, l, plain(1, clk.ms.Load(), 0)); r.BaseOffset != 24 {
		t.Fatalf("append after retention at %d", r.BaseOffset)
	}
	l.Close()
	l = openT(t, dir, Options{Now: clk.now, Config: cfg})
	if l.LogStartOffset() != 24 || l.HighWatermark() != 25 {
		t.Fatalf("after reopen: log start %d, hw %d", l.LogStartOffset(), l.HighWatermark())
	}
}

func TestRetentionBySize(t *testing.T) {
	dir := t.TempDir()
	cfg := withConfig(DefaultConfig(), func(c *Config) { c.SegmentBytes = 300; c.RetentionBytes = 700; c.RetentionMs = -1 })
	l := openT(t, dir, Options{Config: cfg})
	for i := range 20 {
		mustAppend(t, l, plain(2, int64(i), 0))
	}
	before := l.Size()
	res, err := l.EnforceRetention()
	if err != nil {
		t.Fatal(err)
	}
	if l.Size() > 700+300 || l.Size() < 700-300 || res.Bytes != before-l.Size() {
		t.Fatalf("size %d (was %d) after retention to 700 bytes: %+v", l.Size(), before, res)
	}
	// Compact-only topics keep everything.
	c := *cfg
	c.Delete, c.Compact, c.RetentionBytes = false, true, 1
	l.SetConfig(c)
	if res, _ := l.EnforceRetention(); res.Segments != 0 {
		t.Fatalf("retention on a compact-only log: %+v", res)
	}
}

// TestProducerSnapshotStart: after a clean close Open takes producer state
// and sealed segments from the snapshot, reading no batch header (a byte
// broken inside an older segment behind an unchanged size and
// modification time goes unnoticed), while FullStartCheck reads them all.
// Duplicates are still found after the reopen.
func TestProducerSnapshotStart(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 400}
	l := openT(t, dir, opts)
	for i := range 12 {
		mustAppend(t, l, idem(7, 0, int32(i*2), 2))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "*.snapshot"))
	if len(snaps) != snapshotsKept {
		t.Fatalf("%d snapshots, want %d", len(snaps), snapshotsKept)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	_, pos := breakSecondBatchKeepTime(t, logs[1])

	l = openT(t, dir, opts)
	if l.HighWatermark() != 24 {
		t.Fatalf("hw %d", l.HighWatermark())
	}
	// The retry of the last batch is a duplicate: the producer state came
	// from the snapshot.
	if r := mustAppend(t, l, idem(7, 0, 22, 2)); !r.Duplicate || r.BaseOffset != 22 {
		t.Fatalf("retry after reopen: %+v", r)
	}
	l.Close()

	_, err := Open(dir, Options{SegmentBytes: 400, FullStartCheck: true})
	wantDamage(t, err, logs[1], segBase(logs[1])+2)
	var d *DamageError
	if errors.As(err, &d) && d.Position != pos {
		t.Fatalf("damage at byte %d, want %d", d.Position, pos)
	}
}

// breakSecondBatchKeepTime is breakSecondBatch that puts the file's
// modification time back, as silent corruption would.
func breakSecondBatchKeepTime(t *testing.T, path string) (int64, int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	off, pos := breakSecondBatch(t, path)
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	return off, pos
}

// TestProducerSnapshotAfterCrash: after a crash Open starts from the
// snapshot of the last roll and replays the batches after it; producer
// state covers both.
func TestProducerSnapshotAfterCrash(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 400}
	l := openT(t, dir, opts)
	for i := range 10 {
		mustAppend(t, l, idem(7, 0, int32(i), 1))
		mustAppend(t, l, idem(8, 0, int32(i), 1))
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	crash(l)
	l = openT(t, dir, opts)
	if l.snapshotAt == 0 || l.snapshotAt >= 20 {
		t.Fatalf("started from the snapshot at %d", l.snapshotAt)
	}
	for _, pid := range []int64{7, 8} {
		if r := mustAppend(t, l, idem(pid, 0, 9, 1)); !r.Duplicate {
			t.Fatalf("producer %d: retry of its last batch not a duplicate", pid)
		}
		if _, err := l.Append([][]byte{idem(pid, 0, 12, 1)}); !errors.Is(err, ErrOutOfOrderSequence) {
			t.Fatalf("producer %d: gap in sequence: %v", pid, err)
		}
	}
}

func TestProducerExpiry(t *testing.T) {
	clk := newClock(1000)
	l := openT(t, t.TempDir(), Options{Now: clk.now, ProducerIDExpiration: time.Hour})
	mustAppend(t, l, idem(7, 0, 0, 1)) // stamped 1000
	clk.advance(59 * time.Minute)
	if n := l.ExpireProducers(); n != 0 || l.Producers() != 1 {
		t.Fatalf("expired %d before the hour", n)
	}
	clk.advance(2 * time.Minute)
	if n := l.ExpireProducers(); n != 1 || l.Producers() != 0 {
		t.Fatalf("expired %d after the hour, %d left", n, l.Producers())
	}
	// Forgotten: any sequence is accepted, as from a new producer.
	if r := mustAppend(t, l, idem(7, 0, 40, 1)); r.Duplicate {
		t.Fatalf("append after expiry: %+v", r)
	}
}

func TestSnapshotEncoding(t *testing.T) {
	prods := map[int64]*producerEntry{
		3: {epoch: 1, lastTimestamp: 77, batches: []producerBatch{{0, 4, 10, 14}, {5, 5, 20, 20}}},
		9: {epoch: 0, lastTimestamp: -1},
	}
	segs := []segSummary{{base: 0, stats: segStats{size: 100, next: 10, maxTS: 5, maxTSOffset: 3, firstTS: 1}, entries: 1, modTime: 42}}
	raw := encodeSnapshot(30, prods, segs)
	ps, err := decodeSnapshot(raw)
	if err != nil || ps.offset != 30 || len(ps.producers) != 2 || ps.producers[3].batches[1].firstOffset != 20 ||
		ps.producers[3].lastTimestamp != 77 || ps.segments[0].modTime != 42 || ps.segments[0].stats.maxTSOffset != 3 {
		t.Fatalf("decoded %+v, %v", ps, err)
	}
	raw[10] ^= 1
	if _, err := decodeSnapshot(raw); err == nil {
		t.Fatal("a flipped byte decoded")
	}
}

func FuzzSnapshot(f *testing.F) {
	f.Add(encodeSnapshot(30, map[int64]*producerEntry{3: {epoch: 1, batches: []producerBatch{{0, 4, 10, 14}}}},
		[]segSummary{{base: 0, stats: segStats{size: 100, next: 10}, entries: 1}}))
	f.Add([]byte("GDPS\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := decodeSnapshot(data)
		if err != nil {
			return
		}
		var segs []segSummary
		for _, s := range ps.segments {
			segs = append(segs, s)
		}
		back, err := decodeSnapshot(encodeSnapshot(ps.offset, ps.producers, segs))
		if err != nil || back.offset != ps.offset || len(back.producers) != len(ps.producers) || len(back.segments) != len(ps.segments) {
			t.Fatalf("snapshot %+v does not survive a rewrite: %+v, %v", ps, back, err)
		}
	})
}
