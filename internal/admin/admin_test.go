package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/inspect"
	"github.com/groupd/groupd/internal/metrics"
)

func get(t *testing.T, h http.Handler, path string) (int, http.Header, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "http://groupd"+path, nil)
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Header(), rec.Body.Bytes()
}

// getJSON decodes a 200 JSON answer into a generic value, so the tests
// see the field names on the wire rather than Go's.
func getJSON(t *testing.T, h http.Handler, path string) any {
	t.Helper()
	code, hdr, body := get(t, h, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("GET %s: Content-Type %q", path, ct)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
	return v
}

func keys(v any) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func hasKeys(t *testing.T, what string, v any, want ...string) {
	t.Helper()
	have := keys(v)
	for _, k := range want {
		if !slices.Contains(have, k) {
			t.Errorf("%s lacks field %q; has %v", what, k, have)
		}
	}
}

func TestGroupList(t *testing.T) {
	src := sampleSource(time.Now())
	h := Handler(Config{Source: src})
	list, ok := getJSON(t, h, "/api/v1/groups").([]any)
	if !ok || len(list) != len(src.groups) {
		t.Fatalf("group list: %d entries, want %d", len(list), len(src.groups))
	}
	var ids []string
	for _, g := range list {
		hasKeys(t, "group summary", g, "group", "type", "state", "protocol_type", "protocol", "generation", "member_count", "lag", "rebalances")
		ids = append(ids, g.(map[string]any)["group"].(string))
	}
	if !slices.IsSorted(ids) {
		t.Errorf("groups not sorted by id: %q", ids)
	}
	busy := list[slices.Index(ids, busyGroup)].(map[string]any)
	last := busy["last_rebalance"]
	hasKeys(t, "last_rebalance", last, "trigger", "member", "started_at", "ended_at", "duration_ms", "members_in_count", "members_out_count",
		"straggler", "moved_count", "changed_count", "max_pause_ms", "commit_gap", "outcome", "storm")
	// The list carries counts, not the lists: the history has those.
	for _, heavy := range []string{"moved", "waited_for", "members_in", "members_out"} {
		if _, ok := last.(map[string]any)[heavy]; ok {
			t.Errorf("the group list's last_rebalance carries %q", heavy)
		}
	}
	lastRec := src.rebalances[busyGroup][len(src.rebalances[busyGroup])-1]
	for k, want := range map[string]any{"trigger": busyLastTrig, "moved_count": float64(4), "changed_count": float64(4),
		"max_pause_ms": float64(7410), "commit_gap": float64(96 + 112 + 260), "members_in_count": float64(1)} {
		if got := last.(map[string]any)[k]; got != want {
			t.Errorf("busy group's last_rebalance %s = %v, want %v", k, got, want)
		}
	}
	if got := last.(map[string]any)["straggler"].(map[string]any)["member"]; got != lastRec.WaitedFor[0].Member {
		t.Errorf("busy group's straggler %v, want %s", got, lastRec.WaitedFor[0].Member)
	}
	if got := busy["member_count"]; got != float64(4) {
		t.Errorf("busy group's member_count %v, want 4", got)
	}
	if _, ok := list[slices.Index(ids, emptyGroup)].(map[string]any)["last_rebalance"]; ok {
		t.Error("a group without rebalances has a last_rebalance")
	}
}

func TestGroupAndRebalances(t *testing.T) {
	src := sampleSource(time.Now())
	h := Handler(Config{Source: src})
	g := getJSON(t, h, "/api/v1/groups/"+busyGroup)
	hasKeys(t, "group", g, "group", "type", "state", "protocol", "member_count", "members", "offsets", "lag")
	members := g.(map[string]any)["members"].([]any)
	if len(members) != 4 || g.(map[string]any)["member_count"] != float64(4) {
		t.Fatalf("%d members, member_count %v, want 4", len(members), g.(map[string]any)["member_count"])
	}
	hasKeys(t, "member", members[0], "member_id", "client_id", "client_host", "assignment", "last_heartbeat", "session_timeout_ms", "rebalance_timeout_ms")
	hasKeys(t, "assignment", members[0].(map[string]any)["assignment"].([]any)[0], "topic", "partitions")
	offsets := g.(map[string]any)["offsets"].([]any)
	hasKeys(t, "offset", offsets[0], "topic", "partition", "committed", "high_watermark", "lag")

	rs := getJSON(t, h, "/api/v1/groups/"+busyGroup+"/rebalances").([]any)
	if len(rs) != len(src.rebalances[busyGroup]) {
		t.Fatalf("%d rebalances, want %d", len(rs), len(src.rebalances[busyGroup]))
	}
	var storms int
	for _, r := range rs {
		hasKeys(t, "rebalance", r, "group", "protocol", "generation_before", "generation_after", "trigger", "member",
			"started_at", "ended_at", "duration_ms", "members_in", "members_out", "waited_for", "moved", "outcome", "storm")
		if r.(map[string]any)["storm"] == true {
			storms++
			hasKeys(t, "storm rebalance", r, "storm_cause")
		}
	}
	if storms != 2 {
		t.Errorf("%d storm rebalances, want 2", storms)
	}
	last := rs[len(rs)-1].(map[string]any)
	hasKeys(t, "member", last["member"], "member_id", "client_id", "client_host")
	hasKeys(t, "wait", last["waited_for"].([]any)[0], "member", "waited_ms")
	moved := last["moved"].([]any)
	hasKeys(t, "move", moved[0], "topic", "partition", "from", "to", "pause_ms", "released_at", "assigned_at", "commit_gap")
	if got := moved[0].(map[string]any)["pause_ms"]; got != float64(7410) {
		t.Errorf("first move's pause_ms %v, want 7410", got)
	}
	released, err1 := time.Parse(time.RFC3339Nano, moved[0].(map[string]any)["released_at"].(string))
	assigned, err2 := time.Parse(time.RFC3339Nano, moved[0].(map[string]any)["assigned_at"].(string))
	if err1 != nil || err2 != nil || assigned.Sub(released) != 7410*time.Millisecond {
		t.Errorf("first move released at %v, assigned at %v (%v %v), want 7410 ms apart", released, assigned, err1, err2)
	}
	if _, err := time.Parse(time.RFC3339Nano, last["started_at"].(string)); err != nil {
		t.Errorf("started_at is not RFC 3339: %v", err)
	}

	// A rebalance in progress has no end yet.
	inProgress := getJSON(t, h, "/api/v1/groups/"+joiningGroup+"/rebalances").([]any)[0].(map[string]any)
	if v, ok := inProgress["ended_at"]; !ok || v != nil {
		t.Errorf("in-progress rebalance: ended_at %v (present %v), want null", v, ok)
	}
}

// Lists are JSON arrays even when the source leaves them nil.
func TestEmptyListsAreArrays(t *testing.T) {
	src := &fakeSource{}
	src.add(inspect.Group{
		GroupSummary: inspect.GroupSummary{Group: "bare", State: "Empty"},
		Members:      []inspect.Member{{MemberID: "m"}},
	}, inspect.Rebalance{Trigger: inspect.TriggerMemberLeft, StartedAt: time.Unix(0, 0)})
	h := Handler(Config{Source: src})
	isArray := func(what string, v any) {
		t.Helper()
		if _, ok := v.([]any); !ok {
			t.Errorf("%s is %#v, want a JSON array", what, v)
		}
	}
	g := getJSON(t, h, "/api/v1/groups/bare").(map[string]any)
	isArray("offsets", g["offsets"])
	isArray("assignment", g["members"].([]any)[0].(map[string]any)["assignment"])
	r := getJSON(t, h, "/api/v1/groups/bare/rebalances").([]any)[0]
	for _, field := range []string{"members_in", "members_out", "waited_for", "moved"} {
		isArray(field, r.(map[string]any)[field])
	}
	src = &fakeSource{}
	isArray("group list", getJSON(t, Handler(Config{Source: src}), "/api/v1/groups"))
	src.add(inspect.Group{GroupSummary: inspect.GroupSummary{Group: "quiet"}})
	isArray("rebalances", getJSON(t, Handler(Config{Source: src}), "/api/v1/groups/quiet/rebalances"))
}

func TestErrorsAreJSON(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	h := Handler(Config{Source: sampleSource(time.Now()), Logger: quiet})
	cases := []struct {
		method, path string
		code         int
		msg          string
	}{
		{"GET", "/api/v1/groups/nope", 404, `group "nope" not found`},
		{"GET", "/api/v1/groups/nope/rebalances", 404, `group "nope" not found`},
		{"GET", "/api/v1/group?id=nope", 404, `group "nope" not found`},
		{"GET", "/api/v1/group", 400, "missing the id parameter"},
		{"GET", "/api/v2/groups", 404, "no API endpoint"},
		{"GET", "/api/v1/groups/" + busyGroup + "/members", 404, "no API endpoint"},
		{"POST", "/api/v1/groups", 405, "read-only"},
		{"DELETE", "/api/v1/groups/" + busyGroup, 405, "read-only"},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, "http://groupd"+c.path, nil))
		var body errorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Errorf("%s %s: body is not JSON: %v %q", c.method, c.path, err, rec.Body)
			continue
		}
		if rec.Code != c.code || !strings.Contains(body.Error, c.msg) {
			t.Errorf("%s %s: %d %q, want %d with %q", c.method, c.path, rec.Code, body.Error, c.code, c.msg)
		}
	}

	// No source yet, a source not available yet (loading, closing), a
	// failing source, a source past its deadline. Only the unavailable
	// ones ask the client to come back.
	for _, c := range []struct {
		src   inspect.Source
		code  int
		msg   string
		retry bool
	}{
		{nil, 503, "not available", true},
		{&fakeSource{err: fmt.Errorf("shard 2 loading: %w", inspect.ErrUnavailable)}, 503, "loading its groups", true},
		{&fakeSource{err: errors.New("shard 3 stopped")}, 500, "shard 3 stopped", false},
		{&fakeSource{err: context.DeadlineExceeded}, 504, "timed out", false},
	} {
		for _, path := range []string{"/api/v1/groups", "/api/v1/groups/x", "/api/v1/groups/x/rebalances"} {
			code, hdr, raw := get(t, Handler(Config{Source: c.src, Logger: quiet}), path)
			var body errorBody
			if err := json.Unmarshal(raw, &body); err != nil || code != c.code || !strings.Contains(body.Error, c.msg) {
				t.Errorf("GET %s with source %v: %d %s, want %d with %q", path, c.src, code, raw, c.code, c.msg)
			}
			if got := hdr.Get("Retry-After"); (got != "") != c.retry {
				t.Errorf("GET %s with source %v: Retry-After %q", path, c.src, got)
			}
		}
	}
}

// escapeSegment escapes a group id as one path segment the way a client
// must: url.PathEscape leaves dots alone, and dot segments would be
// cleaned away.
func escapeSegment(id string) string {
	return strings.ReplaceAll(url.PathEscape(id), ".", "%2E")
}

func TestGroupIDEscaping(t *testing.T) {
	ids := []string{"a/b", "a b", "..", ".", "%", "%2F", "ü-ñ", "x?y#z", "a+b", "a\\b", " lead", "tab\there", "/", "-", busyGroup, slashGroup, spaceGroup}
	src := &fakeSource{}
	for _, id := range ids {
		src.add(inspect.Group{GroupSummary: inspect.GroupSummary{Group: id, State: "Empty"}}, inspect.Rebalance{Trigger: "member-left:" + id})
	}
	src.add(inspect.Group{GroupSummary: inspect.GroupSummary{Group: "", State: "Empty"}}, inspect.Rebalance{Trigger: "member-left:"})
	h := Handler(Config{Source: src})
	for _, id := range ids {
		if id == "/" {
			// The mux takes a segment that unescapes to "/" for a
			// trailing slash, so "/" is reached by the query form only.
			if code, _, body := get(t, h, "/api/v1/groups/%2F"); code != 404 {
				t.Errorf("GET /api/v1/groups/%%2F: %d %s, want 404", code, body)
			}
			if got := getJSON(t, h, "/api/v1/group?id=%2F").(map[string]any)["group"]; got != id {
				t.Errorf("GET /api/v1/group?id=%%2F: group %q, want %q", got, id)
			}
			continue
		}
		for _, path := range []string{"/api/v1/groups/" + escapeSegment(id), "/api/v1/group?id=" + url.QueryEscape(id)} {
			if got := getJSON(t, h, path).(map[string]any)["group"]; got != id {
				t.Errorf("GET %s: group %q, want %q", path, got, id)
			}
		}
		for _, path := range []string{"/api/v1/groups/" + escapeSegment(id) + "/rebalances", "/api/v1/group/rebalances?id=" + url.QueryEscape(id)} {
			rs := getJSON(t, h, path).([]any)
			if got := rs[0].(map[string]any)["trigger"]; got != "member-left:"+id {
				t.Errorf("GET %s: rebalance of %q, want of %q", path, got, id)
			}
		}
	}
	// The empty id has no path segment; the query form reaches it.
	if got := getJSON(t, h, "/api/v1/group?id=").(map[string]any)["group"]; got != "" {
		t.Errorf("empty id: group %q", got)
	}
}

func TestPageAndAssets(t *testing.T) {
	h := Handler(Config{Source: sampleSource(time.Now())})
	code, hdr, body := get(t, h, "/")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") || !strings.Contains(string(body), "static/app.js") {
		t.Fatalf("GET /: %d %s\n%.200s", code, hdr.Get("Content-Type"), body)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("GET /: Content-Security-Policy %q does not keep the page to its origin", csp)
	}
	for path, ct := range map[string]string{"/static/app.js": "text/javascript", "/static/app.css": "text/css", "/static/favicon.svg": "image/svg+xml"} {
		code, hdr, _ := get(t, h, path)
		if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), ct) {
			t.Errorf("GET %s: %d %q, want 200 %s", path, code, hdr.Get("Content-Type"), ct)
		}
	}
	if code, _, _ := get(t, h, "/static/nope.js"); code != 404 {
		t.Errorf("GET /static/nope.js: %d, want 404", code)
	}
	if code, _, _ := get(t, h, "/metrics"); code != 404 {
		t.Errorf("GET /metrics without metrics: %d, want 404", code)
	}
}

// The page must work offline: no asset names anything outside groupd.
// The SVG namespace is a name, not a request.
func TestAssetsReferenceNoExternalURL(t *testing.T) {
	url := regexp.MustCompile(`(?i:(https?:|wss?:|ftp:)?//[a-z0-9-]+(\.[a-z0-9-]+)+)|@import|url\(`)
	err := fs.WalkDir(uiFiles, "ui", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := uiFiles.ReadFile(path)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(raw), "http://www.w3.org/2000/svg", "")
		for _, m := range url.FindAllString(text, -1) {
			t.Errorf("%s references %q", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMetricsRoute(t *testing.T) {
	m := metrics.New(metrics.Config{MaxGroups: 10})
	m.SetSource(sampleSource(time.Now()))
	m.RequestHandled(11, 9, time.Millisecond, nil)
	h := Handler(Config{Source: sampleSource(time.Now()), Metrics: m.Handler()})
	code, _, body := get(t, h, "/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, want := range []string{`groupd_requests_total{api="JoinGroup"} 1`, `groupd_group_members{group="orders-processor"} 4`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestListenServesAndShutsDown(t *testing.T) {
	s, err := Listen("127.0.0.1:0", Config{Source: sampleSource(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Get("http://" + s.Addr() + "/api/v1/groups/" + busyGroup)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), busyLastTrig) {
		t.Errorf("GET over TCP: %d %.200s", res.StatusCode, body)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if _, err := http.Get("http://" + s.Addr() + "/"); err == nil {
		t.Error("still serving after Shutdown")
	}
}

// Go's profiles are served only when asked for.
func TestProfilingOnlyWhenEnabled(t *testing.T) {
	for _, on := range []bool{false, true} {
		h := Handler(Config{Profiling: on})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "http://groupd/debug/pprof/goroutine?debug=1", nil))
		served := rec.Code == http.StatusOK && strings.Contains(rec.Body.String(), "goroutine profile")
		if served != on {
			t.Fatalf("profiling %v: /debug/pprof/goroutine answered %d", on, rec.Code)
		}
	}
}
