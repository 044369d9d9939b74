package store

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/groupd/groupd/internal/group"
)

// BenchmarkApplyOffsetCommit measures offset commits per second: many
// goroutines each Apply one offset record at a time, as many consumers
// committing through their own connections would. syncs/commit below 1 is
// group commit at work.
//
//	go test -run '^$' -bench ApplyOffsetCommit -benchtime 3s ./internal/store
func BenchmarkApplyOffsetCommit(b *testing.B) {
	for _, conc := range []int{1, 64} {
		for _, sync := range []bool{true, false} {
			b.Run(fmt.Sprintf("sync=%v/goroutines=%d", sync, conc), func(b *testing.B) {
				s, err := OpenPebble(b.TempDir(), Options{Shards: DefaultShards, Sync: sync})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				benchCommits(b, s, conc)
				b.ReportMetric(float64(s.WALSyncs())/float64(b.N), "syncs/commit")
			})
		}
	}
	b.Run("memory/goroutines=64", func(b *testing.B) {
		benchCommits(b, NewMemory(), 64)
	})
}

func benchCommits(b *testing.B, s Store, conc int) {
	var next atomic.Int64
	// RunParallel starts parallelism*GOMAXPROCS goroutines.
	par := max(conc/runtime.GOMAXPROCS(0), 1)
	b.SetParallelism(par)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := next.Add(1)
		g := fmt.Sprintf("group-%d", w)
		i := int64(0)
		for pb.Next() {
			i++
			rec := group.Record{Type: group.RecordOffsetCommit, Group: g, Topic: "orders", Partition: int32(i % 16),
				Offset: &group.OffsetCommit{Offset: i, LeaderEpoch: 3, CommitTimestamp: 1_700_000_000_000, ExpireTimestamp: -1}}
			if err := s.Apply([]group.Record{rec}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}
