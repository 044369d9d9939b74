package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/store"
)

// faultPanicGroup is a group whose requests make the fault-injection build
// of groupd panic in the group machine's step (internal/app, fault_on.go).
const faultPanicGroup = "groupd-faultinject-panic-step"

// groupOnShard returns a group id, starting with prefix, that the
// coordinator's default sharding puts on shard (or off it, with on false).
func groupOnShard(prefix string, shard int, on bool) string {
	for i := 0; ; i++ {
		id := prefix + strconv.Itoa(i)
		if (store.ShardOf(id, store.DefaultShards) == shard) == on {
			return id
		}
	}
}

func offsetCommit(groupID string, offset int64) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 8
	req.Group, req.Generation = groupID, -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Offset = offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// TestBinaryPanicInGroupMachineIsContained runs the fault-injection build,
// whose group machine panics on every request for faultPanicGroup, while a
// consumer group on another shard consumes. Every request that meets the
// panic is answered COORDINATOR_NOT_AVAILABLE on an open connection,
// stepped alone (on the connection's goroutine) or pipelined behind a
// commit whose write is in flight (on the shard's loop); the shard is
// rebuilt and its other groups' commits land; the consumer group is never
// interrupted; the metrics and the log tell of each panic; and the
// process serves on.
func TestBinaryPanicInGroupMachineIsContained(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := ln.Addr().String()
	ln.Close()
	p := startGroupdCmd(t, []string{groupdFaultBinary(t)}, t.TempDir(), "127.0.0.1:0", "--http-listen", httpAddr)

	faultShard := store.ShardOf(faultPanicGroup, store.DefaultShards)
	neighbour := groupOnShard("neighbour-", faultShard, true)
	steady := groupOnShard("steady-", faultShard, false)
	createTopic(t, p.addr, "feed", 4)

	// The consumer group on another shard, with a producer feeding it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var consumed atomic.Int64
	var wg sync.WaitGroup
	var consumeErr atomic.Value
	cons := newClient(t, p.addr, kgo.ConsumerGroup(steady), kgo.ConsumeTopics("feed"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitInterval(100*time.Millisecond))
	wg.Go(func() {
		for ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			fs.EachError(func(_ string, _ int32, err error) {
				if ctx.Err() == nil {
					consumeErr.Store(err)
				}
			})
			consumed.Add(int64(fs.NumRecords()))
		}
	})
	prod := newClient(t, p.addr)
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			prod.ProduceSync(ctx, &kgo.Record{Topic: "feed", Value: []byte(strconv.Itoa(i))})
			time.Sleep(time.Millisecond)
		}
	})
	waitProgress := func(what string) {
		t.Helper()
		from := consumed.Load()
		for deadline := time.Now().Add(30 * time.Second); consumed.Load() < from+20; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the consumer group on another shard stalled %s (%d records consumed)", what, consumed.Load())
			}
		}
	}
	waitProgress("before the panics")

	rc := dialRaw(t, p.addr)
	waitCoordinatorLoaded(t, rc, neighbour)
	commitCode := func(resp kmsg.Response) int16 {
		return resp.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
	}
	// commitNeighbour commits as a client would: retrying while the
	// shard is being rebuilt.
	commitNeighbour := func(offset int64) {
		t.Helper()
		for try := 0; ; try++ {
			resp, err := rc.do(offsetCommit(neighbour, offset))
			if err != nil {
				t.Fatalf("commit to %s: %v", neighbour, err)
			}
			ec := commitCode(resp)
			if ec == 0 {
				return
			}
			if (ec != kerr.CoordinatorNotAvailable.Code && ec != kerr.CoordinatorLoadInProgress.Code) || try == 50 {
				t.Fatalf("commit to %s: %v", neighbour, kerr.ErrorForCode(ec))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	panics := 0
	for i := range 5 {
		resp, err := rc.do(offsetCommit(faultPanicGroup, int64(i)))
		if err != nil {
			t.Fatalf("the request that met the panic closed its connection: %v", err)
		}
		if ec := commitCode(resp); ec != kerr.CoordinatorNotAvailable.Code {
			t.Fatalf("the request that met the panic: %v, want COORDINATOR_NOT_AVAILABLE", kerr.ErrorForCode(ec))
		}
		panics++
		commitNeighbour(int64(100 + i))
	}
	// Pipelined: the neighbour's commit goes to the writer, and the
	// request behind it is stepped by the shard's loop.
	for i := range 5 {
		first := rc.corr + 1
		var frames []byte
		for _, req := range []kmsg.Request{offsetCommit(neighbour, int64(200+i)), offsetCommit(faultPanicGroup, 0), offsetCommit(neighbour, int64(300+i))} {
			rc.corr++
			frames = append(frames, requestFrame(req, rc.corr)...)
		}
		rc.write(frames)
		for j := range int32(3) {
			corr, body, err := rc.readFrame()
			if err != nil {
				t.Fatalf("pipelined request %d of 3: %v", j+1, err)
			}
			if corr != first+j {
				t.Fatalf("reply with correlation id %d, want %d", corr, first+j)
			}
			resp := kmsg.NewPtrOffsetCommitResponse()
			resp.Version = 8
			if err := resp.ReadFrom(body[1:]); err != nil {
				t.Fatal(err)
			}
			ec := resp.Topics[0].Partitions[0].ErrorCode
			switch {
			case j == 1 && ec != kerr.CoordinatorNotAvailable.Code:
				t.Fatalf("the pipelined request that met the panic: %v", kerr.ErrorForCode(ec))
			case ec != 0 && ec != kerr.CoordinatorNotAvailable.Code:
				t.Fatalf("pipelined commit %d: %v", j+1, kerr.ErrorForCode(ec))
			}
		}
		panics++
		commitNeighbour(int64(400 + i))
	}
	waitProgress("after the panics")
	if err, _ := consumeErr.Load().(error); err != nil {
		t.Fatalf("the consumer group on another shard saw an error: %v", err)
	}
	cancel()
	wg.Wait()
	p.expectAlive(t)

	fams := scrape(t, httpAddr)
	if got := metricValue(fams, "groupd_coordinator_shard_panics_total"); got != float64(panics) {
		t.Fatalf("groupd_coordinator_shard_panics_total = %v, want %d", got, panics)
	}
	if got := metricValue(fams, "groupd_coordinator_shards_unavailable"); got != 0 {
		t.Fatalf("groupd_coordinator_shards_unavailable = %v, want 0", got)
	}
	logs := p.stderr.String()
	if n := strings.Count(logs, "panic while stepping the group machine"); n != panics {
		t.Fatalf("%d panic lines logged, want %d:\n%s", n, panics, logs)
	}
	if !strings.Contains(logs, fmt.Sprintf("groups=[%s]", faultPanicGroup)) {
		t.Fatalf("the panic's log line does not name the group:\n%s", logs)
	}
}
