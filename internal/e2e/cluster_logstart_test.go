package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/broker"
)

// TestClusterDeleteRecordsPastAStoppedFollower runs three nodes: a
// three-replica partition takes 100 records; one follower stops; 100 more
// come (the stopped follower lacks them), then DeleteRecords through the
// leader moves the log start to 155, past the stopped follower's log end
// and inside a batch (a non-leader refuses it NOT_LEADER_OR_FOLLOWER; an
// offset past the high watermark is OFFSET_OUT_OF_RANGE); 100 more come.
// The follower restarts: its fetch at 100 is out of range, it restarts its
// log at the leader's log start and catches up, and rejoins the ISR.
// Every replica then starts at or past 155 and holds the records up to
// 300; a consumer asking for offset 0 is reset to the log start.
//
// Before a follower could restart its log at the leader's log start, the
// restarted follower fetched at 100, was told OFFSET_OUT_OF_RANGE, asked
// where the logs diverge (100), fetched at 100... for ever, and never
// rejoined the ISR.
func TestClusterDeleteRecordsPastAStoppedFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three nodes")
	}
	etcd := startEtcd(t)
	prefix := "/groupd/" + t.Name()
	addrs, dirs := make([]string, 3), make([]string, 3)
	nodes := make([]*app.App, 3)
	for i := range nodes {
		addrs[i], dirs[i] = freeAddr(t), t.TempDir()
		nodes[i] = startServer(t, dirs[i], inCluster(etcd, prefix, int32(i+1), addrs[i]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic = "trimmed"
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	waitUntil(t, ctx, func() error {
		ids, controller, err := liveBrokers(ctx, cl)
		if err != nil {
			return err
		}
		if len(ids) != 3 || controller < 1 {
			return fmt.Errorf("brokers %v, controller %d", ids, controller)
		}
		return nil
	})
	// (The node asked may not see the third node registered yet: it
	// refuses three replicas until it does.)
	waitUntil(t, ctx, func() error {
		res, err := adm.CreateTopic(ctx, 1, 3, nil, topic)
		switch {
		case err != nil:
			return err
		case errors.Is(res.Err, kerr.InvalidReplicationFactor):
			return res.Err
		case res.Err != nil:
			t.Fatalf("create topic: %v", res.Err)
		}
		return nil
	})
	partition0 := func() (kadm.PartitionDetail, [16]byte, error) {
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			return kadm.PartitionDetail{}, [16]byte{}, err
		}
		td := md.Topics[topic]
		return td.Partitions[0], td.ID, nil
	}
	var (
		p0  kadm.PartitionDetail
		tid [16]byte
	)
	waitUntil(t, ctx, func() error {
		var err error
		if p0, tid, err = partition0(); err != nil {
			return err
		}
		if len(p0.Replicas) != 3 || p0.Leader < 1 || len(p0.ISR) != 3 {
			return fmt.Errorf("partition 0: replicas %v, leader %d, ISR %v", p0.Replicas, p0.Leader, p0.ISR)
		}
		return nil
	})
	// produce appends [from, to) in batches of size.
	produce := func(from, to, size int) {
		t.Helper()
		for i := from; i < to; i += size {
			var rs []*kgo.Record
			for j := i; j < min(i+size, to); j++ {
				rs = append(rs, &kgo.Record{Partition: 0, Value: fmt.Appendf(nil, "r%05d", j)})
			}
			if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	produce(0, 100, 1)

	leader := p0.Leader
	var stopped, other int32
	for _, r := range p0.Replicas {
		switch {
		case r == leader:
		case stopped == 0:
			stopped = r
		default:
			other = r
		}
	}
	t.Logf("leader %d; stopping follower %d; follower %d stays", leader, stopped, other)
	stopServer(t, nodes[stopped-1])
	waitUntil(t, ctx, func() error {
		p, _, err := partition0()
		if err != nil {
			return err
		}
		if p.Leader != leader || slices.Contains(p.ISR, stopped) {
			return fmt.Errorf("leader %d, ISR %v", p.Leader, p.ISR)
		}
		return nil
	})
	produce(100, 200, 10)

	deleteRecords := func(node int32, offset int64) kmsg.DeleteRecordsResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrDeleteRecordsRequest()
		req.TimeoutMillis = 30_000
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Partition, rp.Offset = 0, offset
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(node)))
		if err != nil {
			t.Fatalf("DeleteRecords to node %d: %v", node, err)
		}
		return resp.Topics[0].Partitions[0]
	}
	// Only the leader takes it.
	if sp := deleteRecords(other, 155); sp.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("DeleteRecords at follower %d: error %v, low watermark %d", other, kerr.ErrorForCode(sp.ErrorCode), sp.LowWatermark)
	}
	if sp := deleteRecords(leader, 201); sp.ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Fatalf("DeleteRecords past the high watermark: error %v, low watermark %d", kerr.ErrorForCode(sp.ErrorCode), sp.LowWatermark)
	}
	// The answer waits for the live follower's log start; the stopped
	// node holds nothing up.
	if sp := deleteRecords(leader, 155); sp.ErrorCode != 0 || sp.LowWatermark != 155 {
		t.Fatalf("DeleteRecords at the leader: error %v, low watermark %d", kerr.ErrorForCode(sp.ErrorCode), sp.LowWatermark)
	}
	replicaLog := func(node int32) (start, end int64, ok bool) {
		a := nodes[node-1].Broker()
		l, ok := a.Replica(broker.ReplicaKey{Topic: broker.TopicID(tid), Partition: 0})
		if !ok {
			return 0, 0, false
		}
		return l.LogStartOffset(), l.LogEndOffset(), true
	}
	if start, _, _ := replicaLog(other); start != 155 {
		t.Fatalf("follower %d's log start %d once DeleteRecords answered, want 155", other, start)
	}
	produce(200, 300, 10)

	t.Logf("restarting follower %d", stopped)
	nodes[stopped-1] = startServer(t, dirs[stopped-1], inCluster(etcd, prefix, stopped, addrs[stopped-1]))
	waitUntil(t, ctx, func() error {
		p, _, err := partition0()
		if err != nil {
			return err
		}
		if !slices.Contains(p.ISR, stopped) {
			start, end, _ := replicaLog(stopped)
			return fmt.Errorf("ISR %v without node %d (its log [%d, %d))", p.ISR, stopped, start, end)
		}
		return nil
	})
	for id := int32(1); id <= 3; id++ {
		waitUntil(t, ctx, func() error {
			start, end, ok := replicaLog(id)
			if !ok || start < 155 || end != 300 {
				return fmt.Errorf("node %d: log [%d, %d) (open %v), want start >= 155 and end 300", id, start, end, ok)
			}
			return nil
		})
	}

	// The restarted follower holds the very batches the leader holds
	// from the log start on.
	batches := func(node int32) []byte {
		l, _ := nodes[node-1].Broker().Replica(broker.ReplicaKey{Topic: broker.TopicID(tid), Partition: 0})
		data, err := l.ReadReplica(155, 1<<20)
		if err != nil {
			t.Fatalf("node %d: reading its replica from 155: %v", node, err)
		}
		return data
	}
	if a, b := batches(leader), batches(stopped); len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatalf("from 155 the leader holds %d bytes, follower %d %d bytes, not the same", len(a), stopped, len(b))
	}

	// A consumer asking for offset 0 is out of range, and resets to the
	// log start: it reads 155.. once each, in order.
	rd, err := kgo.NewClient(kgo.SeedBrokers(addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var got []*kgo.Record
	for len(got) < 145 {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of 145 records: %v", len(got), ctx.Err())
		}
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, kerr.OffsetOutOfRange) && !kerr.IsRetriable(err) {
				t.Logf("fetch: %v", err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	for i, r := range got {
		if want := fmt.Sprintf("r%05d", 155+i); r.Offset != int64(155+i) || string(r.Value) != want {
			t.Fatalf("record %d: offset %d holds %q, want offset %d holding %q", i, r.Offset, r.Value, 155+i, want)
		}
	}
	if len(got) != 145 {
		t.Fatalf("read %d records, want 145", len(got))
	}
	lo, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := lo.Lookup(topic, 0); o.Err != nil || o.Offset != 155 {
		t.Fatalf("the partition's start offset: %d %v, want 155", o.Offset, o.Err)
	}
}
