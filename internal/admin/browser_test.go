package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/groupd/groupd/internal/inspect"
)

// The status page in a real headless browser (Debian's chromium). The
// test server is also the browser's proxy for every host, loopback
// included, so every request the browser makes, to groupd or anywhere
// else, arrives at it, is logged and is answered there: nothing leaves
// the machine. The browser also makes requests of its own (Google
// account and time services) whatever the page, so the browser's net log
// tells the page's requests from those: each request the page made went
// to groupd, and each request the proxy saw for another host was one the
// browser made for itself.

// chromium finds the browser, or skips the test (fails it under CI).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GROUPD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found: install Debian's chromium (apt-get install chromium) or set GROUPD_CHROMIUM to run the status page test"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// liveSource serves the sample groups as of its last reset.
type liveSource struct {
	mu  sync.Mutex
	src *fakeSource
}

func (l *liveSource) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.src = sampleSource(time.Now())
}

func (l *liveSource) current() *fakeSource {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.src
}

func (l *liveSource) Groups(ctx context.Context) ([]inspect.GroupSummary, error) {
	return l.current().Groups(ctx)
}

func (l *liveSource) Group(ctx context.Context, id string) (inspect.Group, bool, error) {
	return l.current().Group(ctx, id)
}

func (l *liveSource) Rebalances(ctx context.Context, id string) ([]inspect.Rebalance, bool, error) {
	return l.current().Rebalances(ctx, id)
}

type requestLog struct {
	mu   sync.Mutex
	seen []string // "METHOD host path"
}

func (l *requestLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.seen = append(l.seen, fmt.Sprintf("%s %s %s", r.Method, r.Host, r.URL.RequestURI()))
		l.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (l *requestLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

type browser struct {
	t       *testing.T
	bin     string
	proxy   string
	profile string
	// before runs before each browser start.
	before func()
	// requests are what every run's net log recorded.
	requests []netRequest
}

// run runs one headless chromium with a fresh profile and returns its
// standard output.
func (b *browser) run(args ...string) []byte {
	b.t.Helper()
	if b.before != nil {
		b.before()
	}
	profile, err := os.MkdirTemp(b.profile, "profile-")
	if err != nil {
		b.t.Fatal(err)
	}
	base := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
		// Services the browser itself calls on start or when a page has
		// a form field: network time, search preconnects, AI mode
		// eligibility, autofill, translation.
		"--disable-features=NetworkTimeServiceQuerying,PreconnectToSearch,AimEnabled,AimServerEligibilityEnabled,AutofillServerCommunication,OptimizationHints,Translate,MediaRouter",
		"--user-data-dir=" + profile,
		"--log-net-log=" + filepath.Join(profile, "net.json"),
		"--proxy-server=" + b.proxy, "--proxy-bypass-list=<-loopback>",
		// Fetches run in real time; the budget lets the page's scripts
		// and their API calls finish before the DOM is dumped.
		"--virtual-time-budget=4000",
	}
	// A safety net for a wedged browser, not a speed assertion.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.bin, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		b.t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	reqs, err := readNetLog(filepath.Join(profile, "net.json"))
	if err != nil {
		b.t.Fatalf("chromium %v: %v", args, err)
	}
	b.requests = append(b.requests, reqs...)
	return stdout.Bytes()
}

// netRequest is one URL request from chromium's net log.
type netRequest struct {
	URL       string `json:"url"`
	Initiator string `json:"initiator"`
	// IsolationKey names the top-level site the request was made for
	// ("http://127.0.0.1 http://127.0.0.1" for the page's own).
	IsolationKey string `json:"network_isolation_key"`
}

func readNetLog(file string) ([]netRequest, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the net log: %w", err)
	}
	var log struct {
		Constants struct {
			EventTypes map[string]int `json:"logEventTypes"`
		} `json:"constants"`
		Events []struct {
			Type   int             `json:"type"`
			Params json.RawMessage `json:"params"`
		} `json:"events"`
	}
	if err := json.Unmarshal(raw, &log); err != nil {
		return nil, fmt.Errorf("parsing the net log: %w", err)
	}
	start, ok := log.Constants.EventTypes["URL_REQUEST_START_JOB"]
	if !ok {
		return nil, errors.New("the net log has no URL_REQUEST_START_JOB event type")
	}
	var out []netRequest
	for _, e := range log.Events {
		if e.Type != start || len(e.Params) == 0 {
			continue
		}
		var r netRequest
		if err := json.Unmarshal(e.Params, &r); err != nil {
			return nil, fmt.Errorf("parsing a net log request: %w", err)
		}
		if r.URL != "" {
			out = append(out, r)
		}
	}
	return out, nil
}

func (b *browser) dom(url string) *html.Node {
	b.t.Helper()
	out := b.run("--dump-dom", url)
	doc, err := html.Parse(bytes.NewReader(out))
	if err != nil {
		b.t.Fatalf("parsing the DOM of %s: %v", url, err)
	}
	return doc
}

// find returns the elements under n for which match is true.
func find(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func withAttr(key, val string) func(*html.Node) bool {
	return func(n *html.Node) bool { v, ok := attr(n, key); return ok && v == val }
}

func byID(doc *html.Node, id string) *html.Node {
	ns := find(doc, withAttr("id", id))
	if len(ns) != 1 {
		return nil
	}
	return ns[0]
}

func text(n *html.Node) string {
	if n == nil {
		return ""
	}
	var sb strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			sb.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return sb.String()
}

func TestStatusPageInBrowser(t *testing.T) {
	bin := chromium(t)
	live := &liveSource{}
	live.reset()
	src := live.current()
	log := &requestLog{}
	srv := httptest.NewServer(log.wrap(Handler(Config{Source: live})))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	// The sample is rebuilt around the time of each run, so the pages
	// (and the screenshots) show heartbeats as fresh as a live group's.
	b := &browser{t: t, bin: bin, proxy: srv.URL, profile: t.TempDir(), before: live.reset}

	// The group list: every group, with the trigger of its last
	// rebalance in its row.
	doc := b.dom(srv.URL + "/")
	rows := find(doc, func(n *html.Node) bool { _, ok := attr(n, "data-group"); return ok && n.Data == "tr" })
	if len(rows) != len(src.groups) {
		t.Fatalf("group list shows %d rows, want %d; page text:\n%s", len(rows), len(src.groups), text(byID(doc, "main")))
	}
	for _, row := range rows {
		id, _ := attr(row, "data-group")
		g, ok := src.groups[id]
		if !ok {
			t.Errorf("row for unknown group %q", id)
			continue
		}
		rowText := text(row)
		if rs := src.rebalances[id]; len(rs) > 0 && !strings.Contains(rowText, rs[len(rs)-1].Trigger) {
			t.Errorf("row of %q lacks its last trigger %q: %q", id, rs[len(rs)-1].Trigger, rowText)
		}
		if !strings.Contains(rowText, g.State) {
			t.Errorf("row of %q lacks its state %q: %q", id, g.State, rowText)
		}
	}

	// A group's page: its members, its last rebalance's trigger, the
	// timeline with one mark per rebalance, and the partition pauses.
	for _, id := range []string{busyGroup, slashGroup, spaceGroup, dotsGroup, joiningGroup} {
		doc := b.dom(srv.URL + "/#/groups/" + url.PathEscape(id))
		if got := text(byID(doc, "gname")); got != id {
			t.Errorf("group page of %q is titled %q; page text:\n%s", id, got, text(byID(doc, "main")))
			continue
		}
		g := src.groups[id]
		for _, m := range g.Members {
			row := find(doc, withAttr("data-member", m.MemberID))
			if len(row) != 1 || !strings.Contains(text(row[0]), m.ClientID) || !strings.Contains(text(row[0]), m.ClientHost) {
				t.Errorf("group %q: member %s (%s) not shown with its client id and host", id, m.MemberID, m.ClientID)
			}
		}
		rs := src.rebalances[id]
		last := rs[len(rs)-1]
		tiles := text(byID(doc, "gtiles"))
		if !strings.Contains(tiles, "Last trigger"+last.Trigger) {
			t.Errorf("group %q: tiles %q lack last trigger %q", id, tiles, last.Trigger)
		}
		if detail := text(byID(doc, "detail")); !strings.Contains(detail, last.Trigger) {
			t.Errorf("group %q: the selected rebalance %q is not the last one %q", id, detail, last.Trigger)
		}
		marks := find(doc, func(n *html.Node) bool { return n.Data == "g" && strings.Contains(getAttr(n, "class"), "reb") })
		if len(marks) != len(rs) {
			t.Errorf("group %q: timeline has %d rebalances, want %d", id, len(marks), len(rs))
		}
		history := find(byID(doc, "history"), func(n *html.Node) bool { _, ok := attr(n, "data-started"); return ok })
		if len(history) != len(rs) {
			t.Errorf("group %q: history has %d rows, want %d", id, len(history), len(rs))
		}
		if id == busyGroup {
			if lag := text(byID(doc, "offsets")); !strings.Contains(lag, "4,512") {
				t.Errorf("busy group's lag table lacks partition 3's lag 4,512: %q", lag)
			}
			if tl := text(byID(doc, "timeline")); !strings.Contains(tl, "storm ×3") {
				t.Errorf("busy group's timeline does not mark the storm of 3: %q", tl)
			}
		}
	}
	missing := b.dom(srv.URL + "/#/groups/no-such-group")
	if m := text(byID(missing, "main")); !strings.Contains(m, `group "no-such-group" not found`) {
		t.Errorf("page of an unknown group says %q", m)
	}

	// Screenshots of both pages, for a person to look at.
	dir := os.Getenv("GROUPD_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	for name, page := range map[string]string{"groups.png": "/", "group.png": "/#/groups/" + busyGroup} {
		file, err := filepath.Abs(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		b.run("--screenshot="+file, "--window-size=1440,1900", srv.URL+page)
		png, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("no screenshot: %v", err)
		}
		if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 20_000 {
			t.Errorf("%s is not a plausible screenshot (%d bytes)", file, len(png))
		}
		t.Logf("screenshot of %s: %s", page, file)
	}

	// Every request the page made went to groupd, and it used the API.
	origin := srv.URL
	pageSite := "http://" + u.Hostname() + " "
	var api, assets bool
	browserHosts := map[string]bool{}
	for _, r := range b.requests {
		ru, err := url.Parse(r.URL)
		if err != nil {
			t.Errorf("net log request with a bad URL %q", r.URL)
			continue
		}
		if r.Initiator != origin && !strings.HasPrefix(r.IsolationKey, pageSite) {
			browserHosts[ru.Host] = true
			continue
		}
		if ru.Scheme+"://"+ru.Host != origin {
			t.Errorf("the page requested %s, not from groupd (%s)", r.URL, origin)
		}
		if r.Initiator == origin {
			api = api || ru.EscapedPath() == "/api/v1/groups/"+url.PathEscape(busyGroup)+"/rebalances"
			assets = assets || ru.Path == "/static/app.js"
		}
	}
	if !api || !assets {
		t.Errorf("the page fetched its script: %v, the busy group's rebalances: %v", assets, api)
	}
	// And everything that reached the proxy for another host was the
	// browser's own business.
	for _, s := range log.all() {
		f := strings.Fields(s)
		if len(f) != 3 {
			t.Errorf("odd request log line %q", s)
			continue
		}
		host := f[1]
		if host == u.Host {
			continue
		}
		if !browserHosts[host] && !browserHosts[strings.TrimSuffix(host, ":443")] {
			t.Errorf("request to %s that the net log does not show the browser making for itself: %q", host, s)
		}
	}
}

func getAttr(n *html.Node, key string) string { v, _ := attr(n, key); return v }
