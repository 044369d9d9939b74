package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/inspect"
)

// The HTTP side as groupd starts it, over the real coordinator: metrics in
// Prometheus text format, the status page, and the admin API answering in
// JSON what the coordinator holds.
func TestHTTPSide(t *testing.T) {
	a := startServer(t, t.TempDir(), withHTTP)
	base := "http://" + a.HTTPAddr()
	fetch := func(path string) (*http.Response, []byte) {
		t.Helper()
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return res, body
	}

	// Right after the start the coordinator may still be loading its
	// shards: the API says so with 503 and Retry-After, then answers.
	api := httpAdmin(a.HTTPAddr())
	waitFor(t, 10*time.Second, "the group list", func() (bool, string) {
		gs, err := api.Groups(context.Background())
		if err != nil && !errors.Is(err, inspect.ErrUnavailable) {
			t.Fatalf("GET /api/v1/groups: %v", err)
		}
		return err == nil && len(gs) == 0, fmt.Sprintf("%v %v", gs, err)
	})
	if res, body := fetch("/api/v1/groups"); strings.TrimSpace(string(body)) != "[]" {
		t.Errorf("GET /api/v1/groups on a new groupd: %d %s, want []", res.StatusCode, body)
	}

	// A group with committed offsets and no members, whose id needs
	// escaping.
	const groupID, topic = "billing/eu.west", "invoices"
	createTopic(t, a.Addr(), topic, 2)
	adm := kadm.NewClient(newClient(t, a.Addr()))
	commits := kadm.Offsets{}
	commits.Add(kadm.Offset{Topic: topic, Partition: 1, At: 0, LeaderEpoch: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := adm.CommitAllOffsets(ctx, groupID, commits); err != nil {
		t.Fatalf("commit: %v", err)
	}
	g, ok, err := api.Group(ctx, groupID)
	if err != nil || !ok {
		t.Fatalf("GET %s: %v %v", groupPath(groupID, ""), ok, err)
	}
	if g.Group != groupID || g.State != "Empty" || g.MemberCount != 0 || len(g.Members) != 0 || g.Lag != 0 ||
		len(g.Offsets) != 1 || g.Offsets[0] != (inspect.PartitionOffset{Topic: topic, Partition: 1, Committed: 0, HighWatermark: 0, Lag: 0}) {
		t.Errorf("group %+v", g)
	}
	gs, err := api.Groups(ctx)
	if err != nil || len(gs) != 1 || gs[0].Group != groupID || gs[0].LastRebalance != nil {
		t.Errorf("group list %+v %v", gs, err)
	}
	if rs, ok, err := api.Rebalances(ctx, groupID); err != nil || !ok || rs == nil || len(rs) != 0 {
		t.Errorf("rebalances of a group without members: %+v %v %v, want []", rs, ok, err)
	}
	res, body := fetch(groupPath("nope", "/rebalances"))
	var e struct{ Error string }
	if err := json.Unmarshal(body, &e); err != nil || res.StatusCode != http.StatusNotFound || !strings.Contains(e.Error, `"nope" not found`) {
		t.Errorf("GET rebalances of an unknown group: %d %s", res.StatusCode, body)
	}

	fams := scrape(t, a.HTTPAddr())
	for _, name := range []string{"go_goroutines", "groupd_connections_open", "groupd_group_scrape_success", "groupd_groups"} {
		if fams[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if got := metricValue(fams, "groupd_group_scrape_success"); got != 1 {
		t.Errorf("groupd_group_scrape_success = %v: the metrics did not read the coordinator", got)
	}
	if got := metricValue(fams, "groupd_groups", "state", "Empty", "type", "classic"); got != 1 {
		t.Errorf("groupd_groups{state=Empty,type=classic} = %v, want 1", got)
	}
	// A request is counted once its reply is written, which the client
	// may see a moment before the counter moves.
	waitFor(t, 10*time.Second, "the OffsetCommit counted", func() (bool, string) {
		got := metricValue(scrape(t, a.HTTPAddr()), "groupd_requests_total", "api", "OffsetCommit")
		return got == 1, fmt.Sprintf("groupd_requests_total{api=OffsetCommit} = %v, want 1", got)
	})

	res, body = fetch("/")
	if res.StatusCode != 200 || !strings.Contains(string(body), "static/app.js") {
		t.Errorf("GET /: %d %.200s", res.StatusCode, body)
	}
}

// Without HTTPListen there is no HTTP side.
func TestHTTPSideDisabled(t *testing.T) {
	a := startServer(t, t.TempDir(), func(c *app.Config) { c.HTTPListen = "" })
	if addr := a.HTTPAddr(); addr != "" {
		t.Errorf("HTTPAddr %q with HTTPListen empty", addr)
	}
}
