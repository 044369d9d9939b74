package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/partition"
)

// The throughput benchmarks drive groupd and franz-go's kfake with the same
// franz-go client workload in the same run, and report each side's MB/s and
// their ratio (groupd / kfake; above 1 means groupd is faster).
//
//	go test ./internal/e2e -run '^$' -bench Throughput -count 5

const (
	benchTopic      = "bench"
	benchPartitions = 8
	benchRecordSize = 1024
	benchRecords    = 20000 // 20 MiB of values per measured pass
)

type benchTarget struct {
	name string
	addr string
}

// benchTargets starts groupd (with the given fsync policy) and kfake (with
// the given options), each with the bench topic created.
func benchTargets(b *testing.B, sync partition.SyncPolicy, kfakeOpts ...kfake.Opt) []benchTarget {
	b.Helper()
	a := startServer(b, b.TempDir(), func(c *app.Config) { c.Log.Sync = sync })
	createTopic(b, a.Addr(), benchTopic, benchPartitions)
	kf, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(benchPartitions, benchTopic)}, kfakeOpts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kf.Close)
	return []benchTarget{{"groupd", a.Addr()}, {"kfake", kf.ListenAddrs()[0]}}
}

var benchValue = make([]byte, benchRecordSize)

func produceN(b *testing.B, cl *kgo.Client, n int) {
	ctx := context.Background()
	var firstErr error
	for i := range n {
		r := &kgo.Record{Topic: benchTopic, Key: fmt.Appendf(nil, "%d", i), Value: benchValue}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

func reportRatio(b *testing.B, secs map[string]time.Duration, bytes float64) {
	g := bytes / secs["groupd"].Seconds() / 1e6
	k := bytes / secs["kfake"].Seconds() / 1e6
	b.ReportMetric(g, "groupd-MB/s")
	b.ReportMetric(k, "kfake-MB/s")
	b.ReportMetric(g/k, "ratio")
}

func benchmarkProduce(b *testing.B, sync partition.SyncPolicy, kfakeOpts ...kfake.Opt) {
	targets := benchTargets(b, sync, kfakeOpts...)
	clients := make(map[string]*kgo.Client)
	for _, t := range targets {
		clients[t.name] = newClient(b, t.addr, kgo.ProducerLinger(0), kgo.MaxBufferedRecords(benchRecords))
		produceN(b, clients[t.name], 1000) // warm up connections and metadata
	}
	elapsed := make(map[string]time.Duration)
	b.ResetTimer()
	for range b.N {
		for _, t := range targets {
			start := time.Now()
			produceN(b, clients[t.name], benchRecords)
			elapsed[t.name] += time.Since(start)
		}
	}
	b.StopTimer()
	reportRatio(b, elapsed, float64(b.N)*benchRecords*benchRecordSize)
}

// BenchmarkProduceThroughput compares like with like: groupd without fsync
// against kfake in memory, and groupd fsyncing every append against kfake
// persisting to a data directory with synced writes.
func BenchmarkProduceThroughput(b *testing.B) {
	b.Run("fsync=never/kfake=memory", func(b *testing.B) { benchmarkProduce(b, partition.SyncNever) })
	b.Run("fsync=always/kfake=memory", func(b *testing.B) { benchmarkProduce(b, partition.SyncAlways) })
	b.Run("fsync=always/kfake=sync-writes", func(b *testing.B) {
		benchmarkProduce(b, partition.SyncAlways, kfake.DataDir(b.TempDir()), kfake.SyncWrites())
	})
}

func BenchmarkFetchThroughput(b *testing.B) {
	targets := benchTargets(b, partition.SyncNever)
	for _, t := range targets {
		produceN(b, newClient(b, t.addr, kgo.MaxBufferedRecords(benchRecords)), benchRecords)
	}
	elapsed := make(map[string]time.Duration)
	b.ResetTimer()
	for range b.N {
		for _, t := range targets {
			cl := newClient(b, t.addr, kgo.ConsumeTopics(benchTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			for n := 0; n < benchRecords; {
				fs := cl.PollFetches(ctx)
				if ctx.Err() != nil {
					b.Fatalf("%s: fetched %d of %d records", t.name, n, benchRecords)
				}
				n += fs.NumRecords()
			}
			cancel()
			elapsed[t.name] += time.Since(start)
			cl.Close()
		}
	}
	b.StopTimer()
	reportRatio(b, elapsed, float64(b.N)*benchRecords*benchRecordSize)
}
