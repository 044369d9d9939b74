package partition

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/batch/batchtest"
)

// scanned reads as Read does with no hints, which finds the first batch
// by scanning from an index entry, and leaves the hints as they were.
func (l *Log) scanned(offset int64, maxBytes int32, minOneBatch bool) ([]byte, error) {
	l.reads.mu.Lock()
	saved, next := l.reads.hint, l.reads.next
	l.reads.hint = [len(saved)]readHint{}
	l.reads.mu.Unlock()
	defer func() {
		l.reads.mu.Lock()
		l.reads.hint, l.reads.next = saved, next
		l.reads.mu.Unlock()
	}()
	return l.Read(offset, maxBytes, minOneBatch)
}

// TestReadHintsReadAsScanning has several consumers read a log that grows
// and rolls segments while they read, each on from where its last read
// ended (so hints are found) with random limits, and checks every read
// against the same read with no hints, which finds its batch by scanning.
func TestReadHintsReadAsScanning(t *testing.T) {
	l := openT(t, t.TempDir(), Options{SegmentBytes: 4000, IndexIntervalBytes: 300})
	rng := rand.New(rand.NewPCG(7, 7))
	appendSome := func() {
		for range rng.IntN(3) {
			// Batches of 1 to 5 records, some larger than the read
			// limits below, so KIP-74's whole first batch is read too.
			vals := make([][]byte, 1+rng.IntN(5))
			for i := range vals {
				vals[i] = bytes.Repeat([]byte("v"), rng.IntN(120))
			}
			recs := make([]batchtest.Record, len(vals))
			for i, v := range vals {
				recs[i] = batchtest.Record{Value: v}
			}
			mustAppend(t, l, batchtest.Build(batchtest.NonIdempotent(1000, recs...)))
		}
	}
	appendSome()
	// More consumers than hints: some reads find none.
	next := make([]int64, len(l.reads.hint)+1) // each consumer's next offset
	hits := 0
	for range 400 {
		appendSome()
		c := rng.IntN(len(next))
		limit, one := int32(rng.IntN(700)), rng.IntN(4) != 0
		if _, found := l.locateHinted(next[c]); found {
			hits++
		}
		got, err := l.Read(next[c], limit, one)
		if err != nil {
			t.Fatal(err)
		}
		want, err := l.scanned(next[c], limit, one)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read at %d (limit %d, one %t): %d bytes with hints, %d without", next[c], limit, one, len(got), len(want))
		}
		// Consumers move on past what they got; one that got nothing
		// (the limit was below its first batch) goes on from the next
		// batch, as a consumer skipping ahead would.
		var last int64 = -1
		for rest := got; len(rest) > 0; {
			h, err := batch.ParseHeader(rest)
			if err != nil {
				t.Fatal(err)
			}
			last, rest = h.LastOffset(), rest[h.Size():]
		}
		switch {
		case last >= 0:
			next[c] = last + 1
		case next[c] < l.HighWatermark():
			next[c]++
		}
	}
	t.Logf("%d of 400 reads found a hint", hits)
	if hits < 100 {
		t.Fatalf("only %d of 400 reads found a hint", hits)
	}
}

// locateHinted reports whether a read at offset would find its batch from
// a hint.
func (l *Log) locateHinted(offset int64) (int64, bool) {
	v, ok, err := l.segmentFor(offset)
	if err != nil || !ok {
		return 0, false
	}
	return l.reads.find(v.f, offset)
}
