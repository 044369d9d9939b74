package e2e

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/partition"
)

// The member benchmarks load the coordinator as deployed consumers do: each
// member holds a connection of its own and has one request in flight at a
// time.
//
//	go test ./internal/e2e -run '^$' -bench MembersEvery3s -benchtime 1x -count 3 -timeout 0
//	go test ./internal/e2e -run '^$' -bench MembersBackToBack -count 5
//
// BenchmarkMembersEvery3s runs groupd (cmd/groupd) and kfake
// (internal/kfakeserver) each in a process of its own, so that each one's
// resident memory can be read; -members-hold shortens its minute for a
// quick run. BenchmarkMembersBackToBack runs groupd, the edge floor (or the
// one -floor names) and kfake in this process, like the other group
// benchmarks.

var membersHold = flag.Duration("members-hold", time.Minute,
	"how long BenchmarkMembersEvery3s keeps its members heartbeating once they are formed")

// membersSide, if set, limits BenchmarkMembersBackToBack's measured rounds
// to one side (groupd, kfake, floor-edge...), so that a profile of the run
// is that side's alone and the clients':
//
//	go test ./internal/e2e -run '^$' -bench MembersBackToBack -count 1 -timeout 0 \
//	  -cpuprofile cpu.out -blockprofile block.out -args -http-side=false -members-side groupd
var membersSide = flag.String("members-side", "", "measure only this side in BenchmarkMembersBackToBack (for profiling)")

const (
	everyGroups    = 1000
	everyGroupSize = 10
	everyPeriod    = 3 * time.Second // a member's heartbeat interval

	backToBackGroups    = 100
	backToBackGroupSize = 10
	backToBackPerRound  = 20 // heartbeats per member in each round

	formWorkers = 20 // groups formed at once
)

// formMemberGroups forms groups of size members, each member on a
// connection of its own that it keeps; members[i] is on conns[i].
func formMemberGroups(b *testing.B, addr, prefix string, groups, size int) ([]benchMember, []*benchConn) {
	b.Helper()
	conns := dialBenchN(b, addr, groups*size)
	ctls := dialBenchN(b, addr, min(formWorkers, groups))
	armAll(conns)
	members := make([]benchMember, len(conns))
	_, err := parallel(ctls, func(w int, ctl *benchConn) error {
		ctl.arm()
		for g := w; g < groups; g += len(ctls) {
			ms, _, err := formGroup(nil, ctl, conns[g*size:(g+1)*size], fmt.Sprintf("%s-%d", prefix, g))
			if err != nil {
				return err
			}
			copy(members[g*size:], ms)
		}
		return nil
	})
	for _, c := range ctls {
		c.c.Close()
	}
	if err != nil {
		b.Fatal(err)
	}
	return members, conns
}

// heartbeats encodes one Heartbeat v4 per member.
func heartbeats(members []benchMember) []prepared {
	out := make([]prepared, len(members))
	for i, m := range members {
		req := kmsg.NewPtrHeartbeatRequest()
		req.Version = 4
		req.Group, req.MemberID, req.Generation = m.group, m.id, m.gen
		out[i] = prepared{req, requestFrame(req, 0)}
	}
	return out
}

// beat sends a heartbeat and waits for its answer, which must be no error.
// It returns how long that took, as the member sees it.
func (bc *benchConn) beat(hb prepared) (time.Duration, error) {
	start := time.Now()
	if err := bc.sendPrepared(hb); err != nil {
		return 0, err
	}
	if err := bc.flush(); err != nil {
		return 0, err
	}
	resp, err := bc.recv()
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	if ec := resp.(*kmsg.HeartbeatResponse).ErrorCode; ec != 0 {
		req := hb.req.(*kmsg.HeartbeatRequest)
		return 0, fmt.Errorf("heartbeat of %s in %s: error %d", req.MemberID, req.Group, ec)
	}
	return took, nil
}

// cpuTime is the user and system time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percentile returns the q-th percentile (0 < q < 100) of sorted.
func percentile(sorted []time.Duration, q int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)*q/100, len(sorted)-1)]
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

var (
	kfakeBinOnce sync.Once
	kfakeBinPath string
	kfakeBinErr  error
)

// kfakeBinary builds internal/e2e/internal/kfakeserver beside groupd's
// binary.
func kfakeBinary(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Dir(groupdBinary(tb))
	kfakeBinOnce.Do(func() {
		tmp := filepath.Join(dir, fmt.Sprintf("kfakeserver.%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-o", tmp, "github.com/groupd/groupd/internal/e2e/internal/kfakeserver")
		if out, err := cmd.CombinedOutput(); err != nil {
			kfakeBinErr = fmt.Errorf("go build kfakeserver: %v\n%s", err, out)
			return
		}
		kfakeBinPath = filepath.Join(dir, "kfakeserver")
		kfakeBinErr = os.Rename(tmp, kfakeBinPath)
	})
	if kfakeBinErr != nil {
		tb.Fatal(kfakeBinErr)
	}
	return kfakeBinPath
}

// needOpenFiles skips the benchmark unless this process may open n files.
// Go raises the soft limit to the hard one at start; the hard limit is the
// operator's (ulimit -Hn).
func needOpenFiles(b *testing.B, n int) {
	if runtime.GOOS != "linux" {
		b.Skip("needs Linux: /proc/PID/status")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur < uint64(n) {
		b.Skipf("needs %d open files, the limit is %d: raise the hard limit (ulimit -Hn)", n, lim.Cur)
	}
}

// everyResult is what one side of BenchmarkMembersEvery3s measured: the
// server's resident memory before any member connected, once every member
// had heartbeated once, and at the end; and each heartbeat's latency after
// the first round.
type everyResult struct {
	idle, formed, end int64
	latencies         []time.Duration
	// cpu is the server's CPU time from formed to end.
	cpu, held time.Duration
}

// processCPU is the user and system time a process has used, from
// /proc/PID/stat (in clock ticks of 10 ms).
func processCPU(b *testing.B, pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is the first, utime and stime the 12th and 13th.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// runMembersEvery3s forms everyGroups groups of everyGroupSize members on
// p, then has every member heartbeat every everyPeriod, their phases spread
// evenly over the period, for -members-hold after the first round.
func runMembersEvery3s(b *testing.B, p *groupdProc) everyResult {
	var r everyResult
	r.idle, _ = p.memory(b)
	members, conns := formMemberGroups(b, p.addr, "every", everyGroups, everyGroupSize)
	beats := heartbeats(members)
	n := len(conns)
	start := time.Now()
	formed := start.Add(everyPeriod) // every member has heartbeated once
	end := formed.Add(*membersHold)
	latencies := make([][]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			first := start.Add(everyPeriod * time.Duration(i) / time.Duration(n))
			for next := first; next.Before(end); next = next.Add(everyPeriod) {
				time.Sleep(time.Until(next))
				c.arm()
				took, err := c.beat(beats[i])
				if err != nil {
					errs[i] = err
					return
				}
				if next != first {
					latencies[i] = append(latencies[i], took)
				}
			}
		})
	}
	// A moment after the round's end, for the last first heartbeat's
	// answer.
	time.Sleep(time.Until(formed.Add(everyPeriod / 30)))
	r.formed, _ = p.memory(b)
	cpu, held := processCPU(b, p.cmd.Process.Pid), time.Now()
	time.Sleep(time.Until(end))
	r.end, _ = p.memory(b)
	r.cpu, r.held = processCPU(b, p.cmd.Process.Pid)-cpu, time.Since(held)
	wg.Wait()
	for _, c := range conns {
		c.c.Close()
	}
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, l := range latencies {
		r.latencies = append(r.latencies, l...)
	}
	return r
}

// membersEveryRuns counts runs of BenchmarkMembersEvery3s, so that each
// run (-count) starts with another side.
var membersEveryRuns int

// BenchmarkMembersEvery3s forms 1,000 groups of 10 members, each member on
// its own connection, on groupd and on kfake, each in its own process, and
// has every member heartbeat every 3 seconds for -members-hold. It reports
// each server's resident memory once every member has heartbeated once
// (formed-MiB) and at the end (end-MiB), what each member added to it
// (KiB/member: end less the memory before the first member connected),
// the share of a core it used meanwhile (cpu-%), the heartbeat latencies
// the members saw after their first heartbeat (p50-ms, p99-ms), and
// groupd/kfake for the memory at the end and the p99 (below 1 means
// groupd uses less, answers faster).
func BenchmarkMembersEvery3s(b *testing.B) {
	n := everyGroups * everyGroupSize
	needOpenFiles(b, n+1000)
	start := map[string]func() *groupdProc{
		"groupd": func() *groupdProc {
			return startGroupd(b, b.TempDir(), "127.0.0.1:0", "--http-listen", "",
				"--group-initial-rebalance-delay", "0", "--max-connections", strconv.Itoa(n+1000))
		},
		"kfake": func() *groupdProc { return startListener(b, "kfake", []string{kfakeBinary(b)}) },
	}
	results := map[string][]everyResult{}
	for range b.N {
		sides := []string{"groupd", "kfake"}
		if membersEveryRuns%2 == 1 {
			slices.Reverse(sides)
		}
		membersEveryRuns++
		for _, side := range sides {
			p := start[side]()
			results[side] = append(results[side], runMembersEvery3s(b, p))
			p.signal(syscall.SIGKILL)
			<-p.exited
		}
	}
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	summary := map[string]struct{ end, p99 float64 }{}
	for _, side := range []string{"groupd", "kfake"} {
		var formed, end, perMember, cpu float64
		var all []time.Duration
		for _, r := range results[side] {
			formed += mib(r.formed)
			end += mib(r.end)
			perMember += float64(r.end-r.idle) / 1024 / float64(n)
			cpu += 100 * r.cpu.Seconds() / r.held.Seconds()
			all = append(all, r.latencies...)
		}
		runs := float64(len(results[side]))
		slices.Sort(all)
		b.ReportMetric(formed/runs, side+"-formed-MiB")
		b.ReportMetric(end/runs, side+"-end-MiB")
		b.ReportMetric(perMember/runs, side+"-KiB/member")
		b.ReportMetric(cpu/runs, side+"-cpu-%")
		b.ReportMetric(millis(percentile(all, 50)), side+"-p50-ms")
		b.ReportMetric(millis(percentile(all, 99)), side+"-p99-ms")
		summary[side] = struct{ end, p99 float64 }{end / runs, millis(percentile(all, 99))}
	}
	b.ReportMetric(summary["groupd"].end/summary["kfake"].end, "rss-ratio")
	b.ReportMetric(summary["groupd"].p99/summary["kfake"].p99, "p99-ratio")
}

// BenchmarkMembersBackToBack forms 100 groups of 10 members, each member on
// its own connection, on groupd, on a floor (the edge floor, or the one
// -floor names) and on kfake, all in this process, and has every member
// heartbeat back to back, one heartbeat in flight each. It reports each
// side's heartbeats per second, the latencies its members saw (p50-us,
// p99-us) and the CPU time this process spent per heartbeat in its
// windows (cpu-us/hb: the members' share is the same for every side, so
// it tells the servers apart on a busy machine, where rates do not), and
// groupd/kfake (ratio) and groupd/floor (floor-ratio); above 1 means
// groupd answers more.
func BenchmarkMembersBackToBack(b *testing.B) {
	floor := *benchFloor
	if floor == "" {
		floor = "edge"
	}
	targets, settle := groupdAndKfake(b, partition.SyncNever)
	floorSide := floorTarget(b, floor)
	targets = append(targets, floorSide)
	type side struct {
		conns     []*benchConn
		beats     []prepared
		latencies [][]time.Duration // by member
		elapsed   time.Duration
		cpu       time.Duration // this process's, servers' and members'
	}
	sides := make(map[string]*side)
	for _, t := range targets {
		members, conns := formMemberGroups(b, t.addr, "b2b", backToBackGroups, backToBackGroupSize)
		sides[t.name] = &side{conns: conns, beats: heartbeats(members), latencies: make([][]time.Duration, len(conns))}
	}
	run := func(name string, record bool) {
		s := sides[name]
		settle(name)
		armAll(s.conns)
		cpu := cpuTime(b)
		d, err := parallel(s.conns, func(i int, c *benchConn) error {
			for range backToBackPerRound {
				took, err := c.beat(s.beats[i])
				if err != nil {
					return err
				}
				if record {
					s.latencies[i] = append(s.latencies[i], took)
				}
			}
			return nil
		})
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		if record {
			s.elapsed += d
			s.cpu += cpuTime(b) - cpu
		}
	}
	if *membersSide != "" {
		targets = slices.DeleteFunc(targets, func(t benchTarget) bool { return t.name != *membersSide })
		if len(targets) == 0 {
			b.Fatalf("-members-side %q: no such side", *membersSide)
		}
	}
	for _, t := range targets {
		run(t.name, false) // warm up
	}
	b.ResetTimer()
	for round := range b.N * benchRounds {
		for _, t := range inTurn(targets, round) {
			run(t.name, true)
		}
	}
	b.StopTimer()
	beats := float64(b.N * benchRounds * backToBackPerRound * backToBackGroups * backToBackGroupSize)
	rate := make(map[string]float64)
	for _, t := range targets {
		s := sides[t.name]
		var all []time.Duration
		for _, l := range s.latencies {
			all = append(all, l...)
		}
		slices.Sort(all)
		rate[t.name] = beats / s.elapsed.Seconds()
		b.ReportMetric(rate[t.name], t.name+"-hb/s")
		b.ReportMetric(float64(percentile(all, 50).Microseconds()), t.name+"-p50-us")
		b.ReportMetric(float64(percentile(all, 99).Microseconds()), t.name+"-p99-us")
		b.ReportMetric(float64(s.cpu.Microseconds())/beats, t.name+"-cpu-us/hb")
	}
	if rate["groupd"] > 0 && rate["kfake"] > 0 {
		b.ReportMetric(rate["groupd"]/rate["kfake"], "ratio")
	}
	if rate["groupd"] > 0 && rate[floorSide.name] > 0 {
		b.ReportMetric(rate["groupd"]/rate[floorSide.name], "floor-ratio")
	}
}
