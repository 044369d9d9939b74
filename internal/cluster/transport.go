package cluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/cluster/view"
)

// KafkaTransport carries a follower's requests to leaders over the Kafka
// protocol, as Kafka's replica fetchers do: Fetch with the follower's
// replica id, and OffsetForLeaderEpoch. It speaks through franz-go, which
// finds every node from the Metadata any node answers.
type KafkaTransport struct {
	node *Node
	// FetchWait and FetchMaxBytes are replica.fetch.wait.max.ms and
	// replica.fetch.max.bytes.
	FetchWait     time.Duration
	FetchMaxBytes int32

	mu sync.Mutex
	cl *kgo.Client
}

// NewKafkaTransport returns the transport of node.
func NewKafkaTransport(node *Node) *KafkaTransport {
	return &KafkaTransport{node: node, FetchWait: 500 * time.Millisecond, FetchMaxBytes: 1 << 20}
}

// Close closes the client.
func (t *KafkaTransport) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cl != nil {
		t.cl.Close()
		t.cl = nil
	}
}

// client returns a franz-go client seeded with the live nodes.
func (t *KafkaTransport) client() (*kgo.Client, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cl != nil {
		return t.cl, nil
	}
	var seeds []string
	for _, n := range t.node.View().SortedNodes() {
		seeds = append(seeds, net.JoinHostPort(n.Host, strconv.Itoa(int(n.Port))))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ClientID("groupd-replica-fetcher-"+strconv.Itoa(int(t.node.ID()))),
		kgo.RetryTimeout(0), kgo.RequestRetries(0))
	if err != nil {
		return nil, err
	}
	t.cl = cl
	return cl, nil
}

func (t *KafkaTransport) broker(ctx context.Context, id int32) (*kgo.Broker, error) {
	cl, err := t.client()
	if err != nil {
		return nil, err
	}
	if b := cl.Broker(int(id)); b != nil {
		return b, nil
	}
	// A node the client has not heard of yet: its metadata knows.
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
		return nil, err
	}
	if b := cl.Broker(int(id)); b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("node %d unknown", id)
}

// Fetch implements Transport.
func (t *KafkaTransport) Fetch(ctx context.Context, leader int32, wants []FetchWant) ([]FetchResult, error) {
	b, err := t.broker(ctx, leader)
	if err != nil {
		return nil, err
	}
	req := kmsg.NewPtrFetchRequest()
	req.Version = 13 // topic ids, no sessions kept
	req.ReplicaID = t.node.ID()
	req.ReplicaState.ID = t.node.ID()
	req.ReplicaState.Epoch = -1
	req.MaxWaitMillis = int32(t.FetchWait / time.Millisecond)
	req.MinBytes = 1
	req.MaxBytes = t.FetchMaxBytes
	req.SessionEpoch = -1
	byTopic := map[[16]byte]int{}
	for _, w := range wants {
		i, ok := byTopic[w.TP.Topic]
		if !ok {
			i = len(req.Topics)
			byTopic[w.TP.Topic] = i
			rt := kmsg.NewFetchRequestTopic()
			rt.TopicID = w.TP.Topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = w.TP.Partition
		rp.CurrentLeaderEpoch = w.LeaderEpoch
		rp.FetchOffset = w.Offset
		rp.LogStartOffset = w.LogStart
		rp.PartitionMaxBytes = t.FetchMaxBytes
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	resp, err := req.RequestWith(ctx, b)
	if err != nil {
		return nil, err
	}
	if resp.ErrorCode != 0 {
		return nil, kerr.ErrorForCode(resp.ErrorCode)
	}
	var out []FetchResult
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			out = append(out, FetchResult{TP: view.TP{Topic: rt.TopicID, Partition: rp.Partition},
				Err: kerr.ErrorForCode(rp.ErrorCode), HW: rp.HighWatermark, Batches: rp.RecordBatches, LogStart: rp.LogStartOffset})
		}
	}
	return out, nil
}

// EpochEnd implements Transport.
func (t *KafkaTransport) EpochEnd(ctx context.Context, leader int32, asks []EpochAsk) ([]EpochAnswer, error) {
	b, err := t.broker(ctx, leader)
	if err != nil {
		return nil, err
	}
	v := t.node.View()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.Version = 4
	req.ReplicaID = t.node.ID()
	byTopic := map[string]int{}
	names := map[string][16]byte{}
	for _, a := range asks {
		topic, ok := v.TopicByID(a.TP.Topic)
		if !ok {
			continue
		}
		i, ok := byTopic[topic.Name]
		if !ok {
			i = len(req.Topics)
			byTopic[topic.Name] = i
			names[topic.Name] = a.TP.Topic
			rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
			rt.Topic = topic.Name
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition = a.TP.Partition
		rp.CurrentLeaderEpoch = a.LeaderEpoch
		rp.LeaderEpoch = a.Epoch
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	resp, err := req.RequestWith(ctx, b)
	if err != nil {
		return nil, err
	}
	var out []EpochAnswer
	for _, rt := range resp.Topics {
		id, ok := names[rt.Topic]
		if !ok {
			continue
		}
		for _, rp := range rt.Partitions {
			out = append(out, EpochAnswer{TP: view.TP{Topic: id, Partition: rp.Partition},
				Err: kerr.ErrorForCode(rp.ErrorCode), Epoch: rp.LeaderEpoch, End: rp.EndOffset})
		}
	}
	return out, nil
}
