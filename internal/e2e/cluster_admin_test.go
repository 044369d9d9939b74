package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/groupd/groupd/internal/cli"
)

// partition waits until check passes on partition p of topic as Metadata
// shows it, and returns it.
func (c *localCluster) partition(t *testing.T, ctx context.Context, topic string, p int32, check func(kadm.PartitionDetail) error) kadm.PartitionDetail {
	t.Helper()
	var pd kadm.PartitionDetail
	waitUntil(t, ctx, func() error {
		md, err := c.adm.Metadata(ctx, topic)
		if err != nil {
			return err
		}
		td, ok := md.Topics[topic]
		if !ok || td.Err != nil || len(td.Partitions) <= int(p) {
			return fmt.Errorf("topic %s: %v", topic, td.Err)
		}
		pd = td.Partitions[p]
		if pd.Leader < 1 || pd.Err != nil {
			return fmt.Errorf("partition %d: leader %d, %v", p, pd.Leader, pd.Err)
		}
		return check(pd)
	})
	return pd
}

// TestClusterReassignsAPartition moves a partition of a topic with two
// replicas to another pair of nodes (one kept, one new) while a producer
// writes to it with acks=all: ListPartitionReassignments shows the move
// while it is under way and nothing once it is done, Metadata then shows
// the new replicas, and with the node it left stopped, every acknowledged
// record is read back from the new replicas.
func TestClusterReassignsAPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startLocalCluster(t, ctx, nil, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("moving"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RetryTimeout(30*time.Second))
	if res, err := c.adm.CreateTopic(ctx, 1, 2, nil, "moving"); err != nil || res.Err != nil {
		t.Fatalf("create topic: %v %v", err, res.Err)
	}
	before := c.partition(t, ctx, "moving", 0, func(pd kadm.PartitionDetail) error {
		if len(pd.Replicas) != 2 || len(pd.ISR) != 2 {
			return fmt.Errorf("replicas %v, isr %v", pd.Replicas, pd.ISR)
		}
		return nil
	})
	// The topic's placement is the cluster's choice: from [a b] to [b c].
	a, b := before.Replicas[0], before.Replicas[1]
	var cNode int32
	for id := int32(1); id <= 3; id++ {
		if id != a && id != b {
			cNode = id
		}
	}
	target := []int32{b, cNode}
	t.Logf("moving partition 0 from %v to %v", before.Replicas, target)

	var (
		mu    sync.Mutex
		acked []string
		stop  = make(chan struct{})
		done  = make(chan error, 1)
	)
	produce := func(i int) error {
		v := fmt.Sprintf("m%05d", i)
		if err := c.cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte(v)}).FirstErr(); err != nil {
			return fmt.Errorf("produce %d: %w", i, err)
		}
		mu.Lock()
		acked = append(acked, v)
		mu.Unlock()
		return nil
	}
	for i := range 100 {
		if err := produce(i); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		for i := 100; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := produce(i); err != nil {
				done <- err
				return
			}
		}
	}()

	var req kadm.AlterPartitionAssignmentsReq
	req.Assign("moving", 0, target)
	res, err := c.adm.AlterPartitionAssignments(ctx, req)
	if err != nil || res.Error() != nil {
		t.Fatalf("alter partition assignments: %v %v", err, res.Error())
	}
	// The node that took the request answers once its view shows the
	// reassignment: the first listing has it, unless the move is done
	// already (several etcd writes and a follower's catching up later).
	first := true
	moving := kadm.TopicsSet{}
	moving.Add("moving", 0)
	waitUntil(t, ctx, func() error {
		ls, err := c.adm.ListPartitionReassignments(ctx, moving)
		if err != nil {
			return err
		}
		wasFirst := first
		first = false
		r, ok := ls["moving"][0]
		if !ok {
			if wasFirst {
				t.Fatalf("the first listing after the request has no reassignment: %v", ls)
			}
			if len(ls) != 0 {
				t.Fatalf("listing %v", ls)
			}
			return nil
		}
		if !slices.Equal(r.AddingReplicas, []int32{cNode}) || !slices.Equal(r.RemovingReplicas, []int32{a}) {
			t.Fatalf("in progress: replicas %v adding %v removing %v, want adding [%d] removing [%d]", r.Replicas, r.AddingReplicas, r.RemovingReplicas, cNode, a)
		}
		if !slices.Contains(r.Replicas, a) || !slices.Contains(r.Replicas, b) {
			t.Fatalf("in progress: replicas %v should still hold %d and %d", r.Replicas, a, b)
		}
		return errors.New("reassignment in progress")
	})
	after := c.partition(t, ctx, "moving", 0, func(pd kadm.PartitionDetail) error {
		if !slices.Equal(pd.Replicas, target) || len(pd.ISR) != 2 || !slices.Contains(target, pd.Leader) {
			return fmt.Errorf("replicas %v, isr %v, leader %d", pd.Replicas, pd.ISR, pd.Leader)
		}
		return nil
	})
	t.Logf("after the move: replicas %v, isr %v, leader %d", after.Replicas, after.ISR, after.Leader)
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := range 50 { // and on, with the old replica gone
		if i == 0 {
			stopServer(t, c.nodes[a-1])
		}
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if err := produce(n); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	want := slices.Clone(acked)
	mu.Unlock()
	got := readPartition(t, ctx, []string{c.addrs[b-1], c.addrs[cNode-1]}, "moving", 0, len(want))
	if !slices.Equal(got, want) {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("offset %d holds %q, want %q (%d records acknowledged)", i, got[i], want[i], len(want))
			}
		}
	}
	t.Logf("%d acknowledged records read back from nodes %v", len(want), target)
	// A cancellation with nothing under way, and a target naming a node
	// that is not registered, are refused as Kafka refuses them.
	var bad kadm.AlterPartitionAssignmentsReq
	bad.CancelAssign("moving", 0)
	bad.Assign("moving", 1, []int32{b})
	res, err = c.adm.AlterPartitionAssignments(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	if e := res["moving"][0].Err; !errors.Is(e, kerr.NoReassignmentInProgress) {
		t.Errorf("cancel with none under way: %v", e)
	}
	if e := res["moving"][1].Err; !errors.Is(e, kerr.UnknownTopicOrPartition) {
		t.Errorf("a partition that does not exist: %v", e)
	}
	var gone kadm.AlterPartitionAssignmentsReq
	gone.Assign("moving", 0, []int32{b, a})
	res, err = c.adm.AlterPartitionAssignments(ctx, gone)
	if err != nil {
		t.Fatal(err)
	}
	if e := res["moving"][0].Err; !errors.Is(e, kerr.InvalidReplicaAssignment) {
		t.Errorf("a target with a stopped node: %v", e)
	}
}

// TestClusterElectsThePreferredLeader: after the preferred leader of a
// partition restarts, another replica leads; ElectLeaders gives the
// preferred replica its leadership back, and answers ELECTION_NOT_NEEDED
// when asked again.
func TestClusterElectsThePreferredLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startLocalCluster(t, ctx, nil)
	if res, err := c.adm.CreateTopic(ctx, 1, 3, nil, "elect"); err != nil || res.Err != nil {
		t.Fatalf("create topic: %v %v", err, res.Err)
	}
	pd := c.partition(t, ctx, "elect", 0, func(pd kadm.PartitionDetail) error {
		if len(pd.ISR) != 3 {
			return fmt.Errorf("isr %v", pd.ISR)
		}
		return nil
	})
	pref := pd.Replicas[0]
	if pd.Leader != pref {
		t.Fatalf("a new partition is led by %d, not its preferred replica %d", pd.Leader, pref)
	}
	stopServer(t, c.nodes[pref-1])
	c.start(t, pref)
	pd = c.partition(t, ctx, "elect", 0, func(pd kadm.PartitionDetail) error {
		if pd.Leader == pref || !slices.Contains(pd.ISR, pref) {
			return fmt.Errorf("leader %d, isr %v: waiting for %d back in sync under another leader", pd.Leader, pd.ISR, pref)
		}
		return nil
	})
	t.Logf("preferred replica %d back in sync; %d leads", pref, pd.Leader)

	set := kadm.TopicsSet{}
	set.Add("elect", 0)
	rs, err := c.adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, set)
	if err != nil {
		t.Fatal(err)
	}
	if r := rs["elect"][0]; r.Err != nil {
		t.Fatalf("preferred election: %v %s", r.Err, r.ErrMessage)
	}
	c.partition(t, ctx, "elect", 0, func(pd kadm.PartitionDetail) error {
		if pd.Leader != pref {
			return fmt.Errorf("leader %d after the election, want %d", pd.Leader, pref)
		}
		return nil
	})
	rs, err = c.adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, set)
	if err != nil {
		t.Fatal(err)
	}
	if r := rs["elect"][0]; !errors.Is(r.Err, kerr.ElectionNotNeeded) {
		t.Fatalf("second preferred election: %v, want ELECTION_NOT_NEEDED", r.Err)
	}
	// An unclean election of a partition with a live leader is not
	// needed either; a partition that does not exist is unknown; asked
	// for every partition, those led as asked are left out.
	set.Add("elect", 7)
	rs, err = c.adm.ElectLeaders(ctx, kadm.ElectLiveReplica, set)
	if err != nil {
		t.Fatal(err)
	}
	if r := rs["elect"][0]; !errors.Is(r.Err, kerr.ElectionNotNeeded) {
		t.Errorf("unclean election with a live leader: %v", r.Err)
	}
	if r := rs["elect"][7]; !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("election of a partition that does not exist: %v", r.Err)
	}
	rs, err = c.adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs["elect"]) != 0 {
		t.Errorf("an election of every partition lists %v", rs)
	}
}

// runTopicsCLI runs `groupd topics args...` as the binary does, against
// the cluster, and returns its output and exit status.
func runTopicsCLI(c *localCluster, args ...string) (stdout, stderr string, code int) {
	root := &cobra.Command{Use: "groupd", SilenceUsage: true}
	root.AddCommand(cli.TopicsCmd())
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append(append([]string{"topics"}, args...), "--bootstrap-server="+strings.Join(c.addrs, ","), "--timeout=30s"))
	err := root.ExecuteContext(context.Background())
	if err != nil {
		fmt.Fprintln(&errOut, err)
	}
	return out.String(), errOut.String(), cli.ExitCode(err)
}

// TestClusterCLIMovesPartitionsAndElectsLeaders drives `groupd topics
// reassign`, `reassignments` and `elect-leaders` against three nodes: a
// partition moves to other brokers, then its replicas are reordered so
// that its preferred replica does not lead, and elect-leaders makes it
// lead.
func TestClusterCLIMovesPartitionsAndElectsLeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startLocalCluster(t, ctx, nil)
	must := func(args ...string) string {
		t.Helper()
		out, errOut, code := runTopicsCLI(c, args...)
		if code != 0 {
			t.Fatalf("topics %q: exit %d\n%s%s", args, code, out, errOut)
		}
		return out
	}
	must("create", "clitopic", "--partitions", "1", "--replication-factor", "2")
	pd := c.partition(t, ctx, "clitopic", 0, func(pd kadm.PartitionDetail) error {
		if len(pd.ISR) != 2 {
			return fmt.Errorf("isr %v", pd.ISR)
		}
		return nil
	})
	a, b := pd.Replicas[0], pd.Replicas[1]
	cNode := 6 - a - b
	out := must("reassign", "--topic", "clitopic", "--partition", "0", "--replicas", fmt.Sprintf("%d,%d", b, cNode))
	if want := fmt.Sprintf(`Reassignment of "clitopic" partition 0 to replicas %d,%d started`, b, cNode); !strings.Contains(out, want) {
		t.Fatalf("reassign printed %q, want %q", out, want)
	}
	waitUntil(t, ctx, func() error {
		out := must("reassignments")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if strings.Join(strings.Fields(lines[0]), " ") != "TOPIC PARTITION REPLICAS ADDING REMOVING" {
			t.Fatalf("reassignments printed:\n%s", out)
		}
		if len(lines) == 1 {
			return nil
		}
		row := strings.Fields(lines[1])
		if row[0] != "clitopic" || row[1] != "0" || row[3] != fmt.Sprint(cNode) || row[4] != fmt.Sprint(a) {
			t.Fatalf("reassignments printed:\n%s", out)
		}
		return errors.New("under way: " + lines[1])
	})
	c.partition(t, ctx, "clitopic", 0, func(pd kadm.PartitionDetail) error {
		if !slices.Equal(pd.Replicas, []int32{b, cNode}) || len(pd.ISR) != 2 {
			return fmt.Errorf("replicas %v, isr %v", pd.Replicas, pd.ISR)
		}
		return nil
	})
	if _, errOut, code := runTopicsCLI(c, "reassign", "--topic", "clitopic", "--partition", "0", "--cancel"); code != 1 || !strings.Contains(errOut, "NO_REASSIGNMENT_IN_PROGRESS") {
		t.Fatalf("cancel with none under way: exit %d, %s", code, errOut)
	}

	// The same replicas in the other order: the leader stays, and is no
	// longer the preferred replica.
	pd = c.partition(t, ctx, "clitopic", 0, func(pd kadm.PartitionDetail) error { return nil })
	other := b
	if pd.Leader == b {
		other = cNode
	}
	must("reassign", "--topic", "clitopic", "--partition", "0", "--replicas", fmt.Sprintf("%d,%d", other, pd.Leader))
	c.partition(t, ctx, "clitopic", 0, func(p kadm.PartitionDetail) error {
		if !slices.Equal(p.Replicas, []int32{other, pd.Leader}) || p.Leader != pd.Leader || len(p.ISR) != 2 {
			return fmt.Errorf("replicas %v, leader %d, isr %v", p.Replicas, p.Leader, p.ISR)
		}
		return nil
	})
	out = must("elect-leaders", "clitopic:0")
	if strings.Join(strings.Fields(out), " ") != "TOPIC PARTITION RESULT clitopic 0 elected" {
		t.Fatalf("elect-leaders printed:\n%s", out)
	}
	c.partition(t, ctx, "clitopic", 0, func(p kadm.PartitionDetail) error {
		if p.Leader != other {
			return fmt.Errorf("leader %d, want the preferred replica %d", p.Leader, other)
		}
		return nil
	})
	out = must("elect-leaders", "clitopic", "-o", "json")
	if strings.Join(strings.Fields(out), "") != `[{"topic":"clitopic","partition":0,"result":"not-needed"}]` {
		t.Fatalf("elect-leaders again printed:\n%s", out)
	}
	out = must("elect-leaders", "--unclean", "clitopic")
	if !strings.Contains(out, "not-needed") {
		t.Fatalf("unclean election with a live leader printed:\n%s", out)
	}
}
