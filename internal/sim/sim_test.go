package sim

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
	flagSeeds = flag.Int("seeds", 1000, "how many seeds TestSim runs (and TestSimRuntime, when given; it runs 200 otherwise)")
	flagFirst = flag.Uint64("first", 1, "first seed of TestSim's batch")
	flagSeed  = flag.Uint64("seed", 0, "run only this seed; with -v the whole trace is printed")
	flagBug   = flag.String("bug", "", "enable a harness bug switch by name (see bugSwitches) for TestSim")
	flagRepro = flag.Int("repro-seeds", 0, "TestReproducible runs seeds 1..N of each mode twice instead of its five fixed seeds")
)

// bugSwitches names every harness bug switch, for -bug and for
// TestCheckersCatchBrokenBehaviour.
var bugSwitches = []struct {
	name string
	set  func(*Bugs)
}{
	{"ReplyBeforeApply", func(b *Bugs) { b.ReplyBeforeApply = true }},
	{"DropOffsetRecords", func(b *Bugs) { b.DropOffsetRecords = true }},
	{"DropGroupRecords", func(b *Bugs) { b.DropGroupRecords = true }},
	{"ServeStaleSync", func(b *Bugs) { b.ServeStaleSync = true }},
	{"EagerInCooperative", func(b *Bugs) { b.EagerInCooperative = true }},
	{"LoseSessionTimers", func(b *Bugs) { b.LoseSessionTimers = true }},
	{"AckFailedWrite", func(b *Bugs) { b.AckFailedWrite = true }},
}

func bugsByName(t *testing.T, name string) Bugs {
	var b Bugs
	if name == "" {
		return b
	}
	for _, s := range bugSwitches {
		if s.name == name {
			s.set(&b)
			return b
		}
	}
	t.Fatalf("unknown -bug %q", name)
	return b
}

func replay(seed uint64, runtime bool, bug string) string {
	if bug == "" {
		return ReplayCommand(seed, runtime)
	}
	return ReplayCommand(seed, runtime) + " -bug=" + bug
}

// TestSim runs a batch of seeds (-seeds, from -first), or one seed (-seed),
// over the model of the coordinator runtime. A failure prints the seed, the
// checker, the last events and the command that replays it.
func TestSim(t *testing.T) {
	runSeeds(t, *flagSeeds, false)
}

// TestSimRuntime runs seeds over the real coordinator runtime and pebble
// store (Options.Runtime): 200 by default, or -seeds when given; -seed
// runs one.
func TestSimRuntime(t *testing.T) {
	n := 200
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "seeds" {
			n = *flagSeeds
		}
	})
	runSeeds(t, n, true)
}

func runSeeds(t *testing.T, n int, runtimeMode bool) {
	bugs := bugsByName(t, *flagBug)
	if *flagSeed != 0 {
		res := Run(Options{Seed: *flagSeed, Bugs: bugs, KeepTrace: testing.Verbose(), Runtime: runtimeMode})
		for _, l := range res.Trace {
			t.Log(l)
		}
		t.Logf("seed %d: %d events, %v virtual, trace hash %016x\n%s", res.Seed, res.Events, res.Virtual, res.TraceHash, res.Stats)
		if res.Failure != nil {
			t.Fatalf("%v\nreplay: %s", res.Failure, replay(res.Seed, runtimeMode, *flagBug))
		}
		return
	}
	if testing.Short() {
		n = min(n, 50)
	}
	workers := min(runtime.GOMAXPROCS(0), 2)
	// Stop starting seeds a while before the test binary's deadline so a
	// long batch reports how far it got instead of being killed.
	stopAt, hasDeadline := t.Deadline()
	began := time.Now()
	var (
		mu       sync.Mutex
		total    = Stats{}
		failures []*Failure
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
				res := Run(Options{Seed: seed, Bugs: bugs, Runtime: runtimeMode})
				mu.Lock()
				ran++
				total.Add(res.Stats)
				events += int64(res.Events)
				virtual += res.Virtual
				if res.Failure != nil {
					failures = append(failures, res.Failure)
				}
				if ran%progressEvery(runtimeMode) == 0 {
					// Streamed with -v, so a long batch shows progress.
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
	for _, k := range sortedStrings(byCheck) {
		fmt.Fprintf(&b, "  %s: %d seeds, first %v\n", k, len(byCheck[k]), byCheck[k][:min(len(byCheck[k]), 10)])
	}
	t.Errorf("%d of %d seeds failed:\n%s", len(failures), ran, b.String())
	for _, f := range failures[:min(len(failures), 3)] {
		t.Errorf("%v", f)
	}
}

func progressEvery(runtimeMode bool) int {
	if runtimeMode {
		return 1000
	}
	return 10000
}

func sortedStrings[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestReproducible runs seeds twice and compares their traces: the same
// seed must give the same run, event for event, over the model and over the
// real runtime.
func TestReproducible(t *testing.T) {
	seeds := []uint64{1, 2, 3, 42, 1234}
	if *flagRepro > 0 {
		seeds = nil
		for s := range *flagRepro {
			seeds = append(seeds, uint64(s)+1)
		}
	}
	for _, mode := range []struct {
		name    string
		runtime bool
	}{{"model", false}, {"runtime", true}} {
		t.Run(mode.name, func(t *testing.T) {
			for _, seed := range seeds {
				a := Run(Options{Seed: seed, KeepTrace: true, Runtime: mode.runtime})
				b := Run(Options{Seed: seed, KeepTrace: true, Runtime: mode.runtime})
				if a.TraceHash != b.TraceHash || a.Events != b.Events || len(a.Trace) != len(b.Trace) {
					for i := range min(len(a.Trace), len(b.Trace)) {
						if a.Trace[i] != b.Trace[i] {
							t.Fatalf("seed %d diverges at trace line %d:\n  %s\n  %s", seed, i, a.Trace[i], b.Trace[i])
						}
					}
					t.Fatalf("seed %d: hashes %016x/%016x, events %d/%d, trace lines %d/%d", seed, a.TraceHash, b.TraceHash, a.Events, b.Events, len(a.Trace), len(b.Trace))
				}
				if (a.Failure == nil) != (b.Failure == nil) {
					t.Fatalf("seed %d failed in only one of two runs", seed)
				}
				if *flagRepro == 0 {
					t.Logf("seed %d: %d events, trace hash %016x", seed, a.Events, a.TraceHash)
				}
			}
		})
	}
}

// TestCheckersCatchBrokenBehaviour enables each harness bug switch and
// requires the checkers to catch it within a bounded number of seeds.
func TestCheckersCatchBrokenBehaviour(t *testing.T) {
	const maxSeeds = 200
	for _, sw := range bugSwitches {
		t.Run(sw.name, func(t *testing.T) {
			var bugs Bugs
			sw.set(&bugs)
			for seed := uint64(1); seed <= maxSeeds; seed++ {
				res := Run(Options{Seed: seed, Bugs: bugs})
				if f := res.Failure; f != nil {
					if f.Check == "panic" || f.Check == "runaway" {
						t.Fatalf("bug %s crashed the simulator instead of tripping a checker:\n%v", sw.name, f)
					}
					t.Logf("caught by %q at seed %d after %v virtual: %s\nreplay: %s", f.Check, seed, f.At, firstLine(f.Msg), replay(seed, false, sw.name))
					return
				}
			}
			t.Fatalf("no checker noticed bug %s in %d seeds", sw.name, maxSeeds)
		})
	}
}

// TestRuntimeCheckersCatchBrokenStore runs the real runtime over a store
// that breaks its contract (it drops records, or acknowledges a write that
// failed) and requires the checkers to catch it.
func TestRuntimeCheckersCatchBrokenStore(t *testing.T) {
	const maxSeeds = 200
	for _, name := range []string{"DropOffsetRecords", "DropGroupRecords", "AckFailedWrite"} {
		t.Run(name, func(t *testing.T) {
			bugs := bugsByName(t, name)
			for seed := uint64(1); seed <= maxSeeds; seed++ {
				res := Run(Options{Seed: seed, Bugs: bugs, Runtime: true})
				if f := res.Failure; f != nil {
					if f.Check == "panic" || f.Check == "runaway" || f.Check == "runtime" || f.Check == "store" {
						t.Fatalf("bug %s broke the simulation instead of tripping a checker:\n%v", name, f)
					}
					t.Logf("caught by %q at seed %d after %v virtual: %s\nreplay: %s", f.Check, seed, f.At, firstLine(f.Msg), replay(seed, true, name))
					return
				}
			}
			t.Fatalf("no checker noticed bug %s over the real runtime in %d seeds", name, maxSeeds)
		})
	}
}
