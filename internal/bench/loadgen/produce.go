package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// valuePool is how many distinct record values a run cycles through: at
// o.recordSize bytes each, far more than a batch, so that a codec sees no
// repeats within one.
const valuePool = 4096

// recordValues builds valuePool values of size bytes: the first half
// random letters and digits (seeded, so the same for every side), the
// second half a fixed text, as log or event payloads mix both. Snappy
// makes them about half as large.
func recordValues(size int) [][]byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	const text = `{"service":"checkout","level":"info","msg":"order accepted","region":"eu-west-1","version":"2.14.3","retries":0,"cache":"hit"}`
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([][]byte, valuePool)
	for i := range out {
		v := make([]byte, size)
		for k := range size / 2 {
			v[k] = alphabet[rng.IntN(len(alphabet))]
		}
		for k := size / 2; k < size; k++ {
			v[k] = text[(k-size/2)%len(text)]
		}
		out[i] = v
	}
	return out
}

func codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("-compression %q: want none, snappy, lz4, zstd or gzip", name)
}

// runProduce produces o.records records of o.recordSize bytes with a kgo
// client (acks=all, idempotent, o.compression, kgo's other defaults:
// linger 10 ms, batches up to 1 MB, MaxBufferedRecords raised so that the
// producer never waits for buffer room) to a topic of o.partitions
// partitions, then fetches them all back with a second client from the
// start of every partition. The records are built before the window;
// one unmeasured pass of 1,000 records warms up connections and metadata.
// It reports produce and fetch MB/s of record values.
func runProduce(o *options) error {
	cc, err := codec(o.compression)
	if err != nil {
		return err
	}
	topic := "pf-" + o.compression
	if _, err := ensureTopic(o.target, topic, int32(o.partitions)); err != nil {
		return err
	}
	values := recordValues(o.recordSize)
	const warm = 1000
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.target), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(cc),
		kgo.MaxBufferedRecords(o.records+warm+1))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), o.limit)
	defer cancel()
	produce := func(n int) error {
		records := make([]*kgo.Record, n)
		for i := range records {
			records[i] = &kgo.Record{Value: values[i%len(values)]}
		}
		var failed atomic.Pointer[error]
		promise := func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		}
		runtime.GC()
		m := meter{pid: o.serverPID}
		m.start()
		for _, r := range records {
			cl.Produce(ctx, r, promise)
		}
		if err := cl.Flush(ctx); err != nil {
			return err
		}
		m.stop()
		if err := failed.Load(); err != nil {
			return *err
		}
		if n == warm {
			return nil
		}
		bytes := int64(n * o.recordSize)
		r := result{Scenario: o.scenario, Metric: "produce, " + o.compression, Unit: "MB/s", HigherIsBetter: true,
			Value: float64(bytes) / m.elapsed.Seconds() / 1e6}
		m.fill(&r, int64(n))
		r.Extra = map[string]float64{"mb": float64(bytes) / 1e6}
		r.print()
		return nil
	}
	if err := produce(warm); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	if err := produce(o.records); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	cl.Close()

	fc, err := kgo.NewClient(kgo.SeedBrokers(o.target))
	if err != nil {
		return err
	}
	defer fc.Close()
	if err := fc.Ping(ctx); err != nil {
		return err
	}
	offsets := map[int32]kgo.Offset{}
	for p := range int32(o.partitions) {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	want := o.records + warm
	runtime.GC()
	m := meter{pid: o.serverPID}
	m.start()
	fc.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	got, bytes := 0, int64(0)
	for got < want {
		fs := fc.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fetched %d of %d records: %w", got, want, err)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return fmt.Errorf("fetch: %v", errs[0].Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			bytes += int64(len(r.Value))
		})
	}
	m.stop()
	if got != want {
		return fmt.Errorf("fetched %d records, want %d", got, want)
	}
	r := result{Scenario: o.scenario, Metric: "fetch, " + o.compression, Unit: "MB/s", HigherIsBetter: true,
		Value: float64(bytes) / m.elapsed.Seconds() / 1e6}
	m.fill(&r, int64(got))
	r.Extra = map[string]float64{"mb": float64(bytes) / 1e6}
	r.print()
	return nil
}
