package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/api"
	"github.com/groupd/groupd/internal/batch/batchtest"
	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/coordinator"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/server"
	"github.com/groupd/groupd/internal/store"
)

// fuzzTarget is the whole request path below the server: the API handlers
// over a real broker, pebble store and coordinator in a temp dir.
type fuzzTarget struct {
	b *broker.Broker
	h *api.Handler
}

func newFuzzTarget(tb testing.TB) *fuzzTarget {
	dir := tb.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := broker.Open(broker.Config{DataDir: dir, AutoCreateTopics: true, DefaultPartitions: 1,
		Log: partition.Options{Sync: partition.SyncNever}, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	st, err := store.OpenPebble(filepath.Join(dir, "coordinator"), store.Options{Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	// No initial rebalance delay: a lone JoinGroup completes at once
	// instead of parking past the fuzz input's deadline.
	coord := coordinator.New(coordinator.Config{Group: group.Config{InitialRebalanceDelay: -1}, Store: st, Logger: quiet})
	tb.Cleanup(func() {
		coord.Close()
		st.Close()
		b.Close()
	})
	if _, err := b.CreateTopic("fuzz", 2, nil, false); err != nil {
		tb.Fatal(err)
	}
	return &fuzzTarget{b: b, h: api.New(b, coord, "127.0.0.1", 9092, quiet)}
}

// maxFuzzPartitions bounds the partitions fuzz inputs may create. The
// broker bounds neither the partitions of one request nor their total; a
// fuzzer that creates millions of files finds a full disk, not a bug.
const maxFuzzPartitions = 256

// creates reports how many partitions req may create (an upper bound).
func (f *fuzzTarget) creates(req kmsg.Request) int64 {
	var n int64
	switch r := req.(type) {
	case *kmsg.CreateTopicsRequest:
		for _, t := range r.Topics {
			n += max(int64(t.NumPartitions), int64(len(t.ReplicaAssignment)), 1)
		}
	case *kmsg.CreatePartitionsRequest:
		for _, t := range r.Topics {
			n += max(int64(t.Count), 0)
		}
	case *kmsg.MetadataRequest:
		if r.Version < 4 || r.AllowAutoTopicCreation {
			n = int64(len(r.Topics))
		}
	}
	return n
}

func (f *fuzzTarget) partitions() int64 {
	var n int64
	for _, t := range f.b.Topics() {
		n += int64(len(t.Partitions()))
	}
	return n
}

// serve takes a frame down the path the server's read loop takes, with
// nothing to recover a panic: a panic anywhere fails the fuzz run. The
// reply must encode into something a client can decode again.
func (f *fuzzTarget) serve(t *testing.T, frame []byte) {
	var size [4]byte
	in := append(binary.BigEndian.AppendUint32(nil, uint32(len(frame))), frame...)
	fr, err := server.ReadFrame(bytes.NewReader(in), size[:], 1<<20)
	if err != nil {
		return
	}
	hdr, req, err := server.DecodeRequest(fr, f.h)
	if err != nil {
		return
	}
	if n := f.creates(req); n > 0 && f.partitions()+n > maxFuzzPartitions {
		return
	}
	// Parked requests (a long-polling fetch, a JoinGroup waiting for
	// members) give up soon; what they did on the way is what is tested.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	resp, err := f.h.Handle(ctx, &server.Request{Header: hdr, Msg: req, Remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000}})
	if err != nil || resp == nil {
		return
	}
	if w, ok := resp.(server.Waiter); ok {
		if err := w.Wait(); err != nil {
			return
		}
	}
	out := server.AppendResponse(nil, hdr.CorrelationID, resp)
	back := kmsg.ResponseForKey(resp.Key())
	back.SetVersion(resp.GetVersion())
	body := out[8:]
	if resp.IsFlexible() && resp.Key() != int16(kmsg.ApiVersions) {
		body = body[1:]
	}
	if err := back.ReadFrom(body); err != nil {
		t.Fatalf("%s v%d reply does not decode: %v", kmsg.NameForKey(resp.Key()), resp.GetVersion(), err)
	}
}

// fuzzSeeds are requests that get past decoding and into the handlers and
// the group machine: produce and fetch on the existing topic, a group's
// join, sync, heartbeat, commit and fetch of offsets, and the admin APIs.
func fuzzSeeds() []kmsg.Request {
	produce := kmsg.NewPtrProduceRequest()
	produce.Version, produce.Acks, produce.TimeoutMillis = 9, -1, 1000
	produce.Topics = []kmsg.ProduceRequestTopic{{Topic: "fuzz", Partitions: []kmsg.ProduceRequestTopicPartition{{
		Records: batchtest.Build(batchtest.NonIdempotent(1, batchtest.Values("a", "b")...))}}}}
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version, fetch.MaxBytes = 12, 1<<20
	fetch.Topics = []kmsg.FetchRequestTopic{{Topic: "fuzz", Partitions: []kmsg.FetchRequestTopicPartition{
		{Partition: 0, PartitionMaxBytes: 1 << 20}, {Partition: 1, PartitionMaxBytes: 1 << 20}, {Partition: 0, FetchOffset: 1, PartitionMaxBytes: 10}}}}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version, join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 5, "g", 10000, 10000
	join.InstanceID = kmsg.StringPtr("static-1")
	join.ProtocolType = "consumer"
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1, 0, 0, 0, 1, 0, 4, 'f', 'u', 'z', 'z', 0, 0, 0, 0}}}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Version, sync.Group, sync.Generation, sync.MemberID = 5, "g", 1, "m"
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: "m", MemberAssignment: []byte{0, 1}}}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.Generation, hb.MemberID = 4, "g", 1, "m"
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group, commit.Generation = 8, "simple", -1
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "fuzz", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}}}
	offsets := kmsg.NewPtrOffsetFetchRequest()
	offsets.Version = 8
	offsets.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "simple"}, {Group: "g"}}
	create := kmsg.NewPtrCreateTopicsRequest()
	create.Version = 7
	create.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "made", NumPartitions: 2, ReplicationFactor: 1}}
	meta := kmsg.NewPtrMetadataRequest()
	meta.Version = 12
	meta.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("fuzz")}}
	list := kmsg.NewPtrListOffsetsRequest()
	list.Version = 7
	list.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: "fuzz", Partitions: []kmsg.ListOffsetsRequestTopicPartition{{Partition: 0, Timestamp: -1}}}}
	describe := kmsg.NewPtrDescribeGroupsRequest()
	describe.Version, describe.Groups = 5, []string{"g", "simple"}
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Version, leave.Group = 4, "g"
	leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: "m", InstanceID: kmsg.StringPtr("static-1")}}
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Version, del.Groups = 2, []string{"simple"}
	return []kmsg.Request{produce, fetch, join, sync, hb, commit, offsets, create, meta, list, describe, leave, del,
		kmsg.NewPtrApiVersionsRequest(), kmsg.NewPtrListGroupsRequest(), kmsg.NewPtrInitProducerIDRequest(),
		kmsg.NewPtrFindCoordinatorRequest(), kmsg.NewPtrOffsetDeleteRequest(), kmsg.NewPtrCreatePartitionsRequest()}
}

// FuzzRequest feeds arbitrary frames through the server's decoding into
// the API handlers, the broker and the group machine. It fails on any
// panic and on any reply that does not decode.
func FuzzRequest(f *testing.F) {
	target := newFuzzTarget(f)
	format := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz"))
	for _, req := range fuzzSeeds() {
		f.Add(format.AppendRequest(nil, req, 1)[4:])
		// Also at the oldest and newest versions kmsg knows.
		for _, v := range []int16{0, req.MaxVersion()} {
			req.SetVersion(v)
			f.Add(format.AppendRequest(nil, req, 2)[4:])
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		target.serve(t, frame)
	})
}
