// Package admintest runs groupd's status page in a real headless browser
// (Debian's chromium) for tests, and checks that nothing the browser does
// leaves the machine.
//
// The browser is given a Proxy for every host, loopback included, so every
// request it makes, to groupd or anywhere else, arrives at the proxy, is
// logged, and is forwarded only when it is for groupd; anything else is
// refused there. The browser also makes requests of its own (Google
// account and time services) whatever the page, so its net log tells the
// page's requests from those: CheckOffline asserts that each request the
// page made went to groupd, and that each request the proxy saw for
// another host was one the browser made for itself.
package admintest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// Chromium finds the browser, or skips the test (fails it when CI=true).
// GROUPD_CHROMIUM names a browser binary to use instead.
func Chromium(t testing.TB) string {
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

// Proxy is the browser's only way out: it forwards the requests for one
// origin (groupd's HTTP side) and refuses every other, logging all.
type Proxy struct {
	// URL is the proxy's own address, for the browser's --proxy-server.
	URL string
	// Origin is the scheme and host of the one server requests are
	// forwarded to.
	Origin string

	mu   sync.Mutex
	seen []string // "METHOD host path"
}

// NewProxy starts a proxy in front of target, an http:// URL, until the
// test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	tu, err := url.Parse(target)
	if err != nil || tu.Scheme != "http" || tu.Host == "" {
		t.Fatalf("proxy target %q is not an http:// URL", target)
	}
	p := &Proxy{Origin: tu.Scheme + "://" + tu.Host}
	forward := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: tu.Scheme, Host: tu.Host})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen = append(p.seen, fmt.Sprintf("%s %s %s", r.Method, r.Host, r.URL.RequestURI()))
		p.mu.Unlock()
		if r.Method == http.MethodConnect || r.Host != tu.Host {
			http.Error(w, "this test proxy forwards nothing but groupd", http.StatusForbidden)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Seen is every request the proxy received, as "METHOD host path".
func (p *Proxy) Seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// Browser runs headless chromium through a Proxy, each run with a fresh
// profile.
type Browser struct {
	t       testing.TB
	bin     string
	proxy   *Proxy
	profile string
	// Before, if set, runs before each browser start.
	Before func()
	// Requests are what every run's net log recorded.
	Requests []NetRequest
}

// NewBrowser returns a browser (bin, from Chromium) whose every request
// goes through proxy.
func NewBrowser(t testing.TB, bin string, proxy *Proxy) *Browser {
	return &Browser{t: t, bin: bin, proxy: proxy, profile: t.TempDir()}
}

// Run runs one headless chromium with args (after the common ones) and
// returns its standard output.
func (b *Browser) Run(args ...string) []byte {
	b.t.Helper()
	if b.Before != nil {
		b.Before()
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
		"--proxy-server=" + b.proxy.URL, "--proxy-bypass-list=<-loopback>",
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
	b.Requests = append(b.Requests, reqs...)
	return stdout.Bytes()
}

// DOM loads url and returns the document as the page's scripts left it.
func (b *Browser) DOM(url string) *html.Node {
	b.t.Helper()
	out := b.Run("--dump-dom", url)
	doc, err := html.Parse(bytes.NewReader(out))
	if err != nil {
		b.t.Fatalf("parsing the DOM of %s: %v", url, err)
	}
	return doc
}

// Screenshot saves a PNG of url as name in GROUPD_SCREENSHOT_DIR (a
// temporary directory if unset), checks that it is a plausible one, and
// returns its path.
func (b *Browser) Screenshot(url, name string) string {
	b.t.Helper()
	dir := os.Getenv("GROUPD_SCREENSHOT_DIR")
	if dir == "" {
		dir = b.t.TempDir()
	}
	file, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		b.t.Fatal(err)
	}
	b.Run("--screenshot="+file, "--window-size=1440,1900", url)
	png, err := os.ReadFile(file)
	if err != nil {
		b.t.Fatalf("no screenshot of %s: %v", url, err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 20_000 {
		b.t.Errorf("%s is not a plausible screenshot (%d bytes)", file, len(png))
	}
	return file
}

// NetRequest is one URL request from chromium's net log.
type NetRequest struct {
	URL       string `json:"url"`
	Initiator string `json:"initiator"`
	// IsolationKey names the top-level site the request was made for
	// ("http://127.0.0.1 http://127.0.0.1" for the page's own).
	IsolationKey string `json:"network_isolation_key"`
}

func readNetLog(file string) ([]NetRequest, error) {
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
	var out []NetRequest
	for _, e := range log.Events {
		if e.Type != start || len(e.Params) == 0 {
			continue
		}
		var r NetRequest
		if err := json.Unmarshal(e.Params, &r); err != nil {
			return nil, fmt.Errorf("parsing a net log request: %w", err)
		}
		if r.URL != "" {
			out = append(out, r)
		}
	}
	return out, nil
}

// CheckOffline asserts that every request the page made in the
// browser's runs went to the proxy's origin (groupd), and that every
// request the proxy saw for another host was the browser's own business
// (which the proxy refused). It returns the URLs the page fetched from
// groupd itself (scripts and API reads), for the caller to check.
func CheckOffline(t testing.TB, b *Browser) []*url.URL {
	t.Helper()
	origin := b.proxy.Origin
	ou, _ := url.Parse(origin)
	pageSite := "http://" + ou.Hostname() + " "
	var fetched []*url.URL
	browserHosts := map[string]bool{}
	for _, r := range b.Requests {
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
			fetched = append(fetched, ru)
		}
	}
	for _, s := range b.proxy.Seen() {
		f := strings.Fields(s)
		if len(f) != 3 {
			t.Errorf("odd request log line %q", s)
			continue
		}
		host := f[1]
		if host == ou.Host {
			continue
		}
		if !browserHosts[host] && !browserHosts[strings.TrimSuffix(host, ":443")] {
			t.Errorf("request to %s that the net log does not show the browser making for itself: %q", host, s)
		}
	}
	return fetched
}

// Find returns the elements under n for which match is true.
func Find(n *html.Node, match func(*html.Node) bool) []*html.Node {
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
	if n != nil {
		walk(n)
	}
	return out
}

// Attr returns an element's attribute.
func Attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

// WithAttr matches the elements whose attribute key is val.
func WithAttr(key, val string) func(*html.Node) bool {
	return func(n *html.Node) bool { v, ok := Attr(n, key); return ok && v == val }
}

// HasAttr matches the elements that have the attribute key.
func HasAttr(key string) func(*html.Node) bool {
	return func(n *html.Node) bool { _, ok := Attr(n, key); return ok }
}

// ByID returns the element with the id, or nil unless exactly one has it.
func ByID(doc *html.Node, id string) *html.Node {
	ns := Find(doc, WithAttr("id", id))
	if len(ns) != 1 {
		return nil
	}
	return ns[0]
}

// Text is the text under n.
func Text(n *html.Node) string {
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
