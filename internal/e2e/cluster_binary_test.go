package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// clusterProc is one node of a cluster of real processes.
type clusterProc struct {
	id   int32
	dir  string
	addr string
	p    *groupdProc
}

// startClusterNode runs the binary as node id of the cluster at etcd.
func startClusterNode(t *testing.T, n *clusterProc, etcd, prefix string) {
	t.Helper()
	n.p = startGroupd(t, n.dir, n.addr,
		"--node-id", strconv.Itoa(int(n.id)),
		"--etcd-endpoints", etcd, "--etcd-prefix", prefix,
		"--node-session-timeout", "2s",
		"--default-replication-factor", "3", "--min-insync-replicas", "2",
		"--replica-lag-time-max", "5s",
		// A kill -9 leaves the page cache: what the process wrote
		// survives it without an fsync.
		"--fsync", "never")
}

// TestBinaryClusterLeaderKilled runs three groupd processes over an
// embedded etcd, a topic with three replicas and min.insync.replicas=2, and
// an idempotent franz-go producer with acks=all, while the leader of
// partition 0 is killed with SIGKILL four times (and started again once
// its partitions have new leaders). Every acknowledged record must then be
// read back exactly once, in the order it was produced, on every
// partition.
func TestBinaryClusterLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd and three groupd processes for about half a minute")
	}
	etcd := startEtcd(t)
	prefix := "/groupd/" + t.Name()
	nodes := make([]*clusterProc, 3)
	var seeds []string
	for i := range nodes {
		nodes[i] = &clusterProc{id: int32(i + 1), dir: t.TempDir(), addr: freeAddr(t)}
		startClusterNode(t, nodes[i], etcd, prefix)
		seeds = append(seeds, nodes[i].addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const topic, partitions = "killed", 3
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	waitUntil(t, ctx, func() error {
		md, err := adm.BrokerMetadata(ctx)
		if err != nil {
			return err
		}
		if len(md.Brokers) != 3 {
			return fmt.Errorf("brokers %v", md.Brokers.NodeIDs())
		}
		return nil
	})
	if res, err := adm.CreateTopic(ctx, partitions, 3, nil, topic); err != nil || res.Err != nil {
		t.Fatalf("create topic: %v %v", err, res.Err)
	}

	// The producer: idempotent (franz-go's default), acks=all, retrying
	// for as long as a failover may take.
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(60*time.Second), kgo.MaxBufferedRecords(2000))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		acked  [partitions]map[int]bool
		failed int
	)
	for p := range acked {
		acked[p] = map[int]bool{}
	}
	stopProducing := make(chan struct{})
	produced := make(chan [partitions]int, 1)
	go func() {
		var next [partitions]int
		defer func() { produced <- next }()
		for i := 0; ; i++ {
			select {
			case <-stopProducing:
				return
			default:
			}
			p := int32(i % partitions)
			seq := next[p]
			next[p]++
			r := &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "%d", seq)}
			prod.Produce(ctx, r, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					return
				}
				acked[r.Partition][seq] = true
			})
			if i%50 == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()

	leaderOf := func(p int32) int32 {
		var leader int32 = -1
		waitUntil(t, ctx, func() error {
			md, err := adm.Metadata(ctx, topic)
			if err != nil {
				return err
			}
			pd, ok := md.Topics[topic].Partitions[p]
			if !ok || pd.Leader < 1 || pd.Err != nil {
				return fmt.Errorf("partition %d: leader %d, %v", p, pd.Leader, pd.Err)
			}
			leader = pd.Leader
			return nil
		})
		return leader
	}
	for kill := range 4 {
		time.Sleep(2 * time.Second)
		victim := nodes[leaderOf(0)-1]
		t.Logf("kill %d: SIGKILL to node %d, the leader of partition 0", kill+1, victim.id)
		victim.p.signal(syscall.SIGKILL)
		<-victim.p.exited
		// Once the controller has seen the lease expire and elected
		// another leader, the node comes back as a follower.
		waitUntil(t, ctx, func() error {
			if l := leaderOf(0); l == victim.id {
				return fmt.Errorf("node %d still leads partition 0", l)
			}
			return nil
		})
		startClusterNode(t, victim, etcd, prefix)
	}
	time.Sleep(2 * time.Second)
	close(stopProducing)
	next := <-produced
	if err := prod.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	prod.Close()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("produced %v, %d failed", next, failed)

	for p := range int32(partitions) {
		var want int
		for range acked[p] {
			want++
		}
		if want == 0 {
			t.Fatalf("partition %d: nothing was acknowledged", p)
		}
		got := readUntilHW(t, ctx, seeds, topic, p)
		seen := map[int]bool{}
		last := -1
		for off, v := range got {
			seq, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("partition %d offset %d: %q", p, off, v)
			}
			if seen[seq] {
				t.Fatalf("partition %d: record %d read twice (offset %d)", p, seq, off)
			}
			if seq < last {
				t.Fatalf("partition %d: record %d at offset %d after record %d", p, seq, off, last)
			}
			seen[seq], last = true, seq
		}
		for seq := range acked[p] {
			if !seen[seq] {
				t.Fatalf("partition %d: acknowledged record %d was not read back (%d records read, %d acknowledged)", p, seq, len(got), want)
			}
		}
		t.Logf("partition %d: %d acknowledged, %d read, in order, none twice", p, want, len(got))
	}
}

// readUntilHW reads partition p of topic from its start up to its high
// watermark.
func readUntilHW(t *testing.T, ctx context.Context, seeds []string, topic string, p int32) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, ok := ends.Lookup(topic, p)
	if !ok || end.Err != nil {
		t.Fatalf("end offset of partition %d: %v", p, end.Err)
	}
	return readPartition(t, ctx, seeds, topic, p, int(end.Offset))
}
