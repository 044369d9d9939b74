package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/app"
)

// virtualClock is the partitions' clock (app.Config.Log.Now), moved by
// the test; retention runs when the test says (Broker().EnforceRetention).
type virtualClock struct{ ms atomic.Int64 }

func newVirtualClock() *virtualClock {
	c := &virtualClock{}
	c.ms.Store(time.Now().Truncate(time.Second).UnixMilli())
	return c
}

func (c *virtualClock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *virtualClock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }
func (c *virtualClock) use(cfg *app.Config)     { cfg.Log.Now = c.now }

// uncompressed makes a producer's batches as large as their records, so
// segment sizes are predictable.
var uncompressed = kgo.ProducerBatchCompression(kgo.NoCompression())

// produceAt writes n records of 200 bytes stamped ts to partition 0, in
// batches of at most five, each well below a 2 KiB segment.
func produceAt(t *testing.T, cl *kgo.Client, topic string, n int, ts time.Time) {
	t.Helper()
	for n > 0 {
		var recs []*kgo.Record
		for range min(n, 5) {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Value: bytes.Repeat([]byte("r"), 200), Timestamp: ts})
		}
		if err := cl.ProduceSync(ctxFor(t, 30*time.Second), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		n -= len(recs)
	}
}

func startOffset(t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	lo, err := adm.ListStartOffsets(ctxFor(t, 10*time.Second), topic)
	if err != nil || lo.Error() != nil {
		t.Fatalf("list start offsets: %v %v", err, lo.Error())
	}
	o, _ := lo.Lookup(topic, 0)
	return o.Offset
}

// firstConsumed reads the first record a consumer of partition 0 gets
// when it asks for offset from, with the given reset policy.
func firstConsumed(t *testing.T, addr, topic string, from int64, reset kgo.Offset) *kgo.Record {
	t.Helper()
	r, err := firstRecord(addr, topic, from, reset)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// firstRecord is firstConsumed for any goroutine.
func firstRecord(addr, topic string, from int64, reset kgo.Offset) (*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}),
		kgo.ConsumeResetOffset(reset))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("nothing consumed from %d", from)
		}
		for _, e := range fs.Errors() {
			return nil, fmt.Errorf("fetch error: %w", e.Err)
		}
		if recs := fs.Records(); len(recs) > 0 {
			return recs[0], nil
		}
	}
}

func createWithConfigs(t *testing.T, adm *kadm.Client, topic string, configs map[string]string) {
	t.Helper()
	cfg := map[string]*string{}
	for k, v := range configs {
		cfg[k] = kmsg.StringPtr(v)
	}
	resp, err := adm.CreateTopic(ctxFor(t, 10*time.Second), 1, 1, cfg, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", topic, err, resp.Err)
	}
}

// TestRetentionByTime: segments whose records are older than retention.ms
// go, the log start moves (ListOffsets earliest follows, durably), and a
// consumer asking for an offset below it is reset as its policy says.
func TestRetentionByTime(t *testing.T) {
	clk := newVirtualClock()
	dir := t.TempDir()
	a := startServer(t, dir, clk.use)
	cl := newClient(t, a.Addr(), uncompressed)
	adm := kadm.NewClient(cl)
	createWithConfigs(t, adm, "aged", map[string]string{"segment.bytes": "2048", "retention.ms": "60000"})
	old := clk.now()
	produceAt(t, cl, "aged", 40, old)
	clk.advance(3 * time.Minute)
	produceAt(t, cl, "aged", 40, clk.now())
	clk.advance(30 * time.Second)

	if n := a.Broker().EnforceRetention(); n == 0 {
		t.Fatal("retention deleted nothing")
	}
	start := startOffset(t, adm, "aged")
	if start <= 0 || start > 40 {
		t.Fatalf("log start %d, want within the old records' segments (0, 40]", start)
	}
	if r := firstConsumed(t, a.Addr(), "aged", 0, kgo.NewOffset().AtStart()); r.Offset != start {
		t.Fatalf("reset to the start: first record at %d, log start %d", r.Offset, start)
	}
	if r := firstConsumed(t, a.Addr(), "aged", 0, kgo.NewOffset().AtStart()); !r.Timestamp.Equal(old) && r.Offset < 40 {
		t.Fatalf("a kept old record has timestamp %v", r.Timestamp)
	}
	// A group whose committed offset is below the log start resets too.
	if _, err := adm.CommitOffsets(ctxFor(t, 10*time.Second), "stale", kadm.OffsetsFromRecords(kgo.Record{Topic: "aged", Partition: 0, Offset: -1})); err != nil {
		t.Fatal(err)
	}
	grp := newClient(t, a.Addr(), kgo.ConsumerGroup("stale"), kgo.ConsumeTopics("aged"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx := ctxFor(t, 20*time.Second)
	for {
		fs := grp.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("the group consumed nothing")
		}
		if recs := fs.Records(); len(recs) > 0 {
			if recs[0].Offset != start {
				t.Fatalf("group reset to %d, log start %d", recs[0].Offset, start)
			}
			break
		}
	}
	grp.Close()

	stopServer(t, a)
	a = startServer(t, dir, clk.use)
	adm = kadm.NewClient(newClient(t, a.Addr()))
	if got := startOffset(t, adm, "aged"); got != start {
		t.Fatalf("log start %d after a restart, was %d", got, start)
	}
	// Reset to the end: only records written after the reset arrive.
	// Records keep coming until one does, so the test does not depend on
	// when the consumer resets.
	cl = newClient(t, a.Addr(), uncompressed)
	type result struct {
		r   *kgo.Record
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := firstRecord(a.Addr(), "aged", 0, kgo.NewOffset().AtEnd())
		done <- result{r, err}
	}()
	for {
		select {
		case res := <-done:
			if res.err != nil {
				t.Fatal(res.err)
			}
			if r := res.r; r.Offset < 80 {
				t.Fatalf("reset to the end: first record at %d, below the end 80", r.Offset)
			}
			return
		case <-time.After(50 * time.Millisecond):
			produceAt(t, cl, "aged", 1, clk.now())
		}
	}
}

// TestRetentionBySize: the oldest segments go while the partition is
// larger than retention.bytes.
func TestRetentionBySize(t *testing.T) {
	clk := newVirtualClock()
	a := startServer(t, t.TempDir(), clk.use)
	cl := newClient(t, a.Addr(), uncompressed)
	adm := kadm.NewClient(cl)
	createWithConfigs(t, adm, "sized", map[string]string{"segment.bytes": "2048", "retention.bytes": "8192"})
	for range 10 {
		produceAt(t, cl, "sized", 10, clk.now())
	}
	tp, _ := a.Broker().Topic("sized")
	l := tp.Partition(0)
	before := l.Size()
	a.Broker().EnforceRetention()
	// As in Kafka, a segment goes only if the rest still holds retention.bytes.
	if l.Size() > 8192+2048 || l.Size() < 8192 || startOffset(t, adm, "sized") == 0 {
		t.Fatalf("size %d (was %d), log start %d after retention to 8192 bytes", l.Size(), before, startOffset(t, adm, "sized"))
	}
	if r := firstConsumed(t, a.Addr(), "sized", 0, kgo.NewOffset().AtStart()); r.Offset != l.LogStartOffset() {
		t.Fatalf("first record %d, log start %d", r.Offset, l.LogStartOffset())
	}
}

// TestDeleteRecords: kadm's DeleteRecords moves the log start, durably;
// reads below it are out of range, and an offset past the end is refused.
func TestDeleteRecords(t *testing.T) {
	dir := t.TempDir()
	a := startServer(t, dir)
	cl := newClient(t, a.Addr(), uncompressed)
	adm := kadm.NewClient(cl)
	createWithConfigs(t, adm, "trim", map[string]string{"segment.bytes": "2048"})
	produceAt(t, cl, "trim", 50, time.Now())
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "trim", Partition: 0, At: 30})
	resp, err := adm.DeleteRecords(ctxFor(t, 10*time.Second), offs)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := resp.Lookup("trim", 0)
	if r.Err != nil || r.LowWatermark != 30 {
		t.Fatalf("delete records: %+v", r)
	}
	if got := startOffset(t, adm, "trim"); got != 30 {
		t.Fatalf("log start %d", got)
	}
	rc := dialRaw(t, a.Addr())
	fr, err := rc.do(fetchReq("trim", 29, 0, 1, 1<<20, 1<<20))
	if err != nil || fr.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Fatalf("fetch below the log start: %v %+v", err, fr)
	}
	offs = kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "trim", Partition: 0, At: 51})
	resp, _ = adm.DeleteRecords(ctxFor(t, 10*time.Second), offs)
	if r, _ := resp.Lookup("trim", 0); r.Err == nil {
		t.Fatal("deleting past the high watermark was accepted")
	}
	stopServer(t, a)
	a = startServer(t, dir)
	if got := startOffset(t, kadm.NewClient(newClient(t, a.Addr())), "trim"); got != 30 {
		t.Fatalf("log start %d after a restart", got)
	}
}
