package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/inspect"
)

func TestClusterAPI(t *testing.T) {
	f := sampleCluster()
	h := Handler(Config{Source: sampleSource(time.Now()), Cluster: f})

	c := getJSON(t, h, "/api/v1/cluster")
	hasKeys(t, "cluster", c, "cluster_id", "node_id", "controller", "nodes", "partitions")
	m := c.(map[string]any)
	if m["cluster_id"] != "dev-cluster" || m["controller"] != float64(1) || m["node_id"] != float64(2) {
		t.Errorf("cluster: %v", m)
	}
	nodes := m["nodes"].([]any)
	if len(nodes) != 3 {
		t.Fatalf("%d nodes, want 3: %v", len(nodes), nodes)
	}
	for i, n := range nodes {
		hasKeys(t, "node", n, "id", "host", "port", "rack", "self", "controller")
		n := n.(map[string]any)
		if n["id"] != float64(i+1) || n["self"] != (i == 1) || n["controller"] != (i == 0) {
			t.Errorf("node %d: %v (want node 2 marked self, node 1 controller)", i, n)
		}
	}
	counts := m["partitions"].(map[string]any)
	for k, want := range map[string]float64{"topics": 3, "total": 10, "under_replicated": 2, "offline": 1, "reassigning": 1, "leading": 3} {
		if counts[k] != want {
			t.Errorf("partitions.%s = %v, want %v", k, counts[k], want)
		}
	}

	all := getJSON(t, h, "/api/v1/cluster/partitions").([]any)
	if len(all) != len(f.ps) {
		t.Fatalf("%d partitions, want %d", len(all), len(f.ps))
	}
	for _, p := range all {
		hasKeys(t, "partition", p, "topic", "partition", "leader", "leader_epoch", "replicas", "isr", "offline_replicas",
			"under_replicated", "offline", "reassigning")
	}
	// The wire holds what the source said, field for field.
	_, _, body := get(t, h, "/api/v1/cluster/partitions")
	var back []inspect.ClusterPartition
	if err := json.Unmarshal(body, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, f.ps) {
		t.Errorf("partitions round trip\n got %+v\nwant %+v", back, f.ps)
	}

	for _, c := range []struct {
		query string
		want  []string // topic/partition
	}{
		{"?topic=orders", []string{"orders/0", "orders/1", "orders/2", "orders/3", "orders/4", "orders/5"}},
		{"?topic=audit", []string{"audit/0"}},
		{"?topic=nope", []string{}},
		{"?under_replicated", []string{"orders/2", "orders/3"}},
		{"?offline", []string{"orders/5"}},
		{"?under_replicated&offline", []string{"orders/2", "orders/3", "orders/5"}},
		{"?topic=audit&offline", []string{}},
	} {
		got := []string{}
		for _, p := range getJSON(t, h, "/api/v1/cluster/partitions"+c.query).([]any) {
			p := p.(map[string]any)
			got = append(got, p["topic"].(string)+"/"+jsonNum(p["partition"]))
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("partitions%s: %v, want %v", c.query, got, c.want)
		}
	}
	if code, _, body := get(t, h, "/api/v1/cluster/partitions?topic="); code != http.StatusBadRequest || !strings.Contains(string(body), "topic parameter is empty") {
		t.Errorf("an empty topic: %d %s, want 400", code, body)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "http://groupd/api/v1/cluster", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /api/v1/cluster: %d, Allow %q", rec.Code, rec.Header().Get("Allow"))
	}
}

// In single-node mode the cluster reads answer 404 and say why, whatever
// the group side's state.
func TestClusterAPINotInCluster(t *testing.T) {
	for _, h := range []http.Handler{Handler(Config{Source: sampleSource(time.Now())}), Handler(Config{})} {
		for _, path := range []string{"/api/v1/cluster", "/api/v1/cluster/partitions", "/api/v1/cluster/partitions?topic=orders"} {
			code, hdr, body := get(t, h, path)
			if code != http.StatusNotFound || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
				t.Errorf("GET %s: %d %q, want a JSON 404", path, code, hdr.Get("Content-Type"))
			}
			var e errorBody
			if err := json.Unmarshal(body, &e); err != nil || e.Error != NotInCluster {
				t.Errorf("GET %s: %s (%v), want the error %q", path, body, err, NotInCluster)
			}
		}
	}
	// The group side does not need the cluster.
	if code, _, body := get(t, Handler(Config{Source: sampleSource(time.Now())}), "/api/v1/groups"); code != http.StatusOK {
		t.Errorf("GET /api/v1/groups in single-node mode: %d %s", code, body)
	}
}

func jsonNum(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
