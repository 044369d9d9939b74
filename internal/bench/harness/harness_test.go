package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	p, err := plan([]string{"heartbeat", "produce-none", "rebalance+work"}, true)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range p {
		names = append(names, s.name)
	}
	want := []string{"heartbeat", "heartbeat+work", "produce-none", "rebalance+work"}
	if !slices.Equal(names, want) {
		t.Fatalf("plan %v, want %v", names, want)
	}
	if !p[1].work || p[0].work {
		t.Fatalf("work flags %v %v", p[0].work, p[1].work)
	}
	for _, bad := range []string{"nope", "produce-none+work", "hold+work"} {
		if _, err := plan([]string{bad}, false); err == nil {
			t.Errorf("plan %q: no error", bad)
		}
	}
	if _, err := plan(splitList(defaultScenarios), true); err != nil {
		t.Fatalf("default scenarios: %v", err)
	}
}

func TestInTurn(t *testing.T) {
	ts := []string{"groupd", "kfake", "naive"}
	firsts := map[string]bool{}
	for r := range 3 {
		order := inTurn(ts, r)
		if len(order) != 3 || !slices.Equal(slices.Sorted(slices.Values(order)), []string{"groupd", "kfake", "naive"}) {
			t.Fatalf("run %d: %v", r, order)
		}
		firsts[order[0]] = true
	}
	if len(firsts) != 3 {
		t.Fatalf("not every side went first: %v", firsts)
	}
	if !slices.Equal(ts, []string{"groupd", "kfake", "naive"}) {
		t.Fatalf("inTurn changed its argument: %v", ts)
	}
}

func TestQuickArgsCoverScenarios(t *testing.T) {
	for name, s := range scenarios {
		if _, ok := quickArgs[s.args[1]]; !ok {
			t.Errorf("scenario %s (%s) has no quick sizes", name, s.args[1])
		}
	}
	if _, ok := quickArgs["work"]; !ok {
		t.Error("the other work has no quick sizes")
	}
}

func TestTable(t *testing.T) {
	h := &harness{}
	add := func(target string, v float64) {
		h.records = append(h.records, record{Scenario: "heartbeat", Target: target,
			Result: &result{Metric: "heartbeats", Unit: "hb/s", HigherIsBetter: true, Value: v, P50ms: 1, P99ms: 2, ServerCPUusPerOp: 30}})
	}
	for _, v := range []float64{100, 300, 200} {
		add("groupd", v)
	}
	add("kfake", 100)
	add("naive", 400)
	h.records = append(h.records, record{Scenario: "heartbeat", Target: "kfake", Error: "boom\nmore"})
	h.failures = 1
	out := h.table()
	for _, want := range []string{
		"| heartbeat | heartbeats (hb/s) | 200 | 100 | 400 | 2.00 | 0.50 |",
		"| heartbeat | heartbeats | groupd | 3 | 200 hb/s | 100–300 | 1.00 | 2.00 | 30.0 |",
		"| heartbeat | heartbeats | kfake | 1 (+1 failed) |",
		"- heartbeat on kfake, run 0: boom\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestFormat(t *testing.T) {
	for v, want := range map[float64]string{1234567.4: "1,234,567", 999.6: "1,000", 150.2: "150", 12.345: "12.3", 1.234: "1.23"} {
		if got := format(v, ""); got != want {
			t.Errorf("format(%v) = %q, want %q", v, got, want)
		}
	}
}

var smoke = flag.Bool("smoke", false, "run TestSmoke: build everything and run every scenario once, shrunk (a few minutes)")

// TestSmoke builds the four binaries and runs every scenario once on
// every side with -quick sizes. It takes minutes (building groupd), so it
// runs only with -smoke:
//
//	go test ./internal/bench/harness -run Smoke -v -args -smoke
func TestSmoke(t *testing.T) {
	if !*smoke {
		t.Skip("needs -smoke")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bins, err := build(root, dir, os.Getenv("GROUPD_BIN"), "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range scenarios {
		names = append(names, n)
	}
	plans, err := plan(sorted(names), true)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{bins: bins, dir: dir, raw: json.NewEncoder(io.Discard), quick: true, timeout: 5 * time.Minute, only: allTargets}
	h.runAll(plans, 1)
	t.Log("\n" + h.table())
	if h.failures > 0 {
		t.Fatalf("%d runs failed", h.failures)
	}
	for _, s := range plans {
		for _, target := range s.targets {
			if !slices.ContainsFunc(h.records, func(r record) bool { return r.Scenario == s.name && r.Target == target && r.Result != nil }) {
				t.Errorf("%s on %s: no result", s.name, target)
			}
		}
	}
}
