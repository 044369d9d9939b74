package partition

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/groupd/groupd/internal/batch"
)

// truncFixture is a replica's log of 15 batches of 2 records each (batch
// i at offset 2i) over several segments, in three leader epochs, with
// idempotent producer 7 writing every other batch from batch 3 on.
type truncFixture struct {
	dir    string
	opts   Options
	epochs [][2]int64
	// batches as stored; seq is producer 7's base sequence, -1 if not
	// its batch.
	batches [][]byte
	seq     []int32
	hw      int64
}

var fixtureEpochs = [][2]int64{{1, 0}, {2, 12}, {4, 24}}

func newTruncFixture(t *testing.T) *truncFixture {
	t.Helper()
	fx := &truncFixture{dir: t.TempDir(), opts: Options{Replicated: true, SegmentBytes: 400, IndexIntervalBytes: 150}, epochs: fixtureEpochs, hw: 20}
	l, err := Open(fx.dir, fx.opts)
	if err != nil {
		t.Fatal(err)
	}
	seq := int32(0)
	for i := range 15 {
		for _, e := range fx.epochs {
			if e[1] == int64(2*i) {
				if err := l.AssignEpoch(int32(e[0]), e[1]); err != nil {
					t.Fatal(err)
				}
			}
		}
		b := plain(2, int64(100+i), 0)
		s := int32(-1)
		if i >= 3 && i%2 == 1 {
			b, s = idem(7, 0, seq, 2), seq
			seq += 2
		}
		mustAppend(t, l, b)
		fx.seq = append(fx.seq, s)
	}
	fx.batches = replicaBatches(t, l)
	if len(fx.batches) != 15 || l.Segments() < 4 {
		t.Fatalf("fixture: %d batches in %d segments", len(fx.batches), l.Segments())
	}
	l.SetHighWatermark(fx.hw)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return fx
}

func (fx *truncFixture) open(t *testing.T) *Log {
	t.Helper()
	return openT(t, fx.dir, fx.opts)
}

// wantState checks that l is the fixture's log truncated to end (30: not
// truncated) with epochs, high watermark at most hw, and producer 7's
// state as of end; then that appends go on at end.
func (fx *truncFixture) wantState(t *testing.T, l *Log, what string, end int64, epochs [][2]int64, hw int64) {
	t.Helper()
	if l.LogEndOffset() != end {
		t.Fatalf("%s: log end %d, want %d", what, l.LogEndOffset(), end)
	}
	if l.HighWatermark() != min(hw, end) {
		t.Fatalf("%s: high watermark %d, want %d", what, l.HighWatermark(), min(hw, end))
	}
	got := replicaBatches(t, l)
	if len(got) != int(end/2) {
		t.Fatalf("%s: %d batches, want %d", what, len(got), end/2)
	}
	for i, b := range got {
		if !bytes.Equal(b, fx.batches[i]) {
			t.Fatalf("%s: batch %d differs", what, i)
		}
	}
	if e := l.LeaderEpochs(); !slices.Equal(e, epochs) {
		t.Fatalf("%s: epochs %v, want %v", what, e, epochs)
	}
	// Producer 7: its last batch below end is a duplicate, the next
	// sequence goes in at end.
	next, lastBatch := int32(0), -1
	for i := range int(end / 2) {
		if fx.seq[i] >= 0 {
			next, lastBatch = fx.seq[i]+2, i
		}
	}
	if lastBatch >= 0 {
		if r, err := l.Append([][]byte{idem(7, 0, next-2, 2)}); err != nil || !r.Duplicate || r.BaseOffset != int64(2*lastBatch) {
			t.Fatalf("%s: retry of producer 7's batch at %d: %+v %v", what, 2*lastBatch, r, err)
		}
	}
	if r, err := l.Append([][]byte{idem(7, 0, next, 2)}); err != nil || r.Duplicate || r.BaseOffset != end {
		t.Fatalf("%s: producer 7's sequence %d: %+v %v, want it appended at %d", what, next, r, err, end)
	}
}

// cutEpochs is the fixture's epochs cut from the end at offset.
func cutEpochs(epochs [][2]int64, offset int64) [][2]int64 {
	var out [][2]int64
	for _, e := range epochs {
		if e[1] < offset {
			out = append(out, e)
		}
	}
	return out
}

func segBases(t *testing.T, l *Log) []int64 {
	t.Helper()
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []int64
	for _, s := range l.segs {
		out = append(out, s.base)
	}
	return out
}

// TestTruncateTo: truncation inside a segment, inside a batch, at a
// segment boundary, across segments, at and past the log end (epochs
// only), to zero; the state as expected, appends going on at the new end
// with producer state as of it, and the same state after a reopen.
func TestTruncateTo(t *testing.T) {
	probe := newTruncFixture(t)
	l := probe.open(t)
	bases := segBases(t, l)
	l.Close()
	boundary := bases[2] // a segment boundary (batches start at even offsets)
	if boundary%2 != 0 {
		t.Fatalf("segment base %d", boundary)
	}
	cases := []struct {
		name   string
		offset int64
		end    int64
	}{
		{"inside a segment at a batch", boundary + 2, boundary + 2},
		{"inside a batch", boundary + 3, boundary + 2},
		{"at a segment boundary", boundary, boundary},
		{"inside the first batch of a segment", boundary + 1, boundary},
		{"across segments", 7, 6},
		{"inside the first batch", 1, 0},
		{"to zero", 0, 0},
		{"at an epoch start", 24, 24},
		{"the last batch", 28, 28},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fx := newTruncFixture(t)
			l := fx.open(t)
			ch := l.Wait()
			if err := l.TruncateTo(c.offset); err != nil {
				t.Fatal(err)
			}
			if !closed(ch) {
				t.Fatal("Wait did not fire")
			}
			epochs := cutEpochs(fx.epochs, c.end)
			if cp := readCP(t, fx.dir); cp.truncating || cp.recoveryPoint > c.end || cp.hw > c.end {
				t.Fatalf("checkpoint after truncating to %d: %+v", c.end, cp)
			}
			if l.RecoveryPoint() > c.end {
				t.Fatalf("recovery point %d past the new end %d", l.RecoveryPoint(), c.end)
			}
			l.Close()
			// The same state after a reopen, and appends go on.
			l = fx.open(t)
			fx.wantState(t, l, "after reopening", c.end, epochs, fx.hw)
			l.Close()
			if _, err := os.Stat(filepath.Join(fx.dir, epochFileName)); err != nil {
				t.Fatal(err)
			}
		})
		t.Run(c.name+"/live", func(t *testing.T) {
			fx := newTruncFixture(t)
			l := fx.open(t)
			if err := l.TruncateTo(c.offset); err != nil {
				t.Fatal(err)
			}
			fx.wantState(t, l, "after truncating", c.end, cutEpochs(fx.epochs, c.end), fx.hw)
		})
	}

	t.Run("at and past the log end", func(t *testing.T) {
		fx := newTruncFixture(t)
		l := fx.open(t)
		if err := l.AssignEpoch(6, 30); err != nil {
			t.Fatal(err)
		}
		withNew := append(slices.Clone(fx.epochs), [2]int64{6, 30})
		if err := l.TruncateTo(31); err != nil {
			t.Fatal(err)
		}
		if got := l.LeaderEpochs(); !slices.Equal(got, withNew) || l.LogEndOffset() != 30 {
			t.Fatalf("past the log end: epochs %v, log end %d", got, l.LogEndOffset())
		}
		if err := l.TruncateTo(30); err != nil {
			t.Fatal(err)
		}
		if got := l.LeaderEpochs(); !slices.Equal(got, fx.epochs) {
			t.Fatalf("at the log end: epochs %v, want %v", got, fx.epochs)
		}
		l.Close()
		l = fx.open(t)
		fx.wantState(t, l, "after reopening", 30, fx.epochs, fx.hw)
	})

	for _, c := range []struct {
		name                   string
		start, offset, restart int64
	}{
		// The batch holding 11 starts at 10, below the log start: no
		// record at or past the log start stays, and the log restarts
		// at 10, empty, to fetch from there.
		{"inside a batch holding the log start", 11, 11, 10},
		// No segment starts below 5: the log restarts at 5.
		{"below every segment", 9, 5, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			fx := newTruncFixture(t)
			l := fx.open(t)
			if _, err := l.DeleteRecords(c.start); err != nil {
				t.Fatal(err)
			}
			if err := l.TruncateTo(c.offset); err != nil {
				t.Fatal(err)
			}
			check := func(what string) {
				t.Helper()
				if l.LogStartOffset() != c.restart || l.LogEndOffset() != c.restart || l.HighWatermark() != c.restart || l.Segments() != 1 {
					t.Fatalf("%s: log [%d, %d), high watermark %d, %d segments", what, l.LogStartOffset(), l.LogEndOffset(), l.HighWatermark(), l.Segments())
				}
				if got := l.LeaderEpochs(); len(got) != 0 {
					t.Fatalf("%s: epochs %v", what, got)
				}
				if snaps, _ := snapshotOffsets(fx.dir); len(snaps) != 0 && l.Producers() != 0 {
					t.Fatalf("%s: snapshots %v, %d producers", what, snaps, l.Producers())
				}
			}
			check("after truncating")
			l.Close()
			l = fx.open(t)
			check("after reopening")
			if _, err := l.AppendReplicated(stored(c.restart, 5, 2)); err != nil {
				t.Fatal(err)
			}
			if got := l.LeaderEpochs(); !slices.Equal(got, [][2]int64{{5, c.restart}}) {
				t.Fatalf("epochs %v", got)
			}
		})
	}

	t.Run("single node", func(t *testing.T) {
		dir := t.TempDir()
		l := openT(t, dir, Options{SegmentBytes: 300})
		for i := range 10 {
			mustAppend(t, l, idem(3, 0, int32(i), 1))
		}
		if err := l.TruncateTo(6); err != nil {
			t.Fatal(err)
		}
		if l.HighWatermark() != 6 || l.LogEndOffset() != 6 {
			t.Fatalf("high watermark %d, log end %d", l.HighWatermark(), l.LogEndOffset())
		}
		if r := mustAppend(t, l, idem(3, 0, 6, 1)); r.Duplicate || r.BaseOffset != 6 {
			t.Fatalf("the truncated sequence 6 came back as %+v", r)
		}
		if r := mustAppend(t, l, idem(3, 0, 5, 1)); !r.Duplicate || r.BaseOffset != 5 {
			t.Fatalf("retry of sequence 5: %+v", r)
		}
	})
}

// TestTruncateSnapshots: producer snapshots past the new end are deleted,
// and producer state comes from the one at or below it.
func TestTruncateSnapshots(t *testing.T) {
	fx := newTruncFixture(t)
	l := fx.open(t)
	snaps, _ := snapshotOffsets(fx.dir)
	if len(snaps) < 2 {
		t.Fatalf("snapshots %v", snaps)
	}
	to := snaps[len(snaps)-2] + 2
	if err := l.TruncateTo(to); err != nil {
		t.Fatal(err)
	}
	after, _ := snapshotOffsets(fx.dir)
	for _, off := range after {
		if off > to {
			t.Fatalf("snapshot at %d kept past the new end %d (%v)", off, to, after)
		}
	}
	if l.snapshotAt != snaps[len(snaps)-2] {
		t.Fatalf("producer state from the snapshot at %d, want %d", l.snapshotAt, snaps[len(snaps)-2])
	}
	fx.wantState(t, l, "after truncating", to, cutEpochs(fx.epochs, to), fx.hw)
}

// crashLog is crash for a log a stopped TruncateTo left: the files of the
// segments it retired are closed too.
func crashLog(l *Log) {
	crash(l)
	l.closeRetired(true)
}

// TestTruncateCrash: a stop at every step of a TruncateTo leaves a log
// that Open recovers, without refusing, to the state before (a stop
// before the truncation was recorded) or after it.
func TestTruncateCrash(t *testing.T) {
	for _, c := range []struct {
		name      string
		offset    int64
		end       int64
		logStart  int64 // DeleteRecords before, if not 0
		wantStart int64
	}{
		{name: "across segments inside a batch", offset: 7, end: 6},
		{name: "at a segment boundary", offset: -1},
		{name: "inside a batch holding the log start", offset: 11, end: 10, logStart: 11, wantStart: 10},
		{name: "below every segment", offset: 5, end: 5, logStart: 9, wantStart: 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			var steps []string
			for n := 0; ; n++ {
				fx := newTruncFixture(t)
				l := fx.open(t)
				offset, end := c.offset, c.end
				if offset < 0 {
					offset = segBases(t, l)[1]
					end = offset
				}
				oldStart := int64(0)
				if c.logStart > 0 {
					if _, err := l.DeleteRecords(c.logStart); err != nil {
						t.Fatal(err)
					}
					oldStart = c.logStart
				}
				stopped := stopAtStep(l, n)
				err := l.TruncateTo(offset)
				at := *stopped
				if at == "" {
					if err != nil {
						t.Fatal(err)
					}
					if len(steps) < 4 {
						t.Fatalf("only %d steps: %v", len(steps), steps)
					}
					t.Logf("stopped at each of %q", steps)
					return
				}
				steps = append(steps, at)
				l2 := reopenAfterStop(t, fx, l, at, err)
				what := fmt.Sprintf("stopped at %q", at)
				if at == "planned" {
					if l2.LogStartOffset() != oldStart {
						t.Fatalf("%s: log start %d", what, l2.LogStartOffset())
					}
					if oldStart == 0 {
						fx.wantState(t, l2, what, 30, fx.epochs, fx.hw)
					}
				} else {
					if cp := readCP(t, fx.dir); cp.truncating {
						t.Fatalf("%s: the truncation is still marked after reopening: %+v", what, cp)
					}
					if c.wantStart > 0 {
						if l2.LogStartOffset() != c.wantStart || l2.LogEndOffset() != end || len(l2.LeaderEpochs()) != 0 {
							t.Fatalf("%s: log [%d, %d), epochs %v", what, l2.LogStartOffset(), l2.LogEndOffset(), l2.LeaderEpochs())
						}
					} else {
						fx.wantState(t, l2, what, end, cutEpochs(fx.epochs, end), fx.hw)
					}
				}
				l2.Close()
			}
		})
	}
}

// TestTruncateWhileReading: readers reading through a log that is cut and
// refilled again and again (as a follower that keeps changing leaders)
// get whole batches with valid CRCs, or an offset out of range, never a
// torn or mixed batch: cut segments and deleted ones are read from their
// old files.
func TestTruncateWhileReading(t *testing.T) {
	l := openT(t, t.TempDir(), Options{Replicated: true, SegmentBytes: 1500, IndexIntervalBytes: 100})
	fill := func(epoch int32) {
		for l.LogEndOffset() < 60 {
			n := 1 + int(l.LogEndOffset()%3)
			if _, err := l.AppendReplicated(stored(l.LogEndOffset(), epoch, n)); err != nil {
				t.Error(err)
				return
			}
		}
	}
	fill(1)
	done := make(chan struct{})
	errc := make(chan error, 4)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := int64(r)
			for {
				select {
				case <-done:
					return
				default:
				}
				data, err := l.ReadReplica(off, 500)
				if errors.Is(err, ErrOffsetOutOfRange) || err == nil && len(data) == 0 {
					off = 0
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				parts, err := batch.Split(data)
				for _, p := range parts {
					if err == nil {
						err = batch.VerifyCRC(p)
					}
				}
				if err != nil {
					errc <- fmt.Errorf("read at %d: %w", off, err)
					return
				}
				off = header(t, parts[len(parts)-1]).LastOffset() + 1
			}
		}()
	}
	for i := range 12 {
		if err := l.TruncateTo(int64(i*17) % 55); err != nil {
			t.Fatal(err)
		}
		fill(int32(2 + i))
	}
	close(done)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// stopAtStep makes l's next truncation stop at the (n+1)th step it
// reaches; the string it points to names that step once the truncation
// returns ("" if it went through).
func stopAtStep(l *Log, n int) *string {
	calls := 0
	var at string
	l.stopAt = func(step string) bool {
		calls++
		if calls == n+1 {
			at = step
			return true
		}
		return false
	}
	return &at
}

// reopenAfterStop checks what a truncation stopped at step at returned
// (err) and left: past "planned" the log refuses appends until it is
// reopened. It then crashes l and reopens its directory, which must not
// refuse.
func reopenAfterStop(t *testing.T, fx *truncFixture, l *Log, at string, err error) *Log {
	t.Helper()
	if !errors.Is(err, errStopped) {
		t.Fatalf("stopped at %q: %v", at, err)
	}
	if at != "planned" {
		if _, err := l.Append([][]byte{plain(1, 1, 0)}); !errors.Is(err, ErrFailed) {
			t.Fatalf("stopped at %q: an append was taken (%v)", at, err)
		}
	}
	crashLog(l)
	l2, err := Open(fx.dir, fx.opts)
	if err != nil {
		t.Fatalf("stopped at %q: reopening refused: %v", at, err)
	}
	return l2
}
