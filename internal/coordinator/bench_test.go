package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/store"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// BenchmarkCommits measures simple-group OffsetCommit throughput through
// the coordinator and a Pebble store, with as many concurrent callers as
// the e2e benchmark has connections, without the network in between:
//
//	go test ./internal/coordinator -run '^$' -bench Commits
func BenchmarkCommits(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(fmt.Sprintf("sync=%v", sync), func(b *testing.B) {
			st, err := store.OpenPebble(b.TempDir(), store.Options{Sync: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			c := New(Config{Store: st, Logger: slog.New(slog.DiscardHandler), Group: group.Config{InitialRebalanceDelay: -1}})
			defer c.Close()
			for _, s := range c.shards {
				<-s.ready
			}
			benchCommits(b, c)
		})
	}
}

func benchCommits(b *testing.B, c *Coordinator) {
	const callers, groups, parts = 32, 1000, 10
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := b.N/callers + 1
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				req := kmsg.NewPtrOffsetCommitRequest()
				req.Version = 9
				req.Group = fmt.Sprintf("commit-%d", (w+i*callers)%groups)
				req.Generation = -1
				t := kmsg.NewOffsetCommitRequestTopic()
				t.Topic = "t"
				for p := range int32(parts) {
					rp := kmsg.NewOffsetCommitRequestTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch = p, int64(i), -1
					t.Partitions = append(t.Partitions, rp)
				}
				req.Topics = []kmsg.OffsetCommitRequestTopic{t}
				resp, err := c.Handle(context.Background(), "c", "h", req)
				if err != nil {
					b.Error(err)
					return
				}
				if ec := resp.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; ec != 0 {
					b.Errorf("error %d", ec)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(per*callers)/time.Since(start).Seconds(), "commits/s")
}
