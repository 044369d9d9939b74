package cluster

import (
	"flag"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	flagSeeds  = flag.Int("seeds", 300, "how many seeds TestSim runs")
	flagFirst  = flag.Uint64("first", 1, "first seed of TestSim's batch")
	flagSeed   = flag.Uint64("seed", 0, "run only this seed; with -v the whole trace is printed")
	flagBug    = flag.String("bug", "", "break one rule of the simulated runtime (see bugSwitches)")
	flagOnly   = flag.String("only", "", "run only this checker")
	flagStrict = flag.Bool("strict", false, "fail on the failures known bugs outside this package explain, too")
)

// TestSim runs a batch of seeds (-seeds, from -first), or one seed
// (-seed). A failure prints the seed, the checker, the last trace lines
// and the command that replays it; -v prints the counters of the batch.
func TestSim(t *testing.T) {
	bugs, err := BugByName(*flagBug)
	if err != nil {
		t.Fatal(err)
	}
	if *flagSeed != 0 {
		res := Run(Options{Seed: *flagSeed, Bugs: bugs, KeepTrace: testing.Verbose(), Only: *flagOnly})
		for _, l := range res.Trace {
			t.Log(l)
		}
		t.Logf("seed %d: %d events, %v virtual, trace hash %016x\n%s", res.Seed, res.Events, res.Virtual, res.TraceHash, res.Stats)
		if f := res.Failure; f != nil {
			if f.Known != "" && !*flagStrict {
				t.Skipf("%v\n(a known bug outside this package; -strict fails on it)", f)
			}
			t.Fatalf("%v", f)
		}
		return
	}
	n := *flagSeeds
	if testing.Short() {
		n = min(n, 50)
	}
	workers := min(runtime.GOMAXPROCS(0), 2)
	stopAt, hasDeadline := t.Deadline()
	began := time.Now()
	var (
		mu       sync.Mutex
		total    = Stats{}
		failures []*Failure
		known    = map[string][]uint64{}
		ran      int
		events   int64
		virtual  time.Duration
		next     = *flagFirst
		end      = *flagFirst + uint64(n)
	)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				if next >= end || (hasDeadline && time.Until(stopAt) < 30*time.Second) {
					mu.Unlock()
					return
				}
				seed := next
				next++
				mu.Unlock()
				res := Run(Options{Seed: seed, Bugs: bugs, Only: *flagOnly})
				mu.Lock()
				ran++
				total.Add(res.Stats)
				events += int64(res.Events)
				virtual += res.Virtual
				if f := res.Failure; f != nil && f.Known != "" && !*flagStrict {
					known[f.Known] = append(known[f.Known], seed)
					t.Logf("seed %d hit known bug %s: %s: %s", seed, f.Known, f.Check, firstLine(f.Msg))
				} else if f != nil {
					failures = append(failures, f)
					t.Logf("seed %d failed: %s: %s", seed, f.Check, firstLine(f.Msg))
				}
				if ran%5000 == 0 {
					t.Logf("progress: %d seeds in %v, %d failed", ran, time.Since(began).Round(time.Second), len(failures))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Slice(failures, func(i, j int) bool { return failures[i].Seed < failures[j].Seed })
	t.Logf("ran %d of %d seeds (%d..%d) in %v: %d failed; %d events, %v of virtual time\ncounters over the batch:\n%s",
		ran, n, *flagFirst, end-1, time.Since(began).Round(time.Millisecond), len(failures), events, virtual.Round(time.Second), total)
	knownNames := make([]string, 0, len(known))
	for k := range known {
		knownNames = append(knownNames, k)
	}
	sort.Strings(knownNames)
	for _, k := range knownNames {
		if seeds := known[k]; len(seeds) > 0 {
			t.Logf("%d seeds failed by known bug %s (%s); first %v", len(seeds), k, KnownBugs[k], seeds[:min(len(seeds), 10)])
		}
	}
	if ran < n {
		t.Errorf("stopped after %d of %d seeds at the test deadline; rerun with -timeout=0", ran, n)
	}
	if len(failures) == 0 {
		return
	}
	byCheck := map[string][]uint64{}
	for _, f := range failures {
		byCheck[f.Check] = append(byCheck[f.Check], f.Seed)
	}
	var b strings.Builder
	keys := make([]string, 0, len(byCheck))
	for k := range byCheck {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %d seeds, first %v\n", k, len(byCheck[k]), byCheck[k][:min(len(byCheck[k]), 10)])
	}
	t.Errorf("%d of %d seeds failed:\n%s", len(failures), ran, b.String())
	for _, f := range failures[:min(len(failures), 3)] {
		t.Errorf("%v", f)
	}
}

// TestReproducible runs seeds twice: the same seed must give the same
// run, line for line.
func TestReproducible(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 42} {
		a := Run(Options{Seed: seed, KeepTrace: true})
		b := Run(Options{Seed: seed, KeepTrace: true})
		if a.TraceHash != b.TraceHash || a.Events != b.Events || len(a.Trace) != len(b.Trace) {
			for i := range min(len(a.Trace), len(b.Trace)) {
				if a.Trace[i] != b.Trace[i] {
					t.Fatalf("seed %d diverges at trace line %d:\n  %s\n  %s", seed, i, a.Trace[i], b.Trace[i])
				}
			}
			t.Fatalf("seed %d: hashes %016x/%016x, events %d/%d", seed, a.TraceHash, b.TraceHash, a.Events, b.Events)
		}
	}
}

// TestBrokenRulesAreCaught breaks each rule of the runtime in turn and
// runs a seed on which the checkers catch it: every checker is shown to
// fail on a broken build. (The seeds were found with -bug=NAME -seeds=150;
// a change of the simulation may move them, and then this test says
// which to look for again.)
func TestBrokenRulesAreCaught(t *testing.T) {
	for _, c := range []struct {
		bug   string
		seed  uint64
		check string
	}{
		{"LeaderIgnoresLease", 11, ckLeaseFence},
		{"TrustLeaseAfterPause", 17, ckLeaseFence},
		{"FollowerSkipsTruncate", 2, ckAgree},
		{"UncleanElection", 7, ckAckedLost},
		{"HWIsLEO", 14, ckClientHW},
		{"HWIsLEO", 2, ckConsumedLost},
		{"SkipKIP207", 31, ckClientHW},
		{"NoReregister", 3, ckLiveness},
		{"ElectEmptyDisk", 8397, ckAckedLost},
		{"ReuseLeaderEpoch", 2, ckAckEpoch},
	} {
		t.Run(c.bug+"-"+c.check, func(t *testing.T) {
			bugs, err := BugByName(c.bug)
			if err != nil {
				t.Fatal(err)
			}
			if res := Run(Options{Seed: c.seed}); res.Failure != nil {
				t.Fatalf("seed %d fails without the bug: %v", c.seed, res.Failure)
			}
			res := Run(Options{Seed: c.seed, Bugs: bugs})
			if res.Failure == nil || res.Failure.Check != c.check {
				t.Fatalf("seed %d with %s: failure %v, want checker %q (find another seed: %s -seeds=150)",
					c.seed, c.bug, res.Failure, c.check, ReplayCommand(c.seed, c.bug, ""))
			}
		})
	}
}
