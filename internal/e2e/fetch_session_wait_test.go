package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestIncrementalFetchWaitsForAnyPartition: an incremental fetch of a
// caught-up session reads none of its partitions, yet while it waits
// (MaxWait far beyond the raw connection's 10 s read deadline, so only a
// wake-up answers in time) an append to any of them must wake it, and
// with MinBytes above one batch it must wait on after a first append
// for a second one in another partition.
func TestIncrementalFetchWaitsForAnyPartition(t *testing.T) {
	a := startServer(t, t.TempDir())
	const parts = 50
	createTopic(t, a.Addr(), "sw", parts)
	cl := newClient(t, a.Addr(), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	produce := func(p int32) {
		t.Helper()
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "sw", Partition: p, Value: []byte("wake")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	rc := dialRaw(t, a.Addr())
	offsets := map[int32]int64{}
	for p := range int32(parts) {
		offsets[p] = 0
	}
	resp, err := rc.do(sessionFetch(12, "sw", [16]byte{}, 0, 0, offsets))
	if err != nil {
		t.Fatal(err)
	}
	sid := resp.(*kmsg.FetchResponse).SessionID
	if sid <= 0 {
		t.Fatalf("no session opened: %+v", resp)
	}
	waiting := func(epoch int32, minBytes int32, changed map[int32]int64) <-chan *kmsg.FetchResponse {
		req := sessionFetch(12, "sw", [16]byte{}, sid, epoch, changed)
		req.MaxWaitMillis, req.MinBytes = 60_000, minBytes
		done := make(chan *kmsg.FetchResponse, 1)
		go func() {
			resp, err := rc.do(req)
			if err != nil {
				t.Error(err)
			}
			r, _ := resp.(*kmsg.FetchResponse)
			done <- r
		}()
		return done
	}
	carried := func(r *kmsg.FetchResponse) (got []string, bytes int) {
		for _, s := range answered(r) {
			got = append(got, s[:strings.IndexAny(s, "=:")])
		}
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				bytes += len(p.RecordBatches)
			}
		}
		return got, bytes
	}

	done := waiting(1, 1, nil)
	select {
	case r := <-done:
		t.Fatalf("fetch of a caught-up session returned before any append: %v", answered(r))
	case <-time.After(200 * time.Millisecond):
	}
	produce(37)
	r := <-done
	got, one := carried(r)
	if r == nil || r.ErrorCode != 0 || !slices.Equal(got, []string{"37"}) || one == 0 {
		t.Fatalf("after an append to partition 37: %v", answered(r))
	}

	// Room for more than one batch: the first append wakes the fetch,
	// which waits on for the second.
	done = waiting(2, int32(one)+1, map[int32]int64{37: 1})
	select {
	case r := <-done:
		t.Fatalf("fetch returned before any append: %v", answered(r))
	case <-time.After(200 * time.Millisecond):
	}
	produce(5)
	select {
	case r := <-done:
		t.Fatalf("fetch returned with less than MinBytes: %v", answered(r))
	case <-time.After(200 * time.Millisecond):
	}
	produce(44)
	r = <-done
	if got, _ := carried(r); r == nil || r.ErrorCode != 0 || !slices.Equal(got, []string{"5", "44"}) {
		t.Fatalf("after appends to partitions 5 and 44: %v", answered(r))
	}
}
