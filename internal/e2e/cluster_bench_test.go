package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkClusterProduce compares produce with acks=all on one groupd
// node against a cluster of three, each node its own process on this
// machine, over a topic with three replicas and min.insync.replicas=2: the
// same franz-go workload (1 KiB records, 8 partitions) alternates between
// the two in every iteration. It reports each side's MB/s, their ratio
// (cluster / single) and each side's p99 from Produce to acknowledgement.
//
//	go test ./internal/e2e -run '^$' -bench ClusterProduce -count 5
func BenchmarkClusterProduce(b *testing.B) {
	for _, fsync := range []string{"never", "always"} {
		b.Run("fsync="+fsync, func(b *testing.B) { benchmarkClusterProduce(b, fsync) })
	}
}

func benchmarkClusterProduce(b *testing.B, fsync string) {
	ctx := context.Background()
	single := startGroupd(b, b.TempDir(), "127.0.0.1:0", "--fsync", fsync)
	etcd := startEtcd(b)
	var seeds []string
	for i := range 3 {
		n := &clusterProc{id: int32(i + 1), dir: b.TempDir(), addr: freeAddr(b)}
		n.p = startGroupd(b, n.dir, n.addr, "--node-id", fmt.Sprint(n.id),
			"--etcd-endpoints", etcd, "--etcd-prefix", "/groupd/bench",
			"--default-replication-factor", "3", "--min-insync-replicas", "2", "--fsync", fsync)
		seeds = append(seeds, n.addr)
	}
	sides := []struct {
		name  string
		seeds []string
		rf    int16
	}{{"single", []string{single.addr}, 1}, {"rf3", seeds, 3}}
	clients := map[string]*kgo.Client{}
	for _, s := range sides {
		cl, err := kgo.NewClient(kgo.SeedBrokers(s.seeds...), kgo.DefaultProduceTopic(benchTopic),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(benchRecords))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cl.Close)
		adm := kadm.NewClient(cl)
		deadline := time.Now().Add(30 * time.Second)
		for {
			ids, _, err := liveBrokers(ctx, cl)
			if err == nil && len(ids) == len(s.seeds) {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s: brokers not up: %v", s.name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if res, err := adm.CreateTopic(ctx, benchPartitions, s.rf, nil, benchTopic); err != nil || res.Err != nil {
			b.Fatalf("%s: create topic: %v %v", s.name, err, res.Err)
		}
		clients[s.name] = cl
		produceTimed(b, cl, 1000) // warm up connections and metadata
	}
	elapsed := map[string]time.Duration{}
	lat := map[string][]time.Duration{}
	b.ResetTimer()
	for range b.N {
		for _, s := range sides {
			start := time.Now()
			lat[s.name] = append(lat[s.name], produceTimed(b, clients[s.name], benchRecords)...)
			elapsed[s.name] += time.Since(start)
		}
	}
	b.StopTimer()
	bytes := float64(b.N) * benchRecords * benchRecordSize
	mbs := func(name string) float64 { return bytes / elapsed[name].Seconds() / 1e6 }
	b.ReportMetric(mbs("single"), "single-MB/s")
	b.ReportMetric(mbs("rf3"), "rf3-MB/s")
	b.ReportMetric(mbs("rf3")/mbs("single"), "ratio")
	for _, s := range sides {
		l := lat[s.name]
		slices.Sort(l)
		b.ReportMetric(float64(l[len(l)*99/100].Microseconds())/1000, s.name+"-p99-ms")
	}
}

// produceTimed produces n records and returns each one's time from
// Produce to its acknowledgement.
func produceTimed(b *testing.B, cl *kgo.Client, n int) []time.Duration {
	ctx := context.Background()
	var (
		mu       sync.Mutex
		firstErr error
		lat      = make([]time.Duration, 0, n)
	)
	for i := range n {
		r := &kgo.Record{Key: fmt.Appendf(nil, "%d", i), Value: benchValue}
		at := time.Now()
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			took := time.Since(at)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			lat = append(lat, took)
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return lat
}
