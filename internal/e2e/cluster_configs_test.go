package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClusterTopicConfigs changes a topic's configs through one node and
// sees the change everywhere: every node describes it, with its source,
// and the leader's log, on another node, enforces it (a record larger
// than the new max.message.bytes is refused). The configs live in etcd,
// not in the node that took the request.
func TestClusterTopicConfigs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startLocalCluster(t, ctx, nil, kgo.DefaultProduceTopic("configured"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(3))
	addrs, cl, adm := c.addrs, c.cl, c.adm
	if res, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, "configured"); err != nil || res.Err != nil {
		t.Fatalf("create topic: %v %v", err, res.Err)
	}
	var leader int32
	waitUntil(t, ctx, func() error {
		md, err := adm.Metadata(ctx, "configured")
		if err != nil {
			return err
		}
		leader = md.Topics["configured"].Partitions[0].Leader
		if leader < 1 {
			return fmt.Errorf("no leader yet")
		}
		return nil
	})
	// Random bytes, so that the producer's compression keeps them large.
	big := make([]byte, 4000)
	rand.NewChaCha8([32]byte{1}).Read(big)
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: big}).FirstErr(); err != nil {
		t.Fatalf("a 4000-byte record before the change: %v", err)
	}

	// The change goes to a node that does not lead the partition.
	other := addrs[leader%3]
	ocl, err := kgo.NewClient(kgo.SeedBrokers(other))
	if err != nil {
		t.Fatal(err)
	}
	defer ocl.Close()
	alter := kadm.NewClient(ocl)
	res, err := alter.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("1000")},
		{Op: kadm.DeleteConfig, Name: "retention.ms"},
	}, "configured")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := res.On("configured", nil); err != nil || r.Err != nil {
		t.Fatalf("alter configs: %v %v", err, r.Err)
	}

	// Every node describes the topic's configs as etcd holds them.
	for i, addr := range addrs {
		ncl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		rcs, err := kadm.NewClient(ncl).DescribeTopicConfigs(ctx, "configured")
		ncl.Close()
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
		rc, err := rcs.On("configured", nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
		got := map[string]string{}
		for _, c := range rc.Configs {
			if c.Key == "max.message.bytes" || c.Key == "retention.ms" {
				got[c.Key] = c.MaybeValue() + " " + c.Source.String()
			}
		}
		if got["max.message.bytes"] != "1000 DYNAMIC_TOPIC_CONFIG" || got["retention.ms"] == "3600000 DYNAMIC_TOPIC_CONFIG" {
			t.Fatalf("node %d describes %v", i+1, got)
		}
	}

	// The leader's log enforces the new limit: the change reached it
	// through etcd, not through the request.
	waitUntil(t, ctx, func() error {
		err := cl.ProduceSync(ctx, &kgo.Record{Value: big}).FirstErr()
		if !errors.Is(err, kerr.MessageTooLarge) {
			return fmt.Errorf("a 4000-byte record after the change: %v, want MESSAGE_TOO_LARGE", err)
		}
		return nil
	})
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("small")}).FirstErr(); err != nil {
		t.Fatalf("a small record after the change: %v", err)
	}

	// The internal topic's configs are fixed, on any node. It exists once
	// a group's coordinator was asked for.
	adm.FindGroupCoordinators(ctx, "some-group")
	waitUntil(t, ctx, func() error {
		md, err := alter.Metadata(ctx, "__consumer_offsets")
		if err != nil {
			return err
		}
		if err := md.Topics["__consumer_offsets"].Err; err != nil {
			return err
		}
		return nil
	})
	res, err = alter.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("1")}}, "__consumer_offsets")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := res.On("__consumer_offsets", nil); err != nil || !errors.Is(r.Err, kerr.InvalidRequest) {
		t.Fatalf("altering __consumer_offsets's configs: %v %v, want INVALID_REQUEST", err, r.Err)
	}
}
