package partition

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/batch/batchtest"
	"github.com/groupd/groupd/internal/partition/partitiontest"
)

// logLines is a slog handler that keeps every record, for tests that
// check what a start logged and at which level.
type logLines struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (h *logLines) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logLines) WithGroup(string) slog.Handler            { return h }
func (h *logLines) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// find returns the attributes of the first record with message msg, and
// its level.
func (h *logLines) find(msg string) (map[string]string, slog.Level, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message != msg {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		return attrs, r.Level, true
	}
	return nil, 0, false
}

// maxLevel is the highest level logged.
func (h *logLines) maxLevel() slog.Level {
	h.mu.Lock()
	defer h.mu.Unlock()
	lvl := slog.LevelDebug
	for _, r := range h.recs {
		lvl = max(lvl, r.Level)
	}
	return lvl
}

// tailFixture is a one-segment log stopped by a crash whose recovery
// checkpoint lags its fsyncs, as between the broker's checkpoints (about
// one a minute) under --fsync=always: the checkpoint's recovery point is
// the end of batch 1, every batch after it was fsynced and acknowledged.
type tailFixture struct {
	dir, path string
	sent      [][]byte // the batches as the producer sent them
	stored    [][]byte // as they are in the segment file
	pos, off  []int64  // each batch's byte position and base offset
	end       int64    // the log end before the crash
}

const (
	fixtureBatches         = 6
	fixtureRecoveryBatches = 2 // batches below the checkpoint's recovery point
)

func newTailFixture(t *testing.T) *tailFixture {
	t.Helper()
	fx := &tailFixture{dir: t.TempDir()}
	l, err := Open(fx.dir, Options{Sync: SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	codecs := [fixtureBatches]batch.Codec{batch.CodecNone, batch.CodecZstd, batch.CodecNone, batch.CodecGzip, batch.CodecSnappy, batch.CodecNone}
	for i, c := range codecs {
		if i == fixtureRecoveryBatches {
			if err := l.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
		var recs []batchtest.Record
		for j := range 1 + i%3 {
			recs = append(recs, batchtest.Record{TimestampDelta: int64(j),
				Key: []byte(fmt.Sprintf("key-%d-%d", i, j)), Value: []byte(fmt.Sprintf("value %d.%d\twith a tab", i, j))})
		}
		recs[0].Key = nil // a null key
		s := batchtest.NonIdempotent(int64(1000+i), recs...)
		s.Codec = c
		b := batchtest.Build(s)
		r, err := l.Append([][]byte{b})
		if err != nil {
			t.Fatal(err)
		}
		fx.sent = append(fx.sent, b)
		fx.off = append(fx.off, r.BaseOffset)
	}
	fx.end = l.HighWatermark()
	if cp := readCP(t, fx.dir); cp.recoveryPoint != fx.off[fixtureRecoveryBatches] {
		t.Fatalf("checkpoint's recovery point %d, want %d", cp.recoveryPoint, fx.off[fixtureRecoveryBatches])
	}
	crash(l)
	fx.path = activeFile(t, fx.dir)
	data := fx.read(t)
	for p := int64(0); p < int64(len(data)); {
		h, err := batch.ParseHeader(data[p:])
		if err != nil {
			t.Fatal(err)
		}
		fx.pos = append(fx.pos, p)
		fx.stored = append(fx.stored, data[p:p+h.Size()])
		p += h.Size()
	}
	if len(fx.stored) != len(fx.sent) {
		t.Fatalf("%d batches in the file, %d sent", len(fx.stored), len(fx.sent))
	}
	return fx
}

func (fx *tailFixture) read(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(fx.path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func (fx *tailFixture) write(t *testing.T, data []byte) {
	t.Helper()
	if err := os.WriteFile(fx.path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// wantServed checks that l serves exactly the first n batches written,
// then whatever extra holds.
func (fx *tailFixture) wantServed(t *testing.T, l *Log, n int, extra ...[]byte) {
	t.Helper()
	got := readGapped(t, l, 0)
	want := append(append([][]byte(nil), fx.sent[:n]...), extra...)
	if len(got) != len(want) {
		t.Fatalf("%d batches served, want %d", len(got), len(want))
	}
	for i := range got {
		if !sameBatch(got[i], want[i]) {
			t.Fatalf("batch %d served differs from the one written", i)
		}
	}
}

// damagedBatch is the batch the tail tests damage: past the recovery
// point, with intact batches after it.
const damagedBatch = 3

// tailDamage are ways to damage batch damagedBatch of the fixture in
// place, leaving the batches after it intact.
var tailDamage = []struct {
	name   string
	damage func(data []byte, pos, size int64)
}{
	{"flipped-record-byte", func(d []byte, pos, size int64) { d[pos+size-3] ^= 0xFF }},
	{"bad-magic", func(d []byte, pos, _ int64) { d[pos+16] = 9 }},
	{"length-past-the-end", func(d []byte, pos, _ int64) { binary.BigEndian.PutUint32(d[pos+8:], 1<<30) }},
	{"length-too-short", func(d []byte, pos, _ int64) { binary.BigEndian.PutUint32(d[pos+8:], 60) }},
	{"zeroed-header", func(d []byte, pos, _ int64) { clear(d[pos : pos+batch.HeaderLen]) }},
	{"wrong-base-offset", func(d []byte, pos, _ int64) { binary.BigEndian.PutUint64(d[pos:], 1<<40) }},
}

// TestTornTailCutSilently: in the last segment past the recovery point, a
// bad batch with nothing intact behind it is a write the crash tore. The
// start cuts it with a warning, serves every batch before it and sets
// nothing aside, with or without a quarantine.
func TestTornTailCutSilently(t *testing.T) {
	last := fixtureBatches - 1
	cases := []struct {
		name string
		// damage edits the segment file and returns how many batches
		// survive.
		damage func(fx *tailFixture, data []byte) ([]byte, int)
	}{
		{"last-batch-cut-short", func(fx *tailFixture, d []byte) ([]byte, int) {
			return d[:fx.pos[last]+int64(len(fx.stored[last]))/2], last
		}},
		{"last-header-cut-short", func(fx *tailFixture, d []byte) ([]byte, int) { return d[:fx.pos[last]+20], last }},
		{"flipped-byte-in-last", func(fx *tailFixture, d []byte) ([]byte, int) { d[len(d)-2] ^= 1; return d, last }},
		{"garbage-after-last", func(fx *tailFixture, d []byte) ([]byte, int) {
			return append(d, bytes.Repeat([]byte{0xAB, 2, 0, 0, 0, 0x40}, 300)...), last + 1
		}},
		{"zeros-after-last", func(fx *tailFixture, d []byte) ([]byte, int) { return append(d, make([]byte, 8192)...), last + 1 }},
		// Two batches of one write torn: the first cut short, nothing
		// readable past it.
		{"two-batches-torn", func(fx *tailFixture, d []byte) ([]byte, int) {
			return d[:fx.pos[last-1]+int64(len(fx.stored[last-1]))-5], last - 1
		}},
		// An older batch carried in a record value is intact, but its
		// offset is below the damage: not taken for a following batch.
		{"old-batch-inside-torn-record", func(fx *tailFixture, d []byte) ([]byte, int) {
			return append(d[:fx.pos[last]], embedOld(fx)...), last
		}},
	}
	for _, c := range cases {
		for _, quarantine := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/quarantine=%v", c.name, quarantine), func(t *testing.T) {
				fx := newTailFixture(t)
				data, keep := c.damage(fx, fx.read(t))
				fx.write(t, data)
				logs := &logLines{}
				opts := Options{Logger: slog.New(logs)}
				qdir := filepath.Join(t.TempDir(), "q")
				if quarantine {
					opts.QuarantineDir = qdir
				}
				l, err := Open(fx.dir, opts)
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				defer l.Close()
				fx.wantServed(t, l, keep)
				if attrs, lvl, ok := logs.find("truncating torn segment tail"); !ok || lvl != slog.LevelWarn || attrs["valid_bytes"] != strconv.Itoa(int(fx.pos[keep-1])+len(fx.stored[keep-1])) {
					t.Fatalf("torn tail logged %v at %v (%v)", attrs, lvl, ok)
				}
				if lvl := logs.maxLevel(); lvl > slog.LevelWarn {
					t.Fatalf("a torn tail logged at %v", lvl)
				}
				if _, err := os.Stat(qdir); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("something was set aside for a torn tail: %v", err)
				}
				if fi, _ := os.Stat(fx.path); fi.Size() != fx.pos[keep-1]+int64(len(fx.stored[keep-1])) {
					t.Fatalf("segment is %d bytes after the cut", fi.Size())
				}
				next := fx.end
				if keep < len(fx.off) {
					next = fx.off[keep]
				}
				if r := mustAppend(t, l, plain(1, 5, 0)); r.BaseOffset != next {
					t.Fatalf("append after the cut at %d, want %d", r.BaseOffset, next)
				}
			})
		}
	}
}

// embedOld is the start of a batch (one record) whose value is an older
// batch of the log, intact; the outer batch is cut in its value.
func embedOld(fx *tailFixture) []byte {
	old := bytes.Clone(fx.stored[0])
	s := batchtest.NonIdempotent(7, batchtest.Record{Value: old})
	b := batchtest.Build(s)
	batch.SetBaseOffset(b, fx.off[len(fx.off)-1])
	return b[:len(b)-3]
}

// TestDamagedTailRefused: a bad batch past the recovery point with intact
// batches behind it is damage, not a torn write: the start refuses it,
// naming the file, the offset and the byte position, and changes nothing.
func TestDamagedTailRefused(t *testing.T) {
	for _, c := range tailDamage {
		t.Run(c.name, func(t *testing.T) {
			fx := newTailFixture(t)
			data := fx.read(t)
			c.damage(data, fx.pos[damagedBatch], int64(len(fx.stored[damagedBatch])))
			fx.write(t, data)
			before := partitiontest.Snapshot(t, fx.dir)
			_, err := Open(fx.dir, Options{})
			wantDamage(t, err, fx.path, fx.off[damagedBatch])
			var d *DamageError
			errors.As(err, &d)
			if d.Position != fx.pos[damagedBatch] || !strings.Contains(err.Error(), "not a torn write") ||
				!strings.Contains(err.Error(), fmt.Sprintf("%d intact batches", len(fx.sent)-damagedBatch-1)) {
				t.Fatalf("damage at byte %d (want %d): %v", d.Position, fx.pos[damagedBatch], err)
			}
			partitiontest.Same(t, "after the refused open", before, partitiontest.Snapshot(t, fx.dir))
		})
	}
}

// TestDamagedTailQuarantined: with a quarantine the start copies the tail
// from the bad batch on to the quarantine, cuts it, logs at error level
// what it set aside, and goes on past every offset the tail held; every
// record behind the damage reads back from the quarantined file.
func TestDamagedTailQuarantined(t *testing.T) {
	for _, c := range tailDamage {
		t.Run(c.name, func(t *testing.T) {
			fx := newTailFixture(t)
			data := fx.read(t)
			c.damage(data, fx.pos[damagedBatch], int64(len(fx.stored[damagedBatch])))
			fx.write(t, data)
			qdir := filepath.Join(t.TempDir(), "quarantine", "topic", "0")
			logs := &logLines{}
			l, err := Open(fx.dir, Options{QuarantineDir: qdir, Logger: slog.New(logs)})
			if err != nil {
				t.Fatal(err)
			}
			fx.wantServed(t, l, damagedBatch)
			if l.HighWatermark() != fx.end {
				t.Fatalf("log end %d after setting the tail aside, want %d", l.HighWatermark(), fx.end)
			}
			if fi, _ := os.Stat(fx.path); fi.Size() != fx.pos[damagedBatch] {
				t.Fatalf("segment is %d bytes, want %d", fi.Size(), fx.pos[damagedBatch])
			}

			name := fmt.Sprintf("%s.tail-at-byte-%d-offset-%d", filepath.Base(fx.path), fx.pos[damagedBatch], fx.off[damagedBatch])
			qfile := filepath.Join(qdir, name)
			kept, err := os.ReadFile(qfile)
			if err != nil {
				t.Fatalf("tail not in the quarantine: %v", err)
			}
			if !bytes.Equal(kept, data[fx.pos[damagedBatch]:]) {
				t.Fatal("the quarantined tail is not the segment's bytes from the damage on")
			}
			intact := len(fx.sent) - damagedBatch - 1
			attrs, lvl, ok := logs.find("set a damaged segment tail aside in the quarantine")
			if !ok || lvl != slog.LevelError || attrs["intact_batches"] != strconv.Itoa(intact) ||
				attrs["bytes"] != strconv.Itoa(len(kept)) || attrs["quarantine_file"] != qfile {
				t.Fatalf("logged %v at %v (%v)", attrs, lvl, ok)
			}
			if _, _, ok := logs.find("truncating torn segment tail"); ok {
				t.Fatal("the damaged tail was also reported as torn")
			}

			// Every batch behind the damage, and every record in them.
			got, err := ReadQuarantinedTail(qfile)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != intact {
				t.Fatalf("%d batches read back, want %d", len(got), intact)
			}
			var dump strings.Builder
			for i, q := range got {
				j := damagedBatch + 1 + i
				if q.Position != fx.pos[j]-fx.pos[damagedBatch] || !bytes.Equal(q.Raw, fx.stored[j]) || q.Err != nil {
					t.Fatalf("batch %d read back at byte %d (%v), want the stored batch at %d", j, q.Position, q.Err, fx.pos[j]-fx.pos[damagedBatch])
				}
				sent, _ := batch.Records(fx.sent[j])
				if len(q.Records) != len(sent) {
					t.Fatalf("batch %d: %d records read back, %d sent", j, len(q.Records), len(sent))
				}
				for k, r := range q.Records {
					s := sent[k]
					if r.Offset != fx.off[j]+int64(k) || !bytes.Equal(r.Key, s.Key) || (r.Key == nil) != (s.Key == nil) ||
						!bytes.Equal(r.Value, s.Value) || r.Timestamp != s.Timestamp {
						t.Fatalf("record %d of batch %d read back as %+v, sent %+v", k, j, r, s)
					}
					key := "null"
					if s.Key != nil {
						key = strconv.Quote(string(s.Key))
					}
					fmt.Fprintf(&dump, "%d\t%s\t%s\n", fx.off[j]+int64(k), key, strconv.Quote(string(s.Value)))
				}
			}
			var out bytes.Buffer
			n, err := DumpQuarantinedTail(&out, qfile)
			if err != nil || out.String() != dump.String() || n != strings.Count(dump.String(), "\n") {
				t.Fatalf("dump wrote %d records (%v):\n%s\nwant:\n%s", n, err, out.String(), dump.String())
			}

			// New records go past every offset the tail held; the gap
			// reads as the next batch after it.
			extra := plain(1, 77, 0)
			if r := mustAppend(t, l, extra); r.BaseOffset != fx.end {
				t.Fatalf("append at %d, want %d", r.BaseOffset, fx.end)
			}
			if b, err := l.Read(fx.off[damagedBatch], 1000, true); err != nil || len(b) == 0 {
				t.Fatalf("read in the gap: %d bytes, %v", len(b), err)
			} else if h, _ := batch.ParseHeader(b); h.BaseOffset != fx.end {
				t.Fatalf("read in the gap gave batch %d, want %d", h.BaseOffset, fx.end)
			}
			l.Close()

			// Later starts need no quarantine and find nothing wrong.
			before := partitiontest.Snapshot(t, qdir)
			l2, err := Open(fx.dir, Options{})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer l2.Close()
			fx.wantServed(t, l2, damagedBatch, extra)
			partitiontest.Same(t, "quarantine after the reopen", before, partitiontest.Snapshot(t, qdir))
		})
	}
}

// TestDamagedTailQuarantineStopped: a stop while a tail is being set aside
// never leaves a log that gives the tail's offsets out again. Before the
// cut, the segment after it makes the damage one in an older segment;
// after it, the log does not continue: both are refused, and with the
// quarantine the next start goes on past the tail's offsets.
func TestDamagedTailQuarantineStopped(t *testing.T) {
	for _, cut := range []bool{false, true} {
		t.Run(fmt.Sprintf("cut=%v", cut), func(t *testing.T) {
			fx := newTailFixture(t)
			data := fx.read(t)
			data[fx.pos[damagedBatch]+16] = 9
			fx.write(t, data)
			cpPath := filepath.Join(fx.dir, checkpointName)
			oldCP, err := os.ReadFile(cpPath)
			if err != nil {
				t.Fatal(err)
			}
			qdir := filepath.Join(t.TempDir(), "q")
			l, err := Open(fx.dir, Options{QuarantineDir: qdir})
			if err != nil {
				t.Fatal(err)
			}
			crash(l)
			// Undo what came after the stop.
			if err := os.WriteFile(cpPath, oldCP, 0o644); err != nil {
				t.Fatal(err)
			}
			if !cut {
				fx.write(t, data)
			}
			before := partitiontest.Snapshot(t, fx.dir)
			if _, err := Open(fx.dir, Options{}); !errors.Is(err, ErrDamaged) {
				t.Fatalf("open after a stop half way: %v", err)
			}
			partitiontest.Same(t, "after the refused open", before, partitiontest.Snapshot(t, fx.dir))
			l2, err := Open(fx.dir, Options{QuarantineDir: qdir})
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			if r := mustAppend(t, l2, plain(1, 1, 0)); r.BaseOffset < fx.end {
				t.Fatalf("append at %d reuses an offset below %d", r.BaseOffset, fx.end)
			}
		})
	}
}

// TestReadQuarantinedSegment: a whole segment moved to the quarantine
// reads back too, the batches on both sides of the damage.
func TestReadQuarantinedSegment(t *testing.T) {
	dir := t.TempDir()
	logs := multiSegment(t, dir, 12)
	l := openT(t, dir, Options{SegmentBytes: 300})
	all := readAll(t, l)
	l.Close()
	raw, _ := os.ReadFile(logs[1])
	off, _ := breakSecondBatch(t, logs[1])
	qdir := filepath.Join(t.TempDir(), "q")
	l2, err := Open(dir, Options{SegmentBytes: 300, QuarantineDir: qdir})
	if err != nil {
		t.Fatal(err)
	}
	l2.Close()
	got, err := ReadQuarantinedTail(filepath.Join(qdir, filepath.Base(logs[1])))
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for _, b := range all {
		h, _ := batch.ParseHeader(b)
		if h.BaseOffset >= segBase(logs[1]) && h.BaseOffset != off && bytes.Contains(raw, b) {
			want = append(want, b)
		}
	}
	if len(want) < 2 || len(got) != len(want) {
		t.Fatalf("%d batches read back, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].Raw, want[i]) {
			t.Fatalf("batch %d differs", i)
		}
	}
}

// intactAt reports whether data holds, at byte p, a batch the tail check
// takes for intact: the rule findIntact documents, checked plainly.
func intactAt(data []byte, p int, min, origin int64) bool {
	h, err := batch.ParseHeader(data[p:])
	if err != nil || h.Size() > int64(len(data)-p) || h.BaseOffset < min || h.LastOffset() < h.BaseOffset || !h.Codec().Valid() {
		return false
	}
	if n := (int64(p)-origin)/batch.HeaderLen + 1; origin >= 0 && n < 1<<31 && h.BaseOffset > min+n<<31 {
		return false
	}
	return batch.VerifyCRC(data[p:int64(p)+h.Size()]) == nil
}

// FuzzRecoverTail opens a log whose segment holds two batches below the
// recovery point followed by fuzzed bytes, without and with a quarantine.
// The open without one refuses the log exactly when an intact batch
// follows a bad one, changing nothing; otherwise it cuts the bad tail and
// sets nothing aside. With a quarantine it always opens; a set-aside tail
// holds the segment's bytes from the bad batch on, reads back, and no
// offset it used is given out again.
func FuzzRecoverTail(f *testing.F) {
	batchAt := func(off int64, n int, c batch.Codec) []byte {
		b := plain(n, 100+off, c)
		batch.SetBaseOffset(b, off)
		return b
	}
	head := append(batchAt(0, 2, 0), batchAt(2, 1, batch.CodecZstd)...)
	good := append(batchAt(3, 2, batch.CodecGzip), batchAt(5, 3, 0)...)
	f.Add(good)
	f.Add(good[:len(good)-4])
	broken := bytes.Clone(good)
	broken[16] = 3
	f.Add(broken)
	flipped := bytes.Clone(good)
	flipped[70] ^= 1
	f.Add(flipped)
	f.Add(append([]byte("garbage"), good...))
	f.Add(append(make([]byte, 100), batchAt(9, 1, 0)...))
	f.Add(append(bytes.Clone(good[:80]), batchAt(0, 1, 0)...)) // an old offset after damage
	f.Fuzz(func(t *testing.T, tail []byte) {
		data := append(bytes.Clone(head), tail...)
		write := func(dir string) {
			if err := os.WriteFile(filepath.Join(dir, "00000000000000000000.log"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := writeCheckpoint(dir, checkpoint{recoveryPoint: 3}); err != nil {
				t.Fatal(err)
			}
		}
		segPath := func(dir string) string { return filepath.Join(dir, "00000000000000000000.log") }
		// Where the valid run ends, as the start's scan finds it.
		res, err := scanSegment(bytes.NewReader(data), 0, int64(len(data)), 3, false, DefaultIndexIntervalBytes, nil)
		if err != nil {
			t.Fatal(err)
		}
		intact := false
		if res.bad != "" {
			for p := int(res.stats.size); p+batch.HeaderLen <= len(data) && !intact; p++ {
				intact = intactAt(data, p, res.stats.next, res.stats.size)
			}
		}

		dir := t.TempDir()
		write(dir)
		before := partitiontest.Snapshot(t, dir)
		l, err := Open(dir, Options{Sync: SyncNever})
		switch {
		case intact:
			var d *DamageError
			if !errors.As(err, &d) || d.File != segPath(dir) || d.Position != res.stats.size || d.Offset != res.stats.next {
				t.Fatalf("open with intact batches after a bad one at byte %d: %v", res.stats.size, err)
			}
			partitiontest.Same(t, "after the refused open", before, partitiontest.Snapshot(t, dir))
		case err != nil:
			t.Fatalf("open of a torn tail at byte %d: %v", res.stats.size, err)
		default:
			if fi, _ := os.Stat(segPath(dir)); fi.Size() != res.stats.size || l.HighWatermark() != res.stats.next {
				t.Fatalf("after the cut: %d bytes, end %d; want %d, %d", fi.Size(), l.HighWatermark(), res.stats.size, res.stats.next)
			}
			l.Close()
		}

		qdir := t.TempDir()
		write(qdir)
		quarantine := filepath.Join(t.TempDir(), "q")
		q, err := Open(qdir, Options{Sync: SyncNever, QuarantineDir: quarantine})
		if err != nil {
			t.Fatalf("open with a quarantine: %v", err)
		}
		defer q.Close()
		readGapped(t, q, 3)
		tails, _ := filepath.Glob(filepath.Join(quarantine, "*"))
		if !intact {
			if len(tails) != 0 {
				t.Fatalf("set aside %v from a torn tail", tails)
			}
			return
		}
		want := filepath.Join(quarantine, tailFileName("00000000000000000000.log", res.stats.size, res.stats.next))
		if len(tails) != 1 || tails[0] != want {
			t.Fatalf("quarantine holds %v, want %s", tails, want)
		}
		kept, _ := os.ReadFile(want)
		if !bytes.Equal(kept, data[res.stats.size:]) {
			t.Fatal("the quarantined tail is not the segment's bytes from the bad batch on")
		}
		got, err := ReadQuarantinedTail(want)
		if err != nil || len(got) == 0 {
			t.Fatalf("read back %d batches: %v", len(got), err)
		}
		end := res.stats.next
		for _, b := range got {
			if !bytes.Equal(b.Raw, kept[b.Position:b.Position+b.Header.Size()]) || !intactAt(kept, int(b.Position), res.stats.next, 0) {
				t.Fatalf("batch read back at byte %d is not intact in the file", b.Position)
			}
			end = max(end, b.Header.LastOffset()+1)
		}
		if r, err := q.Append([][]byte{plain(1, 1, 0)}); err != nil || r.BaseOffset < end {
			t.Fatalf("append after setting the tail aside: %+v %v, want an offset from %d on", r, err, end)
		}
	})
}

// FuzzReadQuarantinedTail reads any bytes as a quarantined tail: every
// batch it returns is intact in the file, at or past the offset the name
// gives, in file order without overlap, and the dump writes each record
// of them.
func FuzzReadQuarantinedTail(f *testing.F) {
	b1 := plain(2, 1, 0)
	batch.SetBaseOffset(b1, 10)
	b2 := plain(3, 2, batch.CodecLZ4)
	batch.SetBaseOffset(b2, 12)
	f.Add(append(append([]byte("damaged bytes"), b1...), b2...), true)
	f.Add(append(bytes.Clone(b1), b2...), false)
	f.Add(b2[:40], true)
	f.Fuzz(func(t *testing.T, data []byte, tail bool) {
		name := "00000000000000000004.log"
		min := int64(4)
		if tail {
			name += tailFileName("", 0, 10)
			min = 10
		}
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadQuarantinedTail(path)
		if err != nil {
			t.Fatal(err)
		}
		next, records := int64(0), 0
		for _, b := range got {
			if b.Position < next || !bytes.Equal(b.Raw, data[b.Position:b.Position+b.Header.Size()]) || batch.VerifyCRC(b.Raw) != nil || b.Header.BaseOffset < min {
				t.Fatalf("batch at byte %d (base %d) is not intact in the file", b.Position, b.Header.BaseOffset)
			}
			next = b.Position + b.Header.Size()
			records += len(b.Records)
		}
		n, err := DumpQuarantinedTail(&bytes.Buffer{}, path)
		if n != records {
			t.Fatalf("dump wrote %d records, %d read back (%v)", n, records, err)
		}
	})
}
