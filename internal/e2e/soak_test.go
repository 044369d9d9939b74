package e2e

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The soak test is a long run outside the default test set:
//
//	go test ./internal/e2e -run TestSoak -soak=30m -timeout 0 -v
var (
	soakFor        = flag.Duration("soak", 0, "run TestSoak for this long (e.g. 30m); 0 skips it")
	soakKillEvery  = flag.Duration("soak-kill-every", 0, "kill -9 groupd this often in TestSoak; 0 means min(5m, soak/3), negative never")
	soakChurnEvery = flag.Duration("soak-churn-every", 3*time.Second, "one member joins, leaves or is killed this often in TestSoak")
	soakRate       = flag.Int("soak-rate", 400, "records per second produced in TestSoak")
	soakGroups     = flag.Int("soak-groups", 20, "consumer groups in TestSoak")
	soakSeed       = flag.Uint64("soak-seed", 0, "seed for TestSoak's churn choices; 0 picks one")
)

const (
	soakTopics       = 4
	soakPartitions   = 6
	soakMaxMembers   = 4 // per group; churn keeps 1..soakMaxMembers
	soakStartMembers = 2
	soakSampleEvery  = 5 * time.Second
	soakValuePad     = 100
)

// soakTP names one partition; soakGTP one group's partition.
type soakTP struct {
	topic     string
	partition int32
}

type soakGTP struct {
	group string
	soakTP
}

func (tp soakTP) String() string { return fmt.Sprintf("%s/%d", tp.topic, tp.partition) }
func (g soakGTP) String() string { return g.group + " " + g.soakTP.String() }

func soakTopic(i int) string { return fmt.Sprintf("soak-%d", i) }
func soakGroup(i int) string { return fmt.Sprintf("soak-group-%02d", i) }

// Record number seq is produced with key seq and a value that repeats it,
// so a record read back is checked by both.
func soakKey(seq int64) []byte { return strconv.AppendInt(nil, seq, 10) }
func soakValue(seq int64) []byte {
	return fmt.Appendf(nil, "soak-%d-%s", seq, strings.Repeat("x", soakValuePad))
}

func mib(kib int64) float64           { return float64(kib) / 1024 }
func soakMinutes(d time.Duration) int { return int(d / time.Minute) }

// soakAck is one produce acknowledged by groupd: the record numbered seq
// is at offset.
type soakAck struct{ offset, seq int64 }

func (a soakAck) String() string { return fmt.Sprintf("offset %d (record %d)", a.offset, a.seq) }

// soakLedger is what the clients were told: every acknowledged produce
// and, per group partition, the highest acknowledged commit.
type soakLedger struct {
	mu      sync.Mutex
	records map[soakTP][]soakAck
	commits map[soakGTP]int64

	nRecords, nCommits, produceErrs, commitErrs atomic.Int64
}

func newSoakLedger() *soakLedger {
	return &soakLedger{records: map[soakTP][]soakAck{}, commits: map[soakGTP]int64{}}
}

func (l *soakLedger) produced(r *kgo.Record, seq int64, err error) {
	if err != nil {
		l.produceErrs.Add(1)
		return
	}
	l.mu.Lock()
	tp := soakTP{r.Topic, r.Partition}
	l.records[tp] = append(l.records[tp], soakAck{r.Offset, seq})
	l.mu.Unlock()
	l.nRecords.Add(1)
}

// committed is a CommitOffsetsSync callback: a partition counts as
// committed when the reply came back and carries no error for it.
func (l *soakLedger) committed(group string, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	if err != nil {
		l.commitErrs.Add(1)
		return
	}
	sent := map[soakTP]int64{}
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			sent[soakTP{rt.Topic, rp.Partition}] = rp.Offset
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			off, ok := sent[soakTP{rt.Topic, rp.Partition}]
			if rp.ErrorCode != 0 || !ok {
				l.commitErrs.Add(1)
				continue
			}
			k := soakGTP{group, soakTP{rt.Topic, rp.Partition}}
			if cur, seen := l.commits[k]; !seen || off > cur {
				l.commits[k] = off
			}
			l.nCommits.Add(1)
		}
	}
}

// soakLostRecords compares the acknowledged produces with the partitions
// read back (offset → record number, -1 for a record whose key or value
// is not what was produced) and names every acknowledged record that is
// missing or different.
func soakLostRecords(acked map[soakTP][]soakAck, logs map[soakTP]map[int64]int64) []string {
	var lost []string
	for _, tp := range sortedKeys(acked) {
		for _, a := range acked[tp] {
			got, ok := logs[tp][a.offset]
			switch {
			case !ok:
				lost = append(lost, fmt.Sprintf("%s: %s acknowledged, not in the log", tp, a))
			case got != a.seq:
				lost = append(lost, fmt.Sprintf("%s: %s acknowledged, the log holds record %d there", tp, a, got))
			}
		}
	}
	return lost
}

// soakLostCommits names every group partition whose committed offset, read
// back, is below the highest commit acknowledged for it (committed offsets
// only move forward here: nothing resets them).
func soakLostCommits(acked, fetched map[soakGTP]int64) []string {
	var lost []string
	for _, k := range sortedKeys(acked) {
		got, ok := fetched[k]
		switch {
		case !ok:
			lost = append(lost, fmt.Sprintf("%s: commit of %d acknowledged, no committed offset now", k, acked[k]))
		case got < acked[k]:
			lost = append(lost, fmt.Sprintf("%s: commit of %d acknowledged, committed offset now %d", k, acked[k], got))
		}
	}
	return lost
}

func sortedKeys[K interface {
	comparable
	fmt.Stringer
}, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].String() < ks[j].String() })
	return ks
}

// TestSoakCheckersCatchLoss shows that the soak test's final checks fail
// when something acknowledged is missing: a dropped record, a record
// replaced by another, a commit gone back or gone altogether.
func TestSoakCheckersCatchLoss(t *testing.T) {
	tp := soakTP{"t", 0}
	acked := map[soakTP][]soakAck{tp: {{0, 10}, {1, 11}, {2, 12}}}
	whole := map[soakTP]map[int64]int64{tp: {0: 10, 1: 11, 2: 12, 3: 13}}
	if lost := soakLostRecords(acked, whole); len(lost) != 0 {
		t.Fatalf("complete log reported as lossy: %v", lost)
	}
	dropped := map[soakTP]map[int64]int64{tp: {0: 10, 2: 12}}
	if lost := soakLostRecords(acked, dropped); len(lost) != 1 || !strings.Contains(lost[0], "offset 1 (record 11)") {
		t.Errorf("dropped record: reported %v", lost)
	}
	replaced := map[soakTP]map[int64]int64{tp: {0: 10, 1: -1, 2: 12}}
	if lost := soakLostRecords(acked, replaced); len(lost) != 1 {
		t.Errorf("replaced record: reported %v", lost)
	}
	if lost := soakLostRecords(acked, map[soakTP]map[int64]int64{}); len(lost) != 3 {
		t.Errorf("missing partition: reported %v", lost)
	}

	g := soakGTP{"g", tp}
	h := soakGTP{"h", tp}
	commits := map[soakGTP]int64{g: 5, h: 7}
	if lost := soakLostCommits(commits, map[soakGTP]int64{g: 5, h: 9}); len(lost) != 0 {
		t.Fatalf("kept commits reported as lost: %v", lost)
	}
	if lost := soakLostCommits(commits, map[soakGTP]int64{g: 4, h: 7}); len(lost) != 1 || !strings.Contains(lost[0], "now 4") {
		t.Errorf("commit gone back: reported %v", lost)
	}
	if lost := soakLostCommits(commits, map[soakGTP]int64{g: 5}); len(lost) != 1 {
		t.Errorf("commit gone: reported %v", lost)
	}

	// The ledger counts only what the reply acknowledged.
	l := newSoakLedger()
	req := kmsg.NewPtrOffsetCommitRequest()
	resp := kmsg.NewPtrOffsetCommitResponse()
	for p, off := range []int64{3, 8} {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = int32(p), off
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic = "t"
		sp := kmsg.NewOffsetCommitResponseTopicPartition()
		sp.Partition = int32(p)
		if p == 1 {
			sp.ErrorCode = 22 // ILLEGAL_GENERATION
		}
		st.Partitions = append(st.Partitions, sp)
		resp.Topics = append(resp.Topics, st)
	}
	l.committed("g", req, resp, nil)
	l.committed("g", req, resp, fmt.Errorf("connection reset"))
	if want := map[soakGTP]int64{g: 3}; len(l.commits) != 1 || l.commits[g] != want[g] {
		t.Errorf("ledger commits %v, want %v", l.commits, want)
	}
}

// countingDialer counts the clients' open connections to groupd, so that
// groupd's socket count can be compared with what is really connected.
type countingDialer struct{ open atomic.Int64 }

type countedConn struct {
	net.Conn
	once sync.Once
	d    *countingDialer
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.d.open.Add(-1) })
	return c.Conn.Close()
}

func (d *countingDialer) wrap(dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		d.open.Add(1)
		return &countedConn{Conn: c, d: d}, nil
	}
}

// soakMember is one consumer: it polls, counts and commits what it polled
// (at most once a second, and on every revoke), recording acknowledged
// commits in the ledger.
type soakMember struct {
	name   string
	cl     *kgo.Client
	kd     *killDialer
	cancel context.CancelFunc
	done   chan struct{}
}

func startSoakMember(addr string, group, topic int, name string, cd *countingDialer, ledger *soakLedger, consumed *atomic.Int64) (*soakMember, error) {
	kd := &killDialer{}
	gname := soakGroup(group)
	commit := func(ctx context.Context, cl *kgo.Client) {
		cl.CommitOffsetsSync(ctx, cl.UncommittedOffsets(), func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if len(req.Topics) > 0 || err != nil {
				ledger.committed(gname, req, resp, err)
			}
		})
	}
	balancers := []kgo.GroupBalancer{kgo.RangeBalancer(), kgo.CooperativeStickyBalancer(), kgo.RoundRobinBalancer()}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addr),
		kgo.ClientID(name),
		kgo.Dialer(cd.wrap(kd.DialContext)),
		kgo.ConsumerGroup(gname),
		kgo.ConsumeTopics(soakTopic(topic)),
		kgo.Balancers(balancers[group%len(balancers)]),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(6*time.Second),
		kgo.HeartbeatInterval(time.Second),
		kgo.RebalanceTimeout(15*time.Second),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, _ map[string][]int32) { commit(ctx, cl) }),
		kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) {}),
	)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &soakMember{name: name, cl: cl, kd: kd, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		var lastCommit time.Time
		for {
			fs := cl.PollRecords(ctx, 1000)
			if ctx.Err() != nil || fs.IsClientClosed() {
				return
			}
			consumed.Add(int64(fs.NumRecords()))
			if time.Since(lastCommit) >= time.Second {
				commit(ctx, cl)
				lastCommit = time.Now()
			}
		}
	}()
	return m, nil
}

// leave stops polling and closes the client: its revoke callback commits
// what it polled, then it sends LeaveGroup.
func (m *soakMember) leave() {
	m.cancel()
	<-m.done
	m.cl.Close()
}

// kill makes the member vanish: its connections drop and no LeaveGroup
// reaches groupd, which notices only when the session times out.
func (m *soakMember) kill() {
	m.kd.kill()
	m.cancel()
	<-m.done
	m.cl.Close()
}

// soakSample is one reading of groupd's process and of the workload.
type soakSample struct {
	at                 time.Duration
	life               int // which groupd process: 0 first, +1 per kill
	rssKiB             int64
	fileFDs, sockFDs   int
	clientConns        int64
	members            int
	records, commits   int64
	consumed, churning int64
}

// readProc returns a process's resident set and its open descriptors,
// sockets and others counted apart.
func readProc(pid int) (rssKiB int64, files, sockets int, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				rssKiB, _ = strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, e := range ents {
		target, err := os.Readlink(fdDir + "/" + e.Name())
		if err != nil {
			continue // closed since the listing
		}
		if strings.HasPrefix(target, "socket:") {
			sockets++
		} else {
			files++
		}
	}
	return rssKiB, files, sockets, nil
}

// TestSoak runs the real binary for -soak: a producer writes -soak-rate
// records a second over 4 topics, -soak-groups consumer groups read them
// and commit, one member somewhere joins, leaves or is killed every
// -soak-churn-every, and groupd itself is killed with SIGKILL and
// restarted on the same data dir and port every -soak-kill-every. At the
// end everything stops, groupd is killed once more and restarted, and
// then every acknowledged record must be read back at its offset and every
// acknowledged commit must be at or below the group's committed offset.
// groupd's RSS and open descriptors are sampled throughout and printed per
// minute; after the first minutes they must stay within bounds of the
// level they reached then.
func TestSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("a long run: go test ./internal/e2e -run TestSoak -soak=30m -timeout 0 -v")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc to sample groupd's memory and descriptors")
	}
	total := *soakFor
	killEvery := *soakKillEvery
	if killEvery == 0 {
		killEvery = min(5*time.Minute, total/3)
	}
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	warmup := min(2*time.Minute, total/3)
	t.Logf("soak %v: kill -9 every %v, churn every %v, %d records/s, %d groups, seed %d",
		total, killEvery, *soakChurnEvery, *soakRate, *soakGroups, seed)

	dir := t.TempDir()
	p := startGroupd(t, dir, "127.0.0.1:0")
	addr := p.addr
	var pid atomic.Int64
	pid.Store(int64(p.cmd.Process.Pid))
	for i := range soakTopics {
		createTopic(t, addr, soakTopic(i), soakPartitions)
	}

	ledger := newSoakLedger()
	cd := &countingDialer{}
	begin := time.Now()
	var life atomic.Int64

	// Producer.
	prodCl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.Dialer(cd.wrap((&net.Dialer{}).DialContext)),
		kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer prodCl.Close()
	stopProducing := make(chan struct{})
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		const tick = 50 * time.Millisecond
		perTick := max(1, *soakRate*int(tick)/int(time.Second))
		tk := time.NewTicker(tick)
		defer tk.Stop()
		var seq int64
		for {
			select {
			case <-stopProducing:
				return
			case <-tk.C:
			}
			for range perTick {
				s := seq
				seq++
				r := &kgo.Record{Topic: soakTopic(int(s % soakTopics)), Key: soakKey(s), Value: soakValue(s)}
				prodCl.Produce(context.Background(), r, func(r *kgo.Record, err error) { ledger.produced(r, s, err) })
			}
		}
	}()

	// Consumers and churn.
	var (
		membersMu sync.Mutex
		members   = make([][]*soakMember, *soakGroups)
		nMembers  atomic.Int64
		consumed  atomic.Int64
		churned   atomic.Int64
		joins     int
		leaves    int
		kills     int
		closers   sync.WaitGroup
		startErrs atomic.Int64
		memberSeq int
	)
	addMember := func(g int) {
		memberSeq++
		m, err := startSoakMember(addr, g, g%soakTopics, fmt.Sprintf("g%02d-m%d", g, memberSeq), cd, ledger, &consumed)
		if err != nil {
			startErrs.Add(1)
			t.Logf("start member of group %d: %v", g, err)
			return
		}
		members[g] = append(members[g], m)
		nMembers.Add(1)
	}
	membersMu.Lock()
	for g := range *soakGroups {
		for range soakStartMembers {
			addMember(g)
		}
	}
	membersMu.Unlock()
	stopChurn := make(chan struct{})
	churnDone := make(chan struct{})
	go func() {
		defer close(churnDone)
		rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
		tk := time.NewTicker(*soakChurnEvery)
		defer tk.Stop()
		for {
			select {
			case <-stopChurn:
				return
			case <-tk.C:
			}
			membersMu.Lock()
			g := rng.IntN(*soakGroups)
			n := len(members[g])
			action := rng.IntN(3) // 0 join, 1 clean leave, 2 unclean kill
			if n <= 1 {
				action = 0
			} else if n >= soakMaxMembers && action == 0 {
				action = 1 + rng.IntN(2)
			}
			if action == 0 {
				addMember(g)
				joins++
			} else {
				i := rng.IntN(n)
				m := members[g][i]
				members[g] = append(members[g][:i], members[g][i+1:]...)
				nMembers.Add(-1)
				closers.Add(1)
				if action == 1 {
					leaves++
					go func() { defer closers.Done(); m.leave() }()
				} else {
					kills++
					go func() { defer closers.Done(); m.kill() }()
				}
			}
			membersMu.Unlock()
			churned.Add(1)
		}
	}()

	// Sampler.
	var (
		samplesMu sync.Mutex
		samples   []soakSample
	)
	stopSampling := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		tk := time.NewTicker(soakSampleEvery)
		defer tk.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tk.C:
			}
			rss, files, socks, err := readProc(int(pid.Load()))
			if err != nil {
				continue // between a kill and the restart
			}
			s := soakSample{
				at: time.Since(begin), life: int(life.Load()), rssKiB: rss, fileFDs: files, sockFDs: socks,
				clientConns: cd.open.Load(), members: int(nMembers.Load()),
				records: ledger.nRecords.Load(), commits: ledger.nCommits.Load(),
				consumed: consumed.Load(), churning: churned.Load(),
			}
			samplesMu.Lock()
			samples = append(samples, s)
			samplesMu.Unlock()
		}
	}()

	// Kills, on the test goroutine: startGroupd may fail the test. Each
	// process's share of the workload is counted from the ledger's totals
	// at its start.
	type lifetime struct {
		pid               int
		from, restartTook time.Duration
		records, commits  int64 // acknowledged before it started
	}
	lives := []lifetime{{pid: p.cmd.Process.Pid}}
	restart := func() {
		p.signal(syscall.SIGKILL)
		<-p.exited
		killedAt := time.Now()
		life.Add(1)
		p = startGroupd(t, dir, addr)
		pid.Store(int64(p.cmd.Process.Pid))
		l := lifetime{pid: p.cmd.Process.Pid, from: time.Since(begin), restartTook: time.Since(killedAt),
			records: ledger.nRecords.Load(), commits: ledger.nCommits.Load()}
		lives = append(lives, l)
		t.Logf("%v: kill -9, restarted as pid %d in %v; %d records and %d commits acknowledged so far",
			l.from.Round(time.Second), l.pid, l.restartTook.Round(time.Millisecond), l.records, l.commits)
	}
	end := begin.Add(total)
	if killEvery > 0 {
		for next := begin.Add(killEvery); next.Before(end); next = next.Add(killEvery) {
			time.Sleep(time.Until(next))
			restart()
		}
	}
	time.Sleep(time.Until(end))

	// Wind down: no more churn or produce; members leave cleanly (their
	// last commits are acknowledged or not, and recorded either way).
	close(stopChurn)
	<-churnDone
	close(stopProducing)
	<-producerDone
	flushCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if err := prodCl.Flush(flushCtx); err != nil {
		t.Errorf("producer flush: %v", err)
	}
	cancel()
	membersMu.Lock()
	for g := range members {
		for _, m := range members[g] {
			closers.Add(1)
			go func() { defer closers.Done(); m.leave() }()
		}
		members[g] = nil
	}
	membersMu.Unlock()
	closed := make(chan struct{})
	go func() { closers.Wait(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Minute):
		t.Logf("some members still closing after 2m; going on")
	}
	// Each process must have done real work, or the run proves little.
	lives = append(lives, lifetime{records: ledger.nRecords.Load(), commits: ledger.nCommits.Load()})
	for i, l := range lives[:len(lives)-1] {
		records, commits := lives[i+1].records-l.records, lives[i+1].commits-l.commits
		t.Logf("groupd process %d (pid %d) from %v: %d records and %d commits acknowledged", i, l.pid, l.from.Round(time.Second), records, commits)
		if records == 0 || commits == 0 {
			t.Errorf("groupd process %d (pid %d) from %v: the workload stalled", i, l.pid, l.from.Round(time.Second))
		}
	}
	lives = lives[:len(lives)-1]
	t.Logf("workload: %d records acknowledged (%d produce errors), %d partition commits acknowledged (%d failed), %d records consumed; churn %d joins, %d clean leaves, %d kills (%d member start errors)",
		ledger.nRecords.Load(), ledger.produceErrs.Load(), ledger.nCommits.Load(), ledger.commitErrs.Load(), consumed.Load(),
		joins, leaves, kills, startErrs.Load())

	// The last crash, then read everything back.
	restart()
	close(stopSampling)
	<-samplerDone
	logs, ends := soakReadBack(t, addr)
	fetched := soakFetchCommits(t, addr)

	ledger.mu.Lock()
	lostRecords := soakLostRecords(ledger.records, logs)
	lostCommits := soakLostCommits(ledger.commits, fetched)
	dups := soakDuplicates(logs)
	ledger.mu.Unlock()
	for i, l := range lostRecords {
		if i == 20 {
			t.Errorf("... and %d more", len(lostRecords)-20)
			break
		}
		t.Errorf("lost record: %s", l)
	}
	for i, l := range lostCommits {
		if i == 20 {
			t.Errorf("... and %d more", len(lostCommits)-20)
			break
		}
		t.Errorf("lost commit: %s", l)
	}
	t.Logf("read back after the last restart: %d records lost, %d commits lost, %d records stored twice",
		len(lostRecords), len(lostCommits), dups)

	samplesMu.Lock()
	defer samplesMu.Unlock()
	soakReport(t, samples)
	soakCheckFlat(t, samples, warmup)

	// Every group consumed and committed, and how far behind each was
	// left when its members closed.
	var lag []string
	for g := range *soakGroups {
		group, behind := soakGroup(g), int64(0)
		committedAny := false
		for tp, end := range ends {
			if tp.topic != soakTopic(g%soakTopics) {
				continue
			}
			k := soakGTP{group, tp}
			if _, ok := ledger.commits[k]; ok {
				committedAny = true
			}
			behind += end - max(0, fetched[k])
		}
		if !committedAny {
			t.Errorf("%s: no commit acknowledged", group)
		}
		lag = append(lag, fmt.Sprintf("%s %d", group, behind))
	}
	t.Logf("lag at the end (records not committed when the members closed): %s", strings.Join(lag, ", "))
}

// soakReadBack reads every partition of the soak topics from the start to
// its end offset and returns, per partition, the record number at each
// offset (-1 where the key or value is not one the producer wrote) and the
// end offset.
func soakReadBack(t *testing.T, addr string) (map[soakTP]map[int64]int64, map[soakTP]int64) {
	t.Helper()
	adm := kadm.NewClient(newClient(t, addr))
	topics := make([]string, soakTopics)
	for i := range topics {
		topics[i] = soakTopic(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	ends, err := adm.ListEndOffsets(ctx, topics...)
	cancel()
	if err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	want := map[soakTP]int64{}
	offsets := map[string]map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		want[soakTP{o.Topic, o.Partition}] = o.Offset
		if offsets[o.Topic] == nil {
			offsets[o.Topic] = map[int32]kgo.Offset{}
		}
		offsets[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
	})
	cl := newClient(t, addr, kgo.ConsumePartitions(offsets), kgo.FetchMaxBytes(16<<20))
	logs := map[soakTP]map[int64]int64{}
	next := map[soakTP]int64{}
	done := func() bool {
		for tp, end := range want {
			if next[tp] < end {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(5 * time.Minute)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("read back: partitions not read to their end in 5m: read %v, end %v", next, want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachError(func(topic string, p int32, err error) {
			if err != context.DeadlineExceeded {
				t.Fatalf("read back %s/%d: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			tp := soakTP{r.Topic, r.Partition}
			if logs[tp] == nil {
				logs[tp] = map[int64]int64{}
			}
			seq, err := strconv.ParseInt(string(r.Key), 10, 64)
			if err != nil || string(r.Value) != string(soakValue(seq)) {
				seq = -1
			}
			logs[tp][r.Offset] = seq
			next[tp] = max(next[tp], r.Offset+1)
		})
	}
	return logs, want
}

// soakFetchCommits reads every soak group's committed offsets.
func soakFetchCommits(t *testing.T, addr string) map[soakGTP]int64 {
	t.Helper()
	adm := kadm.NewClient(newClient(t, addr))
	out := map[soakGTP]int64{}
	for g := range *soakGroups {
		group := soakGroup(g)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := adm.FetchOffsets(ctx, group)
		cancel()
		if err != nil {
			t.Fatalf("fetch offsets of %s: %v", group, err)
		}
		resp.Each(func(o kadm.OffsetResponse) {
			if o.Err != nil {
				t.Errorf("fetch offsets of %s %s/%d: %v", group, o.Topic, o.Partition, o.Err)
				return
			}
			out[soakGTP{group, soakTP{o.Topic, o.Partition}}] = o.At
		})
	}
	return out
}

// soakDuplicates counts records that a partition holds at more than one
// offset (an idempotent producer's retry written twice).
func soakDuplicates(logs map[soakTP]map[int64]int64) int {
	n := 0
	for _, log := range logs {
		seen := make(map[int64]bool, len(log))
		for _, seq := range log {
			if seq >= 0 && seen[seq] {
				n++
			}
			seen[seq] = true
		}
	}
	return n
}

// soakReport prints one line per minute: groupd's highest RSS and
// descriptor counts in that minute, and the workload's totals at its end.
func soakReport(t *testing.T, samples []soakSample) {
	var b strings.Builder
	fmt.Fprintf(&b, "%6s %7s %8s %5s %9s %9s %8s %8s %9s %9s %9s %6s\n",
		"minute", "groupd", "rss_MiB", "fds", "file_fds", "sock_fds", "clients", "members", "records", "commits", "consumed", "churn")
	for i := 0; i < len(samples); {
		m := soakMinutes(samples[i].at)
		row, fds := samples[i], 0
		for ; i < len(samples) && soakMinutes(samples[i].at) == m; i++ {
			s := samples[i]
			row.rssKiB = max(row.rssKiB, s.rssKiB)
			fds = max(fds, s.fileFDs+s.sockFDs)
			row.fileFDs = max(row.fileFDs, s.fileFDs)
			row.sockFDs = max(row.sockFDs, s.sockFDs)
			row.clientConns = max(row.clientConns, s.clientConns)
			row.life, row.members, row.records, row.commits, row.consumed, row.churning = s.life, s.members, s.records, s.commits, s.consumed, s.churning
		}
		fmt.Fprintf(&b, "%6d %7d %8.1f %5d %9d %9d %8d %8d %9d %9d %9d %6d\n",
			m, row.life, mib(row.rssKiB), fds, row.fileFDs, row.sockFDs, row.clientConns, row.members, row.records, row.commits, row.consumed, row.churning)
	}
	t.Logf("per minute (groupd = process number, +1 per kill -9; rss and fds are the minute's highest):\n%s", b.String())
}

// Bounds for "flat": after the warm-up, RSS stays within twice its level
// then plus 64 MiB, files within twice theirs plus 32, and groupd holds at
// most 64 sockets more than the clients hold connections (a leak of one
// socket per closed connection passes that within a minute of churn).
const (
	soakRSSSlackKiB  = 64 << 10
	soakFileSlack    = 32
	soakSocketExcess = 64
)

// soakCheckFlat fails the test when groupd's memory or descriptors keep
// growing after the warm-up: the baseline is the highest reading in the
// minute after it.
func soakCheckFlat(t *testing.T, samples []soakSample, warmup time.Duration) {
	var baseRSS int64
	var baseFiles int
	for _, s := range samples {
		if s.at >= warmup && s.at < warmup+time.Minute {
			baseRSS = max(baseRSS, s.rssKiB)
			baseFiles = max(baseFiles, s.fileFDs)
		}
	}
	if baseRSS == 0 {
		t.Errorf("no samples between %v and %v", warmup, warmup+time.Minute)
		return
	}
	var worstRSS int64
	var worstFiles, worstExcess int
	for _, s := range samples {
		if s.at < warmup {
			continue
		}
		worstRSS = max(worstRSS, s.rssKiB)
		worstFiles = max(worstFiles, s.fileFDs)
		worstExcess = max(worstExcess, s.sockFDs-int(s.clientConns))
		if s.rssKiB > 2*baseRSS+soakRSSSlackKiB {
			t.Errorf("%v: groupd RSS %.1f MiB, baseline %.1f MiB", s.at.Round(time.Second), mib(s.rssKiB), mib(baseRSS))
		}
		if s.fileFDs > 2*baseFiles+soakFileSlack {
			t.Errorf("%v: groupd holds %d files, baseline %d", s.at.Round(time.Second), s.fileFDs, baseFiles)
		}
		if excess := s.sockFDs - int(s.clientConns); excess > soakSocketExcess {
			t.Errorf("%v: groupd holds %d sockets for %d client connections", s.at.Round(time.Second), s.sockFDs, s.clientConns)
		}
	}
	t.Logf("after the %v warm-up: RSS baseline %.1f MiB, highest %.1f MiB; files baseline %d, highest %d; sockets beyond client connections at most %d",
		warmup, mib(baseRSS), mib(worstRSS), baseFiles, worstFiles, worstExcess)
}
