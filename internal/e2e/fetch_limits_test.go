package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/batch/batchtest"
)

// fetchShape describes a fetch reply as "topic[partition@firstOffset/batches ...]".
func fetchShape(t *testing.T, resp *kmsg.FetchResponse) string {
	t.Helper()
	var b strings.Builder
	for _, rt := range resp.Topics {
		fmt.Fprintf(&b, "%s[", rt.Topic)
		for i, rp := range rt.Partitions {
			if i > 0 {
				b.WriteString(" ")
			}
			var parts [][]byte
			var err error
			if len(rp.RecordBatches) > 0 {
				parts, err = batch.Split(rp.RecordBatches)
			}
			if err != nil {
				t.Fatalf("partition %d: %v", rp.Partition, err)
			}
			first := int64(-1)
			if len(parts) > 0 {
				h, err := batch.ParseHeader(parts[0])
				if err != nil {
					t.Fatal(err)
				}
				first = h.BaseOffset
			}
			fmt.Fprintf(&b, "%d@%d/%d", rp.Partition, first, len(parts))
		}
		b.WriteString("]")
	}
	return b.String()
}

// TestFetchNamesEachPartitionOnce checks the fetch limits against abuse:
// as in Kafka, a partition named twice is answered once, where it was
// first named, for the last entry naming it; consecutive partitions of one
// topic share a topic entry; and --fetch-max-bytes caps what the request
// asks for, with the first batch returned whole.
func TestFetchNamesEachPartitionOnce(t *testing.T) {
	a := startServer(t, t.TempDir(), func(c *app.Config) { c.FetchMaxBytes = 2500 })
	createTopic(t, a.Addr(), "dup", 2)
	createTopic(t, a.Addr(), "other", 1)
	rc := dialRaw(t, a.Addr())
	for i := range 5 {
		rec := batchtest.Record{Value: make([]byte, 1000)}
		if p := rc.produce("dup", batchtest.Build(batchtest.NonIdempotent(int64(i), rec))); p.ErrorCode != 0 {
			t.Fatalf("produce: error %d", p.ErrorCode)
		}
	}
	fetch := func(maxBytes int32, topics ...kmsg.FetchRequestTopic) string {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxBytes, req.MinBytes = 12, maxBytes, 1
		req.Topics = topics
		resp, err := rc.do(req)
		if err != nil {
			t.Fatal(err)
		}
		return fetchShape(t, resp.(*kmsg.FetchResponse))
	}
	topic := func(name string, parts ...kmsg.FetchRequestTopicPartition) kmsg.FetchRequestTopic {
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.Partitions = name, parts
		return rt
	}
	part := func(p int32, offset int64) kmsg.FetchRequestTopicPartition {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, offset, 1<<20
		return rp
	}
	for _, c := range []struct {
		name     string
		maxBytes int32
		topics   []kmsg.FetchRequestTopic
		want     string
	}{
		{"the later entry wins, in the first one's place", 1 << 20,
			[]kmsg.FetchRequestTopic{topic("dup", part(0, 0), part(1, 0)), topic("other", part(0, 0)), topic("dup", part(0, 3))},
			"dup[0@3/2 1@-1/0]other[0@-1/0]"},
		{"consecutive entries of a topic share one", 1 << 20,
			[]kmsg.FetchRequestTopic{topic("dup", part(1, 0)), topic("dup", part(0, 4))},
			"dup[1@-1/0 0@4/1]"},
		{"named a thousand times, answered once", 1 << 20,
			[]kmsg.FetchRequestTopic{topic("dup", func() []kmsg.FetchRequestTopicPartition {
				var ps []kmsg.FetchRequestTopicPartition
				for i := range 1000 {
					ps = append(ps, part(0, int64(i%5)))
				}
				return ps
			}()...)},
			"dup[0@4/1]"},
		{"the broker's cap bounds a larger request", 1 << 20,
			[]kmsg.FetchRequestTopic{topic("dup", part(0, 0))},
			"dup[0@0/2]"},
		{"MaxBytes 0 returns the first batch whole", 0,
			[]kmsg.FetchRequestTopic{topic("dup", part(0, 0))},
			"dup[0@0/1]"},
	} {
		if got := fetch(c.maxBytes, c.topics...); got != c.want {
			t.Errorf("%s: reply %s, want %s", c.name, got, c.want)
		}
	}
}
