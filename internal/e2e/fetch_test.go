package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/batch"
)

func fetchReq(topic string, offset int64, maxWaitMs, minBytes, maxBytes, partMaxBytes int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = maxWaitMs, minBytes, maxBytes
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes = offset, partMaxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// TestFetchAtLogEndWakesOnAppend parks a fetch at the end of the log with a
// long MaxWait; an append must answer it with the new data. A fetch that
// only woke at its deadline would come back empty.
func TestFetchAtLogEndWakesOnAppend(t *testing.T) {
	a := startServer(t, t.TempDir())
	createTopic(t, a.Addr(), "wait", 1)
	rc := dialRaw(t, a.Addr())

	type result struct {
		resp kmsg.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// MaxWait is far beyond the raw connection's 10 s read deadline,
		// so only a wake-up by the append can produce a reply in time.
		resp, err := rc.do(fetchReq("wait", 0, 60_000, 1, 1<<20, 1<<20))
		done <- result{resp, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("fetch returned before any data was produced: %+v %v", r.resp, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	cl := newClient(t, a.Addr(), kgo.DefaultProduceTopic("wait"))
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte("wake")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	p := r.resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != 0 || len(p.RecordBatches) == 0 || p.HighWatermark != 1 {
		t.Fatalf("woken fetch: error %d, %d bytes, high watermark %d", p.ErrorCode, len(p.RecordBatches), p.HighWatermark)
	}
}

// TestFetchLimits checks the byte limits: partition MaxBytes and MaxBytes
// cut at batch boundaries, but the first batch is returned whole however
// small the limit (KIP-74), and an empty result is empty, never null.
func TestFetchLimits(t *testing.T) {
	a := startServer(t, t.TempDir())
	createTopic(t, a.Addr(), "limits", 1)
	cl := newClient(t, a.Addr(), kgo.DefaultProduceTopic("limits"), kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()))
	for i := range 5 {
		// One record per batch: ProduceSync waits for each.
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: make([]byte, 1000+i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	rc := dialRaw(t, a.Addr())
	batches := func(req *kmsg.FetchRequest) (int, kmsg.FetchResponseTopicPartition) {
		t.Helper()
		resp, err := rc.do(req)
		if err != nil {
			t.Fatal(err)
		}
		p := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
		parts, err := batch.Split(p.RecordBatches)
		if err != nil && len(p.RecordBatches) > 0 {
			t.Fatalf("returned bytes are not whole batches: %v", err)
		}
		return len(parts), p
	}
	if n, _ := batches(fetchReq("limits", 0, 0, 1, 1<<20, 1<<20)); n != 5 {
		t.Fatalf("unlimited fetch: %d batches, want 5", n)
	}
	if n, _ := batches(fetchReq("limits", 0, 0, 1, 1<<20, 10)); n != 1 {
		t.Fatalf("partition max 10 bytes: %d batches, want 1 (the first, whole)", n)
	}
	if n, _ := batches(fetchReq("limits", 0, 0, 1, 2500, 1<<20)); n != 2 {
		t.Fatalf("max bytes 2500: %d batches, want 2", n)
	}
	if n, _ := batches(fetchReq("limits", 2, 0, 1, 1<<20, 1<<20)); n != 3 {
		t.Fatalf("fetch from offset 2: %d batches, want 3", n)
	}
	n, p := batches(fetchReq("limits", 5, 0, 1, 1<<20, 1<<20))
	if n != 0 || p.RecordBatches == nil || p.ErrorCode != 0 {
		t.Fatalf("fetch at the end: %d batches, records nil=%v, error %d", n, p.RecordBatches == nil, p.ErrorCode)
	}
	if _, p := batches(fetchReq("limits", 6, 0, 1, 1<<20, 1<<20)); p.ErrorCode != 1 {
		t.Fatalf("fetch past the end: error %d, want OFFSET_OUT_OF_RANGE (1)", p.ErrorCode)
	}
}

// TestProduceAcksZero sends with acks=0: no replies come back, the records
// are stored, and the connection keeps serving later requests in order.
func TestProduceAcksZero(t *testing.T) {
	a := startServer(t, t.TempDir())
	createTopic(t, a.Addr(), "acks0", 1)
	cl := newClient(t, a.Addr(), kgo.DefaultProduceTopic("acks0"), kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	for range 100 {
		cl.Produce(context.Background(), &kgo.Record{Value: []byte("x")}, nil)
	}
	if err := cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(newClient(t, a.Addr()))
	deadline := time.Now().Add(10 * time.Second)
	for {
		lo, err := adm.ListEndOffsets(context.Background(), "acks0")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := lo.Lookup("acks0", 0); o.Offset == 100 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("end offset %d after 100 acks=0 records", o.Offset)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
