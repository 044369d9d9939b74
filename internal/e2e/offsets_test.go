package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/batch/batchtest"
)

func buildBatch(vals ...string) []byte {
	return batchtest.Build(batchtest.NonIdempotent(time.Now().UnixMilli(), batchtest.Values(vals...)...))
}

func topicIDOf(t testing.TB, addr, topic string) [16]byte {
	t.Helper()
	adm := kadm.NewClient(newClient(t, addr))
	td, err := adm.ListTopics(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	id := td[topic].ID
	if id == ([16]byte{}) {
		t.Fatalf("topic %s has a zero id", topic)
	}
	return id
}

func TestListOffsets(t *testing.T) {
	a := startServer(t, t.TempDir())
	createTopic(t, a.Addr(), "lo", 1)
	cl := newClient(t, a.Addr(), kgo.DefaultProduceTopic("lo"))
	ctx := context.Background()

	// Ten records at timestamps 1000, 2000, ... 10000 and one at 50000
	// in the middle, so the max timestamp is not the last record.
	for i := range 10 {
		ts := int64(i+1) * 1000
		if i == 5 {
			ts = 50000
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}, Timestamp: time.UnixMilli(ts)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	check := func(name string, lo kadm.ListedOffsets, err error, wantOff int64) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		o, ok := lo.Lookup("lo", 0)
		if !ok || o.Err != nil || o.Offset != wantOff {
			t.Fatalf("%s: %+v, want offset %d", name, o, wantOff)
		}
	}
	lo, err := adm.ListStartOffsets(ctx, "lo")
	check("earliest", lo, err, 0)
	lo, err = adm.ListEndOffsets(ctx, "lo")
	check("latest", lo, err, 10)
	lo, err = adm.ListOffsetsAfterMilli(ctx, 2500, "lo")
	check("timestamp 2500", lo, err, 2)
	lo, err = adm.ListOffsetsAfterMilli(ctx, 3000, "lo")
	check("timestamp 3000", lo, err, 2)
	lo, err = adm.ListOffsetsAfterMilli(ctx, 20000, "lo")
	check("timestamp 20000", lo, err, 5)
	lo, err = adm.ListOffsetsAfterMilli(ctx, 60000, "lo")
	// Past every record Kafka answers -1; kadm turns that into the end.
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := lo.Lookup("lo", 0); o.Offset != 10 && o.Offset != -1 {
		t.Fatalf("timestamp past the end: offset %d", o.Offset)
	}

	// Max timestamp (-3) names the record with the largest timestamp.
	rc := dialRaw(t, a.Addr())
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version = 7
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "lo"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = -3
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := rc.do(req)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	if p.ErrorCode != 0 || p.Offset != 5 || p.Timestamp != 50000 {
		t.Fatalf("max timestamp: %+v, want offset 5 at 50000", p)
	}
}

func TestIdempotentRetryIsNotDuplicated(t *testing.T) {
	a := startServer(t, t.TempDir())
	createTopic(t, a.Addr(), "idem", 1)
	rc := dialRaw(t, a.Addr())

	ipid := kmsg.NewPtrInitProducerIDRequest()
	ipid.Version = 4
	r, err := rc.do(ipid)
	if err != nil {
		t.Fatal(err)
	}
	pr := r.(*kmsg.InitProducerIDResponse)
	if pr.ErrorCode != 0 || pr.ProducerID < 0 {
		t.Fatalf("InitProducerID: %+v", pr)
	}

	send := func(seq int32, vals ...string) kmsg.ProduceResponseTopicPartition {
		t.Helper()
		spec := batchtest.NonIdempotent(time.Now().UnixMilli(), batchtest.Values(vals...)...)
		spec.ProducerID, spec.ProducerEpoch, spec.BaseSequence = pr.ProducerID, pr.ProducerEpoch, seq
		return rc.produce("idem", batchtest.Build(spec))
	}
	first := send(0, "a", "b", "c")
	second := send(3, "d")
	retry := send(0, "a", "b", "c") // the first batch again, as after a lost reply
	if first.ErrorCode != 0 || second.ErrorCode != 0 || retry.ErrorCode != 0 {
		t.Fatalf("errors: %d %d %d", first.ErrorCode, second.ErrorCode, retry.ErrorCode)
	}
	if retry.BaseOffset != first.BaseOffset {
		t.Fatalf("retried batch got offset %d, want the original %d", retry.BaseOffset, first.BaseOffset)
	}
	if gap := send(9, "x"); gap.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("sequence gap: error %d, want OUT_OF_ORDER_SEQUENCE_NUMBER", gap.ErrorCode)
	}

	lo, err := kadm.NewClient(newClient(t, a.Addr())).ListEndOffsets(context.Background(), "idem")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := lo.Lookup("idem", 0); o.Offset != 4 {
		t.Fatalf("end offset %d after a duplicate, want 4", o.Offset)
	}
}
