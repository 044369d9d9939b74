package e2e

import (
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/partition"
)

// BenchmarkProduceCPU runs the produce throughput benchmark's workload
// (without fsync) and measures the process's CPU time per pass of 20 MiB,
// client and broker together, instead of wall-clock time: on a machine
// shared with other work it still compares groupd with kfake, and one
// commit with another. It reports groupd's and kfake's CPU per pass and
// their ratio (kfake / groupd; below 1 means groupd costs more);
// header-only runs groupd with --header-only-compressed-validation.
//
//	go test ./internal/e2e -run '^$' -bench ProduceCPU -benchtime 30x -count 5
func BenchmarkProduceCPU(b *testing.B) {
	for _, mode := range []struct {
		name       string
		headerOnly bool
	}{{"validate=records", false}, {"validate=header-only", true}} {
		b.Run(mode.name, func(b *testing.B) {
			a := startServer(b, b.TempDir(), func(c *app.Config) {
				c.Log.Sync = partition.SyncNever
				c.Log.HeaderOnlyCompressed = mode.headerOnly
			})
			createTopic(b, a.Addr(), benchTopic, benchPartitions)
			kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(benchPartitions, benchTopic))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(kf.Close)
			targets := []benchTarget{{"groupd", a.Addr()}, {"kfake", kf.ListenAddrs()[0]}}
			clients := make(map[string]*kgo.Client)
			for _, t := range targets {
				clients[t.name] = newClient(b, t.addr, kgo.ProducerLinger(0), kgo.MaxBufferedRecords(benchRecords))
				produceN(b, clients[t.name], 1000)
			}
			cpu := make(map[string]time.Duration)
			b.ResetTimer()
			for range b.N {
				for _, t := range targets {
					before := processCPU(b, os.Getpid())
					produceN(b, clients[t.name], benchRecords)
					cpu[t.name] += processCPU(b, os.Getpid()) - before
				}
			}
			b.StopTimer()
			perPass := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(b.N) }
			b.ReportMetric(perPass(cpu["groupd"]), "groupd-cpu-ms/pass")
			b.ReportMetric(perPass(cpu["kfake"]), "kfake-cpu-ms/pass")
			b.ReportMetric(perPass(cpu["kfake"])/perPass(cpu["groupd"]), "ratio")
		})
	}
}
