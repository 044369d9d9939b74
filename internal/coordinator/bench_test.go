package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
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

// BenchmarkHeartbeatsBackToBack measures the coordinator's share of a
// heartbeat as BenchmarkMembersBackToBack (internal/e2e) loads it: 1,000
// members, each of its own group and each with one heartbeat in flight,
// handed to the shards through Start as the API layer does, without the
// network in between:
//
//	go test ./internal/coordinator -run '^$' -bench HeartbeatsBackToBack -count 5
func BenchmarkHeartbeatsBackToBack(b *testing.B) {
	const members = 1000
	c := New(Config{Store: store.NewMemory(), Logger: slog.New(slog.DiscardHandler), Group: group.Config{InitialRebalanceDelay: -1}})
	defer c.Close()
	for _, s := range c.shards {
		<-s.ready
	}
	ctx := context.Background()
	beats := make([]*kmsg.HeartbeatRequest, members)
	for i := range beats {
		id := fmt.Sprintf("hb-%d", i)
		join := func(member string) *kmsg.JoinGroupResponse {
			req := kmsg.NewPtrJoinGroupRequest()
			req.Version = 9
			req.Group, req.MemberID = id, member
			req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 45000, 60000
			req.ProtocolType = "consumer"
			req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1}}}
			resp, err := c.Handle(ctx, "c", "/127.0.0.1", req)
			if err != nil {
				b.Fatal(err)
			}
			return resp.(*kmsg.JoinGroupResponse)
		}
		joined := join(join("").MemberID)
		if joined.ErrorCode != 0 {
			b.Fatalf("join %s: error %d", id, joined.ErrorCode)
		}
		sync := kmsg.NewPtrSyncGroupRequest()
		sync.Version = 5
		sync.Group, sync.MemberID, sync.Generation = id, joined.MemberID, joined.Generation
		sync.ProtocolType, sync.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
		sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: joined.MemberID}}
		if resp, err := c.Handle(ctx, "c", "/127.0.0.1", sync); err != nil || resp.(*kmsg.SyncGroupResponse).ErrorCode != 0 {
			b.Fatalf("sync %s: %v %v", id, err, resp)
		}
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.Version = 4
		hb.Group, hb.MemberID, hb.Generation = id, joined.MemberID, joined.Generation
		beats[i] = hb
	}
	per := b.N/members + 1
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), processCPU(b)
	var wg sync.WaitGroup
	for _, hb := range beats {
		wg.Go(func() {
			for range per {
				var p Pending
				c.Start(ctx, "c", "/127.0.0.1", hb, &p)
				resp, err := p.Wait(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if ec := resp.(*kmsg.HeartbeatResponse).ErrorCode; ec != 0 {
					b.Errorf("heartbeat: error %d", ec)
					return
				}
			}
		})
	}
	wg.Wait()
	n := float64(per * members)
	b.ReportMetric(n/time.Since(start).Seconds(), "hb/s")
	// On a shared machine the rate follows the other load; the CPU time
	// per heartbeat (callers' and shards') does not.
	b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/n, "cpu-ns/hb")
}

// processCPU is the user and system time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
