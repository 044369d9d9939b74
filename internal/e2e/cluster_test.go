package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/cluster/etcddev"
)

// startEtcd runs an embedded etcd member for the test, with short
// timeouts (its minimum lease is then one second).
func startEtcd(t testing.TB) string {
	t.Helper()
	m, err := etcddev.Start(t.TempDir(), etcddev.Options{Fast: true, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m.Endpoint()
}

// freeAddr returns a loopback address nothing listens on, so that a node
// keeps its address across restarts.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// inCluster makes a started groupd node id of the cluster at etcd.
func inCluster(etcd, prefix string, id int32, listen string) func(*app.Config) {
	return func(c *app.Config) {
		c.Listen = listen
		c.NodeID = id
		c.Cluster = app.ClusterConfig{
			EtcdEndpoints: []string{etcd}, Prefix: prefix,
			SessionTimeout:           2 * time.Second,
			DefaultReplicationFactor: 3,
			MinInsyncReplicas:        2,
			ReplicaLagTimeMax:        5 * time.Second,
		}
	}
}

// localCluster is three in-process nodes of one cluster over an embedded
// etcd, and a client of all three.
type localCluster struct {
	etcd, prefix string
	addrs, dirs  []string
	nodes        []*app.App
	nodeOpts     []func(*app.Config)
	cl           *kgo.Client
	adm          *kadm.Client
}

// startLocalCluster starts the nodes, each with nodeOpts besides its
// cluster settings, and returns once every node knows all three and the
// controller.
func startLocalCluster(t *testing.T, ctx context.Context, nodeOpts []func(*app.Config), opts ...kgo.Opt) *localCluster {
	t.Helper()
	c := &localCluster{etcd: startEtcd(t), prefix: "/groupd/" + t.Name(), nodeOpts: nodeOpts}
	for i := range 3 {
		c.addrs = append(c.addrs, freeAddr(t))
		c.dirs = append(c.dirs, t.TempDir())
		c.nodes = append(c.nodes, nil)
		c.start(t, int32(i+1))
	}
	// kgo answers Metadata from its cache for MetadataMinAge (5s by
	// default); the tests wait on changes Metadata shows.
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.addrs...), kgo.MetadataMinAge(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	c.cl, c.adm = cl, kadm.NewClient(cl)
	// Every node, not only the one asked, knows all three before a
	// topic is placed over three: each one answers Metadata itself.
	waitUntil(t, ctx, func() error {
		for id := int32(1); id <= 3; id++ {
			resp, err := cl.Broker(int(id)).Request(ctx, kmsg.NewPtrMetadataRequest())
			if err != nil {
				return err
			}
			md := resp.(*kmsg.MetadataResponse)
			if len(md.Brokers) != 3 || md.ControllerID < 1 {
				return fmt.Errorf("node %d: %d brokers, controller %d", id, len(md.Brokers), md.ControllerID)
			}
		}
		return nil
	})
	return c
}

func (c *localCluster) start(t *testing.T, id int32) {
	c.nodes[id-1] = startServer(t, c.dirs[id-1], append([]func(*app.Config){inCluster(c.etcd, c.prefix, id, c.addrs[id-1])}, c.nodeOpts...)...)
}

// TestClusterReplicatesAndFailsOver runs three nodes in the test process:
// a topic with three replicas is created, acks=all records are produced,
// the leader of its partition stops, and every acknowledged record is read
// back from the new leader.
func TestClusterReplicatesAndFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Every node knows all three before the topic is placed over three.
	c := startLocalCluster(t, ctx, nil, kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic("replicated"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RetryTimeout(30*time.Second))
	addrs, nodes, cl, adm := c.addrs, c.nodes, c.cl, c.adm
	res, err := adm.CreateTopic(ctx, 2, 3, nil, "replicated")
	if err != nil || res.Err != nil {
		t.Fatalf("create topic: %v %v", err, res.Err)
	}
	// The node that created the topic waited for its leaders; the node
	// Metadata asks may see them a moment later.
	var p0 kadm.PartitionDetail
	waitUntil(t, ctx, func() error {
		md, err := adm.Metadata(ctx, "replicated")
		if err != nil {
			return err
		}
		p0 = md.Topics["replicated"].Partitions[0]
		if len(p0.Replicas) != 3 || p0.Leader < 1 {
			return fmt.Errorf("partition 0: replicas %v, leader %d", p0.Replicas, p0.Leader)
		}
		return nil
	})

	const n = 200
	produce := func(from int) {
		for i := from; i < from+n; i++ {
			r := &kgo.Record{Partition: 0, Value: fmt.Appendf(nil, "r%05d", i)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	produce(0)

	// The leader goes away; the controller elects a new one from the ISR.
	leader := p0.Leader
	t.Logf("stopping the leader, node %d", leader)
	stopServer(t, nodes[leader-1])
	produce(n)

	// Every acknowledged record, once and in order, from the new leader.
	md, err := adm.Metadata(ctx, "replicated")
	if err != nil {
		t.Fatal(err)
	}
	if nl := md.Topics["replicated"].Partitions[0].Leader; nl == leader || nl < 1 {
		t.Fatalf("leader after the stop is %d", nl)
	}
	var live []string
	for i, a := range addrs {
		if int32(i+1) != leader {
			live = append(live, a)
		}
	}
	got := readPartition(t, ctx, live, "replicated", 0, 2*n)
	for i, v := range got {
		if want := fmt.Sprintf("r%05d", i); v != want {
			t.Fatalf("offset %d holds %q, want %q", i, v, want)
		}
	}
}

// readPartition reads partition p of topic from its start until it has want
// records.
func readPartition(t *testing.T, ctx context.Context, seeds []string, topic string, p int32, want int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records: %v", len(got), want, ctx.Err())
		}
		fs.EachError(func(_ string, _ int32, err error) {
			if !kerr.IsRetriable(err) {
				t.Logf("fetch: %v", err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if len(got) != want {
		t.Fatalf("read %d records, want %d", len(got), want)
	}
	return got
}

// liveBrokers asks a node for Metadata, every time: kadm's BrokerMetadata
// answers from the client's cache once it has brokers, which keeps the
// first answer of a node that had not yet seen the last node register.
func liveBrokers(ctx context.Context, cl *kgo.Client) ([]int32, int32, error) {
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return nil, -1, err
	}
	ids := make([]int32, 0, len(resp.Brokers))
	for _, b := range resp.Brokers {
		ids = append(ids, b.NodeID)
	}
	return ids, resp.ControllerID, nil
}

// waitUntil retries check until it passes or ctx ends.
func waitUntil(t *testing.T, ctx context.Context, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
