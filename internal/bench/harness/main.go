// Command harness measures groupd against franz-go's kfake and a naive
// server, each in a process of its own, with the same raw Kafka load from
// a load generator in a third process, and prints the medians and the
// ratios.
//
//	go run ./internal/bench/harness -runs 5 -scenarios rebalance,heartbeat,heartbeat+work
//
// It builds four binaries into a work directory: groupd (./cmd/groupd, or
// the commit -groupd-rev names, or the binary -groupd-bin names), kfake
// (internal/e2e/internal/kfakeserver: kfake at the version go.mod pins,
// one broker, in memory), the naive floor (internal/bench/naiveserver:
// one goroutine per connection, no coordinator) and the load generator
// (internal/bench/loadgen). Neither the load generator nor the naive
// server imports a groupd package.
//
// For each run, each scenario and each side in turn (run r starts with
// the r-th side, so that no side always goes first; run r of every
// scenario before run r+1 of any, so that scenarios compared with each
// other meet the same spells of load on a shared machine) it starts the
// server afresh: groupd as
//
//	groupd serve --listen 127.0.0.1:0 --data-dir DIR --fsync never \
//	  --group-initial-rebalance-delay 0 --http-listen 127.0.0.1:0 --log-level warn
//
// (its HTTP side on, as deployed; kfake has no initial rebalance delay at
// all, so groupd runs without one too), kfake and the naive server on
// 127.0.0.1:0. For a scenario named NAME+work it first runs the load
// generator's "other work" on the same server process (commits over 1,000
// groups, then a rebalance of 1,001 members who leave), then NAME. The
// load generator reads the server's CPU time and memory from /proc, so
// that each figure comes with the server's CPU time per operation. The
// server is then stopped with SIGTERM; anything it wrote to stderr is
// kept and counted.
//
// -out writes every result as a JSON line; the table on stdout gives per
// side the median, min and max over the runs, the median latencies and
// CPU time per operation, and groupd/kfake and groupd/naive of the
// medians.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// scenario is one benchmark: the load generator's arguments and the sides
// it runs against.
type scenario struct {
	name    string
	args    []string
	targets []string
	work    bool // run the "other work" on the server first
}

var allTargets = []string{"groupd", "kfake", "naive"}

// scenarios are the harness's scenarios by name; NAME+work adds the other
// work before any of them but produce and hold.
var scenarios = map[string]scenario{
	"rebalance":      {args: []string{"-scenario", "rebalance"}, targets: allTargets},
	"heartbeat":      {args: []string{"-scenario", "heartbeat"}, targets: allTargets},
	"commit4":        {args: []string{"-scenario", "commit", "-inflight", "4"}, targets: allTargets},
	"commit16":       {args: []string{"-scenario", "commit", "-inflight", "16"}, targets: allTargets},
	"cg-heartbeat":   {args: []string{"-scenario", "cg-heartbeat"}, targets: allTargets},
	"cg-converge":    {args: []string{"-scenario", "cg-converge"}, targets: []string{"groupd", "kfake"}},
	"produce-none":   {args: []string{"-scenario", "produce", "-compression", "none"}, targets: []string{"groupd", "kfake"}},
	"produce-snappy": {args: []string{"-scenario", "produce", "-compression", "snappy"}, targets: []string{"groupd", "kfake"}},
	"hold":           {args: []string{"-scenario", "hold"}, targets: []string{"groupd", "kfake"}},
}

// quickArgs shrink every scenario for a smoke run (-quick).
var quickArgs = map[string][]string{
	"rebalance":    {"-members", "21", "-rounds", "2"},
	"heartbeat":    {"-groups", "5", "-size", "4", "-beats", "20"},
	"commit":       {"-groups", "20", "-conns", "4", "-commits", "400"},
	"work":         {"-groups", "20", "-conns", "4", "-commits", "400", "-members", "11"},
	"cg-heartbeat": {"-groups", "3", "-size", "4", "-partitions", "8", "-beats", "20"},
	"cg-converge":  {"-members", "10", "-partitions", "20", "-rounds", "2"},
	"produce":      {"-records", "5000", "-partitions", "2"},
	"hold":         {"-groups", "5", "-size", "4", "-period", "500ms", "-hold", "1s"},
}

const defaultScenarios = "rebalance,heartbeat,heartbeat+work,commit4,commit16,cg-heartbeat,cg-converge,produce-none,produce-snappy"

// lookup resolves a scenario name, NAME or NAME+work.
func lookup(name string) (scenario, error) {
	base, work := strings.CutSuffix(name, "+work")
	s, ok := scenarios[base]
	if !ok {
		return scenario{}, fmt.Errorf("no scenario %q", name)
	}
	if work && (strings.HasPrefix(base, "produce") || base == "hold") {
		return scenario{}, fmt.Errorf("scenario %q: no +work variant", name)
	}
	s.name, s.work = name, work
	return s, nil
}

// plan lists the scenarios to run: those named, and with afterWork a
// +work variant after each that has one and is not named already.
func plan(names []string, afterWork bool) ([]scenario, error) {
	var out []scenario
	seen := map[string]bool{}
	add := func(name string) error {
		if seen[name] {
			return nil
		}
		s, err := lookup(name)
		if err != nil {
			return err
		}
		seen[name] = true
		out = append(out, s)
		return nil
	}
	for _, n := range names {
		if err := add(n); err != nil {
			return nil, err
		}
		if afterWork && !strings.HasSuffix(n, "+work") {
			if _, err := lookup(n + "+work"); err == nil {
				if err := add(n + "+work"); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// inTurn returns targets in run r's order: each run starts with another.
func inTurn(targets []string, r int) []string {
	k := r % len(targets)
	return append(append([]string{}, targets[k:]...), targets[:k]...)
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("harness: ")
	var (
		names      = flag.String("scenarios", defaultScenarios, "comma-separated scenarios: "+scenarioList())
		runs       = flag.Int("runs", 5, "runs per scenario and side")
		afterWork  = flag.Bool("after-work", false, "also measure every scenario that has one after the other work (NAME+work)")
		out        = flag.String("out", "", "write every result as a JSON line to this file")
		only       = flag.String("targets", strings.Join(allTargets, ","), "sides to measure")
		groupdBin  = flag.String("groupd-bin", "", "a groupd binary to use instead of building one")
		groupdRev  = flag.String("groupd-rev", "", "build groupd from this commit (git archive) instead of the work tree")
		workDir    = flag.String("workdir", "", "directory for binaries, data and logs (default: a new temporary one)")
		keep       = flag.Bool("keep", false, "keep the work directory")
		quick      = flag.Bool("quick", false, "shrink every scenario (a smoke run; the figures mean nothing)")
		hold       = flag.Duration("hold", 0, "hold scenario: how long members heartbeat once formed (default: loadgen's minute)")
		runTimeout = flag.Duration("run-timeout", 15*time.Minute, "longest one load generator run may take")
	)
	flag.Parse()
	plans, err := plan(splitList(*names), *afterWork)
	if err != nil {
		log.Fatal(err)
	}
	dir := *workDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "groupd-bench-"); err != nil {
			log.Fatal(err)
		}
		if !*keep {
			defer os.RemoveAll(dir)
		}
	}
	root, err := moduleRoot()
	if err != nil {
		log.Fatal(err)
	}
	bins, err := build(root, dir, *groupdBin, *groupdRev)
	if err != nil {
		log.Fatal(err)
	}
	var raw io.Writer = io.Discard
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		raw = f
	}
	h := &harness{bins: bins, dir: dir, raw: json.NewEncoder(raw), quick: *quick, hold: *hold, timeout: *runTimeout,
		only: splitList(*only)}
	begin := time.Now()
	fmt.Printf("load average before: %s\n", loadavg())
	h.runAll(plans, *runs)
	fmt.Printf("load average after: %s (%v in all)\n\n", loadavg(), time.Since(begin).Round(time.Second))
	fmt.Print(h.table())
	if h.failures > 0 {
		os.Exit(1)
	}
}

func scenarioList() string {
	var names []string
	for n := range scenarios {
		names = append(names, n)
	}
	return strings.Join(sorted(names), ", ") + " (each NAME+work too, but produce-* and hold)"
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// moduleRoot is the directory of the go.mod that holds this harness.
func moduleRoot() (string, error) {
	outb, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(outb))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside a module; run from the groupd repository")
	}
	return filepath.Dir(mod), nil
}

// binaries are the paths of the four programs.
type binaries struct{ groupd, kfake, naive, loadgen string }

// build builds the binaries into dir.
func build(root, dir, groupdBin, groupdRev string) (binaries, error) {
	b := binaries{
		groupd:  filepath.Join(dir, "groupd"),
		kfake:   filepath.Join(dir, "kfakeserver"),
		naive:   filepath.Join(dir, "naiveserver"),
		loadgen: filepath.Join(dir, "loadgen"),
	}
	goBuild := func(src, out, pkg string) error {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = src
		if outb, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, outb)
		}
		return nil
	}
	for _, p := range []struct{ out, pkg string }{
		{b.kfake, "./internal/e2e/internal/kfakeserver"},
		{b.naive, "./internal/bench/naiveserver"},
		{b.loadgen, "./internal/bench/loadgen"},
	} {
		log.Printf("building %s", p.pkg)
		if err := goBuild(root, p.out, p.pkg); err != nil {
			return b, err
		}
	}
	switch {
	case groupdBin != "":
		abs, err := filepath.Abs(groupdBin)
		if err != nil {
			return b, err
		}
		b.groupd = abs
	case groupdRev != "":
		src := filepath.Join(dir, "groupd-src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return b, err
		}
		log.Printf("building ./cmd/groupd at %s", groupdRev)
		archive := exec.Command("sh", "-c", "git -C \"$1\" archive --format=tar \"$2\" | tar -x -C \"$3\"", "sh", root, groupdRev, src)
		if outb, err := archive.CombinedOutput(); err != nil {
			return b, fmt.Errorf("git archive %s: %v\n%s", groupdRev, err, outb)
		}
		if err := goBuild(src, b.groupd, "./cmd/groupd"); err != nil {
			return b, err
		}
	default:
		log.Printf("building ./cmd/groupd from the work tree")
		if err := goBuild(root, b.groupd, "./cmd/groupd"); err != nil {
			return b, err
		}
	}
	return b, nil
}

// loadavg is /proc/loadavg's three averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// runLoadgen runs the load generator against addr and returns its
// results.
func (h *harness) runLoadgen(ctx context.Context, addr string, pid int, floor bool, args []string, logPath string) ([]result, error) {
	argv := append([]string{"-target", addr, "-server-pid", fmt.Sprint(pid)}, args...)
	if floor {
		argv = append(argv, "-floor")
	}
	cmd := exec.CommandContext(ctx, h.bins.loadgen, argv...)
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	stdout, err := cmd.Output()
	var results []result
	for _, line := range strings.Split(string(stdout), "\n") {
		rest, ok := strings.CutPrefix(line, "RESULT ")
		if !ok {
			continue
		}
		var r result
		if jerr := json.Unmarshal([]byte(rest), &r); jerr != nil {
			return results, fmt.Errorf("loadgen printed %q: %v", line, jerr)
		}
		results = append(results, r)
	}
	if err != nil {
		return results, fmt.Errorf("loadgen %s: %v: %s", strings.Join(argv, " "), err, tail(logPath, 5))
	}
	return results, nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
