package partition

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// wantRestarted checks that l is an empty log starting and ending at
// offset, with the high watermark there, one segment, no leader epoch,
// no producer and no snapshot but an empty one at offset; then that a follower's fetch goes on at
// offset and starts a new epoch there.
func wantRestarted(t *testing.T, l *Log, dir, what string, offset int64, appendToo bool) {
	t.Helper()
	if l.LogStartOffset() != offset || l.LogEndOffset() != offset || l.HighWatermark() != offset || l.Segments() != 1 {
		t.Fatalf("%s: log [%d, %d), high watermark %d, %d segments; want all at %d in one segment",
			what, l.LogStartOffset(), l.LogEndOffset(), l.HighWatermark(), l.Segments(), offset)
	}
	if got := l.LeaderEpochs(); len(got) != 0 {
		t.Fatalf("%s: epochs %v", what, got)
	}
	// (A close snapshots the empty producer state at the end.)
	if snaps, _ := snapshotOffsets(dir); len(snaps) > 1 || len(snaps) == 1 && snaps[0] != offset || l.Producers() != 0 {
		t.Fatalf("%s: snapshots %v, %d producers", what, snaps, l.Producers())
	}
	if cp := readCP(t, dir); cp.truncating || cp.logStart != offset || cp.hw != offset || cp.recoveryPoint != offset {
		t.Fatalf("%s: checkpoint %+v", what, cp)
	}
	if _, err := l.ReadReplica(offset-1, 1000); offset > 0 && !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("%s: read below the new start: %v", what, err)
	}
	if !appendToo {
		return
	}
	if _, err := l.AppendReplicated(stored(offset, 9, 3)); err != nil {
		t.Fatalf("%s: appending at %d: %v", what, offset, err)
	}
	if got := l.LeaderEpochs(); !slices.Equal(got, [][2]int64{{9, offset}}) {
		t.Fatalf("%s: epochs after an append %v", what, got)
	}
	if got := replicaBatches(t, l); len(got) != 1 || header(t, got[0]).BaseOffset != offset {
		t.Fatalf("%s: %d batches after an append", what, len(got))
	}
	// Producer 7 of the old log is forgotten: a sequence that would
	// have been a duplicate or a gap there is new here.
	if r, err := l.Append([][]byte{idem(7, 0, 0, 2)}); err != nil || r.Duplicate || r.BaseOffset != offset+3 {
		t.Fatalf("%s: producer 7 after the restart: %+v %v", what, r, err)
	}
}

// TestTruncateFullyAndStartAt: past the log end (a follower the leader's
// log start left behind), inside the log, at its start and at zero, the
// log restarts empty at the offset, and stays so after a reopen.
func TestTruncateFullyAndStartAt(t *testing.T) {
	for _, c := range []struct {
		name     string
		logStart int64 // DeleteRecords before, if not 0
		offset   int64
	}{
		{name: "past the log end", offset: 47},
		{name: "at the log end", offset: 30},
		{name: "inside the log", offset: 13},
		{name: "at a segment base"},
		{name: "at the log start", logStart: 12, offset: 12},
		{name: "below the log start", logStart: 12, offset: 3},
		{name: "at zero", offset: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			fx := newTruncFixture(t)
			l := fx.open(t)
			offset := c.offset
			if c.name == "at a segment base" {
				offset = segBases(t, l)[2]
			}
			if c.logStart > 0 {
				if _, err := l.DeleteRecords(c.logStart); err != nil {
					t.Fatal(err)
				}
			}
			ch := l.Wait()
			if err := l.TruncateFullyAndStartAt(offset); err != nil {
				t.Fatal(err)
			}
			if !closed(ch) {
				t.Fatal("Wait did not fire")
			}
			wantRestarted(t, l, fx.dir, "after truncating", offset, false)
			l.Close()
			l = fx.open(t)
			wantRestarted(t, l, fx.dir, "after reopening", offset, true)
			l.Close()
			l = fx.open(t)
			if l.LogStartOffset() != offset || l.LogEndOffset() != offset+5 {
				t.Fatalf("after appending and reopening: log [%d, %d)", l.LogStartOffset(), l.LogEndOffset())
			}
		})
	}
	t.Run("negative", func(t *testing.T) {
		fx := newTruncFixture(t)
		l := fx.open(t)
		if err := l.TruncateFullyAndStartAt(-1); err == nil {
			t.Fatal("truncating fully at -1 was taken")
		}
		fx.wantState(t, l, "after refusing", 30, fx.epochs, fx.hw)
	})
}

// TestTruncateFullyCrash: a stop at every step of a
// TruncateFullyAndStartAt leaves a log that Open recovers, without
// refusing, to the old log (a stop before the truncation was recorded)
// or to the new, empty one at the offset; never a mix.
func TestTruncateFullyCrash(t *testing.T) {
	for _, offset := range []int64{47, 13} {
		t.Run(fmt.Sprint(offset), func(t *testing.T) {
			var steps []string
			for n := 0; ; n++ {
				fx := newTruncFixture(t)
				l := fx.open(t)
				stopped := stopAtStep(l, n)
				err := l.TruncateFullyAndStartAt(offset)
				at := *stopped
				if at == "" {
					if err != nil {
						t.Fatal(err)
					}
					// planned, snapshots dropped, segment cut, each
					// deleted segment, records cut, epochs cut.
					if len(steps) < 7 {
						t.Fatalf("only %d steps: %v", len(steps), steps)
					}
					t.Logf("stopped at each of %q", steps)
					return
				}
				steps = append(steps, at)
				l2 := reopenAfterStop(t, fx, l, at, err)
				what := fmt.Sprintf("stopped at %q", at)
				if at == "planned" {
					if l2.LogStartOffset() != 0 {
						t.Fatalf("%s: log start %d", what, l2.LogStartOffset())
					}
					fx.wantState(t, l2, what, 30, fx.epochs, fx.hw)
				} else {
					wantRestarted(t, l2, fx.dir, what, offset, true)
				}
				l2.Close()
			}
		})
	}
}

// TestAppendReplicatedInsideFirstBatch: a follower that restarted its log
// at the leader's log start, which DeleteRecords put inside a batch,
// fetches that batch: its empty log restarts at the batch's base and takes
// it whole (Kafka's appendRecordsToFollowerOrFutureReplica). A log that is
// not empty still refuses a batch that does not continue it.
func TestAppendReplicatedInsideFirstBatch(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{Replicated: true})
	if err := l.TruncateFullyAndStartAt(15); err != nil {
		t.Fatal(err)
	}
	leo, err := l.AppendReplicated(append(stored(10, 3, 10), stored(20, 3, 5)...))
	if err != nil {
		t.Fatal(err)
	}
	if leo != 25 || l.LogStartOffset() != 10 || l.HighWatermark() != 10 {
		t.Fatalf("log [%d, %d), high watermark %d; want [10, 25) and 10", l.LogStartOffset(), leo, l.HighWatermark())
	}
	if got := l.LeaderEpochs(); !slices.Equal(got, [][2]int64{{3, 10}}) {
		t.Fatalf("epochs %v", got)
	}
	// The leader's log start comes with the next answer.
	l.SetHighWatermark(25)
	if _, err := l.DeleteRecords(15); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendReplicated(stored(24, 3, 2)); !errors.Is(err, ErrUnexpectedAppendOffset) {
		t.Fatalf("a batch inside a log that is not empty: %v", err)
	}
	l.Close()
	l = openT(t, dir, Options{Replicated: true})
	if l.LogStartOffset() != 15 || l.LogEndOffset() != 25 {
		t.Fatalf("after reopening: log [%d, %d)", l.LogStartOffset(), l.LogEndOffset())
	}
	// An empty log refuses a batch wholly below its end.
	if err := l.TruncateFullyAndStartAt(40); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendReplicated(stored(30, 3, 5)); !errors.Is(err, ErrUnexpectedAppendOffset) {
		t.Fatalf("a batch below an empty log's end: %v", err)
	}
}
