package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/e2e/faultproxy"
)

// clusterNet is the network of a binaryCluster started withFaultProxies.
// Each node reaches etcd through a proxy of its own, and advertises a
// proxy in front of its Kafka listener, so every connection to a node,
// a client's or a peer's, goes through that node's front proxy. Peers
// are told from clients by the client id in the header of a connection's
// first request: a node's replica fetcher (its only connections to other
// nodes) is "groupd-replica-fetcher-<node id>".
//
// Isolating node X then cuts X's etcd proxy entirely, on X's front proxy
// the fetchers of every peer (its followers fetching from it), and on
// every other front proxy the fetcher of X (X fetching from the leaders
// it follows): X is cut off from etcd and from its peers in both
// directions, while clients still reach it, the asymmetric partition in
// which an old leader is still reachable by producers.
type clusterNet struct {
	etcd  []*faultproxy.Proxy // by node index
	front []*faultproxy.Proxy
	cut   int32 // the isolated node, 0 if none
}

const fetcherClientID = "groupd-replica-fetcher-"

// withFaultProxies puts a fault-injecting proxy between each node and
// etcd and in front of each node (see clusterNet).
func withFaultProxies() clusterOption {
	return func(c *binaryCluster) {
		t := c.t
		u, err := url.Parse(c.etcd)
		if err != nil {
			t.Fatal(err)
		}
		c.net = &clusterNet{}
		for _, n := range c.nodes {
			ep := startFaultProxy(t, u.Host, faultproxy.Options{})
			front := startFaultProxy(t, n.addr, faultproxy.Options{Classify: faultproxy.KafkaClientID})
			c.net.etcd = append(c.net.etcd, ep)
			c.net.front = append(c.net.front, front)
			n.etcd = u.Scheme + "://" + ep.Addr()
			n.advertise = front.Addr()
		}
	}
}

func startFaultProxy(t *testing.T, target string, opts faultproxy.Options) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(target, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// isolate cuts node id off from etcd and from its peers (see clusterNet).
func (c *binaryCluster) isolate(id int32, mode faultproxy.Mode) {
	c.net.cut = id
	c.net.etcd[id-1].Cut(mode, nil)
	for i, front := range c.net.front {
		if int32(i+1) == id {
			front.Cut(mode, func(class string) bool { return strings.HasPrefix(class, fetcherClientID) })
		} else {
			front.Cut(mode, func(class string) bool { return class == fetcherClientID+strconv.Itoa(int(id)) })
		}
	}
}

// heal ends the isolation.
func (c *binaryCluster) heal() {
	c.net.etcd[c.net.cut-1].Heal()
	for _, front := range c.net.front {
		front.Heal()
	}
	c.net.cut = 0
}

// peerCuts is how many peer connections the front proxies have cut.
func (c *binaryCluster) peerCuts() int64 {
	var n int64
	for _, front := range c.net.front {
		n += front.Cuts()
	}
	return n
}

// pinnedProducer sends acks=all produce requests to one node only, through
// the address it advertises, whatever the cluster says leads.
type pinnedProducer struct {
	c       *binaryCluster
	cl      *kgo.Client
	node    int32
	topicID [16]byte
}

func (c *binaryCluster) pinnedProducer(node int32) *pinnedProducer {
	t := c.t
	td, err := c.adm.ListTopics(c.ctx, clusterTopic)
	if err != nil || td[clusterTopic].Err != nil {
		t.Fatalf("topic id: %v %v", err, td[clusterTopic].Err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.nodes[node-1].advertise), kgo.ClientID("pinned-producer"),
		kgo.RequestRetries(0), kgo.RetryTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &pinnedProducer{c: c, cl: cl, node: node, topicID: td[clusterTopic].ID}
}

// produce sends one record, "pin-N" with N larger than any before, to
// partition p, and returns the answer's error; an acknowledged record is
// remembered for finish to read back.
func (pp *pinnedProducer) produce(p int32) error {
	c := pp.c
	c.mu.Lock()
	c.pins++
	v := "pin-" + strconv.Itoa(c.pins)
	c.mu.Unlock()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 2000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = clusterTopic, pp.topicID // whichever the version the client picks names it by
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = p
	rp.Records = buildBatch(v)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	resp, err := pp.cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		return err
	}
	pr := resp.(*kmsg.ProduceResponse)
	if len(pr.Topics) != 1 || len(pr.Topics[0].Partitions) != 1 {
		return fmt.Errorf("produce answer for %d topics", len(pr.Topics))
	}
	if err := kerr.ErrorForCode(pr.Topics[0].Partitions[0].ErrorCode); err != nil {
		return err
	}
	c.mu.Lock()
	c.pinAcked[p][v] = true
	c.mu.Unlock()
	return nil
}

// firstAckHandedAfter is the first acknowledgement on partition p of a
// record handed to the producer after from, if any.
func (c *binaryCluster) firstAckHandedAfter(p int32, from time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for seq, handed := range c.handed[p] {
		if at := c.acked[p][seq]; handed.After(from) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// pickVictim picks a node that leads a partition, one not cut before if it
// can, the controller among them if it is one, and returns it with the
// lowest partition it leads.
func (c *binaryCluster) pickVictim(cutBefore []int32) (node, partition int32, controller bool) {
	var leaders map[int32]int32
	var ctrl int32
	waitUntil(c.t, c.ctx, func() error {
		md, err := c.adm.Metadata(c.ctx, clusterTopic)
		if err != nil {
			return err
		}
		leaders, ctrl = map[int32]int32{}, md.Controller
		for p, pd := range md.Topics[clusterTopic].Partitions {
			if pd.Leader < 1 || pd.Err != nil {
				return fmt.Errorf("partition %d: leader %d, %v", p, pd.Leader, pd.Err)
			}
			leaders[p] = pd.Leader
		}
		return nil
	})
	var fresh, all []int32
	for p := range int32(clusterPartitions) {
		l := leaders[p]
		if !slices.Contains(all, l) {
			all = append(all, l)
			if !slices.Contains(cutBefore, l) {
				fresh = append(fresh, l)
			}
		}
	}
	candidates := fresh
	if len(candidates) == 0 {
		candidates = all
	}
	node = candidates[0]
	if slices.Contains(candidates, ctrl) {
		node = ctrl
	}
	for p := range int32(clusterPartitions) {
		if leaders[p] == node {
			return node, p, node == ctrl
		}
	}
	panic("unreachable")
}

// waitFullISR waits until every node is live and in every partition's ISR:
// until then the next fault could leave a partition below
// min.insync.replicas.
func (c *binaryCluster) waitFullISR() {
	waitUntil(c.t, c.ctx, func() error {
		md, err := c.adm.Metadata(c.ctx, clusterTopic)
		if err != nil {
			return err
		}
		if len(md.Brokers) != len(c.nodes) {
			return fmt.Errorf("brokers %v", md.Brokers.NodeIDs())
		}
		for p, pd := range md.Topics[clusterTopic].Partitions {
			if len(pd.ISR) != len(c.nodes) || pd.Err != nil {
				return fmt.Errorf("partition %d: ISR %v, %v", p, pd.ISR, pd.Err)
			}
		}
		return nil
	})
}

// TestBinaryClusterNodeCutOff cuts the leader of a partition off from etcd
// and from its peers under the producer, three times, on different nodes
// where it can (the controller first, when it leads a partition), with the
// proxies resetting the connections or blackholing them, for longer than
// the node's session, while clients still reach it (see clusterNet). The
// partition must get a new leader and the producer go on; a producer
// pinned to the cut node must not be acknowledged anything it sends once
// the node is cut, since neither its followers nor etcd can hear from it;
// and at the end every acknowledged record, of either producer, reads back
// exactly once and in order.
func TestBinaryClusterNodeCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd and three groupd processes for about forty seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	c := startBinaryCluster(t, ctx, withFaultProxies())
	// Past the node's 2 s session (its lease), twice over.
	const cutFor = 5 * time.Second
	var cutBefore []int32
	for i, mode := range []faultproxy.Mode{faultproxy.Blackhole, faultproxy.Reset, faultproxy.Blackhole} {
		time.Sleep(time.Second)
		victim, p, ctrl := c.pickVictim(cutBefore)
		cutBefore = append(cutBefore, victim)

		// The pinned producer is acknowledged while the node leads
		// partition p and is not cut: its check below can fail.
		pp := c.pinnedProducer(victim)
		waitUntil(t, ctx, func() error { return pp.produce(p) })

		ackedBefore, peerCutsBefore, etcdCutsBefore := c.ackedCount(), c.peerCuts(), c.net.etcd[victim-1].Cuts()
		cutAt := time.Now()
		c.isolate(victim, mode)
		t.Logf("cut %d (%s) at %v: node %d, leader of partition %d, controller %v, cut off from etcd and its peers",
			i+1, mode, cutAt.Sub(start).Round(time.Millisecond), victim, p, ctrl)

		// The pinned producer goes on sending to the cut node.
		var (
			pinMu   sync.Mutex
			pinErrs = map[string]int{}
			pinAcks int
		)
		stopPinning, pinned := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(pinned)
			for {
				select {
				case <-stopPinning:
					return
				default:
				}
				err := pp.produce(p)
				pinMu.Lock()
				if err == nil {
					pinAcks++
				} else {
					var ke *kerr.Error
					if !errors.As(err, &ke) {
						if errors.Is(err, context.DeadlineExceeded) {
							err = errors.New("no answer")
						} else {
							err = errors.New("connection failed")
						}
					}
					pinErrs[err.Error()]++
				}
				pinMu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		}()

		// Another node leads p, and the producer's records handed to
		// it after the cut are acknowledged: by the new leader, since
		// the cut node can get none replicated.
		c.waitLeaderMoved(p, victim)
		movedAt := time.Now()
		var firstAck time.Time
		waitUntil(t, ctx, func() error {
			at, ok := c.firstAckHandedAfter(p, cutAt)
			if !ok {
				return fmt.Errorf("partition %d: nothing handed to the producer after the cut is acknowledged", p)
			}
			firstAck = at
			return nil
		})
		newLeader := c.leaderOf(p)
		time.Sleep(time.Until(cutAt.Add(cutFor)))
		close(stopPinning)
		<-pinned
		pinMu.Lock()
		attempts := pinAcks
		for _, n := range pinErrs {
			attempts += n
		}
		if pinAcks > 0 {
			t.Fatalf("cut %d: the cut node %d acknowledged %d of the %d acks=all produces sent to it after the cut (errors %v)",
				i+1, victim, pinAcks, attempts, pinErrs)
		}
		if attempts == 0 {
			t.Fatalf("cut %d: the pinned producer sent nothing during the cut", i+1)
		}
		errs := fmt.Sprint(pinErrs)
		pinMu.Unlock()
		// The cut did cut something: the node's etcd connections, and
		// fetchers' connections between it and its peers.
		if c.net.etcd[victim-1].Cuts() == etcdCutsBefore || c.peerCuts() == peerCutsBefore {
			t.Fatalf("cut %d: the proxies cut %d etcd and %d peer connections", i+1,
				c.net.etcd[victim-1].Cuts()-etcdCutsBefore, c.peerCuts()-peerCutsBefore)
		}
		c.heal()
		healedAt := time.Now()
		c.waitFullISR()
		t.Logf("cut %d: partition %d led by node %d in Metadata %v after the cut; first ack of a record handed after the cut %v after it; "+
			"%d records acknowledged during the cut; %d peer connections cut; pinned producer: %d sent to node %d, none acknowledged, %s; "+
			"back in every ISR %v after the heal",
			i+1, p, newLeader, movedAt.Sub(cutAt).Round(time.Millisecond), firstAck.Sub(cutAt).Round(time.Millisecond), c.ackedCount()-ackedBefore,
			c.peerCuts()-peerCutsBefore, attempts, victim, errs, time.Since(healedAt).Round(time.Millisecond))
	}
	time.Sleep(time.Second)
	t.Logf("checking at %v", time.Since(start).Round(time.Millisecond))
	c.finish()
}
