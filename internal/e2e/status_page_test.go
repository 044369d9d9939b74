package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/net/html"

	"github.com/groupd/groupd/internal/admin/admintest"
	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/inspect"
)

// TestStatusPageOfGroupd opens the status page of a real groupd, serving a
// franz-go group, in headless chromium: the group list shows the group
// with its state and its last rebalance's trigger, and the group's page
// its members with their client ids and hosts, its last trigger, every
// rebalance of its history and its committed partitions. Screenshots of both pages are kept with
// GROUPD_SCREENSHOT_DIR. The browser's only way out is a proxy that
// forwards to groupd alone: nothing leaves the machine.
func TestStatusPageOfGroupd(t *testing.T) {
	bin := admintest.Chromium(t)
	t.Parallel()
	a := startServer(t, t.TempDir(), withHTTP, func(c *app.Config) {
		c.Group.InitialRebalanceDelay = 100 * time.Millisecond
		c.Group.MinSessionTimeout = histSession
	})
	api := httpAdmin(a.HTTPAddr())
	const topic, groupID = "page", "page-readers"
	createTopic(t, a.Addr(), topic, histPartitions)
	pc := newClient(t, a.Addr(), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err := produceSpread(pc, 0, 600, 0); err != nil {
		t.Fatal(err)
	}
	// Three readers; one leaves, so the history holds a join and a
	// leave, and the others commit what they read.
	tl := &timeline{}
	var readers []*histMember
	for _, name := range []string{"reader-1", "reader-2", "reader-3"} {
		readers = append(readers, startHistMember(t, a.Addr(), topic, groupID, name, kgo.RangeBalancer(), tl))
	}
	waitHistSettled(t, api, groupID, tl, []string{"reader-1", "reader-2", "reader-3"}, "three readers")
	readers[2].stop()
	waitHistSettled(t, api, groupID, tl, []string{"reader-1", "reader-2"}, "reader-3 left")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var g inspect.Group
	waitFor(t, 10*time.Second, "every partition committed", func() (bool, string) {
		var err error
		g, _, err = api.Group(ctx, groupID)
		return err == nil && len(g.Offsets) == histPartitions, fmt.Sprintf("%d committed partitions, %v", len(g.Offsets), err)
	})
	rs, _, err := api.Rebalances(ctx, groupID)
	if err != nil || len(rs) == 0 {
		t.Fatalf("rebalances: %v %v", rs, err)
	}
	last := rs[len(rs)-1].Trigger

	origin := "http://" + a.HTTPAddr()
	b := admintest.NewBrowser(t, bin, admintest.NewProxy(t, origin))

	doc := b.DOM(origin + "/")
	rows := admintest.Find(doc, func(n *html.Node) bool { return n.Data == "tr" && admintest.WithAttr("data-group", groupID)(n) })
	if len(rows) != 1 {
		t.Fatalf("the group list has %d rows for %s; page text:\n%s", len(rows), groupID, admintest.Text(admintest.ByID(doc, "main")))
	}
	if row := admintest.Text(rows[0]); !strings.Contains(row, "Stable") || !strings.Contains(row, last) {
		t.Errorf("the group's row %q lacks its state Stable or its last trigger %s", row, last)
	}

	doc = b.DOM(origin + "/#/groups/" + url.PathEscape(groupID))
	if got := admintest.Text(admintest.ByID(doc, "gname")); got != groupID {
		t.Fatalf("the group page is titled %q; page text:\n%s", got, admintest.Text(admintest.ByID(doc, "main")))
	}
	if len(g.Members) != 2 {
		t.Fatalf("the API lists %d members", len(g.Members))
	}
	for _, m := range g.Members {
		row := admintest.Find(doc, admintest.WithAttr("data-member", m.MemberID))
		if len(row) != 1 || !strings.Contains(admintest.Text(row[0]), m.ClientID) || !strings.Contains(admintest.Text(row[0]), m.ClientHost) {
			t.Errorf("member %s (%s on %s) is not shown with its client id and host", m.MemberID, m.ClientID, m.ClientHost)
		}
	}
	if tiles := admintest.Text(admintest.ByID(doc, "gtiles")); !strings.Contains(tiles, "Last trigger"+last) || !strings.Contains(tiles, "Members2") {
		t.Errorf("the group's tiles %q lack its 2 members or its last trigger %s", tiles, last)
	}
	if history := admintest.Find(admintest.ByID(doc, "history"), admintest.HasAttr("data-started")); len(history) != len(rs) {
		t.Errorf("the history table has %d rows, the API %d rebalances", len(history), len(rs))
	}
	if detail := admintest.Text(admintest.ByID(doc, "detail")); !strings.Contains(detail, topic+"[") {
		t.Errorf("the selected rebalance shows no moved partition of %s: %q", topic, detail)
	}
	if lag := admintest.Find(admintest.ByID(doc, "offsets"), func(n *html.Node) bool { return n.Data == "tr" }); len(lag) < histPartitions {
		t.Errorf("the lag table has %d rows for %d committed partitions", len(lag), histPartitions)
	}

	for name, page := range map[string]string{"groupd-groups.png": "/", "groupd-group.png": "/#/groups/" + url.PathEscape(groupID)} {
		t.Logf("screenshot of %s: %s", page, b.Screenshot(origin+page, name))
	}

	var read bool
	for _, u := range admintest.CheckOffline(t, b) {
		read = read || u.EscapedPath() == groupPath(groupID, "/rebalances")
	}
	if !read {
		t.Error("the page did not read the group's rebalances from groupd")
	}
}
