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
func (pp *pinnedProducer) produce(p int32, acks int16) error {
	c := pp.c
	c.mu.Lock()
	c.pins++
	v := "pin-" + strconv.Itoa(c.pins)
	c.mu.Unlock()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = acks
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
	if acks == -1 {
		// An acks=1 record may be lost in a failover.
		c.mu.Lock()
		c.pinAcked[p][v] = true
		c.mu.Unlock()
	}
	return nil
}

// pinTally counts what a pinned producer's produces to a cut node got.
type pinTally struct {
	mu           sync.Mutex
	answers      map[string]int // "acks=all NOT_LEADER_FOR_PARTITION": count
	sentLate     [2]int         // acks=all, acks=1 produces sent once the lease had ended
	ackedAll     int            // acks=all produces acknowledged
	ackedOneLate int            // acks=1 produces sent once the lease had ended and acknowledged
}

func (pt *pinTally) add(acks int16, late bool, err error) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.answers == nil {
		pt.answers = map[string]int{}
	}
	kind, i := "acks=all", 0
	if acks == 1 {
		kind, i = "acks=1", 1
	}
	if late {
		pt.sentLate[i]++
	}
	answer := "ok"
	var ke *kerr.Error
	switch {
	case err == nil:
		if acks == -1 {
			pt.ackedAll++
		} else if late {
			pt.ackedOneLate++
		}
	case errors.As(err, &ke):
		answer = ke.Message
	case errors.Is(err, context.DeadlineExceeded):
		answer = "no answer"
	default:
		answer = "connection failed"
	}
	pt.answers[kind+" "+answer]++
}

func (pt *pinTally) String() string {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return fmt.Sprintf("answers %v; %d acks=all and %d acks=1 sent after the lease had ended", pt.answers, pt.sentLate[0], pt.sentLate[1])
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

// waitLeaderElsewhere waits until a node other than n answers Metadata
// naming a leader of partition p other than n, and returns it. (The cut
// node itself answers from the last view it had.)
func (c *binaryCluster) waitLeaderElsewhere(p, n int32) int32 {
	var leader int32
	waitUntil(c.t, c.ctx, func() error {
		var errs []error
		for _, other := range c.nodes {
			if other.id == n {
				continue
			}
			resp, err := c.metadataOf(other.id)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, t := range resp.Topics {
				for _, pd := range t.Partitions {
					if pd.Partition == p && pd.ErrorCode == 0 && pd.Leader >= 1 && pd.Leader != n {
						leader = pd.Leader
						return nil
					}
				}
			}
			errs = append(errs, fmt.Errorf("node %d: partition %d still led by node %d", other.id, p, n))
		}
		return errors.Join(errs...)
	})
	return leader
}

// metadataOf is node id's answer to Metadata for the topic.
func (c *binaryCluster) metadataOf(id int32) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(clusterTopic)
	req.Topics = append(req.Topics, rt)
	return req.RequestWith(c.ctx, c.admCl.Broker(int(id)))
}

// waitFullISR waits until every node answers Metadata with every node
// live and in every partition's ISR: until then the next fault could
// leave a partition below min.insync.replicas. (Each node is asked: a node
// just healed may answer from a view older than the cut.)
func (c *binaryCluster) waitFullISR() {
	waitUntil(c.t, c.ctx, func() error {
		for _, n := range c.nodes {
			resp, err := c.metadataOf(n.id)
			if err != nil {
				return fmt.Errorf("node %d: %w", n.id, err)
			}
			if len(resp.Brokers) != len(c.nodes) || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != clusterPartitions {
				return fmt.Errorf("node %d: %d brokers, topics %v", n.id, len(resp.Brokers), resp.Topics)
			}
			for _, pd := range resp.Topics[0].Partitions {
				if len(pd.ISR) != len(c.nodes) || pd.ErrorCode != 0 || pd.Leader < 1 {
					return fmt.Errorf("node %d: partition %d: leader %d, ISR %v, error %d", n.id, pd.Partition, pd.Leader, pd.ISR, pd.ErrorCode)
				}
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
// pinned to the cut node must not be acknowledged any acks=all produce it
// sends once the node is cut, since neither its followers nor etcd can hear
// from it, nor any acks=1 produce once the node's lease has ended; and at
// the end every acknowledged record, of either producer, reads back
// exactly once and in order.
func TestBinaryClusterNodeCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd and three groupd processes for about forty seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	c := startBinaryCluster(t, ctx, withFaultProxies())
	// Past the node's session (its lease), twice over.
	const cutFor = 5 * time.Second
	var cutBefore []int32
	for i, mode := range []faultproxy.Mode{faultproxy.Blackhole, faultproxy.Reset, faultproxy.Blackhole} {
		time.Sleep(time.Second)
		victim, p, ctrl := c.pickVictim(cutBefore)
		cutBefore = append(cutBefore, victim)

		// The pinned producer is acknowledged while the node leads
		// partition p and is not cut: its check below can fail.
		pp := c.pinnedProducer(victim)
		waitUntil(t, ctx, func() error { return pp.produce(p, -1) })

		ackedBefore, peerCutsBefore, etcdCutsBefore := c.ackedCount(), c.peerCuts(), c.net.etcd[victim-1].Cuts()
		c.isolate(victim, mode)
		// From here on nothing passes between the node and etcd or its
		// peers.
		cutAt := time.Now()
		t.Logf("cut %d (%s) at %v: node %d, leader of partition %d, controller %v, cut off from etcd and its peers",
			i+1, mode, cutAt.Sub(start).Round(time.Millisecond), victim, p, ctrl)

		// The pinned producer goes on sending to the cut node, acks=all
		// and acks=1 in turn.
		var tally pinTally
		leaseGone := cutAt.Add(clusterSessionTimeout + time.Second)
		stopPinning, pinned := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(pinned)
			for n := 0; ; n++ {
				select {
				case <-stopPinning:
					return
				default:
				}
				acks := int16(-1)
				if n%2 == 1 {
					acks = 1
				}
				sent := time.Now()
				err := pp.produce(p, acks)
				tally.add(acks, sent.After(leaseGone), err)
				time.Sleep(50 * time.Millisecond)
			}
		}()

		// Another node leads p, and the producer's records handed to
		// it after the cut are acknowledged: by the new leader, since
		// the cut node can get none replicated.
		newLeader := c.waitLeaderElsewhere(p, victim)
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
		time.Sleep(time.Until(cutAt.Add(cutFor)))
		waitUntil(t, ctx, func() error {
			tally.mu.Lock()
			defer tally.mu.Unlock()
			if tally.sentLate[0] == 0 || tally.sentLate[1] == 0 {
				return errors.New("the pinned producer has not yet sent both kinds of produce since the node's lease ended")
			}
			return nil
		})
		close(stopPinning)
		<-pinned
		// No acks=all produce may be acknowledged: neither the node's
		// followers nor etcd hear from it, so its ISR can neither
		// catch up nor shrink. An acks=1 produce may be while the
		// node's lease lasts, but not once it cannot: the last
		// keep-alive the node can have had answered was sent before
		// the cut, so its lease ends within a session of the cut.
		if tally.ackedAll > 0 || tally.ackedOneLate > 0 {
			t.Fatalf("cut %d: the cut node %d acknowledged %d acks=all produces sent to it after the cut, and %d acks=1 ones sent after its lease had ended (%s)",
				i+1, victim, tally.ackedAll, tally.ackedOneLate, &tally)
		}
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
			"%d records acknowledged during the cut; %d peer connections cut; pinned producer to node %d: %s; "+
			"back in every ISR %v after the heal",
			i+1, p, newLeader, movedAt.Sub(cutAt).Round(time.Millisecond), firstAck.Sub(cutAt).Round(time.Millisecond), c.ackedCount()-ackedBefore,
			c.peerCuts()-peerCutsBefore, victim, &tally, time.Since(healedAt).Round(time.Millisecond))
	}
	time.Sleep(time.Second)
	t.Logf("checking at %v", time.Since(start).Round(time.Millisecond))
	c.finish()
}
