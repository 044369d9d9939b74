package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	e2ePartitions = 8
	e2eRecords    = 10000
)

var codecs = []struct {
	name  string
	codec kgo.CompressionCodec
}{
	{"none", kgo.NoCompression()},
	{"gzip", kgo.GzipCompression()},
	{"snappy", kgo.SnappyCompression()},
	{"lz4", kgo.Lz4Compression()},
	{"zstd", kgo.ZstdCompression()},
}

func newClient(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func createTopic(t testing.TB, addr, topic string, partitions int32) {
	t.Helper()
	adm := kadm.NewClient(newClient(t, addr))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
	}
}

// produceKeyed writes n records whose key is the record number and whose
// value names the topic and number, spread over partitions by key hash.
func produceKeyed(t testing.TB, cl *kgo.Client, topic string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, 1)
	for i := range n {
		r := &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: fmt.Appendf(nil, "%s-%d", topic, i)}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Fatalf("produce: %v", err)
	default:
	}
}

// consumeAll reads n records from the start of topic and checks that each
// partition's records come in offset order with no gaps and that every key
// appears exactly once. It returns the records per partition.
func consumeAll(t testing.TB, addr, topic string, n int) map[int32][]*kgo.Record {
	t.Helper()
	cl := newClient(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := make(map[int32][]*kgo.Record)
	seen := make(map[string]bool, n)
	for count := 0; count < n; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", count, n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			recs := got[r.Partition]
			if want := int64(len(recs)); r.Offset != want {
				t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, want)
			}
			if k := string(r.Key); seen[k] {
				t.Fatalf("key %s consumed twice", k)
			} else {
				seen[k] = true
			}
			if want := fmt.Sprintf("%s-%s", topic, r.Key); string(r.Value) != want {
				t.Fatalf("value %q, want %q", r.Value, want)
			}
			got[r.Partition] = append(recs, r)
			count++
		})
	}
	return got
}

// checkKeyOrder asserts that within each partition the keys that share a
// partition arrive in the order they were produced.
func checkKeyOrder(t testing.TB, got map[int32][]*kgo.Record) {
	t.Helper()
	for p, recs := range got {
		last := -1
		for _, r := range recs {
			k, _ := strconv.Atoi(string(r.Key))
			if k <= last {
				t.Fatalf("partition %d: key %d after %d", p, k, last)
			}
			last = k
		}
	}
}

func TestFranzGoProduceConsumeRestart(t *testing.T) {
	dir := t.TempDir()
	a := startServer(t, dir)
	for _, c := range codecs {
		topic := "kgo-" + c.name
		createTopic(t, a.Addr(), topic, e2ePartitions)
		// A single in-flight request per broker keeps the produce order
		// per partition equal to the key order, which the check below
		// relies on.
		produceKeyed(t, newClient(t, a.Addr(), kgo.ProducerBatchCompression(c.codec), kgo.MaxBufferedRecords(e2eRecords)), topic, e2eRecords)
		got := consumeAll(t, a.Addr(), topic, e2eRecords)
		if len(got) != e2ePartitions {
			t.Fatalf("%s: records landed in %d partitions, want %d", topic, len(got), e2ePartitions)
		}
		checkKeyOrder(t, got)
	}

	stopServer(t, a)
	a = startServer(t, dir)
	for _, c := range codecs {
		topic := "kgo-" + c.name
		checkKeyOrder(t, consumeAll(t, a.Addr(), topic, e2eRecords))
	}
}
