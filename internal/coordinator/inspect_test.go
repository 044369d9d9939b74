package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/admin"
	"github.com/groupd/groupd/internal/inspect"
	"github.com/groupd/groupd/internal/store"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu         sync.Mutex
	rebalances []inspect.Rebalance
	writes     int
	records    int
	// panics and down count ShardPanic calls, down those that left a
	// shard unavailable.
	panics, down int
}

func (r *recorder) ShardPanic(_ int, down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.panics++
	if down {
		r.down++
	}
}

func (r *recorder) RebalanceEnded(rb inspect.Rebalance) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rebalances = append(r.rebalances, rb)
}

func (r *recorder) StoreWrite(_ time.Duration, records int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.writes++
		r.records += records
	}
}

// logCapture keeps the records logged through it.
type logCapture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCapture) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *logCapture) WithGroup(string) slog.Handler            { return c }

func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r.Clone())
	return nil
}

// lines returns the attributes of every record with the message, as text.
func (c *logCapture) lines(msg string) []map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []map[string]string
	for _, r := range c.recs {
		if r.Message != msg {
			continue
		}
		kv := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { kv[a.Key] = a.Value.String(); return true })
		out = append(out, kv)
	}
	return out
}

// observed configures a coordinator whose broker knows one partition,
// orders/0, at high watermark 100.
func observed(obs Observer, logs *logCapture) func(*Config) {
	return func(c *Config) {
		c.Logger = slog.New(logs)
		c.HighWatermark = func(topic string, p int32) (int64, bool) {
			return 100, topic == "orders" && p == 0
		}
		c.Observer = obs
	}
}

func consumerAssignment(partitions ...int32) []byte {
	a := kmsg.NewConsumerMemberAssignment()
	if len(partitions) > 0 {
		at := kmsg.NewConsumerMemberAssignmentTopic()
		at.Topic, at.Partitions = "orders", partitions
		a.Topics = append(a.Topics, at)
	}
	return a.AppendTo(nil)
}

// directJoin is a JoinGroup v3, which adds a new member at once.
func directJoin(groupID, memberID string) *kmsg.JoinGroupRequest {
	r := joinReq(groupID, memberID)
	r.Version = 3
	return r
}

// TestRebalanceReported follows one hand-off through the coordinator: the
// record's pause is measured on the coordinator's clock, its commit gap
// comes from the broker's high watermark, it is logged and observed once,
// the inspect views show it, and it survives a restart.
func TestRebalanceReported(t *testing.T) {
	st := store.NewMemoryShards(testShards)
	obs := &recorder{}
	logs := &logCapture{}
	e := newEnv(t, st, observed(obs, logs))

	ja := e.start(directJoin("g", ""))
	e.waitParked(1)
	e.clock.Advance(3 * time.Second) // initial rebalance delay
	a := e.wait(ja).(*kmsg.JoinGroupResponse)
	code(t, "join a", a.ErrorCode, 0)
	code(t, "sync a", e.do(syncReq("g", a.MemberID, 1, map[string][]byte{a.MemberID: consumerAssignment(0)})).(*kmsg.SyncGroupResponse).ErrorCode, 0)
	code(t, "commit", e.do(commitReqAs("g", a.MemberID, 1, 40)).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, 0)

	// b joins; a learns of it 1 s later and rejoins; the leader assigns
	// 500 ms after that. a gave orders/0 up when it rejoined.
	jb := e.start(directJoin("g", ""))
	e.waitParked(1)
	e.clock.Advance(time.Second)
	ja = e.start(directJoin("g", a.MemberID))
	b := e.wait(jb).(*kmsg.JoinGroupResponse)
	code(t, "join b", b.ErrorCode, 0)
	code(t, "rejoin a", e.wait(ja).(*kmsg.JoinGroupResponse).ErrorCode, 0)
	e.clock.Advance(500 * time.Millisecond)
	sb := e.start(syncReq("g", b.MemberID, 2, nil))
	e.waitParked(1)
	code(t, "sync a", e.do(syncReq("g", a.MemberID, 2, map[string][]byte{
		a.MemberID: consumerAssignment(), b.MemberID: consumerAssignment(0),
	})).(*kmsg.SyncGroupResponse).ErrorCode, 0)
	code(t, "sync b", e.wait(sb).(*kmsg.SyncGroupResponse).ErrorCode, 0)

	want := inspect.Move{Topic: "orders", Partition: 0, From: a.MemberID, To: b.MemberID, PauseMs: 500,
		ReleasedAt: epoch.Add(4 * time.Second), AssignedAt: epoch.Add(4500 * time.Millisecond), Committed: 40, CommitGap: 60}
	check := func(what string, rs []inspect.Rebalance) {
		t.Helper()
		if len(rs) != 2 {
			t.Fatalf("%s: %d rebalances, want 2", what, len(rs))
		}
		r := rs[1]
		if r.Seq != 2 || r.Trigger != inspect.TriggerMemberJoined || r.Member == nil || r.Member.MemberID != b.MemberID ||
			r.Protocol != inspect.ProtocolEager || r.GenerationBefore != 1 || r.GenerationAfter != 2 ||
			r.DurationMs != 1500 || r.Outcome != "stable" || r.EndedAt == nil {
			t.Fatalf("%s: rebalance %+v", what, r)
		}
		if len(r.Moved) != 1 || r.Moved[0] != want {
			t.Fatalf("%s: moved %+v, want %+v", what, r.Moved, want)
		}
		if len(r.WaitedFor) != 2 || r.WaitedFor[0] != (inspect.Wait{Member: a.MemberID, WaitedMs: 1000, Rejoined: true}) {
			t.Fatalf("%s: waited for %+v", what, r.WaitedFor)
		}
	}
	check("Rebalances", history(e, "g"))

	obs.mu.Lock()
	observed := append([]inspect.Rebalance(nil), obs.rebalances...)
	writes, records := obs.writes, obs.records
	obs.mu.Unlock()
	check("observer", observed)
	if writes == 0 || records == 0 {
		t.Fatalf("observer saw %d writes of %d records", writes, records)
	}
	lines := logs.lines("rebalance")
	if len(lines) != 2 {
		t.Fatalf("%d rebalance log lines, want 2: %v", len(lines), lines)
	}
	for k, v := range map[string]string{"group": "g", "protocol": "eager", "trigger": "member-joined", "member": b.MemberID,
		"duration": "1.5s", "generation": "2", "outcome": "stable", "moved": "1", "paused": "1", "max_pause": "500ms", "storm": "false"} {
		if lines[1][k] != v {
			t.Fatalf("rebalance log line %v: %s is %q, want %q", lines[1], k, lines[1][k], v)
		}
	}
	ctx := context.Background()
	gs, err := e.c.Groups(ctx)
	if err != nil || len(gs) != 1 {
		t.Fatalf("Groups: %+v %v", gs, err)
	}
	if s := gs[0]; s.Group != "g" || s.State != "Stable" || s.MemberCount != 2 || s.Generation != 2 || s.Lag != 60 ||
		s.Rebalances != 2 || s.LastRebalance == nil || s.LastRebalance.Seq != 2 ||
		s.LastRebalance.MovedCount != 1 || s.LastRebalance.MaxPauseMs != 500 || s.LastRebalance.CommitGap != 60 {
		t.Fatalf("summary %+v", s)
	}
	g, ok, err := e.c.Group(ctx, "g")
	if err != nil || !ok {
		t.Fatalf("Group: %v %v", ok, err)
	}
	if len(g.Members) != 2 || g.Lag != 60 || len(g.Offsets) != 1 {
		t.Fatalf("group %+v", g)
	}
	if o := g.Offsets[0]; o != (inspect.PartitionOffset{Topic: "orders", Partition: 0, Committed: 40, HighWatermark: 100, Lag: 60, Owner: b.MemberID}) {
		t.Fatalf("offset %+v", o)
	}
	for _, m := range g.Members {
		wantParts := 0
		if m.MemberID == b.MemberID {
			wantParts = 1
		}
		if got := len(m.Assignment); got != wantParts || !m.LastHeartbeat.Equal(epoch.Add(4500*time.Millisecond)) || m.SessionTimeoutMs != 10000 {
			t.Fatalf("member %+v", m)
		}
	}
	if _, ok, err := e.c.Group(ctx, "nope"); ok || err != nil {
		t.Fatalf("unknown group: %v %v", ok, err)
	}
	if _, ok, err := e.c.Rebalances(ctx, "nope"); ok || err != nil {
		t.Fatalf("unknown group's rebalances: %v %v", ok, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.c.Groups(cancelled); err == nil {
		t.Fatal("Groups with a cancelled context")
	}

	// The history is durable: a new coordinator over what was stored has
	// the same records, commit gaps included.
	check("after restart", history(newEnv(t, st.Crash()), "g"))
}

// TestInspectUnavailable checks that the reads fail with an error matching
// inspect.ErrUnavailable while the shards load and after the coordinator
// closed, so that the admin API answers 503 with Retry-After rather than
// 500.
func TestInspectUnavailable(t *testing.T) {
	bs := &blockingStore{Memory: store.NewMemoryShards(testShards), release: make(chan struct{})}
	e := newEnvLoading(t, bs)
	h := admin.Handler(admin.Config{Source: e.c, Logger: slog.New(slog.DiscardHandler)})
	unavailable := func(when string) {
		t.Helper()
		ctx := context.Background()
		_, err1 := e.c.Groups(ctx)
		_, _, err2 := e.c.Group(ctx, "g")
		_, _, err3 := e.c.Rebalances(ctx, "g")
		for i, err := range []error{err1, err2, err3} {
			if !errors.Is(err, inspect.ErrUnavailable) {
				t.Errorf("%s: read %d: %v, want one matching inspect.ErrUnavailable", when, i, err)
			}
		}
		for _, path := range []string{"/api/v1/groups", "/api/v1/groups/g", "/api/v1/groups/g/rebalances"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "http://groupd"+path, nil))
			if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" ||
				!strings.Contains(rec.Body.String(), "loading its groups") {
				t.Errorf("%s: GET %s: %d Retry-After %q %s", when, path, rec.Code, rec.Header().Get("Retry-After"), rec.Body)
			}
		}
	}
	unavailable("while loading")
	close(bs.release)
	e.waitReady()
	if _, err := e.c.Groups(context.Background()); err != nil {
		t.Fatalf("Groups once loaded: %v", err)
	}
	e.c.Close()
	unavailable("after close")
}
