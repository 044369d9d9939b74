package cli

import (
	"encoding/json"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// `cluster describe` against a healthy cluster of one broker: its id, the
// broker, and partitions none of which is under-replicated or offline;
// and the partition filters of `topics describe` find nothing.
func TestClusterDescribe(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, addr string) {
		bs := "--bootstrap-server=" + addr
		mustRun(t, "topics", "create", "cd", "--partitions", "3", "--replication-factor", "1", bs)

		r := mustRun(t, "cluster", "describe", bs)
		lines := strings.SplitN(r.stdout, "\n", 4)
		if len(lines) < 4 || !strings.HasPrefix(lines[0], "Cluster: ") || !strings.Contains(lines[0], "Controller: ") ||
			!strings.Contains(lines[1], "Under-replicated: 0  Offline: 0") || lines[2] != "" {
			t.Fatalf("describe:\n%s", r.stdout)
		}
		nodes := parseTable(t, lines[3])
		host, port, _ := net.SplitHostPort(addr)
		if len(nodes) != 1 || nodes[0]["HOST"] != host || nodes[0]["PORT"] != port || nodes[0]["RACK"] == "" {
			t.Fatalf("nodes of a one-broker cluster at %s:\n%s", addr, r.stdout)
		}

		var v clusterView
		r = mustRun(t, "cluster", "describe", bs, "-o", "json")
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("describe JSON: %v\n%s", err, r.stdout)
		}
		if len(v.Nodes) != 1 || v.Nodes[0].ID != v.Controller || v.Partitions.Total < 3 || v.Partitions.UnderReplicated != 0 || v.Partitions.Offline != 0 {
			t.Fatalf("describe JSON: %+v", v)
		}
		if !strings.Contains(lines[0], "Cluster: "+v.ClusterID+"  Controller: "+strconv.Itoa(int(v.Controller))) {
			t.Errorf("table %q and JSON %+v disagree", lines[0], v)
		}

		for _, flag := range []string{"--under-replicated-partitions", "--unavailable-partitions"} {
			r = mustRun(t, "topics", "describe", flag, bs)
			if rows := parseTable(t, r.stdout); len(rows) != 0 || !strings.HasPrefix(r.stdout, "TOPIC") {
				t.Errorf("topics describe %s on a healthy cluster:\n%s", flag, r.stdout)
			}
		}
		mustFail(t, 2, "takes", "cluster", "describe", "extra", bs)
		mustFail(t, 2, "unknown command", "cluster", "nope", bs)
	})
}

// unhealthyCluster is kfake answering Metadata with a cluster of brokers 1
// and 2 (3 is gone) whose "orders" has a healthy partition 0, an
// under-replicated 1 (ISR 2,1 of 2,3,1), an offline 2 (no leader; ISR 3
// of 3,1,2) and a partition 3 whose leader, 3, is no longer live; "audit"
// is healthy.
func unhealthyCluster(t *testing.T) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.ClusterID("sick"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	c.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		resp.ClusterID = kmsg.StringPtr("sick")
		resp.ControllerID = 2
		for i, a := range addrs {
			host, port, _ := net.SplitHostPort(a)
			p, _ := strconv.Atoi(port)
			b := kmsg.NewMetadataResponseBroker()
			b.NodeID, b.Host, b.Port = int32(i+1), host, int32(p)
			if i == 0 {
				b.Rack = kmsg.StringPtr("rack-a")
			}
			resp.Brokers = append(resp.Brokers, b)
		}
		asked := map[string]bool{}
		for _, rt := range req.(*kmsg.MetadataRequest).Topics {
			if rt.Topic != nil {
				asked[*rt.Topic] = true
			}
		}
		topic := func(name string, parts ...[3][]int32) {
			if len(asked) > 0 && !asked[name] {
				return
			}
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic = kmsg.StringPtr(name)
			mt.TopicID = [16]byte{byte(len(name))}
			for i, p := range parts {
				mp := kmsg.NewMetadataResponseTopicPartition()
				mp.Partition, mp.Leader, mp.Replicas, mp.ISR = int32(i), p[0][0], p[1], p[2]
				if mp.Leader < 0 {
					mp.ErrorCode = kerr.LeaderNotAvailable.Code
				}
				mt.Partitions = append(mt.Partitions, mp)
			}
			resp.Topics = append(resp.Topics, mt)
		}
		topic("orders",
			[3][]int32{{1}, {1, 2}, {1, 2}},
			[3][]int32{{2}, {2, 3, 1}, {2, 1}},
			[3][]int32{{-1}, {3, 1, 2}, {3}},
			[3][]int32{{3}, {3}, {3}})
		topic("audit", [3][]int32{{2}, {2, 1}, {2, 1}})
		return resp, nil, true
	})
	return addrs[0]
}

// `cluster describe` counts the under-replicated and offline partitions,
// and `topics describe` lists them with kafka-topics.sh's filters.
func TestUnhealthyPartitions(t *testing.T) {
	bs := "--bootstrap-server=" + unhealthyCluster(t)

	r := mustRun(t, "cluster", "describe", bs)
	want := "Cluster: sick  Controller: 2\nTopics: 2  Partitions: 5  Under-replicated: 1  Offline: 2\n\n"
	if !strings.HasPrefix(r.stdout, want) {
		t.Fatalf("describe:\n%s\nwant it to start\n%s", r.stdout, want)
	}
	nodes := parseTable(t, strings.TrimPrefix(r.stdout, want))
	if len(nodes) != 2 || nodes[0]["ID"] != "1" || nodes[0]["RACK"] != "rack-a" || nodes[1]["ID"] != "2" || nodes[1]["RACK"] != "-" {
		t.Fatalf("nodes:\n%s", r.stdout)
	}
	var v clusterView
	r = mustRun(t, "cluster", "describe", bs, "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatal(err)
	}
	if want := (partitionCounts{Topics: 2, Total: 5, UnderReplicated: 1, Offline: 2}); v.Partitions != want || v.ClusterID != "sick" || v.Controller != 2 {
		t.Fatalf("describe JSON %+v, want counts %+v", v, want)
	}
	// The wire's field names are the admin API's.
	var raw map[string]any
	json.Unmarshal([]byte(r.stdout), &raw)
	if _, ok := raw["partitions"].(map[string]any)["under_replicated"]; !ok || raw["cluster_id"] != "sick" {
		t.Errorf("describe JSON fields: %s", r.stdout)
	}

	for _, c := range []struct {
		flags []string
		want  []string // topic/partition leader replicas isr
	}{
		{[]string{"--under-replicated-partitions"}, []string{"orders/1 2 2,3,1 2,1", "orders/2 -1 3,1,2 3"}},
		{[]string{"--unavailable-partitions"}, []string{"orders/2 -1 3,1,2 3", "orders/3 3 3 3"}},
		{[]string{"--under-replicated-partitions", "--unavailable-partitions"}, []string{"orders/1 2 2,3,1 2,1", "orders/2 -1 3,1,2 3", "orders/3 3 3 3"}},
		{[]string{"--under-replicated-partitions", "audit"}, []string{}},
		{[]string{"--unavailable-partitions", "orders"}, []string{"orders/2 -1 3,1,2 3", "orders/3 3 3 3"}},
	} {
		r := mustRun(t, append(append([]string{"topics", "describe"}, c.flags...), bs)...)
		got := []string{}
		for _, row := range parseTable(t, r.stdout) {
			got = append(got, row["TOPIC"]+"/"+row["PARTITION"]+" "+row["LEADER"]+" "+row["REPLICAS"]+" "+row["ISR"])
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("topics describe %v: %q, want %q\n%s", c.flags, got, c.want, r.stdout)
		}
		var lines []partitionLine
		r = mustRun(t, append(append([]string{"topics", "describe", "-o", "json"}, c.flags...), bs)...)
		if err := json.Unmarshal([]byte(r.stdout), &lines); err != nil || len(lines) != len(c.want) {
			t.Errorf("topics describe %v JSON (%v): %s", c.flags, err, r.stdout)
		}
	}
}
