package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// result is what the load generator prints after "RESULT " (see
// internal/bench/loadgen's result; the two are kept apart so that neither
// program imports the other).
type result struct {
	Scenario          string             `json:"scenario"`
	Metric            string             `json:"metric"`
	Value             float64            `json:"value"`
	Unit              string             `json:"unit"`
	HigherIsBetter    bool               `json:"higher_is_better"`
	Ops               int64              `json:"ops,omitempty"`
	Seconds           float64            `json:"seconds,omitempty"`
	P50ms             float64            `json:"p50_ms,omitempty"`
	P99ms             float64            `json:"p99_ms,omitempty"`
	ServerCPUusPerOp  float64            `json:"server_cpu_us_per_op,omitempty"`
	ServerRSSMiB      float64            `json:"server_rss_mib,omitempty"`
	LoadgenCPUusPerOp float64            `json:"loadgen_cpu_us_per_op,omitempty"`
	Extra             map[string]float64 `json:"extra,omitempty"`
}

// record is one result of one run, as -out writes it.
type record struct {
	Scenario string  `json:"scenario"` // the harness's name (NAME or NAME+work)
	Target   string  `json:"target"`
	Run      int     `json:"run"`
	Position int     `json:"position"` // 0 if the side went first in its run
	LoadAvg  string  `json:"loadavg"`  // when the run started
	Error    string  `json:"error,omitempty"`
	Result   *result `json:"result,omitempty"`
}

type harness struct {
	bins    binaries
	dir     string
	raw     *json.Encoder
	quick   bool
	hold    time.Duration
	timeout time.Duration
	only    []string

	records  []record
	failures int
	notes    []string // what the servers said on stderr, exits and the like
}

// runAll runs every scenario runs times on each of its sides. The runs
// are the outer loop: run r of every scenario comes before run r+1 of
// any, so that scenarios compared with each other (fresh and after the
// other work) see the same spells of the machine's load; within a run the
// sides take turns going first.
func (h *harness) runAll(plans []scenario, runs int) {
	for r := range runs {
		log.Printf("run %d of %d; load average %s", r+1, runs, loadavg())
		for _, s := range plans {
			h.runScenario(s, r)
		}
	}
}

// runScenario runs run r of s on each of its sides, in r's turn.
func (h *harness) runScenario(s scenario, r int) {
	targets := slices.DeleteFunc(slices.Clone(s.targets), func(t string) bool { return !slices.Contains(h.only, t) })
	for pos, t := range inTurn(targets, r) {
		rec := record{Scenario: s.name, Target: t, Run: r, Position: pos, LoadAvg: loadavg()}
		results, err := h.runOne(s, t, r)
		if err != nil {
			h.failures++
			rec.Error = err.Error()
			log.Printf("%s on %s, run %d: %v", s.name, t, r, err)
			h.records = append(h.records, rec)
			h.raw.Encode(rec)
		}
		for _, res := range results {
			rec.Result = &res
			h.records = append(h.records, rec)
			h.raw.Encode(rec)
			log.Printf("%s on %s, run %d: %s %.4g %s", s.name, t, r, res.Metric, res.Value, res.Unit)
		}
	}
}

// runOne starts the server, runs the other work if asked and the
// scenario, and stops the server.
func (h *harness) runOne(s scenario, target string, run int) ([]result, error) {
	runDir := filepath.Join(h.dir, fmt.Sprintf("%s-%s-%d", strings.ReplaceAll(s.name, "+", "_"), target, run))
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		os.RemoveAll(filepath.Join(runDir, "data")) // keep the logs only
	}()
	srv, err := h.start(target, runDir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if note := srv.stop(); note != "" {
			h.notes = append(h.notes, fmt.Sprintf("%s on %s, run %d: %s", s.name, target, run, note))
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	floor := target == "naive"
	if s.work {
		args := []string{"-scenario", "work"}
		if h.quick {
			args = append(args, quickArgs["work"]...)
		}
		if _, err := h.runLoadgen(ctx, srv.addr, srv.pid(), floor, args, filepath.Join(runDir, "work.log")); err != nil {
			return nil, fmt.Errorf("other work: %w", err)
		}
		log.Printf("  %s", strings.TrimPrefix(tail(filepath.Join(runDir, "work.log"), 1), "loadgen: "))
	}
	args := slices.Clone(s.args)
	if h.quick {
		args = append(args, quickArgs[args[1]]...)
	}
	if args[1] == "hold" && h.hold > 0 {
		args = append(args, "-hold", h.hold.String())
	}
	return h.runLoadgen(ctx, srv.addr, srv.pid(), floor, args, filepath.Join(runDir, "loadgen.log"))
}

// server is a server process the harness started.
type server struct {
	name    string
	cmd     *exec.Cmd
	addr    string
	http    string // groupd's HTTP side
	errPath string
	exited  chan struct{}
	err     error
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// start starts target with its data and logs under runDir and waits for
// its "NAME listening on HOST:PORT" line.
func (h *harness) start(target, runDir string) (*server, error) {
	var argv []string
	name := target
	switch target {
	case "groupd":
		argv = []string{h.bins.groupd, "serve", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(runDir, "data"),
			"--fsync", "never", "--group-initial-rebalance-delay", "0", "--http-listen", "127.0.0.1:0", "--log-level", "warn"}
	case "kfake":
		argv = []string{h.bins.kfake}
	case "naive":
		argv = []string{h.bins.naive, "-listen", "127.0.0.1:0"}
	default:
		return nil, fmt.Errorf("no side %q", target)
	}
	s := &server{name: name, exited: make(chan struct{}), errPath: filepath.Join(runDir, target+".stderr")}
	errf, err := os.Create(s.errPath)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Stderr = errf
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		errf.Close()
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		errf.Close()
		return nil, err
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, name+" listening on "); ok {
				select {
				case addrc <- strings.Fields(rest)[0]:
				default:
				}
			}
			if _, rest, ok := strings.Cut(line, " on http://"); ok {
				s.http = strings.TrimSuffix(rest, "/")
			}
		}
		io.Copy(io.Discard, stdout)
		s.err = s.cmd.Wait()
		errf.Close()
		close(s.exited)
	}()
	select {
	case s.addr = <-addrc:
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("%s exited before listening: %v\n%s", name, s.err, tail(s.errPath, 10))
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		<-s.exited
		return nil, fmt.Errorf("%s did not print its address in a minute\n%s", name, tail(s.errPath, 10))
	}
}

// stop sends SIGTERM, waits for the exit (SIGKILL after 30 s), and returns
// a note if anything looked wrong: an exit other than a clean one, or
// anything on stderr.
func (s *server) stop() string {
	var notes []string
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		notes = append(notes, "still running 30s after SIGTERM: killed")
		s.cmd.Process.Kill()
		<-s.exited
	}
	if s.err != nil {
		notes = append(notes, fmt.Sprintf("exit: %v", s.err))
	}
	if b, err := os.ReadFile(s.errPath); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		notes = append(notes, fmt.Sprintf("%d lines on stderr (%s), the last: %s", len(lines), s.errPath, lines[len(lines)-1]))
	}
	return strings.Join(notes, "; ")
}
