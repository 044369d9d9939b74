package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/inspect"
)

// adminAPI serves rebalance histories the way groupd's admin API does:
// a JSON array per known group, 404 with {"error": ...} for others.
func adminAPI(t *testing.T, histories map[string][]inspect.Rebalance) (*httptest.Server, map[string][]byte) {
	t.Helper()
	bodies := map[string][]byte{}
	for g, h := range histories {
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		bodies[g] = b
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/groups/{group}/rebalances", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch g := r.PathValue("group"); g {
		case "broken":
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte(`{"error": "store unavailable"}`))
		case "garbage":
			w.Write([]byte(`<html>`))
		default:
			b, ok := bodies[g]
			if !ok {
				w.WriteHeader(http.StatusNotFound)
				json.NewEncoder(w).Encode(map[string]string{"error": "group " + g + " not found"})
				return
			}
			w.Write(b)
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, bodies
}

func TestRebalances(t *testing.T) {
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	end := start.Add(1500 * time.Millisecond)
	history := []inspect.Rebalance{
		{
			Group: "a/b c", Protocol: inspect.ProtocolCooperative,
			GenerationBefore: 3, GenerationAfter: 4,
			StartedAt: start, EndedAt: &end, DurationMs: 1500,
			Trigger:   inspect.TriggerSessionTimeout,
			Member:    &inspect.MemberRef{MemberID: "m-1", InstanceID: "i-1", ClientID: "c", ClientHost: "/127.0.0.1"},
			MembersIn: []string{}, MembersOut: []string{"m-1"},
			Moved: []inspect.Move{
				{Topic: "t", Partition: 0, From: "m-1", To: "m-2", PauseMs: 1200, CommitGap: 5},
				{Topic: "t", Partition: 1, From: "m-1", To: "m-3", PauseMs: 7300, CommitGap: -1},
			},
			Outcome: "stable", Storm: true, StormCause: "session timeout shorter than the member's heartbeat gaps",
		},
		{
			Group: "a/b c", Protocol: inspect.ProtocolCooperative,
			GenerationBefore: 4, StartedAt: end.Add(time.Minute),
			Trigger:   inspect.TriggerMemberJoined,
			Member:    &inspect.MemberRef{MemberID: "m-4", ClientID: "c", ClientHost: "/127.0.0.1"},
			MembersIn: []string{"m-4"}, MembersOut: []string{},
		},
	}
	srv, bodies := adminAPI(t, map[string][]inspect.Rebalance{"a/b c": history, "quiet": {}})
	addr := "--admin-addr=" + strings.TrimPrefix(srv.URL, "http://")

	r := mustRun(t, "groups", "rebalances", "a/b c", addr)
	rows := parseTable(t, r.stdout)
	if len(rows) != 2 {
		t.Fatalf("rebalances:\n%s", r.stdout)
	}
	for col, want := range map[string]string{
		"STARTED": "2026-11-30T10:00:00.000Z", "DURATION": "1.5s", "TRIGGER": "session-timeout", "MEMBER": "m-1(i-1)",
		"GENERATION": "3→4", "MEMBERS-IN": "0", "MEMBERS-OUT": "1", "MOVED": "2", "MAX-PAUSE": "7.3s",
		"STORM": "yes: session timeout shorter than the member's heartbeat gaps",
	} {
		if rows[0][col] != want {
			t.Errorf("first rebalance %s = %q, want %q", col, rows[0][col], want)
		}
	}
	if rows[0]["MEMBER"] != "m-1(i-1)" {
		t.Errorf("the causing member and its instance id: %q", rows[0]["MEMBER"])
	}
	if rows[1]["DURATION"] != "in-progress" || rows[1]["TRIGGER"] != "member-joined" || rows[1]["MAX-PAUSE"] != "-" || rows[1]["STORM"] != "-" {
		t.Errorf("the rebalance in progress: %v", rows[1])
	}

	// JSON is the API's body, as served.
	r = mustRun(t, "groups", "rebalances", "a/b c", addr, "-o", "json")
	if strings.TrimSpace(r.stdout) != string(bodies["a/b c"]) {
		t.Fatalf("JSON output differs from the API's body:\n%s\n%s", r.stdout, bodies["a/b c"])
	}

	r = mustRun(t, "groups", "rebalances", "quiet", addr)
	if len(parseTable(t, r.stdout)) != 0 || !strings.Contains(r.stderr, "no recorded rebalances") {
		t.Fatalf("empty history: %q %q", r.stdout, r.stderr)
	}

	r = mustFail(t, 1, "GROUP_ID_NOT_FOUND", "groups", "rebalances", "nope", addr)
	if !strings.Contains(r.stderr, "group nope not found") {
		t.Errorf("the API's error is not shown: %s", r.stderr)
	}
	mustFail(t, 1, "500 Internal Server Error: store unavailable", "groups", "rebalances", "broken", addr)
	mustFail(t, 1, "not a rebalance history", "groups", "rebalances", "garbage", addr)

	srv.Close()
	r = mustFail(t, 1, "connection refused", "groups", "rebalances", "a/b c", addr)
	if !strings.Contains(r.stderr, "--http-listen") || strings.Contains(r.stderr, "--bootstrap-server") {
		t.Errorf("hint for an unreachable admin API: %s", r.stderr)
	}
}

// TestRebalancesAgainstGroupd reads a real groupd's admin API: a franz-go
// member joins, a second one joins and leaves, and the command shows the
// rebalances the coordinator recorded, as a table and as the API's JSON.
func TestRebalancesAgainstGroupd(t *testing.T) {
	a := startGroupdApp(t)
	bs, admin := "--bootstrap-server="+a.Addr(), "--admin-addr="+a.HTTPAddr()
	const topic, groupID = "events", "a/b readers"
	mustRun(t, "topics", "create", topic, "--partitions", "2", bs)
	first := startConsumer(t, a.Addr(), groupID, topic, 2)
	second := startConsumer(t, a.Addr(), groupID, topic, 1)
	second.cl.Close() // leaves the group
	var want []inspect.Rebalance
	deadline := time.Now().Add(30 * time.Second)
	for {
		rs, _, err := a.Inspect().Rebalances(testCtx(t), groupID)
		if err != nil {
			t.Fatal(err)
		}
		if last := rs[len(rs)-1]; last.Trigger == inspect.TriggerMemberLeft && last.EndedAt != nil {
			want = rs
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the coordinator recorded %+v, want the second member's leave last", rs)
		}
		time.Sleep(20 * time.Millisecond)
	}

	r := mustRun(t, "groups", "rebalances", groupID, admin)
	rows := parseTable(t, r.stdout)
	if len(rows) != len(want) {
		t.Fatalf("rebalances:\n%s", r.stdout)
	}
	for i, w := range want {
		row := rows[i]
		maxPause := "-" // nothing moved
		if len(w.Moved) > 0 {
			maxPause = msDuration(w.MaxPause().Milliseconds())
		}
		for col, v := range map[string]string{
			"STARTED":     w.StartedAt.UTC().Format("2006-01-02T15:04:05.000Z"),
			"DURATION":    msDuration(w.DurationMs),
			"TRIGGER":     w.Trigger,
			"MEMBER":      w.Member.MemberID,
			"GENERATION":  fmt.Sprintf("%d→%d", w.GenerationBefore, w.GenerationAfter),
			"MEMBERS-IN":  fmt.Sprint(len(w.MembersIn)),
			"MEMBERS-OUT": fmt.Sprint(len(w.MembersOut)),
			"MOVED":       fmt.Sprint(len(w.Moved)),
			"MAX-PAUSE":   maxPause,
		} {
			if row[col] != v {
				t.Errorf("rebalance %d: %s = %q, want %q", i+1, col, row[col], v)
			}
		}
	}
	if n := len(rows); rows[0]["TRIGGER"] != inspect.TriggerMemberJoined || rows[0]["MEMBER"] != first.memberID ||
		rows[1]["TRIGGER"] != inspect.TriggerMemberJoined || rows[1]["MEMBER"] != second.memberID || rows[n-1]["MEMBER"] != second.memberID {
		t.Errorf("rebalances:\n%s\nwant joins by %s then %s, and the leave of %s last", r.stdout, first.memberID, second.memberID, second.memberID)
	}

	// JSON is what the API serves: the coordinator's records.
	r = mustRun(t, "groups", "rebalances", groupID, admin, "--output", "json")
	var got []inspect.Rebalance
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("--output json: %v\n%s", err, r.stdout)
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("--output json:\n%s\nthe coordinator holds:\n%s", gotJSON, wantJSON)
	}

	r = mustFail(t, 1, "GROUP_ID_NOT_FOUND", "groups", "rebalances", "nope", admin)
	if !strings.Contains(r.stderr, `group "nope" not found`) {
		t.Errorf("the API's error is not shown: %s", r.stderr)
	}
}
