package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/groupd/groupd/internal/inspect"
)

// adminAPI reads groupd's admin API over HTTP as a script would, and
// serves what it reads as an inspect.Source, so that the end-to-end tests
// see the rebalances through the same JSON an operator gets.
type adminAPI struct{ base string }

var _ inspect.Source = adminAPI{}

// httpAdmin is the admin API of groupd's HTTP side at addr (HOST:PORT).
func httpAdmin(addr string) adminAPI { return adminAPI{base: "http://" + addr} }

// groupPath is a group's API path: its id escaped as one path segment,
// dots too (a client would resolve "." and ".." segments).
func groupPath(id, what string) string {
	return "/api/v1/groups/" + strings.ReplaceAll(url.PathEscape(id), ".", "%2E") + what
}

// get GETs path into v. found is false on 404; a 503 (the coordinator is
// loading or closing) is an error matching inspect.ErrUnavailable.
func (a adminAPI) get(ctx context.Context, path string, v any) (found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		return false, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return false, err
	}
	switch res.StatusCode {
	case http.StatusOK:
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			return false, fmt.Errorf("GET %s: Content-Type %q", path, ct)
		}
		if err := json.Unmarshal(body, v); err != nil {
			return false, fmt.Errorf("GET %s: %w", path, err)
		}
		return true, nil
	case http.StatusNotFound:
		return false, nil
	case http.StatusServiceUnavailable:
		if res.Header.Get("Retry-After") == "" {
			return false, fmt.Errorf("GET %s: 503 without Retry-After: %s", path, body)
		}
		return false, fmt.Errorf("GET %s: %s: %w", path, body, inspect.ErrUnavailable)
	}
	return false, fmt.Errorf("GET %s: %s %s", path, res.Status, body)
}

func (a adminAPI) Groups(ctx context.Context) ([]inspect.GroupSummary, error) {
	var gs []inspect.GroupSummary
	found, err := a.get(ctx, "/api/v1/groups", &gs)
	if err == nil && !found {
		err = fmt.Errorf("GET /api/v1/groups: not found")
	}
	return gs, err
}

func (a adminAPI) Group(ctx context.Context, id string) (inspect.Group, bool, error) {
	var g inspect.Group
	found, err := a.get(ctx, groupPath(id, ""), &g)
	return g, found, err
}

func (a adminAPI) Rebalances(ctx context.Context, id string) ([]inspect.Rebalance, bool, error) {
	var rs []inspect.Rebalance
	found, err := a.get(ctx, groupPath(id, "/rebalances"), &rs)
	return rs, found, err
}

// scrape GETs /metrics from groupd's HTTP side at addr and parses it with
// the Prometheus client library's text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", res.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	return fams
}

// metricValue is the value of the counter, gauge or (its count) histogram
// name whose labels include those given; 0 if there is no such series.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}
