package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/groupd/groupd/internal/partition"
)

// readCompacted reads partition 0 from its start to its high watermark
// with kgo and returns the records.
func readCompacted(t *testing.T, addr, topic string, hw int64) []*kgo.Record {
	t.Helper()
	cl := newClient(t, addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	defer cl.Close()
	ctx := ctxFor(t, 20*time.Second)
	var out []*kgo.Record
	for len(out) == 0 || out[len(out)-1].Offset < hw-1 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d records, none at %d", len(out), hw-1)
		}
		for _, e := range fs.Errors() {
			t.Fatal(e.Err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// readCompactedSarama is readCompacted with sarama's partition consumer.
func readCompactedSarama(t *testing.T, addr, topic string, hw int64) []*sarama.ConsumerMessage {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	c, err := sarama.NewConsumer([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var out []*sarama.ConsumerMessage
	timeout := time.After(20 * time.Second)
	for len(out) == 0 || out[len(out)-1].Offset < hw-1 {
		select {
		case m := <-pc.Messages():
			out = append(out, m)
		case err := <-pc.Errors():
			t.Fatal(err)
		case <-timeout:
			t.Fatalf("sarama read %d records, none at %d", len(out), hw-1)
		}
	}
	return out
}

// TestCompactedTopic: many updates per key, tombstones for some keys; the
// cleaner keeps each key's last record at its offset, consumers of two
// client families read the compacted log, and after delete.retention.ms
// the deleted keys are gone.
func TestCompactedTopic(t *testing.T) {
	clk := newVirtualClock()
	a := startServer(t, t.TempDir(), clk.use)
	cl := newClient(t, a.Addr(), kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	adm := kadm.NewClient(cl)
	createWithConfigs(t, adm, "table", map[string]string{
		"cleanup.policy": "compact", "segment.bytes": "2048", "segment.ms": "3600000",
		"min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "60000",
	})
	const keys, rounds, deleted = 30, 20, 5
	type latest struct {
		offset int64
		value  string // "" for a tombstone
	}
	want := map[string]latest{}
	ctx := ctxFor(t, 60*time.Second)
	for r := range rounds {
		var recs []*kgo.Record
		for k := range keys {
			recs = append(recs, &kgo.Record{Topic: "table", Partition: 0, Key: fmt.Appendf(nil, "key-%02d", k),
				Value: fmt.Appendf(nil, "value %d of key %d, %s", r, k, strings.Repeat("x", k))})
			if len(recs) == 6 {
				if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				for _, rec := range recs {
					want[string(rec.Key)] = latest{rec.Offset, string(rec.Value)}
				}
				recs = nil
			}
		}
	}
	for k := range deleted {
		rec := &kgo.Record{Topic: "table", Partition: 0, Key: fmt.Appendf(nil, "key-%02d", k)}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		want[string(rec.Key)] = latest{rec.Offset, ""}
	}
	// A compacted topic refuses records without a key.
	err := cl.ProduceSync(ctx, &kgo.Record{Topic: "table", Partition: 0, Value: []byte("no key")}).FirstErr()
	if !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("a keyless record: %v", err)
	}
	// A record a day ahead rolls the segment (segment.ms counts record
	// time), so every update above is in a sealed segment.
	roll := &kgo.Record{Topic: "table", Partition: 0, Key: []byte("roll"), Value: []byte("r"), Timestamp: time.Now().Add(24 * time.Hour)}
	if err := cl.ProduceSync(ctx, roll).FirstErr(); err != nil {
		t.Fatal(err)
	}
	hw := roll.Offset + 1

	tp, _ := a.Broker().Topic("table")
	before := tp.Partition(0).Size()
	km := partition.NewKeyMap(1 << 20)
	if n := a.Broker().CleanLogs(km); n == 0 {
		t.Fatal("nothing was cleaned")
	}
	if after := tp.Partition(0).Size(); after*3 > before {
		t.Fatalf("size %d after cleaning, was %d", after, before)
	}
	check := func(tombstones bool) {
		t.Helper()
		got := map[string][]latest{}
		kr := readCompacted(t, a.Addr(), "table", hw)
		for _, r := range kr {
			got[string(r.Key)] = append(got[string(r.Key)], latest{r.Offset, string(r.Value)})
		}
		for k, w := range want {
			switch g := got[k]; {
			case w.value == "" && !tombstones && len(g) == 0:
			case len(g) != 1 || g[0] != w:
				t.Fatalf("%s: read %v, want only %v", k, g, w)
			}
		}
		// sarama reads the same records at the same offsets.
		sm := readCompactedSarama(t, a.Addr(), "table", hw)
		if len(sm) != len(kr) {
			t.Fatalf("sarama read %d records, kgo %d", len(sm), len(kr))
		}
		for i, m := range sm {
			if m.Offset != kr[i].Offset || string(m.Key) != string(kr[i].Key) || string(m.Value) != string(kr[i].Value) {
				t.Fatalf("sarama read %s at %d, kgo %s at %d", m.Key, m.Offset, kr[i].Key, kr[i].Offset)
			}
		}
	}
	check(true)

	clk.advance(2 * time.Minute)
	if n := a.Broker().CleanLogs(km); n == 0 {
		t.Fatal("the tombstones past delete.retention.ms were not cleaned")
	}
	check(false)
}
