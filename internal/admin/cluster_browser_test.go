package admin

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/groupd/groupd/internal/admin/admintest"
)

// TestClusterTabInBrowser opens the Cluster tab over the sample cluster in
// headless chromium: the counts at the top, every node with the
// controller and this node marked, and every partition with its leader,
// replicas and ISR, the under-replicated and offline ones marked; and it
// checks that a single node shows no Cluster tab.
func TestClusterTabInBrowser(t *testing.T) {
	bin := admintest.Chromium(t)
	f := sampleCluster()
	srv := httptest.NewServer(Handler(Config{Source: sampleSource(time.Now()), Cluster: f}))
	defer srv.Close()
	b := admintest.NewBrowser(t, bin, admintest.NewProxy(t, srv.URL))

	doc := b.DOM(srv.URL + "/#/cluster")
	if tabs := byID(doc, "tabs"); tabs == nil || hasAttr(tabs, "hidden") {
		t.Errorf("the tabs are hidden in cluster mode")
	}
	tiles := text(byID(doc, "ctiles"))
	for _, want := range []string{"Cluster iddev-cluster", "Nodes3", "Controllernode 1", "Partitions10", "Under-replicated2", "Offline1", "Reassigning1"} {
		if !strings.Contains(tiles, want) {
			t.Errorf("tiles %q lack %q", tiles, want)
		}
	}
	// The two problem counts are drawn as alerts.
	for _, n := range find(byID(doc, "ctiles"), func(n *html.Node) bool { return strings.Contains(getAttr(n, "class"), "tile") }) {
		k := text(n)
		alert := strings.Contains(getAttr(n, "class"), "alert")
		if want := strings.HasPrefix(k, "Under-replicated") || strings.HasPrefix(k, "Offline"); alert != want {
			t.Errorf("tile %q: alert %v, want %v", k, alert, want)
		}
	}

	for _, nd := range f.c.Nodes {
		rows := find(doc, withAttr("data-node", fmt.Sprint(nd.ID)))
		if len(rows) != 1 {
			t.Errorf("node %d: %d rows", nd.ID, len(rows))
			continue
		}
		row := text(rows[0])
		if !strings.Contains(row, nd.Host) || !strings.Contains(row, nd.Rack) {
			t.Errorf("node %d's row %q lacks its host or rack", nd.ID, row)
		}
		if strings.Contains(row, "controller") != nd.Controller || strings.Contains(row, "this node") != nd.Self {
			t.Errorf("node %d's row %q: controller %v, self %v", nd.ID, row, nd.Controller, nd.Self)
		}
	}

	for _, p := range f.ps {
		tp := fmt.Sprintf("%s/%d", p.Topic, p.Partition)
		rows := find(doc, withAttr("data-tp", tp))
		if len(rows) != 1 {
			t.Errorf("partition %s: %d rows", tp, len(rows))
			continue
		}
		cells := find(rows[0], func(n *html.Node) bool { return n.Data == "td" })
		if len(cells) != 7 {
			t.Fatalf("partition %s: %d cells", tp, len(cells))
		}
		leader := fmt.Sprint(p.Leader)
		if p.Leader < 0 {
			leader = "none"
		}
		if got := text(cells[2]); got != leader {
			t.Errorf("partition %s: leader %q, want %q", tp, got, leader)
		}
		// The replica chips, in assignment order, each classed by
		// its state.
		chips := find(cells[4], func(n *html.Node) bool { return strings.HasPrefix(getAttr(n, "class"), "rep ") })
		if len(chips) != len(p.Replicas) {
			t.Errorf("partition %s: %d replica chips, want %d", tp, len(chips), len(p.Replicas))
			continue
		}
		for i, r := range p.Replicas {
			want := "isr"
			switch {
			case contains(p.OfflineReplicas, r):
				want = "down"
			case r == p.Leader:
				want = "lead"
			case !contains(p.ISR, r):
				want = "lag"
			}
			if text(chips[i]) != fmt.Sprint(r) || getAttr(chips[i], "class") != "rep "+want {
				t.Errorf("partition %s: chip %d is %q class %q, want %d class %q", tp, i, text(chips[i]), getAttr(chips[i], "class"), r, "rep "+want)
			}
		}
		status, class := "ok", ""
		switch {
		case p.Offline:
			status, class = "offline", "bad"
		case p.UnderReplicated:
			status, class = "under-replicated", "warn"
		}
		if got := text(cells[6]); !strings.HasPrefix(got, status) || strings.Contains(got, "reassigning") != p.Reassigning {
			t.Errorf("partition %s: status %q, want %q (reassigning %v)", tp, got, status, p.Reassigning)
		}
		if got := getAttr(rows[0], "class"); got != class {
			t.Errorf("partition %s: row class %q, want %q", tp, got, class)
		}
	}
	t.Logf("screenshot of the Cluster tab: %s", b.Screenshot(srv.URL+"/#/cluster", "cluster.png"))
	t.Logf("screenshot of the group list of a node of a cluster: %s", b.Screenshot(srv.URL+"/", "cluster-groups.png"))
	admintest.CheckOffline(t, b)

	// A single node: no tabs, and the cluster route says why.
	single := httptest.NewServer(Handler(Config{Source: sampleSource(time.Now())}))
	defer single.Close()
	b = admintest.NewBrowser(t, bin, admintest.NewProxy(t, single.URL))
	doc = b.DOM(single.URL + "/")
	if tabs := byID(doc, "tabs"); tabs == nil || !hasAttr(tabs, "hidden") {
		t.Errorf("the tabs are shown by a single node")
	}
	doc = b.DOM(single.URL + "/#/cluster")
	if m := text(byID(doc, "main")); !strings.Contains(m, "not in cluster mode") {
		t.Errorf("the cluster route of a single node says %q", m)
	}
	admintest.CheckOffline(t, b)
}

func hasAttr(n *html.Node, key string) bool { _, ok := attr(n, key); return ok }

func contains(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
