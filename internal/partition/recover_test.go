package partition

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/partition/partitiontest"
)

// multiSegment writes n two-record batches into small segments and closes
// the log cleanly; it returns the segment files, ascending.
func multiSegment(t *testing.T, dir string, n int) []string {
	t.Helper()
	l := openT(t, dir, Options{SegmentBytes: 300})
	for i := range n {
		mustAppend(t, l, plain(2, int64(i), 0))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) < 4 {
		t.Fatalf("%d segments, want at least 4", len(logs))
	}
	return logs
}

// breakSecondBatch sets a bad magic byte in the header of the second batch
// of a segment file and returns that batch's offset and byte position.
func breakSecondBatch(t *testing.T, path string) (offset, pos int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := batch.ParseHeader(data)
	data[h.Size()+16] = 9
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return h.LastOffset() + 1, h.Size()
}

func segBase(path string) int64 {
	b, _ := parseSegmentName(filepath.Base(path))
	return b
}

func wantDamage(t *testing.T, err error, file string, offset int64) {
	t.Helper()
	var d *DamageError
	if !errors.As(err, &d) || !errors.Is(err, ErrDamaged) {
		t.Fatalf("open: %v, want a DamageError", err)
	}
	if d.File != file || d.Offset != offset {
		t.Fatalf("damage reported in %s at offset %d, want %s at %d (%v)", d.File, d.Offset, file, offset, err)
	}
	if !strings.Contains(err.Error(), file) {
		t.Fatalf("error %q does not name %s", err, file)
	}
}

// TestDamageBelowRecoveryPointRefused: after a clean close everything is
// below the recovery point, so a broken header in an older segment, a
// missing segment or a shortened last segment stops Open with an error
// that names the file and offset, and nothing on disk changes.
func TestDamageBelowRecoveryPointRefused(t *testing.T) {
	cases := []struct {
		name string
		// damage returns the file and offset the error must name.
		damage func(t *testing.T, logs []string) (string, int64)
	}{
		{"bad-header-in-older-segment", func(t *testing.T, logs []string) (string, int64) {
			off, _ := breakSecondBatch(t, logs[1])
			return logs[1], off
		}},
		{"bad-header-in-last-segment", func(t *testing.T, logs []string) (string, int64) {
			off, _ := breakSecondBatch(t, logs[len(logs)-1])
			return logs[len(logs)-1], off
		}},
		{"missing-middle-segment", func(t *testing.T, logs []string) (string, int64) {
			os.Remove(logs[1])
			return logs[2], segBase(logs[1])
		}},
		{"missing-first-segment", func(t *testing.T, logs []string) (string, int64) {
			os.Remove(logs[0])
			return logs[1], 0
		}},
		{"last-segment-cut-short", func(t *testing.T, logs []string) (string, int64) {
			last := logs[len(logs)-1]
			data, _ := os.ReadFile(last)
			h, _ := batch.ParseHeader(data)
			os.WriteFile(last, data[:h.Size()], 0o644)
			return last, h.LastOffset() + 1
		}},
		{"torn-older-segment", func(t *testing.T, logs []string) (string, int64) {
			data, _ := os.ReadFile(logs[1])
			h, _ := batch.ParseHeader(data)
			os.WriteFile(logs[1], data[:h.Size()+10], 0o644)
			return logs[1], h.LastOffset() + 1
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			logs := multiSegment(t, dir, 12)
			file, off := c.damage(t, logs)
			before := partitiontest.Snapshot(t, dir)
			_, err := Open(dir, Options{SegmentBytes: 300})
			wantDamage(t, err, file, off)
			partitiontest.Same(t, "after the refused open", before, partitiontest.Snapshot(t, dir))
		})
	}
}

// TestTornTailAboveRecoveryPoint: in the last segment a bad batch past the
// recovery point is a torn write and is cut; the same damage below the
// recovery point is refused.
func TestTornTailAboveRecoveryPoint(t *testing.T) {
	for _, below := range []bool{false, true} {
		dir := t.TempDir()
		l, err := Open(dir, Options{Sync: SyncAlways})
		if err != nil {
			t.Fatal(err)
		}
		mustAppend(t, l, plain(2, 1, 0))
		mustAppend(t, l, plain(3, 2, 0)) // fsynced: recovery point 5
		if err := l.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.AppendDeferred([][]byte{plain(2, 3, 0)}); err != nil { // not fsynced
			t.Fatal(err)
		}
		if l.RecoveryPoint() != 5 {
			t.Fatalf("recovery point %d, want 5", l.RecoveryPoint())
		}
		crash(l)
		path := activeFile(t, dir)
		data, _ := os.ReadFile(path)
		first, _ := batch.ParseHeader(data)
		second, _ := batch.ParseHeader(data[first.Size():])
		if below {
			data[first.Size()+16] = 7 // the second batch's magic
		} else {
			data[len(data)-3] ^= 0xFF
		}
		os.WriteFile(path, data, 0o644)
		before := partitiontest.Snapshot(t, dir)
		l2, err := Open(dir, Options{})
		if below {
			wantDamage(t, err, path, 2)
			partitiontest.Same(t, "after the refused open", before, partitiontest.Snapshot(t, dir))
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if l2.HighWatermark() != 5 {
			t.Fatalf("hw %d after cutting the torn tail, want 5", l2.HighWatermark())
		}
		if fi, _ := os.Stat(path); fi.Size() != first.Size()+second.Size() {
			t.Fatalf("segment is %d bytes after recovery, want %d", fi.Size(), first.Size()+second.Size())
		}
		l2.Close()
	}
}

// TestQuarantineOlderSegment: with a quarantine directory the damaged
// segment is moved there, the rest is served, a read in the gap gets the
// next batch after it, appends continue past the old end, and the gap is
// remembered across later opens without the quarantine.
func TestQuarantineOlderSegment(t *testing.T) {
	dir := t.TempDir()
	qdir := filepath.Join(t.TempDir(), "quarantine")
	logs := multiSegment(t, dir, 12)
	l0 := openT(t, dir, Options{SegmentBytes: 300})
	before := readAll(t, l0)
	oldEnd := l0.HighWatermark()
	l0.Close()
	breakSecondBatch(t, logs[1])
	gapFrom, gapTo := segBase(logs[1]), segBase(logs[2])

	l, err := Open(dir, Options{SegmentBytes: 300, QuarantineDir: qdir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(logs[1]); !os.IsNotExist(err) {
		t.Fatalf("damaged segment still in the log: %v", err)
	}
	if _, err := os.Stat(filepath.Join(qdir, filepath.Base(logs[1]))); err != nil {
		t.Fatalf("damaged segment not in the quarantine: %v", err)
	}
	if l.LogStartOffset() != 0 || l.HighWatermark() != oldEnd {
		t.Fatalf("offsets [%d, %d) after quarantine, want [0, %d)", l.LogStartOffset(), l.HighWatermark(), oldEnd)
	}
	got := readGapped(t, l, 0)
	var want [][]byte
	for _, b := range before {
		if h, _ := batch.ParseHeader(b); h.BaseOffset < gapFrom || h.BaseOffset >= gapTo {
			want = append(want, b)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d batches served, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("batch %d differs", i)
		}
	}
	data, err := l.Read(gapFrom+1, 1000, true)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := batch.ParseHeader(data); err != nil || h.BaseOffset != gapTo {
		t.Fatalf("read in the gap gave batch %d (%v), want %d", h.BaseOffset, err, gapTo)
	}
	if r := mustAppend(t, l, plain(1, 99, 0)); r.BaseOffset != oldEnd {
		t.Fatalf("append at %d, want %d", r.BaseOffset, oldEnd)
	}
	l.Close()

	l2, err := Open(dir, Options{SegmentBytes: 300})
	if err != nil {
		t.Fatalf("reopen after quarantine, without it: %v", err)
	}
	if n := len(readGapped(t, l2, 0)); n != len(want)+1 {
		t.Fatalf("%d batches after reopen, want %d", n, len(want)+1)
	}
	l2.Close()
}

// readGapped reads every batch from the log start on, allowing gaps; a
// gap at the end of the log reads as empty. CRCs are checked from offset
// crcFrom on.
func readGapped(t *testing.T, l *Log, crcFrom int64) [][]byte {
	t.Helper()
	var out [][]byte
	for off := l.LogStartOffset(); off < l.HighWatermark(); {
		data, err := l.Read(off, 3000, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) == 0 {
			break
		}
		parts, err := batch.Split(data)
		if err != nil || len(parts) == 0 {
			t.Fatalf("read at %d: %d batches, %v", off, len(parts), err)
		}
		for _, p := range parts {
			h, _ := batch.ParseHeader(p)
			if err := batch.VerifyCRC(p); err != nil && h.BaseOffset >= crcFrom {
				t.Fatal(err)
			}
			if h.BaseOffset < off {
				t.Fatalf("batch %d read at %d", h.BaseOffset, off)
			}
			off = h.LastOffset() + 1
			out = append(out, p)
		}
	}
	return out
}

// TestQuarantineFirstSegment: setting the first segment aside moves the
// log start; reads below it are out of range.
func TestQuarantineFirstSegment(t *testing.T) {
	dir := t.TempDir()
	logs := multiSegment(t, dir, 12)
	breakSecondBatch(t, logs[0])
	l, err := Open(dir, Options{SegmentBytes: 300, QuarantineDir: filepath.Join(dir, "q")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.LogStartOffset() != segBase(logs[1]) {
		t.Fatalf("log start %d, want %d", l.LogStartOffset(), segBase(logs[1]))
	}
	if _, err := l.Read(0, 1000, true); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below the new start: %v", err)
	}
	readAll(t, l)
}

// TestQuarantineLastSegmentNeverReusesOffsets: when the last segment is
// damaged below a recovery point that lags the log end (a crash with
// unsynced appends), the new segment starts past every offset the moved
// segment may have given out, found from the batches still readable past
// the damage, and idempotent producers continue their sequences.
func TestQuarantineLastSegmentNeverReusesOffsets(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{Sync: SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	var seq int32
	for range 3 {
		mustAppend(t, l, idem(7, 0, seq, 2))
		seq += 2
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		mustAppend(t, l, idem(7, 0, seq, 2))
		seq += 2
	}
	oldEnd := l.HighWatermark()
	if l.RecoveryPoint() != 6 || oldEnd != 12 {
		t.Fatalf("recovery point %d, end %d", l.RecoveryPoint(), oldEnd)
	}
	crash(l)
	path := activeFile(t, dir)
	off, _ := breakSecondBatch(t, path)

	_, err = Open(dir, Options{})
	wantDamage(t, err, path, off)

	l2, err := Open(dir, Options{QuarantineDir: filepath.Join(dir, "q")})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if l2.HighWatermark() < oldEnd {
		t.Fatalf("log end %d after quarantine, below the old end %d", l2.HighWatermark(), oldEnd)
	}
	r, err := l2.Append([][]byte{idem(7, 0, seq, 1)})
	if err != nil {
		t.Fatalf("producer's next sequence after quarantine: %v", err)
	}
	if r.BaseOffset < oldEnd {
		t.Fatalf("append at %d reuses an offset below the old end %d", r.BaseOffset, oldEnd)
	}
	if r, err := l2.Append([][]byte{idem(7, 0, seq-2, 2)}); err != nil || !r.Duplicate {
		t.Fatalf("retry of a batch salvaged from the moved segment: %+v %v", r, err)
	}
}

// TestRecoveryPointAndCheckpoint: the recovery point follows fsyncs, not
// appends; Checkpoint and Close persist it; a clean close puts it at the
// log end; a roll checkpoints the new segment's base.
func TestRecoveryPointAndCheckpoint(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{Sync: SyncNever, SegmentBytes: 300})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, plain(2, 1, 0))
	if l.RecoveryPoint() != 0 {
		t.Fatalf("recovery point %d before any fsync", l.RecoveryPoint())
	}
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if cp := readCP(t, dir); cp.recoveryPoint != 0 {
		t.Fatalf("checkpoint says %d", cp.recoveryPoint)
	}
	for i := range 6 {
		mustAppend(t, l, plain(2, int64(i), 0))
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	lastBase := segBase(logs[len(logs)-1])
	if len(logs) < 2 || readCP(t, dir).recoveryPoint != lastBase {
		t.Fatalf("after %d segments the checkpoint says %d, want the last base %d", len(logs), readCP(t, dir).recoveryPoint, lastBase)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if l.RecoveryPoint() != l.HighWatermark() {
		t.Fatalf("recovery point %d after Sync, hw %d", l.RecoveryPoint(), l.HighWatermark())
	}
	mustAppend(t, l, plain(1, 9, 0))
	hw := l.HighWatermark()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if cp := readCP(t, dir); cp.recoveryPoint != hw {
		t.Fatalf("checkpoint after Close says %d, want %d", cp.recoveryPoint, hw)
	}
}

func readCP(t *testing.T, dir string) checkpoint {
	t.Helper()
	cp, ok, err := readCheckpoint(dir)
	if err != nil || !ok {
		t.Fatalf("checkpoint: %v %v", ok, err)
	}
	return cp
}

// TestUnreadableCheckpointRefused: a checkpoint that does not decode is
// damage, named, not a reason to guess.
func TestUnreadableCheckpointRefused(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	mustAppend(t, l, plain(1, 1, 0))
	l.Close()
	path := filepath.Join(dir, checkpointName)
	raw, _ := os.ReadFile(path)
	raw[len(raw)-1] ^= 1
	os.WriteFile(path, raw, 0o644)
	_, err := Open(dir, Options{})
	wantDamage(t, err, path, -1)

	// With a quarantine it is moved aside and the log is checked as one
	// without a checkpoint.
	qdir := filepath.Join(t.TempDir(), "q")
	l2, err := Open(dir, Options{QuarantineDir: qdir})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if kept, err := os.ReadFile(filepath.Join(qdir, checkpointName)); err != nil || !bytes.Equal(kept, raw) {
		t.Fatalf("unreadable checkpoint not kept in the quarantine: %v", err)
	}
	if n := len(readAll(t, l2)); n != 1 {
		t.Fatalf("%d batches after setting the checkpoint aside", n)
	}
}

func TestCheckpointEncoding(t *testing.T) {
	c := checkpoint{logStart: 3, recoveryPoint: 90}
	c.addGap(40, 50)
	c.addGap(10, 20)
	c.addGap(20, 25)
	c.addGap(1, 2) // below the log start
	if want := []offsetRange{{10, 25}, {40, 50}}; len(c.gaps) != 2 || c.gaps[0] != want[0] || c.gaps[1] != want[1] {
		t.Fatalf("gaps %v, want %v", c.gaps, want)
	}
	got, err := decodeCheckpoint(c.encode())
	if err != nil || !got.equal(c) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	bad := c.encode()
	binary.BigEndian.PutUint32(bad[21:], 3)
	if _, err := decodeCheckpoint(bad); err == nil {
		t.Fatal("wrong gap count accepted")
	}
}

func FuzzCheckpoint(f *testing.F) {
	f.Add(checkpoint{}.encode())
	c := checkpoint{logStart: 5, recoveryPoint: 100, gaps: []offsetRange{{10, 20}, {30, 40}}}
	f.Add(c.encode())
	f.Add([]byte("GDRC\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeCheckpoint(data)
		if err != nil {
			return
		}
		if !bytes.Equal(c.encode(), data) {
			t.Fatalf("decoded %+v does not encode back to the input", c)
		}
		if c.recoveryPoint < c.logStart || c.logStart < 0 {
			t.Fatalf("accepted %+v", c)
		}
	})
}
