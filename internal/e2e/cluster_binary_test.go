package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	// etcd, if set, is the etcd endpoint of this node alone (a proxy in
	// front of the cluster's etcd), and advertise the address it tells
	// clients and peers (a proxy in front of addr).
	etcd, advertise string
	p               *groupdProc
}

// startClusterNode runs the binary as node id of the cluster at etcd.
func startClusterNode(t *testing.T, n *clusterProc, etcd, prefix string) {
	t.Helper()
	if n.etcd != "" {
		etcd = n.etcd
	}
	var advertise []string
	if n.advertise != "" {
		advertise = []string{"--advertise", n.advertise}
	}
	n.p = startGroupd(t, n.dir, n.addr, append([]string{
		"--node-id", strconv.Itoa(int(n.id)),
		"--etcd-endpoints", etcd, "--etcd-prefix", prefix,
		"--node-session-timeout", clusterSessionTimeout.String(),
		"--default-replication-factor", "3", "--min-insync-replicas", "2",
		"--replica-lag-time-max", "5s",
		// A kill -9 leaves the page cache: what the process wrote
		// survives it without an fsync.
		"--fsync", "never"}, advertise...)...)
}

// binaryCluster is three groupd processes over an embedded etcd, a topic
// with three partitions, three replicas and min.insync.replicas=2, and an
// idempotent franz-go producer with acks=all writing to it.
type binaryCluster struct {
	t      *testing.T
	ctx    context.Context
	etcd   string
	prefix string
	nodes  []*clusterProc
	seeds  []string
	admCl  *kgo.Client
	adm    *kadm.Client

	net *clusterNet // nil unless withFaultProxies

	prod  *kgo.Client
	mu    sync.Mutex
	acked [clusterPartitions]map[int]time.Time // when each record was acknowledged
	// handed is when each acknowledged record was handed to the
	// producer.
	handed [clusterPartitions]map[int]time.Time
	// pinAcked holds the records that producers other than the main one
	// had acknowledged ("pin-N", see pinnedProducer.produce), by partition.
	pinAcked      [clusterPartitions]map[string]bool
	pins          int // the last pinned record's N
	failed        int
	stopProducing chan struct{}
	produced      chan [clusterPartitions]int
}

const (
	clusterTopic      = "replicated"
	clusterPartitions = 3
	// clusterSessionTimeout is the nodes' session, their lease's TTL.
	clusterSessionTimeout = 2 * time.Second
)

// clusterOption changes how startBinaryCluster sets the cluster up.
type clusterOption func(*binaryCluster)

// startBinaryCluster starts the nodes, creates the topic and starts
// producing.
func startBinaryCluster(t *testing.T, ctx context.Context, opts ...clusterOption) *binaryCluster {
	c := &binaryCluster{t: t, ctx: ctx, etcd: startEtcd(t), prefix: "/groupd/" + t.Name(),
		stopProducing: make(chan struct{}), produced: make(chan [clusterPartitions]int, 1)}
	c.nodes = make([]*clusterProc, 3)
	for i := range c.nodes {
		c.nodes[i] = &clusterProc{id: int32(i + 1), dir: t.TempDir(), addr: freeAddr(t)}
	}
	for _, o := range opts {
		o(c)
	}
	for i := range c.nodes {
		startClusterNode(t, c.nodes[i], c.etcd, c.prefix)
		c.seeds = append(c.seeds, c.nodes[i].addr)
	}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admCl.Close)
	c.admCl, c.adm = admCl, kadm.NewClient(admCl)
	waitUntil(t, ctx, func() error {
		ids, _, err := liveBrokers(ctx, admCl)
		if err != nil {
			return err
		}
		if len(ids) != 3 {
			return fmt.Errorf("brokers %v", ids)
		}
		return nil
	})
	if res, err := c.adm.CreateTopic(ctx, clusterPartitions, 3, nil, clusterTopic); err != nil || res.Err != nil {
		t.Fatalf("create topic: %v %v", err, res.Err)
	}
	// The producer: idempotent (franz-go's default), acks=all, retrying
	// for as long as a failover may take.
	c.prod, err = kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.DefaultProduceTopic(clusterTopic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(60*time.Second), kgo.MaxBufferedRecords(2000))
	if err != nil {
		t.Fatal(err)
	}
	for p := range c.acked {
		c.acked[p], c.handed[p], c.pinAcked[p] = map[int]time.Time{}, map[int]time.Time{}, map[string]bool{}
	}
	go func() {
		var next [clusterPartitions]int
		defer func() { c.produced <- next }()
		for i := 0; ; i++ {
			select {
			case <-c.stopProducing:
				return
			default:
			}
			p := int32(i % clusterPartitions)
			seq := next[p]
			next[p]++
			r := &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "%d", seq)}
			handed := time.Now()
			c.prod.Produce(ctx, r, func(r *kgo.Record, err error) {
				c.mu.Lock()
				defer c.mu.Unlock()
				if err != nil {
					c.failed++
					return
				}
				c.acked[r.Partition][seq] = time.Now()
				c.handed[r.Partition][seq] = handed
			})
			if i%50 == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	return c
}

// leaderOf is the leader of partition p as Metadata shows it, once it has
// one.
func (c *binaryCluster) leaderOf(p int32) int32 {
	var leader int32 = -1
	waitUntil(c.t, c.ctx, func() error {
		md, err := c.adm.Metadata(c.ctx, clusterTopic)
		if err != nil {
			return err
		}
		pd, ok := md.Topics[clusterTopic].Partitions[p]
		if !ok || pd.Leader < 1 || pd.Err != nil {
			return fmt.Errorf("partition %d: leader %d, %v", p, pd.Leader, pd.Err)
		}
		leader = pd.Leader
		return nil
	})
	return leader
}

// waitLeaderMoved waits until partition p is led by a node other than n.
func (c *binaryCluster) waitLeaderMoved(p, n int32) {
	waitUntil(c.t, c.ctx, func() error {
		if l := c.leaderOf(p); l == n {
			return fmt.Errorf("node %d still leads partition %d", l, p)
		}
		return nil
	})
}

// ackedCount is how many records have been acknowledged so far.
func (c *binaryCluster) ackedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.acked {
		n += len(m)
	}
	return n
}

// longestStall is the longest time between two acknowledgements, over all
// partitions, within [from, to].
func (c *binaryCluster) longestStall(from, to time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ts []time.Time
	for _, m := range c.acked {
		for _, at := range m {
			if !at.Before(from) && !at.After(to) {
				ts = append(ts, at)
			}
		}
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	var longest time.Duration
	for i := 1; i < len(ts); i++ {
		longest = max(longest, ts[i].Sub(ts[i-1]))
	}
	return longest
}

// finish stops producing and checks that every acknowledged record reads
// back exactly once, in the order it was produced, on every partition.
func (c *binaryCluster) finish() {
	t := c.t
	close(c.stopProducing)
	next := <-c.produced
	if err := c.prod.Flush(c.ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	c.prod.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("produced %v, %d failed", next, c.failed)
	for p := range int32(clusterPartitions) {
		want := len(c.acked[p])
		if want == 0 {
			t.Fatalf("partition %d: nothing was acknowledged", p)
		}
		got := readUntilHW(t, c.ctx, c.seeds, clusterTopic, p)
		seen := map[int]bool{}
		last := -1
		pins := map[string]bool{}
		lastPin := -1
		for off, v := range got {
			if pin, ok := strings.CutPrefix(v, "pin-"); ok {
				// A pinned producer's records: each sent once,
				// and each acknowledged one before the next was
				// sent.
				n, err := strconv.Atoi(pin)
				if err != nil || pins[v] {
					t.Fatalf("partition %d offset %d: %q read twice, or not a pinned record", p, off, v)
				}
				if c.pinAcked[p][v] {
					if n < lastPin {
						t.Fatalf("partition %d offset %d: acknowledged %s after acknowledged pin-%d", p, off, v, lastPin)
					}
					lastPin = n
				}
				pins[v] = true
				continue
			}
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
		for seq := range c.acked[p] {
			if !seen[seq] {
				t.Fatalf("partition %d: acknowledged record %d was not read back (%d records read, %d acknowledged)", p, seq, len(got), want)
			}
		}
		for v := range c.pinAcked[p] {
			if !pins[v] {
				t.Fatalf("partition %d: acknowledged record %s of a pinned producer was not read back", p, v)
			}
		}
		t.Logf("partition %d: %d acknowledged, %d read, in order, none twice; %d of a pinned producer acknowledged, all read back",
			p, want, len(got), len(c.pinAcked[p]))
	}
}

// TestBinaryClusterLeaderKilled kills the leader of partition 0 with
// SIGKILL four times under the producer, starting it again each time once
// its partitions have new leaders: every acknowledged record reads back
// exactly once and in order.
func TestBinaryClusterLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd and three groupd processes for about half a minute")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startBinaryCluster(t, ctx)
	for kill := range 4 {
		time.Sleep(2 * time.Second)
		victim := c.nodes[c.leaderOf(0)-1]
		t.Logf("kill %d: SIGKILL to node %d, the leader of partition 0", kill+1, victim.id)
		victim.p.signal(syscall.SIGKILL)
		<-victim.p.exited
		// Once the controller has seen the lease expire and elected
		// another leader, the node comes back as a follower.
		c.waitLeaderMoved(0, victim.id)
		startClusterNode(t, victim, c.etcd, c.prefix)
	}
	time.Sleep(2 * time.Second)
	c.finish()
}

// TestBinaryClusterLeaderPaused stops the leader of partition 0 with
// SIGSTOP for three times its lease (a GC pause, a VM frozen) and resumes
// it once another node leads: the paused node must not have acknowledged
// anything the cluster then lost, and it rejoins as a follower.
func TestBinaryClusterLeaderPaused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd and three groupd processes for about half a minute")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startBinaryCluster(t, ctx)
	for pause := range 2 {
		time.Sleep(2 * time.Second)
		victim := c.nodes[c.leaderOf(0)-1]
		t.Logf("pause %d: SIGSTOP to node %d, the leader of partition 0", pause+1, victim.id)
		victim.p.signal(syscall.SIGSTOP)
		c.waitLeaderMoved(0, victim.id)
		time.Sleep(4 * time.Second) // past its lease's 2 s, three times over
		victim.p.signal(syscall.SIGCONT)
		t.Logf("node %d resumed", victim.id)
	}
	time.Sleep(3 * time.Second)
	c.finish()
}

// TestBinaryClusterRollingRestart stops each node in turn with SIGTERM
// under the producer and starts it again: each hands its leaderships away
// before it exits, so nothing acknowledged is lost, and the producer
// stalls only briefly. The longest stall per restart is logged.
func TestBinaryClusterRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd and three groupd processes for about half a minute")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startBinaryCluster(t, ctx)
	for _, n := range c.nodes {
		time.Sleep(2 * time.Second)
		from, before := time.Now(), c.ackedCount()
		n.p.stop(t)
		startClusterNode(t, n, c.etcd, c.prefix)
		// Until every node is back in every ISR, the next stop could
		// leave a partition below min.insync.replicas.
		waitUntil(t, ctx, func() error {
			md, err := c.adm.Metadata(ctx, clusterTopic)
			if err != nil {
				return err
			}
			for p, pd := range md.Topics[clusterTopic].Partitions {
				if len(pd.ISR) != 3 {
					return fmt.Errorf("partition %d: ISR %v", p, pd.ISR)
				}
			}
			return nil
		})
		t.Logf("node %d restarted: longest produce stall %v, %d records acknowledged meanwhile",
			n.id, c.longestStall(from, time.Now()).Round(time.Millisecond), c.ackedCount()-before)
	}
	time.Sleep(time.Second)
	c.finish()
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
