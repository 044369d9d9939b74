package e2e

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/broker"
)

// committed returns a group's committed offsets as "topic/partition=offset".
func committed(t *testing.T, adm *kadm.Client, group string) []string {
	t.Helper()
	resp, err := adm.FetchOffsets(ctxFor(t, 10*time.Second), group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		t.Fatal(err)
	}
	var out []string
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At >= 0 {
			out = append(out, fmt.Sprintf("%s/%d=%d", o.Topic, o.Partition, o.At))
		}
	})
	slices.Sort(out)
	return out
}

func commit(t *testing.T, adm *kadm.Client, group string, recs ...kgo.Record) {
	t.Helper()
	resp, err := adm.CommitOffsets(ctxFor(t, 10*time.Second), group, kadm.OffsetsFromRecords(recs...))
	if err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
}

// TestDeleteTopicRemovesGroupOffsets: deleting a topic removes its
// committed offsets from every group, durably, so a topic re-created with
// the same name is read from the consumer's reset policy, not from its
// predecessor's offsets.
func TestDeleteTopicRemovesGroupOffsets(t *testing.T) {
	dir := t.TempDir()
	a := startServer(t, dir)
	cl := newClient(t, a.Addr())
	adm := kadm.NewClient(cl)
	createTopic(t, a.Addr(), "orders", 2)
	createTopic(t, a.Addr(), "payments", 1)
	produceKeyed(t, cl, "orders", 20)
	commit(t, adm, "g", kgo.Record{Topic: "orders", Partition: 0, Offset: 6}, kgo.Record{Topic: "orders", Partition: 1, Offset: 2})
	commit(t, adm, "h", kgo.Record{Topic: "orders", Partition: 0, Offset: 1}, kgo.Record{Topic: "payments", Partition: 0, Offset: 4})

	if resp, err := adm.DeleteTopics(ctxFor(t, 10*time.Second), "orders"); err != nil || resp.Error() != nil {
		t.Fatalf("delete: %v %v", err, resp.Error())
	}
	check := func(adm *kadm.Client) {
		t.Helper()
		if got := committed(t, adm, "g"); len(got) != 0 {
			t.Fatalf("g still has %v", got)
		}
		if got := committed(t, adm, "h"); !slices.Equal(got, []string{"payments/0=5"}) {
			t.Fatalf("h has %v, want only payments/0=5", got)
		}
	}
	check(adm)
	if gs, err := adm.DescribeGroups(ctxFor(t, 10*time.Second), "g"); err != nil || gs["g"].State != "Dead" {
		t.Fatalf("g, left without offsets: %v %+v", err, gs["g"])
	}

	createTopic(t, a.Addr(), "orders", 2)
	// A new client: the old one knows the old topic's id.
	produceKeyed(t, newClient(t, a.Addr()), "orders", 4)
	grp := newClient(t, a.Addr(), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := 0
	ctx := ctxFor(t, 20*time.Second)
	for seen < 4 {
		fs := grp.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of the new topic's 4 records", seen)
		}
		fs.EachRecord(func(r *kgo.Record) { seen++ })
	}
	grp.Close()

	stopServer(t, a)
	a = startServer(t, dir)
	adm = kadm.NewClient(newClient(t, a.Addr()))
	if got := committed(t, adm, "h"); !slices.Equal(got, []string{"payments/0=5"}) {
		t.Fatalf("after a restart h has %v", got)
	}
}

// TestDeletedTopicOffsetsRemovedAfterRestart: a deletion whose offset
// removal did not happen before a stop (here the broker deletes the topic
// behind the coordinator's back) is finished by the next start.
func TestDeletedTopicOffsetsRemovedAfterRestart(t *testing.T) {
	dir := t.TempDir()
	a := startServer(t, dir)
	adm := kadm.NewClient(newClient(t, a.Addr()))
	createTopic(t, a.Addr(), "gone", 1)
	createTopic(t, a.Addr(), "kept", 1)
	commit(t, adm, "g", kgo.Record{Topic: "gone", Partition: 0, Offset: 3}, kgo.Record{Topic: "kept", Partition: 0, Offset: 8})
	if err := a.Broker().DeleteTopic("gone"); err != nil {
		t.Fatal(err)
	}
	stopServer(t, a)
	a = startServer(t, dir)
	adm = kadm.NewClient(newClient(t, a.Addr()))
	waitFor(t, 10*time.Second, "offsets of the deleted topic removed", func() (bool, string) {
		got := committed(t, adm, "g")
		return slices.Equal(got, []string{"kept/0=9"}), fmt.Sprint(got)
	})
	waitFor(t, 10*time.Second, "the removal recorded", func() (bool, string) {
		p := a.Broker().PendingOffsetCleanups()
		return len(p) == 0, fmt.Sprint(p)
	})
}

// TestOffsetsTopicInMetadata: __consumer_offsets appears once a group
// coordinator is asked for, internal, with Kafka's 50 partitions; it reads
// as empty and refuses writes and deletion.
func TestOffsetsTopicInMetadata(t *testing.T) {
	dir := t.TempDir()
	a := startServer(t, dir)
	cl := newClient(t, a.Addr())
	adm := kadm.NewClient(cl)
	createTopic(t, a.Addr(), "zebra", 1)
	createTopic(t, a.Addr(), "Aardvark", 1)
	topics, err := adm.ListTopicsWithInternal(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has(broker.OffsetsTopicName) {
		t.Fatal("__consumer_offsets before any group")
	}
	if rs := adm.FindGroupCoordinators(ctxFor(t, 10*time.Second), "some-group"); rs.Error() != nil {
		t.Fatal(rs.Error())
	}
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = nil // every topic
	resp, err := req.RequestWith(ctxFor(t, 10*time.Second), cl)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mt := range resp.Topics {
		names = append(names, *mt.Topic)
		if *mt.Topic == broker.OffsetsTopicName && (!mt.IsInternal || len(mt.Partitions) != 50 || mt.ErrorCode != 0) {
			t.Fatalf("%s: internal %v, %d partitions, error %d", *mt.Topic, mt.IsInternal, len(mt.Partitions), mt.ErrorCode)
		}
	}
	if !slices.Equal(names, []string{"Aardvark", broker.OffsetsTopicName, "zebra"}) {
		t.Fatalf("metadata lists %v", names)
	}
	rc := dialRaw(t, a.Addr())
	if sp := rc.produce(broker.OffsetsTopicName, buildBatch("x")); sp.ErrorCode != kerr.InvalidTopicException.Code {
		t.Fatalf("produce to __consumer_offsets: code %d", sp.ErrorCode)
	}
	fr, err := rc.do(fetchReq(broker.OffsetsTopicName, 0, 0, 1, 1<<20, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	if p := fr.(*kmsg.FetchResponse).Topics[0].Partitions[0]; p.ErrorCode != 0 || p.HighWatermark != 0 || len(p.RecordBatches) != 0 {
		t.Fatalf("fetch of __consumer_offsets: %+v", p)
	}
	if dr, _ := adm.DeleteTopics(ctxFor(t, 10*time.Second), broker.OffsetsTopicName); !errors.Is(dr[broker.OffsetsTopicName].Err, kerr.InvalidRequest) {
		t.Fatalf("delete __consumer_offsets: %+v", dr)
	}
	wantConfig(t, adm, broker.OffsetsTopicName, "cleanup.policy", "compact", kmsg.ConfigSourceDynamicTopicConfig)

	stopServer(t, a)
	a = startServer(t, dir)
	topics, err = kadm.NewClient(newClient(t, a.Addr())).ListTopicsWithInternal(ctxFor(t, 10*time.Second))
	if err != nil || !topics.Has(broker.OffsetsTopicName) || !topics[broker.OffsetsTopicName].IsInternal {
		t.Fatalf("after a restart: %v %v", err, topics.Names())
	}
}
