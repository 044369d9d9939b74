package partition

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/batch/batchtest"
	"github.com/groupd/groupd/internal/partition/partitiontest"
)

func openT(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	if opts.Sync == SyncAlways {
		opts.Sync = SyncNever // keep tests fast; durability paths have their own tests
	}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// plain builds a non-idempotent batch of n records with timestamps ts, ts+1...
func plain(n int, ts int64, codec batch.Codec) []byte {
	vals := make([]string, n)
	for i := range vals {
		vals[i] = fmt.Sprintf("value-%d-%d", ts, i)
	}
	s := batchtest.NonIdempotent(ts, batchtest.Values(vals...)...)
	s.Codec = codec
	return batchtest.Build(s)
}

func idem(pid int64, epoch int16, seq int32, n int) []byte {
	s := batchtest.Spec{FirstTimestamp: 1000, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq,
		Records: batchtest.Values(make([]string, n)...)}
	return batchtest.Build(s)
}

func mustAppend(t testing.TB, l *Log, bs ...[]byte) AppendResult {
	t.Helper()
	r, err := l.Append(bs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// readAll reads the whole log through Read, checking that it is a
// contiguous run of valid batches, and returns the batches.
func readAll(t testing.TB, l *Log) [][]byte {
	t.Helper()
	return readAllEpoch(t, l, true, 0)
}

// readAllEpoch is readAll with the leader epoch check optional and CRCs
// checked only from offset crcFrom on (below a recovery point only headers
// are checked on open, as in Kafka).
func readAllEpoch(t testing.TB, l *Log, checkEpoch bool, crcFrom int64) [][]byte {
	t.Helper()
	var out [][]byte
	off := l.LogStartOffset()
	for off < l.HighWatermark() {
		data, err := l.Read(off, 3000, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) == 0 {
			t.Fatalf("empty read at %d below hw %d", off, l.HighWatermark())
		}
		parts, err := batch.Split(data)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		for _, p := range parts {
			h, _ := batch.Check(p)
			if err := batch.VerifyCRC(p); err != nil && h.BaseOffset >= crcFrom {
				t.Fatalf("batch %d: %v", h.BaseOffset, err)
			}
			if h.BaseOffset != off {
				t.Fatalf("batch base %d, want %d", h.BaseOffset, off)
			}
			if checkEpoch && h.PartitionLeaderEpoch != 0 {
				t.Fatalf("leader epoch %d", h.PartitionLeaderEpoch)
			}
			off = h.LastOffset() + 1
			out = append(out, p)
		}
	}
	if off != l.HighWatermark() {
		t.Fatalf("read up to %d, hw %d", off, l.HighWatermark())
	}
	return out
}

// sameBatch reports whether stored equals sent apart from the patched base
// offset and leader epoch.
func sameBatch(stored, sent []byte) bool {
	return len(stored) == len(sent) && bytes.Equal(stored[8:12], sent[8:12]) && bytes.Equal(stored[16:], sent[16:])
}

var codecs = []batch.Codec{batch.CodecNone, batch.CodecGzip, batch.CodecSnappy, batch.CodecLZ4, batch.CodecZstd}

func TestAppendReadAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{SegmentBytes: 1000, IndexIntervalBytes: 150})
	var sent [][]byte
	for i := range 60 {
		b := plain(1+i%4, int64(1000+i), codecs[i%len(codecs)])
		r := mustAppend(t, l, b)
		if want := l.HighWatermark() - int64(1+i%4); r.BaseOffset != want || r.LastOffset != l.HighWatermark()-1 || r.Duplicate {
			t.Fatalf("append %d: %+v hw %d", i, r, l.HighWatermark())
		}
		sent = append(sent, b)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) < 3 {
		t.Fatalf("want several segments, got %d", len(logs))
	}
	got := readAll(t, l)
	if len(got) != len(sent) {
		t.Fatalf("read %d batches, sent %d", len(got), len(sent))
	}
	for i := range got {
		if !sameBatch(got[i], sent[i]) {
			t.Fatalf("batch %d differs from what was sent", i)
		}
	}
	// Every offset, including ones inside batches, reads from the batch
	// containing it.
	for off := int64(0); off < l.HighWatermark(); off++ {
		data, err := l.Read(off, 1, true)
		if err != nil {
			t.Fatal(err)
		}
		h, err := batch.Check(data)
		if err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
		if h.BaseOffset > off || h.LastOffset() < off {
			t.Fatalf("offset %d: got batch [%d,%d]", off, h.BaseOffset, h.LastOffset())
		}
	}
}

func TestReadLimits(t *testing.T) {
	l := openT(t, t.TempDir(), Options{})
	a, b, c := plain(2, 1, 0), plain(3, 2, 0), plain(1, 3, 0)
	mustAppend(t, l, a, b, c) // offsets 0-1, 2-4, 5
	read := func(off int64, max int32, one bool) []byte {
		t.Helper()
		d, err := l.Read(off, max, one)
		if err != nil {
			t.Fatal(err)
		}
		if d == nil {
			t.Fatal("nil slice")
		}
		return d
	}
	if d := read(0, int32(len(a)+len(b)+len(c)), false); len(d) != len(a)+len(b)+len(c) {
		t.Fatalf("everything: %d bytes", len(d))
	}
	if d := read(0, int32(len(a)+len(b)+len(c)-1), false); len(d) != len(a)+len(b) {
		t.Fatalf("cut to whole batches: %d bytes", len(d))
	}
	if d := read(3, int32(len(b)), false); !sameBatch(d, b) {
		t.Fatal("offset inside second batch")
	}
	if d := read(3, int32(len(b)-1), false); len(d) != 0 {
		t.Fatalf("too small without minOneBatch: %d bytes", len(d))
	}
	if d := read(3, 10, true); !sameBatch(d, b) {
		t.Fatal("minOneBatch must return the first batch whole")
	}
	if d := read(0, 0, true); !sameBatch(d, a) {
		t.Fatal("maxBytes 0 with minOneBatch")
	}
	if d := read(6, 1000, true); len(d) != 0 {
		t.Fatal("read at hw must be empty")
	}
	for _, off := range []int64{7, -1} {
		if _, err := l.Read(off, 1000, true); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("offset %d: %v", off, err)
		}
	}
}

func TestReopenIdenticalAndIndexRebuilt(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 2000, IndexIntervalBytes: 100}
	l := openT(t, dir, opts)
	for i := range 40 {
		mustAppend(t, l, plain(1+i%3, int64(i*10), codecs[i%len(codecs)]))
	}
	before := readAll(t, l)
	hw := l.HighWatermark()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	idxFiles, _ := filepath.Glob(filepath.Join(dir, "*.index"))
	idxBefore := map[string][]byte{}
	for _, f := range idxFiles {
		idxBefore[f], _ = os.ReadFile(f)
		if len(idxBefore[f]) == 0 {
			t.Fatalf("%s empty", f)
		}
	}
	// Lose one index and damage another: both must be rebuilt.
	os.Remove(idxFiles[0])
	os.WriteFile(idxFiles[1], []byte("junk"), 0o644)

	l2 := openT(t, dir, opts)
	if l2.HighWatermark() != hw {
		t.Fatalf("hw %d after reopen, want %d", l2.HighWatermark(), hw)
	}
	after := readAll(t, l2)
	if len(after) != len(before) {
		t.Fatalf("%d batches after reopen, %d before", len(after), len(before))
	}
	for i := range after {
		if !bytes.Equal(after[i], before[i]) {
			t.Fatalf("batch %d changed across reopen", i)
		}
	}
	for f, want := range idxBefore {
		if got, _ := os.ReadFile(f); !bytes.Equal(got, want) {
			t.Fatalf("index %s not rebuilt identically", filepath.Base(f))
		}
	}
	if r := mustAppend(t, l2, plain(2, 999, 0)); r.BaseOffset != hw {
		t.Fatalf("append after reopen at %d, want %d", r.BaseOffset, hw)
	}
}

// crash stops l as a kill -9 would: its files are closed with nothing
// fsynced or checkpointed.
func crash(l *Log) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	l.closed = true
	close(l.waitCh)
	l.mu.Unlock()
	close(l.done)
	l.syncerWG.Wait()
	for _, s := range l.segs {
		s.close()
	}
}

func activeFile(t *testing.T, dir string) string {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) == 0 {
		t.Fatal("no segments")
	}
	return logs[len(logs)-1]
}

func TestTornTailTruncated(t *testing.T) {
	cases := []struct {
		name string
		// damage edits the active segment; the log had batches of
		// sizes sizes; it returns how many batches should survive.
		damage func(t *testing.T, path string, lastSize int) int
	}{
		{"cut-mid-batch", func(t *testing.T, p string, last int) int {
			fi, _ := os.Stat(p)
			os.Truncate(p, fi.Size()-int64(last)/2)
			return 2
		}},
		{"cut-mid-header", func(t *testing.T, p string, last int) int {
			fi, _ := os.Stat(p)
			os.Truncate(p, fi.Size()-int64(last)+20)
			return 2
		}},
		{"garbage-appended", func(t *testing.T, p string, last int) int {
			f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			f.Write(bytes.Repeat([]byte{0xAB}, 100))
			f.Close()
			return 3
		}},
		{"zeros-appended", func(t *testing.T, p string, last int) int {
			f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			f.Write(make([]byte, 4096)) // preallocated-but-unwritten pages after a crash
			f.Close()
			return 3
		}},
		{"flipped-byte-in-last", func(t *testing.T, p string, last int) int {
			data, _ := os.ReadFile(p)
			data[len(data)-5] ^= 0xFF
			os.WriteFile(p, data, 0o644)
			return 2
		}},
		{"bad-length-in-last", func(t *testing.T, p string, last int) int {
			data, _ := os.ReadFile(p)
			binary.BigEndian.PutUint32(data[len(data)-last+8:], 1<<30)
			os.WriteFile(p, data, 0o644)
			return 2
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openT(t, dir, Options{})
			bs := [][]byte{plain(2, 1, 0), plain(3, 2, batch.CodecZstd), plain(2, 3, batch.CodecGzip)}
			for _, b := range bs {
				mustAppend(t, l, b)
			}
			// Nothing was fsynced, so the recovery point is still 0
			// and the whole tail may be torn.
			crash(l)
			keep := c.damage(t, activeFile(t, dir), len(bs[2]))
			l2 := openT(t, dir, Options{})
			wantHW := []int64{0, 2, 5, 7}[keep]
			if l2.HighWatermark() != wantHW {
				t.Fatalf("hw %d, want %d", l2.HighWatermark(), wantHW)
			}
			got := readAll(t, l2)
			if len(got) != keep {
				t.Fatalf("%d batches survive, want %d", len(got), keep)
			}
			var size int64
			for _, b := range bs[:keep] {
				size += int64(len(b))
			}
			if fi, _ := os.Stat(activeFile(t, dir)); fi.Size() != size {
				t.Fatalf("file is %d bytes, want %d", fi.Size(), size)
			}
			if r := mustAppend(t, l2, plain(1, 4, 0)); r.BaseOffset != wantHW {
				t.Fatalf("append continues at %d, want %d", r.BaseOffset, wantHW)
			}
			l2.Close()
			l3 := openT(t, dir, Options{})
			if n := len(readAll(t, l3)); n != keep+1 {
				t.Fatalf("after second reopen %d batches, want %d", n, keep+1)
			}
		})
	}
}

func TestInvalidBatchesRejected(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	mustAppend(t, l, plain(1, 1, 0))
	flipped := plain(2, 2, 0)
	flipped[len(flipped)-1] ^= 1
	magic1 := plain(1, 1, 0)
	magic1[16] = 1
	control := batchtest.NonIdempotent(1, batchtest.Values("x")...)
	control.Attributes = batch.AttrControl
	cases := []struct {
		name string
		in   [][]byte
		want error
	}{
		{"bad-crc", [][]byte{flipped}, batch.ErrCorrupt},
		{"bad-crc-second-of-two", [][]byte{plain(1, 1, 0), flipped}, batch.ErrCorrupt},
		{"magic1", [][]byte{magic1}, batch.ErrUnsupportedMagic},
		{"truncated", [][]byte{plain(2, 1, 0)[:70]}, batch.ErrCorrupt},
		{"control", [][]byte{batchtest.Build(control)}, batch.ErrInvalidRecord},
		{"none", nil, batch.ErrInvalidRecord},
	}
	fi0, _ := os.Stat(activeFile(t, dir))
	for _, c := range cases {
		if _, err := l.Append(c.in); !errors.Is(err, c.want) {
			t.Fatalf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if l.HighWatermark() != 1 {
		t.Fatalf("hw moved to %d", l.HighWatermark())
	}
	if fi, _ := os.Stat(activeFile(t, dir)); fi.Size() != fi0.Size() {
		t.Fatal("rejected batches reached the file")
	}
}

func TestIdempotentProducer(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	expect := func(b []byte, wantOff int64, dup bool, wantErr error) {
		t.Helper()
		r, err := l.Append([][]byte{b})
		if !errors.Is(err, wantErr) {
			t.Fatalf("got err %v, want %v", err, wantErr)
		}
		if err == nil && (r.BaseOffset != wantOff || r.Duplicate != dup) {
			t.Fatalf("got %+v, want offset %d duplicate %v", r, wantOff, dup)
		}
	}
	expect(idem(1, 0, 0, 3), 0, false, nil) // seq 0-2 at 0-2
	expect(idem(1, 0, 3, 2), 3, false, nil) // seq 3-4 at 3-4
	expect(plain(1, 1, 0), 5, false, nil)
	expect(idem(1, 0, 0, 3), 0, true, nil) // retry of the first batch
	expect(idem(1, 0, 3, 2), 3, true, nil) // retry of the second
	if l.HighWatermark() != 6 {
		t.Fatalf("duplicates were written: hw %d", l.HighWatermark())
	}
	expect(idem(1, 0, 3, 3), 0, false, ErrOutOfOrderSequence) // overlapping, not identical
	expect(idem(1, 0, 9, 1), 0, false, ErrOutOfOrderSequence) // gap
	expect(idem(1, 1, 5, 1), 0, false, ErrOutOfOrderSequence) // new epoch not at 0
	expect(idem(7, 3, 1234, 2), 6, false, nil)                // unknown producer: any sequence
	expect(idem(1, 1, 0, 1), 8, false, nil)                   // epoch bump at 0
	expect(idem(1, 0, 5, 1), 0, false, ErrInvalidProducerEpoch)
	expect(idem(1, 1, 1, 1), 9, false, nil)
	// Sequence wraps at MaxInt32.
	expect(idem(2, 0, math.MaxInt32-1, 3), 10, false, nil) // seqs MaxInt32-1, MaxInt32, 0
	expect(idem(2, 0, 1, 1), 13, false, nil)
	expect(idem(2, 0, math.MaxInt32-1, 3), 10, true, nil)

	// Only the last five batches are remembered.
	for i := range 6 {
		expect(idem(3, 0, int32(i), 1), 14+int64(i), false, nil)
	}
	expect(idem(3, 0, 1, 1), 15, true, nil)
	expect(idem(3, 0, 0, 1), 0, false, ErrOutOfOrderSequence)

	// A rejected multi-batch call changes no state.
	if _, err := l.Append([][]byte{idem(3, 0, 6, 1), idem(3, 0, 8, 1)}); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("multi-batch gap: %v", err)
	}
	// A multi-batch call may chain sequences of one producer.
	if r, err := l.Append([][]byte{idem(3, 0, 6, 1), idem(3, 0, 7, 2)}); err != nil || r.BaseOffset != 20 || r.LastOffset != 22 {
		t.Fatalf("multi-batch chain: %+v %v", r, err)
	}

	// State survives reopen.
	l.Close()
	l = openT(t, dir, Options{})
	expect(idem(1, 1, 1, 1), 9, true, nil)
	expect(idem(3, 0, 7, 2), 21, true, nil)
	expect(idem(2, 0, 1, 1), 13, true, nil)
	expect(idem(1, 0, 2, 1), 0, false, ErrInvalidProducerEpoch)
	expect(idem(1, 1, 5, 1), 0, false, ErrOutOfOrderSequence)
	expect(idem(1, 1, 2, 1), 23, false, nil)
}

// allRecords decodes every record of the log.
func allRecords(t *testing.T, l *Log) []batch.Record {
	var out []batch.Record
	for _, b := range readAll(t, l) {
		recs, err := batch.Records(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, recs...)
	}
	return out
}

func TestTimestamps(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1500, IndexIntervalBytes: 200}
	l := openT(t, dir, opts)
	if off, ts := l.MaxTimestamp(); off != -1 || ts != -1 {
		t.Fatalf("empty log max timestamp %d %d", off, ts)
	}
	if _, _, ok, err := l.OffsetForTimestamp(0); ok || err != nil {
		t.Fatalf("empty log lookup: %v %v", ok, err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 60 {
		n := 1 + rng.IntN(4)
		recs := make([]batchtest.Record, n)
		for j := range recs {
			// Timestamps wander, so batch maxima are not monotonic
			// and ties occur.
			recs[j] = batchtest.Record{TimestampDelta: int64(rng.IntN(50)), Value: []byte("v")}
		}
		s := batchtest.NonIdempotent(int64(1000+i*10-rng.IntN(40)), recs...)
		s.Codec = codecs[i%len(codecs)]
		if i == 30 {
			s.Attributes = batch.AttrLogAppendTime
		}
		mustAppend(t, l, batchtest.Build(s))
	}
	check := func(l *Log) {
		t.Helper()
		all := allRecords(t, l)
		var maxOff, maxTS int64 = -1, math.MinInt64
		for _, r := range all {
			if r.Timestamp > maxTS {
				maxOff, maxTS = r.Offset, r.Timestamp
			}
		}
		if off, ts := l.MaxTimestamp(); off != maxOff || ts != maxTS {
			t.Fatalf("MaxTimestamp %d@%d, want %d@%d", ts, off, maxTS, maxOff)
		}
		for ts := int64(900); ts < 1700; ts += 3 {
			wantOff, wantTS, wantOK := int64(-1), int64(-1), false
			for _, r := range all {
				if r.Timestamp >= ts {
					wantOff, wantTS, wantOK = r.Offset, r.Timestamp, true
					break
				}
			}
			off, gotTS, ok, err := l.OffsetForTimestamp(ts)
			if err != nil || off != wantOff || gotTS != wantTS || ok != wantOK {
				t.Fatalf("ts %d: got %d@%d %v %v, want %d@%d %v", ts, gotTS, off, ok, err, wantTS, wantOff, wantOK)
			}
		}
	}
	check(l)
	l.Close()
	check(openT(t, dir, opts))
}

func TestWaitFiresOnAppend(t *testing.T) {
	l := openT(t, t.TempDir(), Options{})
	ch := l.Wait()
	select {
	case <-ch:
		t.Fatal("closed before any append")
	default:
	}
	if _, err := l.Append([][]byte{plain(1, 1, batch.CodecNone)[:20]}); err == nil {
		t.Fatal("bad append accepted")
	}
	select {
	case <-ch:
		t.Fatal("failed append fired Wait")
	default:
	}
	mustAppend(t, l, plain(1, 1, 0))
	select {
	case <-ch:
	default:
		t.Fatal("append did not fire Wait")
	}
	ch2 := l.Wait()
	if ch2 == ch {
		t.Fatal("Wait did not re-arm")
	}
	l.Close()
	select {
	case <-ch2:
	default:
		t.Fatal("Close did not release waiters")
	}
}

func TestConcurrentReadersAndWriter(t *testing.T) {
	l := openT(t, t.TempDir(), Options{SegmentBytes: 8000, IndexIntervalBytes: 300})
	const batches = 150
	done := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for {
				select {
				case <-done:
					return
				default:
				}
				hw := l.HighWatermark()
				if hw == 0 {
					<-l.Wait()
					continue
				}
				off := rng.Int64N(hw)
				data, err := l.Read(off, int32(200+rng.IntN(3000)), true)
				if err != nil {
					errc <- err
					return
				}
				parts, err := batch.Split(data)
				if err != nil {
					errc <- fmt.Errorf("read at %d (hw %d): %w", off, hw, err)
					return
				}
				next := int64(-1)
				for _, p := range parts {
					h, _ := batch.Check(p)
					if err := batch.VerifyCRC(p); err != nil || (next >= 0 && h.BaseOffset != next) {
						errc <- fmt.Errorf("bad batch at %d: %v", h.BaseOffset, err)
						return
					}
					next = h.LastOffset() + 1
				}
				if r == 0 {
					if _, _, _, err := l.OffsetForTimestamp(int64(rng.IntN(batches))); err != nil {
						errc <- err
						return
					}
					l.MaxTimestamp()
				}
			}
		}()
	}
	for i := range batches {
		mustAppend(t, l, plain(1+i%3, int64(i), codecs[i%len(codecs)]))
	}
	close(done)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if n := len(readAll(t, l)); n != batches {
		t.Fatalf("%d batches", n)
	}
}

func TestSyncPolicies(t *testing.T) {
	for _, s := range []string{"always", "interval", "never"} {
		p, err := ParseSyncPolicy(s)
		if err != nil || p.String() != s {
			t.Fatalf("%s: %v %v", s, p, err)
		}
	}
	if _, err := ParseSyncPolicy("sometimes"); err == nil {
		t.Fatal("bad policy accepted")
	}

	// SyncAlways goes through the fsync path on every append.
	l, err := Open(t.TempDir(), Options{Sync: SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, plain(1, 1, 0))
	if l.dirty.Load() {
		t.Fatal("SyncAlways left the log dirty")
	}
	l.Close()

	// SyncInterval: drive the background loop with a hand-made ticker.
	tick := make(chan time.Time)
	stopped := make(chan struct{})
	old := tickerFor
	tickerFor = func(time.Duration) (<-chan time.Time, func()) { return tick, func() { close(stopped) } }
	defer func() { tickerFor = old }()
	l, err = Open(t.TempDir(), Options{Sync: SyncInterval})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, plain(1, 1, 0))
	if !l.dirty.Load() {
		t.Fatal("append under SyncInterval should leave the log dirty")
	}
	tick <- time.Time{}
	tick <- time.Time{} // the loop took the second tick, so the first sync finished
	if l.dirty.Load() {
		t.Fatal("tick did not sync")
	}
	l.Close()
	<-stopped
}

func TestDelete(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "topic-0")
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, plain(1, 1, 0))
	if err := l.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("dir still there: %v", err)
	}
	if _, err := l.Append([][]byte{plain(1, 1, 0)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after delete: %v", err)
	}
	if _, err := l.Read(0, 100, true); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after delete: %v", err)
	}
}

// FuzzRecover opens a log made of one segment file holding data, with a
// recovery checkpoint at recoveryPoint (none if it is not positive).
// Without a quarantine, Open either recovers a valid prefix holding at
// least the recovery point, or refuses with ErrDamaged and leaves every
// file as it was. With a quarantine, Open always succeeds, serves
// contiguous batches (CRC-valid from the recovery point on), and never gives
// out an offset below the recovery point.
func FuzzRecover(f *testing.F) {
	var seed []byte
	for i, c := range codecs {
		b := plain(1+i, int64(i), c)
		batch.SetBaseOffset(b, int64(i*(i+1)/2))
		seed = append(seed, b...)
	}
	f.Add(seed, int64(0))
	f.Add(seed[:len(seed)-7], int64(0))
	f.Add(append(bytes.Clone(seed), 0, 0, 0, 0), int64(0))
	f.Add(seed, int64(6))
	f.Add(seed[:len(seed)-7], int64(15))
	f.Add(seed[:len(seed)/2], int64(15))
	f.Fuzz(func(t *testing.T, data []byte, recoveryPoint int64) {
		recoveryPoint %= 1 << 20
		write := func(dir string) {
			if err := os.WriteFile(filepath.Join(dir, "00000000000000000000.log"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if recoveryPoint > 0 {
				if err := writeCheckpoint(dir, checkpoint{recoveryPoint: recoveryPoint}); err != nil {
					t.Fatal(err)
				}
			}
		}
		dir := t.TempDir()
		write(dir)
		before := partitiontest.Snapshot(t, dir)
		l, err := Open(dir, Options{Sync: SyncNever})
		if err != nil {
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("open: %v", err)
			}
			partitiontest.Same(t, "after the refused open", before, partitiontest.Snapshot(t, dir))
		} else {
			defer l.Close()
			got := readAllEpoch(t, l, false, recoveryPoint) // checks CRCs and contiguity
			var n int
			for _, b := range got {
				n += len(b)
			}
			if fi, _ := os.Stat(filepath.Join(dir, "00000000000000000000.log")); fi.Size() != int64(n) || !bytes.HasPrefix(data, bytes.Join(got, nil)) {
				t.Fatalf("file holds %d bytes, valid prefix %d", fi.Size(), n)
			}
			if l.HighWatermark() < recoveryPoint {
				t.Fatalf("log ends at %d, below its recovery point %d", l.HighWatermark(), recoveryPoint)
			}
			l.MaxTimestamp()
			l.OffsetForTimestamp(0)
			if r, err := l.Append([][]byte{plain(1, 1, 0)}); err != nil || r.BaseOffset != l.HighWatermark()-1 {
				t.Fatalf("append after recovery: %+v %v", r, err)
			}
		}

		qdir := t.TempDir()
		write(qdir)
		q, err := Open(qdir, Options{Sync: SyncNever, QuarantineDir: filepath.Join(qdir, "quarantine")})
		if err != nil {
			t.Fatalf("open with a quarantine: %v", err)
		}
		defer q.Close()
		readGapped(t, q, recoveryPoint)
		q.MaxTimestamp()
		q.OffsetForTimestamp(0)
		r, err := q.Append([][]byte{plain(1, 1, 0)})
		if err != nil || r.BaseOffset < recoveryPoint {
			t.Fatalf("append after quarantine: %+v %v (recovery point %d)", r, err, recoveryPoint)
		}
	})
}

func BenchmarkAppend(b *testing.B) {
	l := openT(b, b.TempDir(), Options{Sync: SyncNever})
	s := batchtest.NonIdempotent(1, batchtest.Record{Value: bytes.Repeat([]byte("x"), 1000)})
	in := [][]byte{batchtest.Build(s)}
	b.SetBytes(int64(len(in[0])))
	for b.Loop() {
		if _, err := l.Append(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRead(b *testing.B) {
	l := openT(b, b.TempDir(), Options{Sync: SyncNever})
	s := batchtest.NonIdempotent(1, batchtest.Record{Value: bytes.Repeat([]byte("x"), 1000)})
	in := [][]byte{batchtest.Build(s)}
	for range 10000 {
		mustAppend(b, l, in...)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	b.SetBytes(64 << 10)
	for b.Loop() {
		if _, err := l.Read(rng.Int64N(10000), 64<<10, true); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAppendDeferredSyncTo checks the deferred path: appends are readable
// at once, SyncTo covers them (also across a segment roll), and a log that
// is closed refuses to sync.
func TestAppendDeferredSyncTo(t *testing.T) {
	l, err := Open(t.TempDir(), Options{Sync: SyncAlways, SegmentBytes: 300})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := range 10 {
		res, err := l.AppendDeferred([][]byte{batchtest.Build(batchtest.NonIdempotent(int64(i), batchtest.Values("0123456789abcdefghij")...))})
		if err != nil {
			t.Fatal(err)
		}
		last = res.LastOffset
		if l.HighWatermark() != last+1 {
			t.Fatalf("deferred append not readable: high watermark %d, want %d", l.HighWatermark(), last+1)
		}
	}
	if got := l.synced.Load(); got >= last+1 {
		t.Fatalf("synced %d before SyncTo although the active segment was not fsynced", got)
	}
	if err := l.SyncTo(last + 1); err != nil {
		t.Fatal(err)
	}
	if got := l.synced.Load(); got != last+1 {
		t.Fatalf("synced %d after SyncTo(%d)", got, last+1)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.SyncTo(last + 5); !errors.Is(err, ErrClosed) {
		t.Fatalf("SyncTo on a closed log: %v", err)
	}
}
