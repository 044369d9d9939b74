package lab

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/groupd/groupd/internal/admin/admintest"
)

// sampleReport is a report over recorded runs with known figures: an eager
// and a cooperative rebalance of the same scenario, and the consumer
// protocol unsupported.
func sampleReport() *Report {
	p0, p1 := TP{"t", 0}, TP{"t", 1}
	var produced []Production
	var consumed []Consumption
	for i := range 400 {
		at := time.Duration(i) * 10 * time.Millisecond
		tp := []TP{p0, p1}[i%2]
		produced = append(produced, Production{At: at, TP: tp, Offset: int64(i / 2), Key: uint64(i)})
		consumed = append(consumed, Consumption{At: at + 5*time.Millisecond, Member: "m1", TP: tp, Offset: int64(i / 2), Key: uint64(i), ProducedAt: at})
	}
	mk := func(p Protocol, events []OwnerEvent) Result {
		rec := &Recording{Events: events, Produced: produced, Consumed: consumed, Partitions: []TP{p0, p1},
			Actions: []Action{{At: sec(1.5), What: "restart", Member: "m2"}}, BaselineStart: sec(1), DisruptionEnd: sec(2.5), End: sec(4)}
		return Result{Scenario: RollingRestart, Protocol: p, Topics: []string{"t"}, Actions: rec.Actions,
			Measurements: Analyze(rec), BaselineStart: rec.BaselineStart, End: rec.End}
	}
	eager := mk(protocolOf(Eager, false), []OwnerEvent{
		ev(0.5, "m1", 0, Assigned, 1, 0), ev(0.5, "m2", 0, Assigned, 1, 1),
		ev(2.0, "m1", 0, Revoked, 1, 0), ev(2.0, "m2", 0, Revoked, 1, 1),
		ev(2.4, "m1", 0, Assigned, 2, 0, 1),
	})
	coop := mk(protocolOf(Cooperative, false), []OwnerEvent{
		ev(0.5, "m1", 0, Assigned, 1, 0), ev(0.5, "m2", 0, Assigned, 1, 1),
		ev(2.0, "m2", 0, Revoked, 2, 1),
		ev(2.1, "m1", 0, Assigned, 3, 1),
	})
	return &Report{Started: time.Unix(1700000000, 0), Broker: "embedded groupd", Config: reportConfig(DefaultConfig()),
		Results: []Result{eager, coop, {Scenario: RollingRestart, Protocol: protocolOf(Consumer, false), Unsupported: "broker 0 does not serve ConsumerGroupHeartbeat (API key 68)"}}}
}

func TestWriteHTML(t *testing.T) {
	var b bytes.Buffer
	if err := WriteHTML(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	// Per run a throughput and an ownership chart; per scenario the
	// pause and duplicate comparisons.
	if n := strings.Count(page, "<svg"); n != 6 {
		t.Errorf("%d charts, want 6", n)
	}
	// Self-contained: nothing is loaded from anywhere (the SVG namespace
	// is a name, not a fetch).
	if loads := regexp.MustCompile(`(?i)(src|href)\s*=|@import|url\(`).FindAllString(page, -1); len(loads) > 0 {
		t.Errorf("the page loads resources: %v", loads)
	}
	for _, want := range []string{"rolling-restart / eager", "rolling-restart / cooperative", "consumer: not run", "API key 68", "Partition ownership"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not say %q", want)
		}
	}
	if _, err := html.Parse(strings.NewReader(page)); err != nil {
		t.Fatal(err)
	}
}

// TestReportInBrowser opens the report in headless chromium, whose only way
// out is a proxy that forwards to the page's server alone, and checks that
// the charts render and the page asks for nothing else.
// GROUPD_SCREENSHOT_DIR keeps its screenshot.
func TestReportInBrowser(t *testing.T) {
	bin := admintest.Chromium(t)
	var b bytes.Buffer
	if err := WriteHTML(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/report.html" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(b.Bytes())
	}))
	defer srv.Close()
	proxy := admintest.NewProxy(t, srv.URL)
	br := admintest.NewBrowser(t, bin, proxy)
	url := srv.URL + "/report.html"
	doc := br.DOM(url)
	svgs := admintest.Find(doc, func(n *html.Node) bool { return n.Data == "svg" })
	if len(svgs) != 6 {
		t.Errorf("the browser shows %d charts, want 6", len(svgs))
	}
	br.Screenshot(url, "lab-report.png")
	fetched := admintest.CheckOffline(t, br)
	for _, u := range fetched {
		if u.Path != "/report.html" && u.Path != "/favicon.ico" {
			t.Errorf("the page fetched %s", u)
		}
	}
}

// A report saved as JSON draws the same page again.
func TestJSONRoundTrip(t *testing.T) {
	rep := sampleReport()
	var direct, saved bytes.Buffer
	if err := WriteHTML(&direct, rep); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&saved, rep); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(&saved)
	if err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := WriteHTML(&again, back); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(direct.Bytes(), again.Bytes()) {
		t.Error("the page drawn from the saved JSON differs from the original")
	}
	if _, err := ReadJSON(strings.NewReader("{")); err == nil {
		t.Error("a truncated report was read")
	}
}
