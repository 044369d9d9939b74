package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/groupd/groupd/internal/app"
)

// The HTTP side as groupd starts it: metrics in Prometheus text format,
// the status page, and the admin API answering in JSON.
func TestHTTPSide(t *testing.T) {
	a := startServer(t, t.TempDir(), func(c *app.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.MetricsMaxGroups = 10
	})
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

	res, body := fetch("/metrics")
	if res.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %s", res.StatusCode, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	for _, name := range []string{"go_goroutines", "groupd_connections_open", "groupd_group_scrape_success"} {
		if fams[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	res, body = fetch("/")
	if res.StatusCode != 200 || !strings.Contains(string(body), "static/app.js") {
		t.Errorf("GET /: %d %.200s", res.StatusCode, body)
	}

	// The coordinator's read side is not connected yet: the API says so.
	res, body = fetch("/api/v1/groups")
	var e struct{ Error string }
	if err := json.Unmarshal(body, &e); err != nil || res.StatusCode != http.StatusServiceUnavailable || e.Error == "" {
		t.Errorf("GET /api/v1/groups: %d %s", res.StatusCode, body)
	}
}

// Without HTTPListen there is no HTTP side.
func TestHTTPSideDisabled(t *testing.T) {
	a := startServer(t, t.TempDir())
	if addr := a.HTTPAddr(); addr != "" {
		t.Errorf("HTTPAddr %q with HTTPListen empty", addr)
	}
}
