package sim

import (
	"flag"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/inspect"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var (
	flagSeeds = flag.Int("seeds", 1000, "how many seeds TestSim runs (and TestSimRuntime, when given; it runs 200 otherwise)")
	flagFirst = flag.Uint64("first", 1, "first seed of TestSim's batch")
	flagSeed  = flag.Uint64("seed", 0, "run only this seed; with -v the whole trace is printed")
	flagBug   = flag.String("bug", "", "enable a harness bug switch by name (see bugSwitches) for TestSim")
	flagRepro = flag.Int("repro-seeds", 0, "TestReproducible runs seeds 1..N of each mode twice instead of its five fixed seeds")
	flagMix   = flag.String("mix", "both", "group types of TestSim and TestSimRuntime: classic, both, consumer or migrate")
)

func mixFlag(t *testing.T) Mix {
	m, err := ParseMix(*flagMix)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// bugSwitches names every harness bug switch, for -bug and for
// TestCheckersCatchBrokenBehaviour.
var bugSwitches = []struct {
	name string
	set  func(*Bugs)
	// consumer marks a switch that breaks consumer groups only
	// (TestConsumerCheckersCatchBrokenBehaviour), migrate one that breaks
	// migrating groups only (TestMigrateCheckersCatchBrokenBehaviour).
	consumer, migrate bool
}{
	{"ReplyBeforeApply", func(b *Bugs) { b.ReplyBeforeApply = true }, false, false},
	{"DropOffsetRecords", func(b *Bugs) { b.DropOffsetRecords = true }, false, false},
	{"DropGroupRecords", func(b *Bugs) { b.DropGroupRecords = true }, false, false},
	{"ServeStaleSync", func(b *Bugs) { b.ServeStaleSync = true }, false, false},
	{"EagerInCooperative", func(b *Bugs) { b.EagerInCooperative = true }, false, false},
	{"LoseSessionTimers", func(b *Bugs) { b.LoseSessionTimers = true }, false, false},
	{"AckFailedWrite", func(b *Bugs) { b.AckFailedWrite = true }, false, false},
	{"ConsumerKeepRevoked", func(b *Bugs) { b.ConsumerKeepRevoked = true }, true, false},
	{"DropConsumerRecords", func(b *Bugs) { b.DropConsumerRecords = true }, true, false},
	{"ConsumerReplyBeforeApply", func(b *Bugs) { b.ConsumerReplyBeforeApply = true }, true, false},
	{"ClassicKeepRevoked", func(b *Bugs) { b.ClassicKeepRevoked = true }, false, true},
	{"DropConvertedGroupRecords", func(b *Bugs) { b.DropConvertedGroupRecords = true }, false, true},
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

func replay(seed uint64, runtime bool, mix Mix, bug string) string {
	if bug == "" {
		return ReplayCommand(seed, runtime, mix)
	}
	return ReplayCommand(seed, runtime, mix) + " -bug=" + bug
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
	mix := mixFlag(t)
	if *flagSeed != 0 {
		res := Run(Options{Seed: *flagSeed, Bugs: bugs, KeepTrace: testing.Verbose(), Runtime: runtimeMode, Mix: mix})
		for _, l := range res.Trace {
			t.Log(l)
		}
		t.Logf("seed %d: %d events, %v virtual, trace hash %016x\n%s", res.Seed, res.Events, res.Virtual, res.TraceHash, res.Stats)
		if res.Failure != nil {
			t.Fatalf("%v\nreplay: %s", res.Failure, replay(res.Seed, runtimeMode, mix, *flagBug))
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
				res := Run(Options{Seed: seed, Bugs: bugs, Runtime: runtimeMode, Mix: mix})
				mu.Lock()
				ran++
				total.Add(res.Stats)
				events += int64(res.Events)
				virtual += res.Virtual
				if f := res.Failure; f != nil {
					failures = append(failures, f)
					// Streamed with -v, so a long batch names its
					// failures as they happen.
					t.Logf("seed %d failed: %s: %s", seed, f.Check, firstLine(f.Msg))
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
	cEvents, cChecks := total.consumerTotals()
	t.Logf("ran %d of %d seeds (%d..%d, mix %s) in %v: %d failed; %d events, %v of virtual time; consumer groups: %d events, %d checks\ncounters over the batch:\n%s",
		ran, n, *flagFirst, end-1, mix, time.Since(began).Round(time.Millisecond), len(failures), events, virtual.Round(time.Second), cEvents, cChecks, total)
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
		mix     Mix
	}{{"model", false, MixClassic}, {"runtime", true, MixClassic}, {"model/both", false, MixBoth}, {"runtime/consumer", true, MixConsumer},
		{"model/migrate", false, MixMigrate}, {"runtime/migrate", true, MixMigrate}} {
		t.Run(mode.name, func(t *testing.T) {
			for _, seed := range seeds {
				a := Run(Options{Seed: seed, KeepTrace: true, Runtime: mode.runtime, Mix: mode.mix})
				b := Run(Options{Seed: seed, KeepTrace: true, Runtime: mode.runtime, Mix: mode.mix})
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
		if sw.consumer || sw.migrate {
			continue
		}
		t.Run(sw.name, func(t *testing.T) {
			var bugs Bugs
			sw.set(&bugs)
			for seed := uint64(1); seed <= maxSeeds; seed++ {
				res := Run(Options{Seed: seed, Bugs: bugs})
				if f := res.Failure; f != nil {
					if f.Check == "panic" || f.Check == "runaway" {
						t.Fatalf("bug %s crashed the simulator instead of tripping a checker:\n%v", sw.name, f)
					}
					t.Logf("caught by %q at seed %d after %v virtual: %s\nreplay: %s", f.Check, seed, f.At, firstLine(f.Msg), replay(seed, false, MixClassic, sw.name))
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
					t.Logf("caught by %q at seed %d after %v virtual: %s\nreplay: %s", f.Check, seed, f.At, firstLine(f.Msg), replay(seed, true, MixClassic, name))
					return
				}
			}
			t.Fatalf("no checker noticed bug %s over the real runtime in %d seeds", name, maxSeeds)
		})
	}
}

// TestConsumerCheckersCatchBrokenBehaviour runs consumer groups alone with
// each harness switch that breaks them and requires the consumer-group
// checker the switch aims at to catch it, over the model and over the real
// runtime. ReplyBeforeApply and LoseSessionTimers break the runtime for
// both group types; here they must be caught through consumer groups.
func TestConsumerCheckersCatchBrokenBehaviour(t *testing.T) {
	const maxSeeds = 300
	for _, tc := range []struct {
		bug     string
		runtime bool
		checks  []string
	}{
		{"ConsumerKeepRevoked", false, []string{ckCOwned}},
		{"DropConsumerRecords", false, []string{ckCRestore}},
		{"DropConsumerRecords", true, []string{ckCRestore}},
		{"ConsumerReplyBeforeApply", false, []string{ckCEpoch}},
		{"LoseSessionTimers", false, []string{"liveness"}},
	} {
		name := tc.bug
		if tc.runtime {
			name += "/runtime"
		}
		t.Run(name, func(t *testing.T) { catchBug(t, tc.bug, tc.runtime, MixConsumer, tc.checks, maxSeeds) })
	}
}

// catchBug runs seeds 1..maxSeeds of a mix with a harness bug switch and
// requires one of checks to be the first checker to fire.
func catchBug(t *testing.T, bug string, runtime bool, mix Mix, checks []string, maxSeeds uint64) {
	bugs := bugsByName(t, bug)
	for seed := uint64(1); seed <= maxSeeds; seed++ {
		f := Run(Options{Seed: seed, Bugs: bugs, Runtime: runtime, Mix: mix}).Failure
		if f == nil {
			continue
		}
		if !slices.Contains(checks, f.Check) {
			t.Fatalf("bug %s tripped %q, not one of %v:\n%v", bug, f.Check, checks, f)
		}
		t.Logf("caught by %q at seed %d after %v virtual: %s\nreplay: %s", f.Check, seed, f.At, firstLine(f.Msg), replay(seed, runtime, mix, bug))
		return
	}
	t.Fatalf("no checker noticed bug %s in %d seeds of the %s mix", bug, maxSeeds, mix)
}

// TestConsumerBookCheckers feeds the consumer-group checkers records that
// break the coordinator's books (a partition held by two members, a member
// epoch going back, a group epoch skipping), which no harness switch can
// produce without breaking the machine itself, and requires each to fail.
func TestConsumerBookCheckers(t *testing.T) {
	id := topicID("c0.t0")
	parts := func(ps ...int32) []consumer.TopicPartitions {
		return []consumer.TopicPartitions{{TopicID: id, Partitions: ps, Epochs: make([]int32, len(ps))}}
	}
	rec := func(r consumer.Record) group.Record {
		r.Group = "c0"
		return group.Record{Type: group.RecordType(r.Type), Group: "c0", Consumer: &r}
	}
	epoch := func(e int32) group.Record {
		return rec(consumer.Record{Type: consumer.RecordGroupEpoch, GroupEpoch: &consumer.GroupEpoch{Epoch: e}})
	}
	target := func(e int32) group.Record {
		return rec(consumer.Record{Type: consumer.RecordTargetEpoch, TargetEpoch: &consumer.TargetAssignmentEpoch{AssignmentEpoch: e}})
	}
	member := func(m string, e int32, assigned, pending []consumer.TopicPartitions) []group.Record {
		return []group.Record{
			rec(consumer.Record{Type: consumer.RecordMemberMetadata, Member: m, MemberMetadata: &consumer.MemberMetadata{}}),
			rec(consumer.Record{Type: consumer.RecordCurrentAssignment, Member: m, Current: &consumer.CurrentAssignment{MemberEpoch: e, Assigned: assigned, PendingRevocation: pending}}),
		}
	}
	base := append([]group.Record{epoch(1), epoch(2), target(2)}, member("a", 2, parts(0, 1), nil)...)
	for _, tc := range []struct {
		name  string
		recs  []group.Record
		check string
	}{
		{"valid", member("b", 2, parts(2), nil), ""},
		{"assigned-twice", member("b", 2, parts(1), nil), ckCOwned},
		{"pending-and-assigned", member("b", 2, parts(2), parts(0)), ckCOwned},
		{"member-epoch-back", member("a", 1, parts(0, 1), nil), ckCEpoch},
		{"member-ahead-of-target", member("b", 3, nil, nil), ckCEpoch},
		{"group-epoch-skips", []group.Record{epoch(4)}, ckCEpoch},
		{"target-epoch-back", []group.Record{target(1)}, ckCEpoch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &world{stats: Stats{}, topicIDs: map[consumer.TopicID]string{id: "c0.t0"}}
			w.chk = newChecker(w)
			w.chk.addConsumerGroup(&groupSpec{id: "c0", consumer: true})
			w.chk.afterConsumer(group.Output{Records: base})
			if w.failure != nil {
				t.Fatalf("the valid base failed: %v", w.failure)
			}
			w.chk.afterConsumer(group.Output{Records: tc.recs})
			switch {
			case tc.check == "" && w.failure != nil:
				t.Fatalf("valid records failed: %v", w.failure.Msg)
			case tc.check != "" && w.failure == nil:
				t.Fatalf("checker %s did not fire", tc.check)
			case tc.check != "" && w.failure.Check != tc.check:
				t.Fatalf("checker %s fired instead of %s: %s", w.failure.Check, tc.check, w.failure.Msg)
			}
		})
	}
}

// TestRuntimeCloseWhileReloading replays a runtime seed in which the
// simulator crashes the coordinator while a shard, reloading after a
// failed store write, waits to retry its load: the event loop had already
// taken Close's wake-up, so Close waited for a load that the virtual clock
// could never retry. The run must end, with its checks passing.
func TestRuntimeCloseWhileReloading(t *testing.T) {
	done := make(chan *Failure, 1)
	go func() {
		done <- Run(Options{Seed: 73, Runtime: true, Mix: MixConsumer}).Failure
	}()
	select {
	case f := <-done:
		if f != nil {
			t.Fatal(f)
		}
	case <-time.After(time.Minute):
		t.Fatal("runtime seed 73 (consumer mix) did not finish: Close waits for a reloading shard")
	}
}

// TestMigrateCheckersCatchBrokenBehaviour runs migrating groups alone with
// harness switches that break them, or break what must hold across
// conversions, and requires the checker each aims at to catch it.
func TestMigrateCheckersCatchBrokenBehaviour(t *testing.T) {
	const maxSeeds = 300
	for _, tc := range []struct {
		bug     string
		runtime bool
		checks  []string
	}{
		{"ClassicKeepRevoked", false, []string{ckMOwned}},
		{"ConsumerKeepRevoked", false, []string{ckMOwned}},
		{"DropConvertedGroupRecords", false, []string{ckMType}},
		{"DropConvertedGroupRecords", true, []string{ckMType}},
		{"DropOffsetRecords", false, []string{ckAckDurable, ckRestart}},
		{"AckFailedWrite", true, []string{ckAckDurable, ckRestart, ckCRestore, ckCEpoch, ckMType}},
	} {
		name := tc.bug
		if tc.runtime {
			name += "/runtime"
		}
		t.Run(name, func(t *testing.T) { catchBug(t, tc.bug, tc.runtime, MixMigrate, tc.checks, maxSeeds) })
	}
}

// TestMigrateRules feeds the migration rules changes of a group that the
// machine should never make (an upgrade on a JoinGroup, a consumer group
// left with classic members only, an online conversion that takes the
// epoch back, a group that vanishes), which no harness switch can produce
// without breaking the machine itself, and requires each to fail.
func TestMigrateRules(t *testing.T) {
	classic := func(epoch int32, members int) mstate {
		return mstate{typ: inspect.TypeClassic, epoch: epoch, members: members}
	}
	cons := func(epoch int32, members, consumers int) mstate {
		return mstate{typ: inspect.TypeConsumer, epoch: epoch, members: members, consumer: consumers}
	}
	heartbeat := group.Request{Msg: kmsg.NewPtrConsumerGroupHeartbeatRequest()}
	join := group.Request{Msg: kmsg.NewPtrJoinGroupRequest()}
	leave := group.Request{Msg: kmsg.NewPtrLeaveGroupRequest()}
	timer := group.Timer{}
	for _, tc := range []struct {
		name      string
		prev, now mstate
		ev        group.Event
		check     string
	}{
		{"online-upgrade", classic(4, 3), cons(4, 4, 1), heartbeat, ""},
		{"empty-upgrade", classic(9, 0), cons(1, 1, 1), heartbeat, ""},
		{"online-downgrade", cons(7, 3, 1), classic(7, 2), timer, ""},
		{"empty-downgrade", cons(7, 0, 0), classic(0, 0), join, ""},
		{"classic-member-joins", cons(7, 2, 1), cons(8, 3, 1), join, ""},
		{"upgrade-on-join", classic(4, 3), cons(4, 3, 0), join, ckMType},
		{"upgrade-on-timer", classic(4, 3), cons(4, 3, 1), timer, ckMType},
		{"no-downgrade", cons(7, 2, 1), cons(8, 1, 0), leave, ckMType},
		{"vanished", cons(7, 2, 1), mstate{}, timer, ckMType},
		{"upgrade-epoch-back", classic(4, 3), cons(1, 4, 1), heartbeat, ckMEpoch},
		{"downgrade-epoch-back", cons(7, 3, 1), classic(3, 2), timer, ckMEpoch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check, msg := migrateRule("m0", tc.prev, tc.now, tc.ev)
			if check != tc.check {
				t.Fatalf("checker %q fired (%s), want %q", check, msg, tc.check)
			}
		})
	}
}

// TestMigrateZombieClaims: what a process holds while the coordinator no
// longer counts it as a member is a zombie's, lost to the group, even once
// it rejoins under its old member id (seed 9002 of the migrate mix: a
// classic member removed on session expiry rejoined the converted group
// still consuming what the group had given another member); what it takes
// again is a member's claim.
func TestMigrateZombieClaims(t *testing.T) {
	p0 := tp{topic: "m0.t0", part: 0}
	p1 := tp{topic: "m0.t0", part: 1}
	q := &process{alive: true, memberID: "a", owned: []tp{p0, p1}}
	g := &groupSpec{id: "m0", procs: []*process{q}}
	c := &checker{}
	claims := func(step string, part tp, want bool) {
		t.Helper()
		if got := q.claims(q.held(), part); got != want {
			t.Fatalf("%s: claims %v = %v, want %v", step, part, got, want)
		}
	}
	c.noteFenced(g, map[string]int32{"a": 1})
	claims("member", p0, true)
	c.noteFenced(g, map[string]int32{})
	claims("removed", p0, false)
	claims("removed", p1, false)
	c.noteFenced(g, map[string]int32{"a": 1})
	claims("rejoined under its old id", p0, false)
	q.forgetFenced([]tp{p1})
	claims("taken again", p1, true)
	claims("not taken again", p0, false)
}

// TestMigrateConfigsShareChosen: every protocol list of a migrating
// group holds the protocol the classic group can choose (one of the lists'
// firsts), so a newcomer is never refused by a group whose members'
// records, after a load, keep only the chosen protocol.
func TestMigrateConfigsShareChosen(t *testing.T) {
	if len(migrateConfigs) == 0 {
		t.Fatal("no protocol lists for migrating groups")
	}
	for _, lists := range migrateConfigs {
		for _, a := range lists {
			for _, b := range lists {
				if !slices.Contains(b, a[0]) {
					t.Errorf("configs %v: %v lacks %q, the first of %v", lists, b, a[0], a)
				}
			}
		}
	}
	got := sharedFirstConfigs([][][]string{{{"range"}, {"cooperative-sticky", "range"}}, {{"cooperative-sticky", "range"}, {"cooperative-sticky"}}})
	if len(got) != 1 || got[0][0][0] != "cooperative-sticky" {
		t.Fatalf("sharedFirstConfigs kept %v, want only the cooperative-sticky lists", got)
	}
}

// TestMigrateLoadRestoresRecord: an upgrade clears the classic records
// seen; a load that undoes it (the store never held the consumer group)
// brings back the persisted record of the classic generation, so a static
// replacement at that generation is not taken for an incomplete new
// assignment (seed 971 of the migrate mix, before the machine fixes).
func TestMigrateLoadRestoresRecord(t *testing.T) {
	persisted := &group.GroupMetadata{Generation: 5, Members: []group.MemberMetadata{{MemberID: "a"}}}
	gc := &gcheck{records: map[int32]*group.GroupMetadata{}, durMeta: persisted}
	gc.restoreRecord()
	if gc.records[5] != persisted {
		t.Fatalf("records after the load = %v, want generation 5's persisted record", gc.records)
	}
	newer := &group.GroupMetadata{Generation: 5, Members: []group.MemberMetadata{{MemberID: "b"}}}
	gc.records[5] = newer
	gc.restoreRecord()
	if gc.records[5] != newer {
		t.Fatal("a load replaced a record of the generation it already had")
	}
	empty := &gcheck{records: map[int32]*group.GroupMetadata{}, durMeta: &group.GroupMetadata{Generation: 2}}
	empty.restoreRecord()
	if len(empty.records) != 0 {
		t.Fatalf("an empty group's load added records %v", empty.records)
	}
}
