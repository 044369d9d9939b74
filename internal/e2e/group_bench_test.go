package e2e

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/partition"
)

// The group benchmarks drive groupd and franz-go's kfake with the same raw
// Kafka requests in the same run and report each side and their ratio
// (groupd / kfake):
//
//	go test ./internal/e2e -run '^$' -bench 'Rebalance|Heartbeats|Commits' -count 3
//
// kfake keeps all state in memory and serves every request on one goroutine.
// It has no initial rebalance delay at all (groups.go: "We do not do the
// delayed join aspects in Kafka"; group.initial.rebalance.delay.ms is not
// among the broker configs it reads), so groupd runs with the delay turned
// off to match.
//
// Both sides run in this process, one after the other, in rounds; each
// round another side goes first (inTurn), and before every measured window
// but groupd's own the collector runs and groupd's store is left to finish
// its background work (settle), so that no side pays for the garbage, log
// folds or pebble compactions the other left behind.

const (
	rebalanceMembers = 1000 // members of the group formed per iteration

	hbGroups      = 100 // stable groups for the heartbeat benchmark
	hbGroupSize   = 10  // members per group
	hbConns       = 32  // concurrent connections driving heartbeats
	hbWindow      = 8   // heartbeats in flight per connection
	hbPerOp       = 50000
	commitGroups  = 1000 // groups receiving simple commits
	commitParts   = 10   // partitions per OffsetCommit
	commitConns   = 32   // concurrent connections driving commits
	commitsPerOp  = 20000
	benchGroupTop = "grouped" // topic named in subscriptions, assignments and commits

	// benchRounds splits each operation of the rate benchmarks into
	// alternating groupd and kfake passes, so that both sides see the
	// same machine load.
	benchRounds = 5

	benchSessionMs   = 45000
	benchRebalanceMs = 60000
	benchIOTimeout   = 2 * time.Minute
)

// groupBenchTargets is groupdAndKfake, with the floor asked for by -floor
// in groupd's place.
func groupBenchTargets(b *testing.B, sync partition.SyncPolicy) ([]benchTarget, func(name string)) {
	b.Helper()
	targets, settle := groupdAndKfake(b, sync)
	if *benchFloor != "" {
		targets[0] = floorTarget(b, *benchFloor)
	}
	return targets, settle
}

// groupdAndKfake starts groupd with no initial rebalance delay (and the
// given fsync policy, which also decides whether the coordinator store
// fsyncs) and a one-broker kfake, each with benchGroupTop created. The
// function it returns is called before each measured window of the named
// side (see settle).
func groupdAndKfake(b *testing.B, sync partition.SyncPolicy) ([]benchTarget, func(name string)) {
	b.Helper()
	a := startServer(b, b.TempDir(), func(c *app.Config) {
		c.Log.Sync = sync
		c.Group.InitialRebalanceDelay = -1
	})
	createTopic(b, a.Addr(), benchGroupTop, commitParts)
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(commitParts, benchGroupTop))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kf.Close)
	targets := []benchTarget{{"groupd", a.Addr()}, {"kfake", kf.ListenAddrs()[0]}}
	groupds := map[string]*app.App{"groupd": a}
	if t, with := httpSideTarget(b, sync); with != nil {
		targets = append(targets, t)
		groupds[t.name] = with
	}
	return targets, func(name string) { settle(b, groupds, name) }
}

// settle prepares the window of the named side: it collects the garbage
// every side left (they share this process), and waits until the store of
// every groupd but the one measured next has no fold, flush or compaction
// running or queued. Work a groupd's writes left for later is its own
// cost, paid in its own next window, not in another side's.
func settle(b *testing.B, groupds map[string]*app.App, name string) {
	runtime.GC()
	for other, a := range groupds {
		if other == name {
			continue
		}
		for deadline := time.Now().Add(30 * time.Second); !a.StoreIdle(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Logf("%s's store still busy after 30s; measuring %s anyway", other, name)
				break
			}
		}
	}
}

// inTurn returns targets in the order of the given round: each round
// another side goes first.
func inTurn(targets []benchTarget, round int) []benchTarget {
	k := round % len(targets)
	return append(targets[k:len(targets):len(targets)], targets[:k]...)
}

// benchConn is a raw Kafka connection that can keep several requests in
// flight: the server answers a connection's requests in order, so responses
// are matched to the queue of sent requests. It is used by one goroutine at
// a time and reports errors instead of failing the benchmark, so that member
// goroutines can use it.
type benchConn struct {
	c      net.Conn
	r      *bufio.Reader
	w      *bufio.Writer
	corr   int32
	queued []kmsg.Request
}

func dialBench(b *testing.B, addr string) *benchConn {
	b.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		b.Fatalf("dial %s (is the open-file limit high enough?): %v", addr, err)
	}
	b.Cleanup(func() { c.Close() })
	return &benchConn{c: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}
}

func dialBenchN(b *testing.B, addr string, n int) []*benchConn {
	conns := make([]*benchConn, n)
	for i := range conns {
		conns[i] = dialBench(b, addr)
	}
	return conns
}

// arm sets one deadline for everything the connection does next, instead
// of paying for a deadline per request.
func (bc *benchConn) arm() { bc.c.SetDeadline(time.Now().Add(benchIOTimeout)) }

func (bc *benchConn) send(req kmsg.Request) error {
	bc.corr++
	bc.queued = append(bc.queued, req)
	_, err := bc.w.Write(requestFrame(req, bc.corr))
	return err
}

func (bc *benchConn) flush() error { return bc.w.Flush() }

// recv reads the response to the oldest unanswered request.
func (bc *benchConn) recv() (kmsg.Response, error) {
	if len(bc.queued) == 0 {
		return nil, errors.New("recv with nothing in flight")
	}
	req := bc.queued[0]
	bc.queued = bc.queued[1:]
	want := bc.corr - int32(len(bc.queued))
	var size [4]byte
	if _, err := io.ReadFull(bc.r, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(bc.r, body); err != nil {
		return nil, err
	}
	if len(body) < 4 {
		return nil, errors.New("short response")
	}
	if corr := int32(binary.BigEndian.Uint32(body)); corr != want {
		return nil, fmt.Errorf("correlation id %d, want %d", corr, want)
	}
	body = body[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() {
		if len(body) == 0 || body[0] != 0 {
			return nil, errors.New("unexpected response header tags")
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, err
	}
	return resp, nil
}

func (bc *benchConn) do(req kmsg.Request) (kmsg.Response, error) {
	if err := bc.send(req); err != nil {
		return nil, err
	}
	if err := bc.flush(); err != nil {
		return nil, err
	}
	return bc.recv()
}

// prepared is a request encoded before the measured window, so that the
// load generator spends the window on the wire and on checking answers,
// the same for both sides, rather than on building requests.
type prepared struct {
	req   kmsg.Request
	frame []byte // the correlation id is filled in when sent
}

// prepare builds n requests with next, for each connection. It collects
// the garbage of building them before returning, so that the collector
// does not do it inside the measured window.
func prepare(conns, n int, next func(conn, i int) kmsg.Request) [][]prepared {
	out := make([][]prepared, conns)
	for c := range out {
		out[c] = make([]prepared, n)
		for i := range out[c] {
			req := next(c, i)
			out[c][i] = prepared{req, requestFrame(req, 0)}
		}
	}
	runtime.GC()
	return out
}

func (bc *benchConn) sendPrepared(p prepared) error {
	bc.corr++
	bc.queued = append(bc.queued, p.req)
	// size, key, version, then the correlation id
	binary.BigEndian.PutUint32(p.frame[8:], uint32(bc.corr))
	_, err := bc.w.Write(p.frame)
	return err
}

// pipeline sends reqs, keeping up to window of them in flight, and checks
// every response.
func (bc *benchConn) pipeline(reqs []prepared, window int, check func(kmsg.Response) error) error {
	n := len(reqs)
	sent := 0
	for got := 0; got < n; got++ {
		for sent < n && sent-got < window {
			if err := bc.sendPrepared(reqs[sent]); err != nil {
				return err
			}
			sent++
		}
		// Flush only before waiting for the server, so that requests
		// sent while answers were already buffered share a write.
		if bc.r.Buffered() == 0 {
			if err := bc.flush(); err != nil {
				return err
			}
		}
		resp, err := bc.recv()
		if err != nil {
			return err
		}
		if err := check(resp); err != nil {
			return err
		}
	}
	return nil
}

// parallel runs fn for every connection at once and returns how long they
// took together and the first error.
func parallel(conns []*benchConn, fn func(i int, c *benchConn) error) (time.Duration, error) {
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i, c)
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

func armAll(conns []*benchConn) {
	for _, c := range conns {
		c.arm()
	}
}

// Classic-protocol requests as a consumer subscribed to benchGroupTop sends
// them.

var benchSubscription = (&kmsg.ConsumerMemberMetadata{Version: 0, Topics: []string{benchGroupTop}}).AppendTo(nil)

func benchJoin(group, memberID string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 9
	req.Group = group
	req.MemberID = memberID
	req.SessionTimeoutMillis = benchSessionMs
	req.RebalanceTimeoutMillis = benchRebalanceMs
	req.ProtocolType = "consumer"
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", benchSubscription
	req.Protocols = []kmsg.JoinGroupRequestProtocol{p}
	return req
}

func benchSync(group, memberID string, gen int32, assignments []kmsg.SyncGroupRequestGroupAssignment) *kmsg.SyncGroupRequest {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = 5
	req.Group = group
	req.MemberID = memberID
	req.Generation = gen
	req.ProtocolType = kmsg.StringPtr("consumer")
	req.Protocol = kmsg.StringPtr("range")
	req.GroupAssignment = assignments
	return req
}

// assignOnePartitionEach gives each member its own partition of
// benchGroupTop, numbered by position. The coordinator stores and hands
// out assignments without reading them, so the numbers need not exist.
func assignOnePartitionEach(members []kmsg.JoinGroupResponseMember) []kmsg.SyncGroupRequestGroupAssignment {
	out := make([]kmsg.SyncGroupRequestGroupAssignment, len(members))
	for i, m := range members {
		t := kmsg.NewConsumerMemberAssignmentTopic()
		t.Topic, t.Partitions = benchGroupTop, []int32{int32(i)}
		a := kmsg.ConsumerMemberAssignment{Version: 0, Topics: []kmsg.ConsumerMemberAssignmentTopic{t}}
		out[i] = kmsg.SyncGroupRequestGroupAssignment{MemberID: m.MemberID, MemberAssignment: a.AppendTo(nil)}
	}
	return out
}

const errMemberIDRequired = 79

// joinForID sends the first JoinGroup of a new member and returns the id
// the coordinator hands out with MEMBER_ID_REQUIRED (KIP-394).
func joinForID(c *benchConn, group string) (string, error) {
	resp, err := c.do(benchJoin(group, ""))
	if err != nil {
		return "", err
	}
	jr := resp.(*kmsg.JoinGroupResponse)
	if jr.ErrorCode != errMemberIDRequired || jr.MemberID == "" {
		return "", fmt.Errorf("first join: error %d, member id %q; want MEMBER_ID_REQUIRED with an id", jr.ErrorCode, jr.MemberID)
	}
	return jr.MemberID, nil
}

// finishJoinAndSync reads the answer to a JoinGroup already sent on c and
// then syncs: the leader with an assignment for every member. It returns
// the generation and when the SyncGroup answer arrived.
func finishJoinAndSync(c *benchConn, group string) (int32, time.Time, error) {
	resp, err := c.recv()
	if err != nil {
		return 0, time.Time{}, err
	}
	jr := resp.(*kmsg.JoinGroupResponse)
	if jr.ErrorCode != 0 {
		return 0, time.Time{}, fmt.Errorf("join %s: error %d", group, jr.ErrorCode)
	}
	var assignments []kmsg.SyncGroupRequestGroupAssignment
	if jr.LeaderID == jr.MemberID {
		assignments = assignOnePartitionEach(jr.Members)
	}
	resp, err = c.do(benchSync(group, jr.MemberID, jr.Generation, assignments))
	if err != nil {
		return 0, time.Time{}, err
	}
	done := time.Now()
	sr := resp.(*kmsg.SyncGroupResponse)
	if sr.ErrorCode != 0 {
		return 0, time.Time{}, fmt.Errorf("sync %s: error %d", group, sr.ErrorCode)
	}
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(sr.MemberAssignment); err != nil || len(a.Topics) != 1 {
		return 0, time.Time{}, fmt.Errorf("sync %s: bad assignment %x (%v)", group, sr.MemberAssignment, err)
	}
	return jr.Generation, done, nil
}

func describeMembers(ctl *benchConn, group string) (int, string, error) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Version = 5
	req.Groups = []string{group}
	resp, err := ctl.do(req)
	if err != nil {
		return 0, "", err
	}
	gs := resp.(*kmsg.DescribeGroupsResponse).Groups
	if len(gs) != 1 || gs[0].ErrorCode != 0 {
		return 0, "", fmt.Errorf("describe %s: %+v", group, gs)
	}
	return len(gs[0].Members), gs[0].State, nil
}

type benchMember struct {
	group string
	id    string
	gen   int32
}

// formGroup builds a stable group with one member per connection such that
// a single join phase collects every member:
//
//  1. the first member joins (MEMBER_ID_REQUIRED, then again with its id)
//     and gets generation 1 alone; it does not sync;
//  2. every other member gets its id, then joins with it, which starts a
//     rebalance that parks all those joins because the first member has
//     not rejoined; ctl polls DescribeGroups until all are in the group;
//  3. the first member rejoins: that last JoinGroup completes the join
//     phase, the leader syncs with an assignment for everyone, the
//     followers sync.
//
// It returns the members and the time from sending the last JoinGroup to
// the last SyncGroup answer. If b is not nil its timer runs only for that
// window.
func formGroup(b *testing.B, ctl *benchConn, conns []*benchConn, group string) ([]benchMember, time.Duration, error) {
	n := len(conns)
	ids := make([]string, n)
	first := conns[0]
	var err error
	if ids[0], err = joinForID(first, group); err != nil {
		return nil, 0, err
	}
	resp, err := first.do(benchJoin(group, ids[0]))
	if err != nil {
		return nil, 0, err
	}
	if jr := resp.(*kmsg.JoinGroupResponse); jr.ErrorCode != 0 || jr.Generation != 1 {
		return nil, 0, fmt.Errorf("first member's join: error %d, generation %d", jr.ErrorCode, jr.Generation)
	}
	if n == 1 {
		// Alone in the group: the leader of generation 1 syncs directly.
		jr := resp.(*kmsg.JoinGroupResponse)
		sresp, err := first.do(benchSync(group, ids[0], jr.Generation, assignOnePartitionEach(jr.Members)))
		if err != nil {
			return nil, 0, err
		}
		if ec := sresp.(*kmsg.SyncGroupResponse).ErrorCode; ec != 0 {
			return nil, 0, fmt.Errorf("sync %s: error %d", group, ec)
		}
		return []benchMember{{group, ids[0], jr.Generation}}, 0, nil
	}
	if _, err := parallel(conns[1:], func(i int, c *benchConn) error {
		id, err := joinForID(c, group)
		ids[i+1] = id
		return err
	}); err != nil {
		return nil, 0, err
	}
	for i := 1; i < n; i++ {
		if err := conns[i].send(benchJoin(group, ids[i])); err != nil {
			return nil, 0, err
		}
		if err := conns[i].flush(); err != nil {
			return nil, 0, err
		}
	}
	gens := make([]int32, n)
	ends := make([]time.Time, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gens[i], ends[i], errs[i] = finishJoinAndSync(conns[i], group)
		}()
	}
	for deadline := time.Now().Add(benchIOTimeout); ; {
		got, _, err := describeMembers(ctl, group)
		if err != nil || got == n {
			if err != nil {
				return nil, 0, err // parked goroutines end when the test closes their connections
			}
			break
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("%s: only %d of %d members joined", group, got, n)
		}
		time.Sleep(time.Millisecond)
	}

	if b != nil {
		b.StartTimer()
	}
	start := time.Now()
	if err := first.send(benchJoin(group, ids[0])); err != nil {
		return nil, 0, err
	}
	if err := first.flush(); err != nil {
		return nil, 0, err
	}
	gens[0], ends[0], errs[0] = finishJoinAndSync(first, group)
	wg.Wait()
	var last time.Time
	for _, e := range ends {
		if e.After(last) {
			last = e
		}
	}
	elapsed := last.Sub(start)
	if b != nil {
		b.StopTimer()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	members := make([]benchMember, n)
	for i := range members {
		if gens[i] != gens[0] {
			return nil, 0, fmt.Errorf("%s: member %d synced generation %d, member 0 generation %d", group, i, gens[i], gens[0])
		}
		members[i] = benchMember{group, ids[i], gens[i]}
	}
	return members, elapsed, nil
}

// leaveAll removes every member in one batch LeaveGroup, so that finished
// groups do not expire in the background of later measurements.
func leaveAll(ctl *benchConn, members []benchMember) error {
	if len(members) == 0 {
		return nil
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version = 5
	req.Group = members[0].group
	for _, m := range members {
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID = m.id
		req.Members = append(req.Members, lm)
	}
	resp, err := ctl.do(req)
	if err != nil {
		return err
	}
	lr := resp.(*kmsg.LeaveGroupResponse)
	if lr.ErrorCode != 0 {
		return fmt.Errorf("leave %s: error %d", req.Group, lr.ErrorCode)
	}
	for _, m := range lr.Members {
		if m.ErrorCode != 0 {
			return fmt.Errorf("leave %s member %s: error %d", req.Group, m.MemberID, m.ErrorCode)
		}
	}
	return nil
}

// BenchmarkRebalance1000 measures one join phase of a 1,000-member group,
// from sending the JoinGroup that completes it to the last member's
// SyncGroup answer, and reports milliseconds per rebalance on each side and
// groupd/kfake (below 1 means groupd is faster). Each member has its own
// connection because a parked JoinGroup holds up its connection.
func BenchmarkRebalance1000(b *testing.B) {
	targets, settle := groupBenchTargets(b, partition.SyncNever)
	type side struct {
		ctl   *benchConn
		conns []*benchConn
	}
	sides := make(map[string]side)
	for _, t := range targets {
		sides[t.name] = side{dialBench(b, t.addr), dialBenchN(b, t.addr, rebalanceMembers)}
	}
	elapsed := make(map[string]time.Duration)
	b.ResetTimer()
	b.StopTimer()
	for i := range b.N {
		for _, t := range inTurn(targets, i) {
			settle(t.name)
			s := sides[t.name]
			s.ctl.arm()
			armAll(s.conns)
			group := fmt.Sprintf("rebalance-%d", i)
			members, d, err := formGroup(b, s.ctl, s.conns, group)
			if err != nil {
				b.Fatalf("%s: %v", t.name, err)
			}
			elapsed[t.name] += d
			if err := leaveAll(s.ctl, members); err != nil {
				b.Fatalf("%s: %v", t.name, err)
			}
		}
	}
	g := elapsed[targets[0].name].Seconds() * 1000 / float64(b.N)
	k := elapsed["kfake"].Seconds() * 1000 / float64(b.N)
	b.ReportMetric(g, targets[0].name+"-ms")
	b.ReportMetric(k, "kfake-ms")
	b.ReportMetric(g/k, "ratio")
	reportHTTPCost(b, elapsed)
}

// formGroups builds count groups of size members each, several at a time.
func formGroups(b *testing.B, addr, prefix string, count, size int) []benchMember {
	const workers = 10
	var (
		mu  sync.Mutex
		all []benchMember
	)
	ctls := dialBenchN(b, addr, workers)
	memberConns := make([][]*benchConn, workers)
	for w := range memberConns {
		memberConns[w] = dialBenchN(b, addr, size)
	}
	_, err := parallel(ctls, func(w int, ctl *benchConn) error {
		ctl.arm()
		conns := memberConns[w]
		armAll(conns)
		for g := w; g < count; g += workers {
			members, _, err := formGroup(nil, ctl, conns, fmt.Sprintf("%s-%d", prefix, g))
			if err != nil {
				return err
			}
			mu.Lock()
			all = append(all, members...)
			mu.Unlock()
		}
		return nil
	})
	for w, c := range ctls {
		c.c.Close()
		for _, mc := range memberConns[w] {
			mc.c.Close()
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].group != all[j].group {
			return all[i].group < all[j].group
		}
		return all[i].id < all[j].id
	})
	return all
}

// BenchmarkHeartbeats measures Heartbeat v4 throughput for the members of
// stable groups, spread over concurrent connections that each keep several
// heartbeats in flight, and reports heartbeats per second on each side and
// groupd/kfake (above 1 means groupd is faster).
func BenchmarkHeartbeats(b *testing.B) {
	targets, settle := groupBenchTargets(b, partition.SyncNever)
	members := make(map[string][]benchMember)
	conns := make(map[string][]*benchConn)
	for _, t := range targets {
		members[t.name] = formGroups(b, t.addr, "hb", hbGroups, hbGroupSize)
		conns[t.name] = dialBenchN(b, t.addr, hbConns)
	}
	perConn := hbPerOp / benchRounds / hbConns
	run := func(name string) time.Duration {
		ms := members[name]
		reqs := prepare(hbConns, perConn, func(ci, i int) kmsg.Request {
			m := ms[(ci+i*hbConns)%len(ms)]
			req := kmsg.NewPtrHeartbeatRequest()
			req.Version = 4
			req.Group, req.MemberID, req.Generation = m.group, m.id, m.gen
			return req
		})
		settle(name)
		armAll(conns[name])
		d, err := parallel(conns[name], func(ci int, c *benchConn) error {
			return c.pipeline(reqs[ci], hbWindow, func(resp kmsg.Response) error {
				if ec := resp.(*kmsg.HeartbeatResponse).ErrorCode; ec != 0 {
					return fmt.Errorf("heartbeat: error %d", ec)
				}
				return nil
			})
		})
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		return d
	}
	for _, t := range targets {
		run(t.name) // warm up
	}
	elapsed := make(map[string]time.Duration)
	b.ResetTimer()
	for round := range b.N * benchRounds {
		for _, t := range inTurn(targets, round) {
			elapsed[t.name] += run(t.name)
		}
	}
	b.StopTimer()
	reportRate(b, targets[0].name, elapsed, float64(b.N*benchRounds*perConn*hbConns), "hb/s")
}

func reportRate(b *testing.B, name string, elapsed map[string]time.Duration, n float64, unit string) {
	g := n / elapsed[name].Seconds()
	k := n / elapsed["kfake"].Seconds()
	b.ReportMetric(g, name+"-"+unit)
	b.ReportMetric(k, "kfake-"+unit)
	b.ReportMetric(g/k, "ratio")
	reportHTTPCost(b, elapsed)
}

// benchmarkCommits measures simple-group OffsetCommit v9 throughput (no
// members: generation -1, empty member id) over commitGroups groups, each
// commit carrying commitParts partitions, with window commits in flight on
// each connection, and reports committed partitions per second on each
// side and groupd/kfake (above 1 means groupd is faster).
func benchmarkCommits(b *testing.B, sync partition.SyncPolicy, window int) {
	targets, settle := groupBenchTargets(b, sync)
	conns := make(map[string][]*benchConn)
	for _, t := range targets {
		conns[t.name] = dialBenchN(b, t.addr, commitConns)
	}
	perConn := commitsPerOp / benchRounds / commitConns
	var offset int64
	run := func(name string, n int) time.Duration {
		offset++
		at := offset
		reqs := prepare(commitConns, n, func(ci, i int) kmsg.Request {
			req := kmsg.NewPtrOffsetCommitRequest()
			req.Version = 9
			req.Group = fmt.Sprintf("commit-%d", (ci+i*commitConns)%commitGroups)
			req.Generation = -1
			t := kmsg.NewOffsetCommitRequestTopic()
			t.Topic = benchGroupTop
			for p := range int32(commitParts) {
				rp := kmsg.NewOffsetCommitRequestTopicPartition()
				rp.Partition = p
				rp.Offset = at*int64(perConn) + int64(i)
				rp.LeaderEpoch = -1
				t.Partitions = append(t.Partitions, rp)
			}
			req.Topics = []kmsg.OffsetCommitRequestTopic{t}
			return req
		})
		settle(name)
		armAll(conns[name])
		d, err := parallel(conns[name], func(ci int, c *benchConn) error {
			return c.pipeline(reqs[ci], window, func(resp kmsg.Response) error {
				cr := resp.(*kmsg.OffsetCommitResponse)
				np := 0
				for _, t := range cr.Topics {
					for _, p := range t.Partitions {
						if p.ErrorCode != 0 {
							return fmt.Errorf("commit %s[%d]: error %d", t.Topic, p.Partition, p.ErrorCode)
						}
						np++
					}
				}
				if np != commitParts {
					return fmt.Errorf("commit answered %d partitions, want %d", np, commitParts)
				}
				return nil
			})
		})
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		return d
	}
	for _, t := range targets {
		run(t.name, commitGroups/commitConns+1) // create every group, warm up
	}
	elapsed := make(map[string]time.Duration)
	b.ResetTimer()
	for round := range b.N * benchRounds {
		for _, t := range inTurn(targets, round) {
			elapsed[t.name] += run(t.name, perConn)
		}
	}
	b.StopTimer()
	reportRate(b, targets[0].name, elapsed, float64(b.N*benchRounds*perConn*commitConns*commitParts), "partitions/s")
}

// BenchmarkCommits runs each fsync policy at two loads: 4 commits in flight
// per connection (128 in all), where a server's rate follows its latency,
// and 16 (512 in all), enough to keep either server busy, where the rate
// is its capacity. kfake serves every request on one goroutine and is
// already at its capacity at the lower load.
func BenchmarkCommits(b *testing.B) {
	for _, sync := range []partition.SyncPolicy{partition.SyncNever, partition.SyncAlways} {
		for _, window := range []int{4, 16} {
			b.Run(fmt.Sprintf("fsync=%s/inflight=%d", sync, window), func(b *testing.B) {
				benchmarkCommits(b, sync, window)
			})
		}
	}
}
