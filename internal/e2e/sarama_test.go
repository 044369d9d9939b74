package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewHashPartitioner
	cfg.Consumer.Return.Errors = true
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	return cfg
}

var saramaCodecs = []struct {
	name  string
	codec sarama.CompressionCodec
}{
	{"none", sarama.CompressionNone},
	{"gzip", sarama.CompressionGZIP},
	{"snappy", sarama.CompressionSnappy},
	{"lz4", sarama.CompressionLZ4},
	{"zstd", sarama.CompressionZSTD},
}

func saramaProduce(t *testing.T, addr, topic string, codec sarama.CompressionCodec, n int) {
	t.Helper()
	cfg := saramaConfig()
	cfg.Producer.Compression = codec
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Flush.Messages = 200
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	p, err := sarama.NewAsyncProducer([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := range n {
			p.Input() <- &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(strconv.Itoa(i)), Value: sarama.StringEncoder(fmt.Sprintf("%s-%d", topic, i))}
		}
	}()
	for i := range n {
		select {
		case <-p.Successes():
		case err := <-p.Errors():
			t.Fatalf("sarama produce %d: %v", i, err)
		case <-time.After(60 * time.Second):
			t.Fatalf("sarama produce: %d of %d acknowledged", i, n)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// saramaConsumeAll reads every partition of topic from the oldest offset
// until n records arrived, checking offsets and per-partition key order.
func saramaConsumeAll(t *testing.T, addr, topic string, n int) {
	t.Helper()
	c, err := sarama.NewConsumer([]string{addr}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parts, err := c.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != e2ePartitions {
		t.Fatalf("%d partitions, want %d", len(parts), e2ePartitions)
	}
	msgs := make(chan *sarama.ConsumerMessage, 1024)
	errs := make(chan error, 16)
	for _, p := range parts {
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		defer pc.AsyncClose()
		go func() {
			for m := range pc.Messages() {
				msgs <- m
			}
		}()
		go func() {
			for e := range pc.Errors() {
				errs <- e
			}
		}()
	}
	next := make(map[int32]int64)
	lastKey := make(map[int32]int)
	seen := make(map[string]bool, n)
	for count := 0; count < n; count++ {
		select {
		case m := <-msgs:
			if m.Offset != next[m.Partition] {
				t.Fatalf("partition %d: offset %d, want %d", m.Partition, m.Offset, next[m.Partition])
			}
			next[m.Partition]++
			k, _ := strconv.Atoi(string(m.Key))
			if prev, ok := lastKey[m.Partition]; ok && k <= prev {
				t.Fatalf("partition %d: key %d after %d", m.Partition, k, prev)
			}
			lastKey[m.Partition] = k
			if seen[string(m.Key)] {
				t.Fatalf("key %s twice", m.Key)
			}
			seen[string(m.Key)] = true
			if want := fmt.Sprintf("%s-%s", topic, m.Key); string(m.Value) != want {
				t.Fatalf("value %q, want %q", m.Value, want)
			}
		case err := <-errs:
			t.Fatalf("sarama consume: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatalf("sarama consume: %d of %d records", count, n)
		}
	}
}

func TestSaramaProduceConsumeRestart(t *testing.T) {
	dir := t.TempDir()
	a := startServer(t, dir)
	admin, err := sarama.NewClusterAdmin([]string{a.Addr()}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range saramaCodecs {
		topic := "sarama-" + c.name
		if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: e2ePartitions, ReplicationFactor: 1}, false); err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
		saramaProduce(t, a.Addr(), topic, c.codec, e2eRecords)
		saramaConsumeAll(t, a.Addr(), topic, e2eRecords)
	}
	admin.Close()

	stopServer(t, a)
	a = startServer(t, dir)
	for _, c := range saramaCodecs {
		saramaConsumeAll(t, a.Addr(), "sarama-"+c.name, e2eRecords)
	}
}
