package fetchsession

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestQuietPartitionsNeedNoRead drives two caches with the same random
// conversation of one consumer over partitions whose logs grow, lose
// their oldest records, vanish and come back: one cache's partitions are
// all read, the other's only when Quiet does not excuse them. Every reply
// must carry the same partitions with the same results, or Quiet would
// change what clients see. The second cache's fetches are released and
// reused; the first's are not.
func TestQuietPartitionsNeedNoRead(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { quietConversation(t, seed) })
	}
}

func quietConversation(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	now := time.Unix(1_700_000_000, 0)
	logs := map[Key]*plog{}
	var keys []Key
	for p := range int32(12) {
		k := Key{Topic: "t" + fmt.Sprint(p%3), Partition: p}
		keys = append(keys, k)
		logs[k] = &plog{hw: rng.Int64N(5)}
	}
	read := func(k Key, p Params) Result {
		l := logs[k]
		switch {
		case l.gone:
			return Result{ErrorCode: 3, HighWatermark: -1, LogStartOffset: -1}
		case p.FetchOffset < l.start || p.FetchOffset > l.hw:
			return Result{ErrorCode: 1, HighWatermark: l.hw, LogStartOffset: l.start}
		}
		return Result{HighWatermark: l.hw, LogStartOffset: l.start, RecordBytes: int(l.hw - p.FetchOffset)}
	}
	all, quiet := New(Config{NewID: SequentialIDs()}), New(Config{NewID: SequentialIDs()})
	offsets := map[Key]int64{}
	session, epoch := NoSession, InitialEpoch
	skipped := 0
	for step := range 300 {
		for range rng.IntN(3) {
			l := logs[keys[rng.IntN(len(keys))]]
			switch r := rng.IntN(10); {
			case r < 6:
				l.hw += 1 + rng.Int64N(3)
			case r < 8:
				l.start = min(l.hw, l.start+1)
			default:
				l.gone = !l.gone
			}
		}
		req := Request{Conn: 1, SessionID: session, Epoch: epoch}
		for _, k := range keys {
			// A full fetch names every partition; an incremental one
			// those whose offset moved, or some at random.
			if o, seen := offsets[k]; epoch == InitialEpoch || !seen || rng.IntN(8) == 0 {
				req.Parts = append(req.Parts, Part{k, Params{FetchOffset: o, MaxBytes: 1 << 20}})
			}
		}
		fa, fq := all.Begin(now, req), quiet.Begin(now, req)
		if fa.Kind != fq.Kind || !slices.Equal(fa.Parts, fq.Parts) {
			t.Fatalf("step %d: the caches began differently", step)
		}
		ra, rq := make([]Result, len(fa.Parts)), make([]Result, len(fq.Parts))
		for i, p := range fa.Parts {
			ra[i] = read(p.Key, p.Params)
			if l := logs[p.Key]; !l.gone && fq.Quiet(i, l.hw, l.start) {
				rq[i] = Result{Unread: true}
				skipped++
				continue
			}
			rq[i] = ra[i]
		}
		ida, codea, keepa := all.Finish(now, fa, ra)
		idq, codeq, keepq := quiet.Finish(now, fq, rq)
		if ida != idq || codea != codeq {
			t.Fatalf("step %d: session %d error %d, and %d %d with quiet partitions unread", step, ida, codea, idq, codeq)
		}
		for i, p := range fa.Parts {
			carried := keepa == nil || keepa[i]
			if carried != (keepq == nil || keepq[i]) || (carried && ra[i] != rq[i]) {
				t.Fatalf("step %d: %v carried %t (%+v) when read, not so when quiet ones are unread", step, p.Key, carried, ra[i])
			}
			// The consumer takes the records it got, and starts over
			// from the log start after an out-of-range error.
			switch {
			case !carried:
			case ra[i].RecordBytes > 0:
				offsets[p.Key] = ra[i].HighWatermark
			case ra[i].ErrorCode == 1:
				offsets[p.Key] = ra[i].LogStartOffset
			}
		}
		// The fetch's memory goes to the next one of the second cache,
		// which must not see this one's through it.
		quiet.Release(fq)
		session, epoch = ida, nextEpoch(epoch)
		if ida == NoSession || rng.IntN(40) == 0 {
			// A full fetch again, closing the session it names.
			epoch = InitialEpoch
		}
		now = now.Add(time.Second)
	}
	if skipped == 0 {
		t.Fatal("no partition was ever quiet: the test shows nothing")
	}
}
