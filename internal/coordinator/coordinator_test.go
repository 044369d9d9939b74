package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/coordinator/clocktest"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/inspect"
	"github.com/groupd/groupd/internal/store"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// hangGuard bounds every wait in real time. Nothing in these tests waits for
// time to pass; the guard only turns a deadlock into a failure.
const hangGuard = 10 * time.Second

const testShards = 4

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type env struct {
	t     *testing.T
	clock *clocktest.Clock
	store store.Store
	c     *Coordinator
}

func newEnv(t *testing.T, st store.Store, opts ...func(*Config)) *env {
	t.Helper()
	e := newEnvLoading(t, st, opts...)
	e.waitReady()
	return e
}

// newEnvLoading starts a coordinator without waiting for its shards to
// load; opts may change its configuration.
func newEnvLoading(t *testing.T, st store.Store, opts ...func(*Config)) *env {
	e := &env{t: t, clock: clocktest.New(epoch), store: st}
	cfg := Config{
		Shards: testShards,
		Group: group.Config{
			InitialRebalanceDelay: 3 * time.Second,
			NewMemberID:           group.SequentialMemberIDs(),
		},
		Store:  st,
		Clock:  e.clock,
		Logger: slog.New(slog.DiscardHandler),
	}
	for _, o := range opts {
		o(&cfg)
	}
	e.c = New(cfg)
	t.Cleanup(func() { e.c.Close() })
	return e
}

// waitReady waits until every shard has loaded.
func (e *env) waitReady() {
	e.t.Helper()
	for _, s := range e.c.shards {
		select {
		case <-s.ready:
		case <-time.After(hangGuard):
			e.t.Fatal("shard never loaded (hang guard)")
		}
	}
}

// sameShard returns a group id other than id owned by id's shard.
func sameShard(id string) string {
	for i := 0; ; i++ {
		o := fmt.Sprintf("%s-neighbour-%d", id, i)
		if store.ShardOf(o, testShards) == store.ShardOf(id, testShards) {
			return o
		}
	}
}

type result struct {
	resp kmsg.Response
	err  error
}

// start sends req from another goroutine; wait collects the answer.
func (e *env) start(req kmsg.Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		resp, err := e.c.Handle(context.Background(), "client", "/127.0.0.1", req)
		ch <- result{resp, err}
	}()
	return ch
}

func (e *env) wait(ch <-chan result) kmsg.Response {
	e.t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			e.t.Fatalf("Handle: %v", r.err)
		}
		return r.resp
	case <-time.After(hangGuard):
		e.t.Fatal("no reply (hang guard)")
		return nil
	}
}

func (e *env) do(req kmsg.Request) kmsg.Response {
	e.t.Helper()
	return e.wait(e.start(req))
}

// waitParked waits until n requests are parked in the machines.
func (e *env) waitParked(n int) {
	e.t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		got := 0
		for _, s := range e.c.shards {
			s.runFunc(func(*group.Machine) { got += len(s.waiting) })
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d requests parked, want %d", got, n)
		}
		runtime.Gosched()
	}
}

func joinReq(groupID, memberID string) *kmsg.JoinGroupRequest {
	r := kmsg.NewPtrJoinGroupRequest()
	r.Version = 4
	r.Group = groupID
	r.MemberID = memberID
	r.SessionTimeoutMillis = 10000
	r.RebalanceTimeoutMillis = 20000
	r.ProtocolType = "consumer"
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name = "range"
	p.Metadata = []byte{0, 1}
	r.Protocols = append(r.Protocols, p)
	return r
}

func syncReq(groupID, memberID string, gen int32, assign map[string][]byte) *kmsg.SyncGroupRequest {
	r := kmsg.NewPtrSyncGroupRequest()
	r.Version = 3
	r.Group, r.MemberID, r.Generation = groupID, memberID, gen
	for m, a := range assign {
		ga := kmsg.NewSyncGroupRequestGroupAssignment()
		ga.MemberID, ga.MemberAssignment = m, a
		r.GroupAssignment = append(r.GroupAssignment, ga)
	}
	return r
}

func heartbeatReq(groupID, memberID string, gen int32) *kmsg.HeartbeatRequest {
	r := kmsg.NewPtrHeartbeatRequest()
	r.Version = 3
	r.Group, r.MemberID, r.Generation = groupID, memberID, gen
	return r
}

func commitReq(groupID string, offset int64) *kmsg.OffsetCommitRequest {
	return commitReqAs(groupID, "", -1, offset)
}

func commitReqAs(groupID, member string, gen int32, offset int64) *kmsg.OffsetCommitRequest {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Version = 8
	r.Group = groupID
	r.MemberID = member
	r.Generation = gen
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = "orders"
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Partition, p.Offset = 0, offset
	t.Partitions = append(t.Partitions, p)
	r.Topics = append(r.Topics, t)
	return r
}

func fetchReq(groupID string) *kmsg.OffsetFetchRequest {
	r := kmsg.NewPtrOffsetFetchRequest()
	r.Version = 7
	r.Group = groupID
	t := kmsg.NewOffsetFetchRequestTopic()
	t.Topic = "orders"
	t.Partitions = []int32{0}
	r.Topics = append(r.Topics, t)
	return r
}

func describe(e *env, ids ...string) []kmsg.DescribeGroupsResponseGroup {
	e.t.Helper()
	r := kmsg.NewPtrDescribeGroupsRequest()
	r.Version = 5
	r.Groups = ids
	return e.do(r).(*kmsg.DescribeGroupsResponse).Groups
}

func code(t *testing.T, what string, got, want int16) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: error %v, want %v", what, kerr.ErrorForCode(got), kerr.ErrorForCode(want))
	}
}

// stableGroup runs the JoinGroup v4 two-step (MEMBER_ID_REQUIRED, then the
// real join, parked through the initial rebalance delay) and SyncGroup, and
// returns the member id and generation.
func stableGroup(e *env, groupID string) (string, int32) {
	t := e.t
	t.Helper()
	first := e.do(joinReq(groupID, "")).(*kmsg.JoinGroupResponse)
	code(t, "first join", first.ErrorCode, kerr.MemberIDRequired.Code)
	if first.MemberID == "" {
		t.Fatal("MEMBER_ID_REQUIRED without a member id")
	}
	member := first.MemberID

	joined := e.start(joinReq(groupID, member))
	e.waitParked(1)
	e.clock.Advance(3 * time.Second) // initial rebalance delay
	join := e.wait(joined).(*kmsg.JoinGroupResponse)
	code(t, "join", join.ErrorCode, 0)
	if join.LeaderID != member || join.MemberID != member || len(join.Members) != 1 || join.Generation != 1 {
		t.Fatalf("join = leader %q member %q members %d generation %d", join.LeaderID, join.MemberID, len(join.Members), join.Generation)
	}

	sync := e.do(syncReq(groupID, member, join.Generation, map[string][]byte{member: []byte("assignment")})).(*kmsg.SyncGroupResponse)
	code(t, "sync", sync.ErrorCode, 0)
	if string(sync.MemberAssignment) != "assignment" {
		t.Fatalf("sync assignment %q", sync.MemberAssignment)
	}
	if g := describe(e, groupID)[0]; g.State != "Stable" || len(g.Members) != 1 {
		t.Fatalf("after sync: %s with %d members", g.State, len(g.Members))
	}
	return member, join.Generation
}

func TestJoinSyncFlow(t *testing.T) {
	st := store.NewMemoryShards(testShards)
	e := newEnv(t, st)
	member, gen := stableGroup(e, "g1")
	code(t, "heartbeat", e.do(heartbeatReq("g1", member, gen)).(*kmsg.HeartbeatResponse).ErrorCode, 0)
	if st.Len() == 0 {
		t.Fatal("nothing stored after a completed sync")
	}
	h := history(e, "g1")
	if len(h) != 1 || h[0].Outcome != "stable" || h[0].GenerationAfter != 1 {
		t.Fatalf("history %+v", h)
	}
}

func TestSessionTimeoutRemovesMember(t *testing.T) {
	e := newEnv(t, store.NewMemoryShards(testShards))
	member, gen := stableGroup(e, "g1")
	e.clock.Advance(9 * time.Second)
	if g := describe(e, "g1")[0]; g.State != "Stable" {
		t.Fatalf("before the session timeout: %s", g.State)
	}
	e.clock.Advance(1 * time.Second) // session timeout is 10s
	g := describe(e, "g1")[0]
	if g.State != "Empty" || len(g.Members) != 0 {
		t.Fatalf("after the session timeout: %s with %d members", g.State, len(g.Members))
	}
	code(t, "heartbeat", e.do(heartbeatReq("g1", member, gen)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.UnknownMemberID.Code)
	h := history(e, "g1")
	if last := h[len(h)-1]; last.Trigger != inspect.TriggerSessionTimeout || last.Member.MemberID != member {
		t.Fatalf("last rebalance %+v", last)
	}
}

func TestFailedApplyHoldsRepliesAndRestores(t *testing.T) {
	st := store.NewMemoryShards(testShards)
	e := newEnv(t, st)
	code(t, "commit", e.do(commitReq("g", 5)).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, 0)

	st.FailNext(errors.New("disk full"))
	resp := e.do(commitReq("g", 6)).(*kmsg.OffsetCommitResponse)
	code(t, "failed commit", resp.Topics[0].Partitions[0].ErrorCode, kerr.CoordinatorNotAvailable.Code)

	// The machine had taken offset 6 in memory; it was rebuilt from the
	// store, which only has 5.
	f := e.do(fetchReq("g")).(*kmsg.OffsetFetchResponse)
	code(t, "fetch", f.ErrorCode, 0)
	if got := f.Topics[0].Partitions[0].Offset; got != 5 {
		t.Fatalf("offset after failed commit = %d, want 5", got)
	}
	code(t, "retry", e.do(commitReq("g", 6)).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, 0)
	if got := e.do(fetchReq("g")).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset; got != 6 {
		t.Fatalf("offset after retry = %d, want 6", got)
	}
}

func TestFailedApplyFailsParkedRequests(t *testing.T) {
	st := store.NewMemoryShards(testShards)
	e := newEnv(t, st)
	first := e.do(joinReq("g", "")).(*kmsg.JoinGroupResponse)
	joined := e.start(joinReq("g", first.MemberID)) // parked for the initial delay
	e.waitParked(1)
	st.FailNext(errors.New("io error"))
	// A failed write for any group of the shard rebuilds its machine.
	code(t, "commit", e.do(commitReq(sameShard("g"), 1)).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode,
		kerr.CoordinatorNotAvailable.Code)
	code(t, "parked join", e.wait(joined).(*kmsg.JoinGroupResponse).ErrorCode, kerr.CoordinatorNotAvailable.Code)
	e.waitParked(0)
}

func TestRestartKeepsStableGroup(t *testing.T) {
	st := store.NewMemoryShards(testShards)
	a := newEnv(t, st)
	member, gen := stableGroup(a, "g1")
	code(t, "commit", a.do(commitReqAs("g1", member, gen, 42)).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, 0)

	// Kill the process: the new coordinator sees only what was durable.
	b := newEnv(t, st.Crash())
	g := describe(b, "g1")[0]
	if g.State != "Stable" || len(g.Members) != 1 || g.Members[0].MemberID != member {
		t.Fatalf("after restart: %s %+v", g.State, g.Members)
	}
	code(t, "heartbeat", b.do(heartbeatReq("g1", member, gen)).(*kmsg.HeartbeatResponse).ErrorCode, 0)
	if g := describe(b, "g1")[0]; g.State != "Stable" {
		t.Fatalf("after heartbeat: %s", g.State)
	}
	if h := history(b, "g1"); len(h) != 1 {
		t.Fatalf("restart changed the history: %+v", h)
	}
	if got := b.do(fetchReq("g1")).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset; got != 42 {
		t.Fatalf("offset after restart = %d", got)
	}
	// The member's session restarted at load: it still expires.
	b.clock.Advance(10 * time.Second)
	if g := describe(b, "g1")[0]; g.State != "Empty" {
		t.Fatalf("after session timeout: %s", g.State)
	}
}

// blockingStore holds Load until released.
type blockingStore struct {
	*store.Memory
	release chan struct{}
}

func (b *blockingStore) Load(shard int, fn func(group.Record) error) error {
	<-b.release
	return b.Memory.Load(shard, fn)
}

func TestLoadInProgress(t *testing.T) {
	bs := &blockingStore{Memory: store.NewMemoryShards(testShards), release: make(chan struct{})}
	e := newEnvLoading(t, bs)
	code(t, "heartbeat", e.do(heartbeatReq("g", "m", 1)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.CoordinatorLoadInProgress.Code)
	c := e.do(commitReq("g", 1)).(*kmsg.OffsetCommitResponse)
	code(t, "commit", c.Topics[0].Partitions[0].ErrorCode, kerr.CoordinatorLoadInProgress.Code)
	gs := describe(e, "a", "b", "c", "d", "e")
	if len(gs) != 5 {
		t.Fatalf("%d groups described", len(gs))
	}
	for _, g := range gs {
		code(t, "describe "+g.Group, g.ErrorCode, kerr.CoordinatorLoadInProgress.Code)
	}
	if _, _, err := e.c.Rebalances(context.Background(), "g"); !errors.Is(err, ErrNotServing) {
		t.Fatalf("history while loading: %v", err)
	}

	close(bs.release)
	e.waitReady()
	code(t, "heartbeat after load", e.do(heartbeatReq("g", "m", 1)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.UnknownMemberID.Code)
}

func TestMultiGroupRequestsAcrossShards(t *testing.T) {
	e := newEnv(t, store.NewMemoryShards(testShards))
	var ids []string
	shards := map[int]bool{}
	for i := 0; i < 12; i++ {
		id := fmt.Sprintf("group-%02d", i)
		ids = append(ids, id)
		shards[store.ShardOf(id, testShards)] = true
		code(t, "commit", e.do(commitReq(id, int64(i))).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, 0)
	}
	if len(shards) < 2 {
		t.Fatal("test groups do not span shards")
	}
	member, _ := stableGroup(e, "stable")

	// Mixed order, an unknown group and a duplicate.
	ask := []string{"group-07", "stable", "nope", "group-00", "group-11", "group-07", "group-03"}
	gs := describe(e, ask...)
	if len(gs) != len(ask) {
		t.Fatalf("%d groups for %d asked", len(gs), len(ask))
	}
	for i, g := range gs {
		if g.Group != ask[i] {
			t.Fatalf("group %d is %q, want %q", i, g.Group, ask[i])
		}
		want := "Empty"
		switch g.Group {
		case "stable":
			want = "Stable"
			if len(g.Members) != 1 || g.Members[0].MemberID != member {
				t.Fatalf("stable members %+v", g.Members)
			}
		case "nope":
			want = "Dead"
		}
		if g.State != want || g.ErrorCode != 0 {
			t.Fatalf("%s: state %s error %d, want %s", g.Group, g.State, g.ErrorCode, want)
		}
	}

	// OffsetFetch v8 with several groups.
	f := kmsg.NewPtrOffsetFetchRequest()
	f.Version = 8
	for _, id := range []string{"group-05", "group-01", "group-09"} {
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group = id
		f.Groups = append(f.Groups, g)
	}
	fr := e.do(f).(*kmsg.OffsetFetchResponse)
	for i, want := range []int64{5, 1, 9} {
		g := fr.Groups[i]
		if g.Group != f.Groups[i].Group || len(g.Topics) != 1 || g.Topics[0].Partitions[0].Offset != want {
			t.Fatalf("fetch group %d: %+v", i, g)
		}
	}

	// ListGroups sees every shard, sorted.
	l := kmsg.NewPtrListGroupsRequest()
	l.Version = 4
	lr := e.do(l).(*kmsg.ListGroupsResponse)
	code(t, "list", lr.ErrorCode, 0)
	if len(lr.Groups) != 13 {
		t.Fatalf("listed %d groups", len(lr.Groups))
	}
	for i := 1; i < len(lr.Groups); i++ {
		if lr.Groups[i-1].Group >= lr.Groups[i].Group {
			t.Fatalf("list not sorted at %d", i)
		}
	}

	// DeleteGroups across shards, keeping order and per-group errors.
	d := kmsg.NewPtrDeleteGroupsRequest()
	d.Version = 2
	d.Groups = []string{"group-10", "stable", "nope", "group-02"}
	dr := e.do(d).(*kmsg.DeleteGroupsResponse)
	for i, want := range []int16{0, kerr.NonEmptyGroup.Code, kerr.GroupIDNotFound.Code, 0} {
		if dr.Groups[i].Group != d.Groups[i] {
			t.Fatalf("delete group %d is %q", i, dr.Groups[i].Group)
		}
		code(t, "delete "+d.Groups[i], dr.Groups[i].ErrorCode, want)
	}
	if gs := describe(e, "group-10", "group-02"); gs[0].State != "Dead" || gs[1].State != "Dead" {
		t.Fatalf("deleted groups: %s %s", gs[0].State, gs[1].State)
	}
}

func TestContextEndsWhileParked(t *testing.T) {
	e := newEnv(t, store.NewMemoryShards(testShards))
	first := e.do(joinReq("g", "")).(*kmsg.JoinGroupResponse)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() {
		_, err := e.c.Handle(ctx, "client", "/h", joinReq("g", first.MemberID))
		ch <- err
	}()
	e.waitParked(1)
	cancel()
	select {
	case err := <-ch:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Handle = %v, want context.Canceled", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("Handle ignored ctx")
	}
	// The join completes with nobody listening; the shard carries on.
	e.clock.Advance(3 * time.Second)
	if g := describe(e, "g")[0]; g.State != "CompletingRebalance" {
		t.Fatalf("state %s", g.State)
	}
}

func TestCloseAnswersParkedRequests(t *testing.T) {
	e := newEnv(t, store.NewMemoryShards(testShards))
	first := e.do(joinReq("g", "")).(*kmsg.JoinGroupResponse)
	joined := e.start(joinReq("g", first.MemberID))
	e.waitParked(1)
	done := make(chan struct{})
	go func() { e.c.Close(); close(done) }()
	code(t, "parked join", e.wait(joined).(*kmsg.JoinGroupResponse).ErrorCode, kerr.NotCoordinator.Code)
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatal("Close hangs")
	}
	code(t, "after close", e.do(heartbeatReq("g", "m", 1)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.NotCoordinator.Code)
}

// gateStore blocks the first Apply until released, so requests pile up
// behind it.
type gateStore struct {
	*store.Memory
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gateStore) Apply(recs []group.Record) error {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		<-g.release
	}
	return g.Memory.Apply(recs)
}

func TestQueuedCommitsShareOneApply(t *testing.T) {
	gs := &gateStore{Memory: store.NewMemoryShards(1), entered: make(chan struct{}), release: make(chan struct{})}
	clk := clocktest.New(epoch)
	c := New(Config{Store: gs, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	defer c.Close()
	e := &env{t: t, clock: clk, c: c}
	e.waitReady()

	first := e.start(commitReq("g0", 1))
	select {
	case <-gs.entered:
	case <-time.After(hangGuard):
		t.Fatal("first Apply never started")
	}
	const n = 20
	var chs []<-chan result
	for i := 1; i <= n; i++ {
		chs = append(chs, e.start(commitReq(fmt.Sprintf("g%d", i), int64(i))))
	}
	// The loop steps the commits into the next batch while the first is
	// being written, or leaves them queued; either way they must all be
	// in before the write completes.
	deadline := time.Now().Add(hangGuard)
	for {
		s := c.shards[0]
		s.mu.Lock()
		queued := len(s.queue)
		s.mu.Unlock()
		if got := queued + int(s.stepped.Load()) - 1; got == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d queued, %d stepped", queued, s.stepped.Load())
		}
		runtime.Gosched()
	}
	close(gs.release)
	e.wait(first)
	for _, ch := range chs {
		code(t, "commit", e.wait(ch).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, 0)
	}
	if calls, _ := gs.Applies(); calls != 2 {
		t.Fatalf("%d Apply calls for %d commits, want 2", calls, n+1)
	}
}

func TestUnsupportedRequest(t *testing.T) {
	e := newEnv(t, store.NewMemoryShards(testShards))
	if _, err := e.c.Handle(context.Background(), "c", "h", kmsg.NewPtrMetadataRequest()); err == nil {
		t.Fatal("Metadata request accepted")
	}
}

func TestErrorResponseSetsEveryLevel(t *testing.T) {
	f := kmsg.NewPtrOffsetFetchRequest()
	f.Version = 1
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = "t", []int32{0, 1}
	f.Topics = append(f.Topics, ft)
	fr := ErrorResponse(f, kerr.CoordinatorNotAvailable.Code).(*kmsg.OffsetFetchResponse)
	if fr.Version != 1 || len(fr.Topics[0].Partitions) != 2 || fr.Topics[0].Partitions[1].ErrorCode != kerr.CoordinatorNotAvailable.Code || fr.Topics[0].Partitions[1].Offset != -1 {
		t.Fatalf("offset fetch v1 error response %+v", fr)
	}
	j := ErrorResponse(joinReq("g", "m"), kerr.CoordinatorNotAvailable.Code).(*kmsg.JoinGroupResponse)
	if j.Version != 4 || j.Generation != -1 || j.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("join error response %+v", j)
	}
	for _, req := range []kmsg.Request{
		kmsg.NewPtrJoinGroupRequest(), kmsg.NewPtrSyncGroupRequest(), kmsg.NewPtrHeartbeatRequest(),
		kmsg.NewPtrLeaveGroupRequest(), kmsg.NewPtrOffsetCommitRequest(), kmsg.NewPtrOffsetFetchRequest(),
		kmsg.NewPtrOffsetDeleteRequest(), kmsg.NewPtrDescribeGroupsRequest(), kmsg.NewPtrDeleteGroupsRequest(),
		kmsg.NewPtrListGroupsRequest(),
	} {
		if !SetErrorCode(req.ResponseKind(), 1) {
			t.Errorf("SetErrorCode does not know %T", req.ResponseKind())
		}
	}
}

// flakyLoadStore fails the first Load of every shard.
type flakyLoadStore struct {
	*store.Memory
	mu     sync.Mutex
	failed map[int]bool
}

func (f *flakyLoadStore) Load(shard int, fn func(group.Record) error) error {
	f.mu.Lock()
	first := !f.failed[shard]
	f.failed[shard] = true
	f.mu.Unlock()
	if first {
		return errors.New("read error")
	}
	return f.Memory.Load(shard, fn)
}

func TestLoadRetriesWithBackoff(t *testing.T) {
	fs := &flakyLoadStore{Memory: store.NewMemoryShards(testShards), failed: map[int]bool{}}
	e := newEnvLoading(t, fs)
	// Every shard fails once and waits minRetry of clock time.
	deadline := time.Now().Add(hangGuard)
	for e.clock.Pending() < testShards {
		if time.Now().After(deadline) {
			t.Fatal("shards did not schedule a retry")
		}
		runtime.Gosched()
	}
	code(t, "heartbeat", e.do(heartbeatReq("g", "m", 1)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.CoordinatorLoadInProgress.Code)
	e.clock.Advance(minRetry)
	e.waitReady()
	code(t, "heartbeat", e.do(heartbeatReq("g", "m", 1)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.UnknownMemberID.Code)
}

// history reads a group's rebalances through the inspect view.
func history(e *env, groupID string) []inspect.Rebalance {
	e.t.Helper()
	rs, ok, err := e.c.Rebalances(context.Background(), groupID)
	if err != nil || !ok {
		e.t.Fatalf("rebalances of %s: ok=%v err=%v", groupID, ok, err)
	}
	return rs
}

// A caller that asks to be told (OnDone) is told once its reply is
// released, by the goroutine that released it, and the reply is there
// for Wait at once: a heartbeat's, released from its own step, and a
// commit's, released once durable. A reply released before OnDone is
// asked for is waited for as usual.
func TestOnDoneTellsOfTheReply(t *testing.T) {
	e := newEnv(t, store.NewMemoryShards(testShards))
	member, gen := stableGroup(e, "g")
	ctx := context.Background()
	for _, req := range []kmsg.Request{heartbeatReq("g", member, gen), commitReqAs("g", member, gen, 7)} {
		var p Pending
		e.c.Start(ctx, "c", "/127.0.0.1", req, &p)
		told := make(chan kmsg.Response, 1)
		if !p.OnDone(func() {
			resp, err := p.Wait(ctx)
			if err != nil {
				t.Errorf("wait after OnDone: %v", err)
			}
			told <- resp
		}) {
			// Released already: Wait has it.
			resp, err := p.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			told <- resp
		}
		select {
		case resp := <-told:
			if resp.Key() != req.Key() {
				t.Fatalf("%T answered with %T", req, resp)
			}
		case <-time.After(hangGuard):
			t.Fatalf("%T: never told", req)
		}
	}
	// Answered inside Start, by a closed coordinator: OnDone declines.
	var p Pending
	e.c.Close()
	e.c.Start(ctx, "c", "/127.0.0.1", heartbeatReq("g", member, gen), &p)
	if p.OnDone(func() { t.Error("told of a reply given inside Start") }) {
		t.Fatal("OnDone took a callback for a reply given inside Start")
	}
	resp, err := p.Wait(ctx)
	if err != nil || resp.(*kmsg.HeartbeatResponse).ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("after close: %v %v", resp, err)
	}
}
