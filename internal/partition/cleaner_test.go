package partition

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/batch/batchtest"
)

// keyed builds a batch of records with the given keys and values (a nil
// value is a tombstone).
func keyed(ts int64, codec batch.Codec, kv ...[]byte) []byte {
	var recs []batchtest.Record
	for i := 0; i+1 < len(kv); i += 2 {
		recs = append(recs, batchtest.Record{Key: kv[i], Value: kv[i+1]})
	}
	s := batchtest.NonIdempotent(ts, recs...)
	s.Codec = codec
	return batchtest.Build(s)
}

// gappedRecords reads every record from the log start through Read,
// allowing the gaps a cleaner leaves; offsets must rise.
func gappedRecords(t *testing.T, l *Log) []batch.Record {
	t.Helper()
	var out []batch.Record
	off := l.LogStartOffset()
	for off < l.HighWatermark() {
		data, err := l.Read(off, 1<<20, true)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if len(data) == 0 {
			t.Fatalf("empty read at %d below hw %d", off, l.HighWatermark())
		}
		parts, err := batch.Split(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			if err := batch.VerifyCRC(p); err != nil {
				t.Fatal(err)
			}
			recs, err := batch.Records(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				if r.Offset < off && len(out) > 0 {
					continue
				}
				if n := len(out); n > 0 && r.Offset <= out[n-1].Offset {
					t.Fatalf("offset %d after %d", r.Offset, out[n-1].Offset)
				}
				out = append(out, r)
			}
			h, _ := batch.Check(p)
			off = h.LastOffset() + 1
		}
	}
	return out
}

// compactedLog writes rounds of updates to keys k0..k(keys-1) over several
// segments and codecs, then tombstones for the first tombs keys, and an
// active segment the cleaner must not touch. It returns the offset and
// value each key's last record must keep.
func compactedLog(t *testing.T, l *Log, keys, rounds, tombs int, ts int64) map[string]batch.Record {
	t.Helper()
	last := map[string]batch.Record{}
	note := func(res AppendResult, kv [][]byte) {
		for i := 0; i+1 < len(kv); i += 2 {
			last[string(kv[i])] = batch.Record{Offset: res.BaseOffset + int64(i/2), Key: kv[i], Value: kv[i+1]}
		}
	}
	for r := range rounds {
		for k := 0; k < keys; k += 4 {
			var kv [][]byte
			for j := k; j < min(k+4, keys); j++ {
				kv = append(kv, fmt.Appendf(nil, "k%d", j), fmt.Appendf(nil, "v%d-%d", j, r))
			}
			note(mustAppend(t, l, keyed(ts, codecs[(r+k)%len(codecs)], kv...)), kv)
		}
	}
	for k := range tombs {
		kv := [][]byte{fmt.Appendf(nil, "k%d", k), nil}
		note(mustAppend(t, l, keyed(ts, batch.CodecNone, kv...)), kv)
	}
	return last
}

// checkCompacted: every key reads back exactly its last record, at its
// offset; tombstones only while wantTombs.
func checkCompacted(t *testing.T, l *Log, last map[string]batch.Record, wantTombs bool, activeFrom int64) {
	t.Helper()
	got := map[string]batch.Record{}
	for _, r := range gappedRecords(t, l) {
		if r.Offset >= activeFrom {
			continue
		}
		k := string(r.Key)
		if prev, dup := got[k]; dup {
			t.Fatalf("key %s read twice: offsets %d and %d", k, prev.Offset, r.Offset)
		}
		got[k] = r
	}
	for k, want := range last {
		r, ok := got[k]
		if want.Value == nil && !wantTombs {
			if ok {
				t.Fatalf("deleted key %s still read at %d", k, r.Offset)
			}
			continue
		}
		if !ok || r.Offset != want.Offset || string(r.Value) != string(want.Value) || (want.Value == nil) != (r.Value == nil) {
			t.Fatalf("key %s: read %+v, want offset %d value %q", k, r, want.Offset, want.Value)
		}
	}
	if extra := slices.Collect(maps.Keys(got)); len(extra) > len(last) {
		t.Fatalf("read keys %v, wrote %d", extra, len(last))
	}
}

func TestCleanKeepsLastRecordOfEachKey(t *testing.T) {
	clk := newClock(50_000_000)
	dir := t.TempDir()
	cfg := withConfig(DefaultConfig(), func(c *Config) {
		c.SegmentBytes, c.Compact, c.Delete = 700, true, false
		c.DeleteRetentionMs = 60_000
		c.MinCleanableDirtyRatio = 0.1
	})
	opts := Options{Now: clk.now, Config: cfg, IndexIntervalBytes: 100}
	l := openT(t, dir, opts)
	last := compactedLog(t, l, 20, 15, 5, clk.ms.Load())
	// The active segment holds fresh updates the cleaner leaves alone.
	l.wmu.Lock()
	l.roll()
	l.wmu.Unlock()
	activeFrom := l.HighWatermark()
	mustAppend(t, l, keyed(clk.ms.Load(), 0, []byte("k1"), []byte("fresh")))
	hw, before, segsBefore := l.HighWatermark(), l.Size(), segmentCount(t, dir)

	if ratio, due := l.Cleanable(); !due || ratio < 0.9 {
		t.Fatalf("cleanable %v at dirty ratio %.2f", due, ratio)
	}
	res, err := l.Clean(NewKeyMap(1 << 20))
	if err != nil {
		t.Fatal(err)
	}
	if res.CleanedTo != activeFrom || res.Records == 0 || l.Size() >= before/3 || l.HighWatermark() != hw {
		t.Fatalf("clean: %+v, size %d (was %d), hw %d", res, l.Size(), before, l.HighWatermark())
	}
	if segmentCount(t, dir) >= segsBefore {
		t.Fatalf("%d segments, was %d: emptied segments are removed", segmentCount(t, dir), segsBefore)
	}
	checkCompacted(t, l, last, true, activeFrom)
	if _, due := l.Cleanable(); due {
		t.Fatal("cleanable again at once")
	}

	// After delete.retention.ms the tombstones are due, and the next
	// clean removes them.
	clk.advance(61 * time.Second)
	if _, due := l.Cleanable(); !due {
		t.Fatal("not cleanable once the tombstones' horizon passed")
	}
	if _, err := l.Clean(NewKeyMap(1 << 20)); err != nil {
		t.Fatal(err)
	}
	checkCompacted(t, l, last, false, activeFrom)
	if recs := gappedRecords(t, l); string(recs[len(recs)-1].Value) != "fresh" {
		t.Fatalf("the active segment changed: last record %+v", recs[len(recs)-1])
	}

	// The cleaned log opens again, from the snapshot and by reading every
	// header, gaps and all.
	l.Close()
	for _, full := range []bool{false, true} {
		o := opts
		o.FullStartCheck = full
		l = openT(t, dir, o)
		checkCompacted(t, l, last, false, activeFrom)
		if r := mustAppend(t, l, keyed(clk.ms.Load(), 0, []byte("k2"), []byte("later"))); r.BaseOffset != hw+int64(map[bool]int{false: 0, true: 1}[full]) {
			t.Fatalf("append after reopen at %d", r.BaseOffset)
		}
		l.Close()
	}
}

// TestCleanSmallKeyMap: a key map too small for the dirty part cleans what
// it can each time; repeated cleans reach the same result.
func TestCleanSmallKeyMap(t *testing.T) {
	clk := newClock(50_000_000)
	cfg := withConfig(DefaultConfig(), func(c *Config) {
		c.SegmentBytes, c.Compact, c.Delete, c.MinCleanableDirtyRatio = 600, true, false, 0.01
	})
	l := openT(t, t.TempDir(), Options{Now: clk.now, Config: cfg})
	last := compactedLog(t, l, 60, 4, 0, clk.ms.Load())
	l.wmu.Lock()
	l.roll()
	l.wmu.Unlock()
	end := l.HighWatermark()
	km := NewKeyMap(16 * keySlotLen) // 14 keys at a time
	var passes int
	for ; passes < 100; passes++ {
		res, err := l.Clean(km)
		if err != nil {
			t.Fatal(err)
		}
		if res.CleanedTo >= end {
			break
		}
	}
	if passes < 5 {
		t.Fatalf("%d passes with a 14-key map over 60 keys", passes)
	}
	checkCompacted(t, l, last, true, end)
}

// TestCleanInterrupted: a stop mid-clean leaves either the old or the
// cleaned segment; the next open removes the half-written rewrite and
// serves everything.
func TestCleanInterrupted(t *testing.T) {
	clk := newClock(50_000_000)
	dir := t.TempDir()
	cfg := withConfig(DefaultConfig(), func(c *Config) {
		c.SegmentBytes, c.Compact, c.Delete, c.MinCleanableDirtyRatio = 700, true, false, 0.01
	})
	opts := Options{Now: clk.now, Config: cfg}
	l := openT(t, dir, opts)
	last := compactedLog(t, l, 12, 10, 0, clk.ms.Load())
	l.wmu.Lock()
	l.roll()
	l.wmu.Unlock()
	end := l.HighWatermark()
	// Clean only the first segments: what a stop half way leaves, with
	// the cleaner's offsets recorded as a clean records them first.
	p, err := l.plan()
	if err != nil {
		t.Fatal(err)
	}
	km := NewKeyMap(1 << 20)
	mapEnd, err := l.buildKeyMap(p, km)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.recordCleaner(func(c *checkpoint) { c.gapsBelow = mapEnd }); err != nil {
		t.Fatal(err)
	}
	due := int64(0)
	for _, v := range p.views[:2] {
		if _, err := l.cleanSegment(v, p, mapEnd, km, v.base == p.views[0].base, &due); err != nil {
			t.Fatal(err)
		}
	}
	crash(l)
	// A rewrite in progress when the stop came.
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if err := os.WriteFile(logs[2]+cleanedSuffix, []byte("half a segment"), 0o644); err != nil {
		t.Fatal(err)
	}
	l = openT(t, dir, opts)
	if _, err := os.Stat(logs[2] + cleanedSuffix); !os.IsNotExist(err) {
		t.Fatalf("the half-written rewrite is still there: %v", err)
	}
	all := gappedRecords(t, l)
	if len(all) == 0 || l.HighWatermark() != end {
		t.Fatalf("%d records, hw %d", len(all), l.HighWatermark())
	}
	if _, err := l.Clean(km); err != nil {
		t.Fatal(err)
	}
	checkCompacted(t, l, last, true, end)
}

func TestKeyMap(t *testing.T) {
	m := NewKeyMap(100 * keySlotLen)
	m.reset()
	for i := range 90 {
		d := keyDigest{byte(i), 7}
		if !m.put(&d, int64(i)) {
			t.Fatalf("put %d into a map of 100 slots", i)
		}
	}
	d := keyDigest{200}
	if m.put(&d, 1) {
		t.Fatal("a 91st key fitted a map filled to nine tenths")
	}
	d = keyDigest{5, 7}
	if !m.put(&d, 500) {
		t.Fatal("updating a key in a full map failed")
	}
	if off, ok := m.get(&d); !ok || off != 500 {
		t.Fatalf("get = %d, %v", off, ok)
	}
	if _, ok := m.get(&keyDigest{201}); ok {
		t.Fatal("found a key never put")
	}
	m.reset()
	if _, ok := m.get(&d); ok {
		t.Fatal("found a key after reset")
	}
}

// TestMaintenanceWhileServing: appends, reads, cleans, retention and
// DeleteRecords run at once (run it with -race); every read either
// succeeds with rising offsets or is out of range below a moved log start.
func TestMaintenanceWhileServing(t *testing.T) {
	cfg := withConfig(DefaultConfig(), func(c *Config) {
		c.SegmentBytes, c.Compact, c.Delete, c.MinCleanableDirtyRatio = 800, true, true, 0.01
		c.RetentionBytes, c.RetentionMs = 20_000, -1
	})
	l := openT(t, t.TempDir(), Options{Config: cfg})
	stop := make(chan struct{})
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := l.Append([][]byte{keyed(int64(i), codecs[i%len(codecs)],
				fmt.Appendf(nil, "k%d", i%37), fmt.Appendf(nil, "v%d", i))}); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Go(func() {
		km := NewKeyMap(1 << 16)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := l.Clean(km); err != nil {
				errs <- err
				return
			}
			if _, err := l.EnforceRetention(); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := l.DeleteRecords(l.HighWatermark() / 2); err != nil {
				errs <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				off := l.LogStartOffset()
				for off < l.HighWatermark() {
					data, err := l.Read(off, 4096, true)
					if errors.Is(err, ErrOffsetOutOfRange) {
						break
					}
					if err != nil {
						errs <- err
						return
					}
					parts, err := batch.Split(data)
					if err != nil || len(parts) == 0 {
						errs <- fmt.Errorf("read at %d: %d parts, %v", off, len(parts), err)
						return
					}
					h, _ := batch.Check(parts[len(parts)-1])
					off = h.LastOffset() + 1
				}
			}
		})
	}
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestTombstoneRemovedAfterRestart: when kept tombstones fall due is not
// kept across a stop; the first clean after a start removes those past
// their horizon.
func TestTombstoneRemovedAfterRestart(t *testing.T) {
	clk := newClock(50_000_000)
	dir := t.TempDir()
	cfg := withConfig(DefaultConfig(), func(c *Config) {
		c.SegmentBytes, c.Compact, c.Delete, c.DeleteRetentionMs, c.MinCleanableDirtyRatio = 700, true, false, 60_000, 0.5
	})
	opts := Options{Now: clk.now, Config: cfg}
	l := openT(t, dir, opts)
	last := compactedLog(t, l, 8, 6, 3, clk.ms.Load())
	l.wmu.Lock()
	l.roll()
	l.wmu.Unlock()
	end := l.HighWatermark()
	// As after any roll, the active segment holds a batch: reads past the
	// removed tombstones find it.
	mustAppend(t, l, keyed(clk.ms.Load(), 0, []byte("k7"), []byte("fresh")))
	if _, err := l.Clean(NewKeyMap(1 << 16)); err != nil {
		t.Fatal(err)
	}
	checkCompacted(t, l, last, true, end)
	l.Close()
	clk.advance(2 * time.Minute)
	l = openT(t, dir, opts)
	if _, due := l.Cleanable(); !due {
		t.Fatal("not cleanable after a start with tombstones past their horizon")
	}
	if _, err := l.Clean(NewKeyMap(1 << 16)); err != nil {
		t.Fatal(err)
	}
	checkCompacted(t, l, last, false, end)
	if _, due := l.Cleanable(); due {
		t.Fatal("still cleanable")
	}
}
