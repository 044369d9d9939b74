package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/cli"
	"github.com/groupd/groupd/internal/inspect"
)

// TestClusterSeen runs three nodes with their HTTP sides: each node's
// admin API shows the three nodes and the controller, and every partition
// of a three-replica topic fully in sync; once node 3 stops, the live
// nodes' API, `groupd cluster describe`, `groupd topics describe
// --under-replicated-partitions` and the metrics all show its partitions
// under-replicated, with node 3 out of their ISR and offline.
func TestClusterSeen(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startLocalCluster(t, ctx, []func(*app.Config){withHTTP})
	addrs, nodes, cl := c.addrs, c.nodes, c.cl
	const topic = "seen"
	if res, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 3, nil, topic); err != nil || res.Err != nil {
		t.Fatalf("create topic: %v %v", err, res.Err)
	}

	// Every node sees the whole cluster, itself marked, and both
	// partitions led with their three replicas in sync.
	for i, n := range nodes {
		api := httpAdmin(n.HTTPAddr())
		waitUntil(t, ctx, func() error {
			c, ps, err := clusterOf(ctx, api, topic)
			if err != nil {
				return err
			}
			if len(c.Nodes) != 3 || c.Controller < 1 || c.NodeID != int32(i+1) || !c.Nodes[i].Self {
				return fmt.Errorf("node %d: cluster %+v", i+1, c)
			}
			if len(ps) != 2 {
				return fmt.Errorf("node %d: partitions %+v", i+1, ps)
			}
			for _, p := range ps {
				if p.Leader < 1 || len(p.Replicas) != 3 || len(p.ISR) != 3 || p.UnderReplicated || p.Offline {
					return fmt.Errorf("node %d: partition %+v", i+1, p)
				}
			}
			return nil
		})
	}

	t.Log("stopping node 3")
	stopServer(t, nodes[2])
	live := addrs[:2]
	var ps []inspect.ClusterPartition
	for _, n := range nodes[:2] {
		api := httpAdmin(n.HTTPAddr())
		waitUntil(t, ctx, func() error {
			var c inspect.Cluster
			var err error
			c, ps, err = clusterOf(ctx, api, topic)
			if err != nil {
				return err
			}
			if len(c.Nodes) != 2 || c.Partitions.UnderReplicated != 2 || c.Partitions.Offline != 0 {
				return fmt.Errorf("cluster %+v", c)
			}
			for _, p := range ps {
				if !p.UnderReplicated || p.Offline || p.Leader == 3 || p.Leader < 1 || slices.Contains(p.ISR, 3) ||
					!slices.Equal(p.OfflineReplicas, []int32{3}) || len(p.Replicas) != 3 {
					return fmt.Errorf("partition %+v", p)
				}
			}
			return nil
		})
		// The metrics of the same node count the same partitions.
		fams := scrape(t, n.HTTPAddr())
		if got := metricValue(fams, "groupd_cluster_under_replicated_partitions"); got != 2 {
			t.Errorf("groupd_cluster_under_replicated_partitions = %v, want 2", got)
		}
		if _, ok := fams["groupd_cluster_replica_max_lag"]; !ok {
			t.Error("/metrics lacks groupd_cluster_replica_max_lag")
		}
	}

	// The CLI, over the Kafka protocol, sees it too.
	bs := "--bootstrap-server=" + strings.Join(live, ",")
	out := runCLI(t, "cluster", "describe", "-o", "json", bs)
	var desc struct {
		Controller int32 `json:"controller"`
		Nodes      []struct {
			ID int32 `json:"id"`
		} `json:"nodes"`
		Partitions struct {
			UnderReplicated int `json:"under_replicated"`
			Offline         int `json:"offline"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(out), &desc); err != nil {
		t.Fatalf("cluster describe: %v\n%s", err, out)
	}
	if len(desc.Nodes) != 2 || desc.Partitions.UnderReplicated != 2 || desc.Partitions.Offline != 0 || desc.Controller == 3 {
		t.Errorf("cluster describe:\n%s", out)
	}
	if out := runCLI(t, "cluster", "describe", bs); !strings.Contains(out, "Under-replicated: 2  Offline: 0") {
		t.Errorf("cluster describe:\n%s", out)
	}
	out = runCLI(t, "topics", "describe", "--under-replicated-partitions", bs)
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 5 {
			rows = append(rows, strings.Join(f, " "))
		}
	}
	for _, p := range ps {
		row := fmt.Sprintf("%s %d %d %s %s", topic, p.Partition, p.Leader, joinIDs(p.Replicas), joinIDs(p.ISR))
		if !slices.Contains(rows, row) {
			t.Errorf("topics describe --under-replicated-partitions lacks %s/%d:\n%s", topic, p.Partition, out)
		}
	}
	if out := runCLI(t, "topics", "describe", "--unavailable-partitions", bs); strings.Contains(out, topic) {
		t.Errorf("topics describe --unavailable-partitions lists a partition with a leader:\n%s", out)
	}
}

// clusterOf reads a node's /api/v1/cluster and the partitions of topic.
func clusterOf(ctx context.Context, api adminAPI, topic string) (inspect.Cluster, []inspect.ClusterPartition, error) {
	var c inspect.Cluster
	var ps []inspect.ClusterPartition
	if found, err := api.get(ctx, "/api/v1/cluster", &c); err != nil || !found {
		return c, nil, fmt.Errorf("GET /api/v1/cluster: found %v, %v", found, err)
	}
	if found, err := api.get(ctx, "/api/v1/cluster/partitions?topic="+topic, &ps); err != nil || !found {
		return c, nil, fmt.Errorf("GET /api/v1/cluster/partitions: found %v, %v", found, err)
	}
	return c, ps, nil
}

// runCLI runs the groupd CLI's cluster and topics commands in the test
// process and returns what they print; they must succeed.
func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	root := &cobra.Command{Use: "groupd", SilenceUsage: true}
	root.AddCommand(cli.ClusterCmd(), cli.TopicsCmd())
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("groupd %q: %v\n%s%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func joinIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}
