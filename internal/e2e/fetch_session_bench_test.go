package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/partition"
)

// BenchmarkFetchSessions runs one franz-go consumer of 1,000 partitions,
// 10 of which hold data, against groupd and kfake, each in a process of
// its own, with fetch sessions and without (kgo.DisableFetchSessions).
// Before each measured pass every data partition gets fsBenchBatches
// batches of one record; the consumer reads them at most one batch per
// partition per fetch, so every fetch has data and none waits. It reports
// per side and mode the fetch round trips per second, the server's CPU time
// per fetch (from /proc, in 10 ms ticks), the bytes of each fetch request
// and reply, and the ratios groupd / kfake:
//
//	go test ./internal/e2e -run '^$' -bench FetchSessions -benchtime 3x -count 3
//
// GROUPD_FETCH_BENCH_CPUPROFILE=PATH and GROUPD_FETCH_BENCH_MEMPROFILE=PATH
// write each server's CPU and allocation profiles to PATH.groupd and
// PATH.kfake (the whole life of the process, topic creation and the
// produce passes included; `go tool pprof -focus 'Handler..fetch$'`
// keeps groupd's fetches). An allocation profile records every
// allocation, which slows the server it profiles.
func BenchmarkFetchSessions(b *testing.B) {
	servers, modes := startFSBench(b)
	type total struct {
		fetches, reqBytes, respBytes, records int64
		elapsed, cpu                          time.Duration
	}
	totals := map[string]*total{}
	prod := map[string]*kgo.Client{}
	for _, s := range servers {
		prod[s.name] = newClient(b, s.addr, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
		for _, m := range modes {
			totals[s.name+"/"+m.name] = &total{}
		}
	}
	b.ResetTimer()
	for range b.N {
		for _, m := range modes {
			for _, s := range servers {
				b.StopTimer()
				start := s.preload(b, prod[s.name])
				b.StartTimer()
				r := s.consume(b, start, m.opts)
				t := totals[s.name+"/"+m.name]
				t.fetches += r.fetches
				t.reqBytes += r.reqBytes
				t.respBytes += r.respBytes
				t.records += r.records
				t.elapsed += r.elapsed
				t.cpu += r.cpu
			}
		}
	}
	b.StopTimer()
	rate := map[string]float64{}
	cpu := map[string]float64{}
	for name, t := range totals {
		rate[name] = float64(t.fetches) / t.elapsed.Seconds()
		cpu[name] = float64(t.cpu.Microseconds()) / float64(t.fetches)
		b.ReportMetric(rate[name], name+"-fetches/s")
		b.ReportMetric(cpu[name], name+"-cpu-µs/fetch")
		b.ReportMetric(float64(t.reqBytes)/float64(t.fetches), name+"-req-B/fetch")
		b.ReportMetric(float64(t.respBytes)/float64(t.fetches), name+"-resp-B/fetch")
		b.ReportMetric(float64(t.records)/float64(t.fetches), name+"-records/fetch")
	}
	g, k := totals["groupd/sessions"], totals["groupd/no-sessions"]
	b.ReportMetric((float64(k.reqBytes)/float64(k.fetches))/(float64(g.reqBytes)/float64(g.fetches)), "groupd-req-bytes-saved-x")
	b.ReportMetric(rate["groupd/sessions"]/rate["kfake/sessions"], "sessions-fetches/s-ratio")
	b.ReportMetric(cpu["groupd/sessions"]/cpu["kfake/sessions"], "sessions-cpu-ratio")
	b.ReportMetric(rate["groupd/no-sessions"]/rate["kfake/no-sessions"], "no-sessions-fetches/s-ratio")
}

// fsBenchMode is a way for the consumer to fetch: with sessions or not.
type fsBenchMode struct {
	name string
	opts []kgo.Opt
}

// startFSBench starts the servers of a fetch benchmark, groupd and kfake,
// and lists the modes to measure each in.
func startFSBench(b *testing.B) ([]*fsBenchServer, []fsBenchMode) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		b.Skip("needs /proc to read the servers' CPU time")
	}
	servers := []*fsBenchServer{startFSBenchServer(b, "groupd"), startFSBenchServer(b, "kfake")}
	return servers, []fsBenchMode{{"sessions", nil}, {"no-sessions", []kgo.Opt{kgo.DisableFetchSessions()}}}
}

const (
	fsBenchTopic      = "fs"
	fsBenchPartitions = 1000
	fsBenchData       = 10  // partitions that receive records: every 100th
	fsBenchBatches    = 300 // batches per data partition per pass
	fsBenchValue      = 100
)

// fsBenchServer is groupd or kfake running in a child process (this test
// binary, run as TestFetchBenchServer), so that its CPU time is its own.
type fsBenchServer struct {
	name   string
	addr   string
	cmd    *exec.Cmd
	passes int64 // batches already in each data partition / fsBenchBatches
}

func startFSBenchServer(b *testing.B, name string) *fsBenchServer {
	cmd := exec.Command(os.Args[0], "-test.run=^TestFetchBenchServer$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), "GROUPD_FETCH_BENCH_SERVER="+name, "GROUPD_FETCH_BENCH_DIR="+b.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "fetch-bench-server "); ok {
			go func() {
				for sc.Scan() {
				}
			}()
			s := &fsBenchServer{name: name, addr: addr, cmd: cmd}
			createTopic(b, addr, fsBenchTopic, fsBenchPartitions)
			return s
		}
	}
	b.Fatalf("%s did not start: %v", name, sc.Err())
	return nil
}

// TestFetchBenchServer is BenchmarkFetchSessions's server process: it
// serves until its standard input closes, and does nothing in a normal
// test run.
func TestFetchBenchServer(t *testing.T) {
	which := os.Getenv("GROUPD_FETCH_BENCH_SERVER")
	if which == "" {
		t.Skip("the server process of BenchmarkFetchSessions")
	}
	var addr string
	switch which {
	case "groupd":
		a, err := app.Start(app.Config{Listen: "127.0.0.1:0", DataDir: os.Getenv("GROUPD_FETCH_BENCH_DIR"), DefaultPartitions: 1,
			Log:    partition.Options{Sync: partition.SyncNever},
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close(context.Background())
		addr = a.Addr()
	case "kfake":
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		addr = c.ListenAddrs()[0]
	default:
		t.Fatalf("unknown server %q", which)
	}
	if path := os.Getenv("GROUPD_FETCH_BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path + "." + which)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if path := os.Getenv("GROUPD_FETCH_BENCH_MEMPROFILE"); path != "" {
		// Every allocation, not a sample, so a fetch's allocations can be
		// counted; written when the benchmark ends.
		runtime.MemProfileRate = 1
		defer func() {
			f, err := os.Create(path + "." + which)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			runtime.GC() // the profile shows allocations as of the last collection
			pprof.Lookup("allocs").WriteTo(f, 0)
		}()
	}
	fmt.Printf("fetch-bench-server %s\n", addr)
	bufio.NewReader(os.Stdin).ReadString('\n') // until the benchmark closes it
}

// preload gives every data partition fsBenchBatches more batches of one
// record, and returns the offset each partition's new records start at.
func (s *fsBenchServer) preload(b *testing.B, cl *kgo.Client) map[int32]int64 {
	value := bytes.Repeat([]byte("v"), fsBenchValue)
	ctx := context.Background()
	for range fsBenchBatches {
		recs := make([]*kgo.Record, 0, fsBenchData)
		for i := range int32(fsBenchData) {
			recs = append(recs, &kgo.Record{Topic: fsBenchTopic, Partition: i * (fsBenchPartitions / fsBenchData), Value: value})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	start := make(map[int32]int64, fsBenchPartitions)
	for p := range int32(fsBenchPartitions) {
		start[p] = 0
		if p%(fsBenchPartitions/fsBenchData) == 0 {
			start[p] = s.passes * fsBenchBatches
		}
	}
	s.passes++
	return start
}

type fsBenchResult struct {
	fetches, reqBytes, respBytes, records int64
	elapsed, cpu                          time.Duration
}

// fsBenchHook counts fetch requests and their bytes on the wire.
type fsBenchHook struct{ fetches, reqBytes, respBytes atomic.Int64 }

func (h *fsBenchHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, n int, _, _ time.Duration, err error) {
	if key == 1 && err == nil {
		h.fetches.Add(1)
		h.reqBytes.Add(int64(n))
	}
}

func (h *fsBenchHook) OnBrokerRead(_ kgo.BrokerMetadata, key int16, n int, _, _ time.Duration, err error) {
	if key == 1 && err == nil {
		h.respBytes.Add(int64(n))
	}
}

// consume reads the pass's records from start with a new consumer of all
// partitions, at most one batch per partition per fetch.
func (s *fsBenchServer) consume(b *testing.B, start map[int32]int64, opts []kgo.Opt) fsBenchResult {
	offsets := make(map[int32]kgo.Offset, len(start))
	for p, o := range start {
		offsets[p] = kgo.NewOffset().At(o)
	}
	hook := &fsBenchHook{}
	cl := newClient(b, s.addr, append([]kgo.Opt{kgo.WithHooks(hook),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{fsBenchTopic: offsets}),
		kgo.FetchMaxPartitionBytes(fsBenchValue + 100), kgo.FetchMaxWait(time.Second)}, opts...)...)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The first fetch (a full one, with every partition) is not measured.
	var records int64
	for records == 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("%s: no records", s.name)
		}
		records += int64(fs.NumRecords())
	}
	f0, q0, r0 := hook.fetches.Load(), hook.reqBytes.Load(), hook.respBytes.Load()
	cpu0, t0 := fsProcessCPU(b, s.cmd.Process.Pid), time.Now()
	var n int64
	for records+n < fsBenchData*fsBenchBatches {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("%s: read %d of %d records", s.name, records+n, fsBenchData*fsBenchBatches)
		}
		fs.EachError(func(t string, p int32, err error) { b.Fatalf("%s: %s/%d: %v", s.name, t, p, err) })
		n += int64(fs.NumRecords())
	}
	r := fsBenchResult{elapsed: time.Since(t0), cpu: fsProcessCPU(b, s.cmd.Process.Pid) - cpu0, records: n}
	r.fetches, r.reqBytes, r.respBytes = hook.fetches.Load()-f0, hook.reqBytes.Load()-q0, hook.respBytes.Load()-r0
	return r
}

// fsProcessCPU is the user and system time of process pid, from
// /proc/PID/stat (clock ticks of 10 ms).
func fsProcessCPU(b *testing.B, pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// After the command name (in parentheses, which may hold spaces):
	// utime and stime are the 12th and 13th fields.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	return time.Duration(u+s) * 10 * time.Millisecond
}

// BenchmarkFetchLongPoll runs one franz-go consumer of 1,000 partitions
// that has read everything, so that each of its fetches waits (MaxWait
// 1 s) until a producer appends one record to one of the 10 data
// partitions, against groupd and kfake as BenchmarkFetchSessions does.
// Each iteration appends one record and waits until the consumer has it.
// It reports per side and mode the time from append to consumption, the
// server's CPU time per record (its fetches and the produce together) and
// the fetches per record, and the ratios groupd / kfake:
//
//	go test ./internal/e2e -run '^$' -bench FetchLongPoll -benchtime 300x -count 3
func BenchmarkFetchLongPoll(b *testing.B) {
	servers, modes := startFSBench(b)
	value := bytes.Repeat([]byte("v"), fsBenchValue)
	latency, cpu, fetches := map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, m := range modes {
		for _, s := range servers {
			name := s.name + "/" + m.name
			prod := newClient(b, s.addr, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
			hook := &fsBenchHook{}
			offsets := make(map[int32]kgo.Offset, fsBenchPartitions)
			for p := range int32(fsBenchPartitions) {
				offsets[p] = kgo.NewOffset().AtEnd()
			}
			cl := newClient(b, s.addr, append([]kgo.Opt{kgo.WithHooks(hook),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{fsBenchTopic: offsets}),
				kgo.FetchMaxWait(time.Second)}, m.opts...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			// One record each way: the first, before the consumer has
			// its positions, may be skipped; once a record is read the
			// consumer is caught up and its fetches wait.
			roundTrip := func(i int) {
				p := int32(i%fsBenchData) * (fsBenchPartitions / fsBenchData)
				if err := prod.ProduceSync(ctx, &kgo.Record{Topic: fsBenchTopic, Partition: p, Value: value}).FirstErr(); err != nil {
					b.Fatal(err)
				}
				for n := 0; n == 0; {
					fs := cl.PollFetches(ctx)
					if ctx.Err() != nil {
						b.Fatalf("%s: record %d not consumed", name, i)
					}
					fs.EachError(func(t string, p int32, err error) { b.Fatalf("%s: %s/%d: %v", name, t, p, err) })
					n = fs.NumRecords()
				}
			}
			for warm := 0; ; warm++ {
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				if err := prod.ProduceSync(pctx, &kgo.Record{Topic: fsBenchTopic, Partition: 0, Value: value}).FirstErr(); err != nil {
					b.Fatal(err)
				}
				fs := cl.PollFetches(pctx)
				pcancel()
				if fs.NumRecords() > 0 {
					break
				}
				if warm == 30 {
					b.Fatalf("%s: the consumer reads nothing", name)
				}
			}
			f0 := hook.fetches.Load()
			cpu0, t0 := fsProcessCPU(b, s.cmd.Process.Pid), time.Now()
			for i := range b.N {
				roundTrip(i)
			}
			elapsed, used := time.Since(t0), fsProcessCPU(b, s.cmd.Process.Pid)-cpu0
			cancel()
			latency[name] = float64(elapsed.Microseconds()) / float64(b.N)
			cpu[name] = float64(used.Microseconds()) / float64(b.N)
			fetches[name] = float64(hook.fetches.Load()-f0) / float64(b.N)
			cl.Close()
			prod.Close()
		}
	}
	// The start of each side and mode is not measured, but it is timed:
	// ns/op means nothing here.
	for name := range latency {
		b.ReportMetric(latency[name], name+"-µs/record")
		b.ReportMetric(cpu[name], name+"-cpu-µs/record")
		b.ReportMetric(fetches[name], name+"-fetches/record")
	}
	b.ReportMetric(latency["groupd/sessions"]/latency["kfake/sessions"], "sessions-latency-ratio")
	b.ReportMetric(cpu["groupd/sessions"]/cpu["kfake/sessions"], "sessions-cpu-ratio")
	b.ReportMetric(cpu["groupd/no-sessions"]/cpu["kfake/no-sessions"], "no-sessions-cpu-ratio")
}
