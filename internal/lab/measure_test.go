package lab

import (
	"reflect"
	"testing"
	"time"
)

func tps(topic string, ps ...int32) []TP {
	out := make([]TP, len(ps))
	for i, p := range ps {
		out[i] = TP{topic, p}
	}
	return out
}

func sec(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func ev(at float64, member string, inc int, kind EventKind, gen int32, parts ...int32) OwnerEvent {
	return OwnerEvent{At: sec(at), Member: member, Incarnation: inc, Kind: kind, Generation: gen, Partitions: tps("t", parts...)}
}

// An eager rebalance: both members give up everything, then get it back.
// Every partition pauses; the group stops between the last revoke and the
// first assignment.
func TestAnalyzeEagerRebalance(t *testing.T) {
	rec := &Recording{
		Events: []OwnerEvent{
			ev(0.5, "m1", 0, Assigned, 1, 0, 1),
			ev(0.6, "m2", 0, Assigned, 1, 2, 3),
			ev(2.0, "m1", 0, Revoked, 1, 0, 1),
			ev(2.1, "m2", 0, Revoked, 1, 2, 3),
			ev(2.5, "m1", 0, Assigned, 2, 0, 1),
			ev(2.6, "m2", 0, Assigned, 2, 2, 3),
		},
		Partitions:    tps("t", 0, 1, 2, 3),
		Actions:       []Action{{At: sec(1.9), What: "restart", Member: "m1"}},
		BaselineStart: sec(1),
		DisruptionEnd: sec(2.6),
		End:           sec(4),
	}
	m := Analyze(rec)
	if m.Rebalances != 1 {
		t.Errorf("rebalances = %d, want 1 (generation 2)", m.Rebalances)
	}
	if want := []Window{{Start: sec(2.0), End: sec(2.6), Duration: sec(0.6)}}; !reflect.DeepEqual(m.Windows, want) {
		t.Errorf("windows = %+v, want %+v", m.Windows, want)
	}
	want := []Pause{
		{TP: TP{"t", 0}, From: sec(2.0), To: sec(2.5), Duration: sec(0.5), Prev: "m1", Next: "m1"},
		{TP: TP{"t", 1}, From: sec(2.0), To: sec(2.5), Duration: sec(0.5), Prev: "m1", Next: "m1"},
		{TP: TP{"t", 2}, From: sec(2.1), To: sec(2.6), Duration: sec(0.5), Prev: "m2", Next: "m2"},
		{TP: TP{"t", 3}, From: sec(2.1), To: sec(2.6), Duration: sec(0.5), Prev: "m2", Next: "m2"},
	}
	if !reflect.DeepEqual(m.Pauses, want) {
		t.Errorf("pauses = %+v\nwant %+v", m.Pauses, want)
	}
	if m.Pause.Count != 4 || m.Pause.Max != 500 || m.Pause.P50 != 500 || m.PausedPartitions != 4 {
		t.Errorf("pause stats = %+v over %d partitions", m.Pause, m.PausedPartitions)
	}
	if m.StopTheWorld != sec(0.4) {
		t.Errorf("stop the world = %v, want 400ms (last revoke 2.1s to first assignment 2.5s)", m.StopTheWorld)
	}
	if m.Moved != 0 {
		t.Errorf("moved = %d, want 0: every partition went back to its owner", m.Moved)
	}
}

// Partitions added under eager: one member gets the old partitions back,
// and the other, a moment later in the same generation, only new ones. It
// is one rebalance, one window.
func TestAnalyzeWindowSpansItsGeneration(t *testing.T) {
	rec := &Recording{
		Events: []OwnerEvent{
			ev(0.5, "m1", 0, Assigned, 1, 0, 1),
			ev(0.5, "m2", 0, Assigned, 1, 2, 3),
			ev(2.0, "m1", 0, Revoked, 1, 0, 1),
			ev(2.0, "m2", 0, Revoked, 1, 2, 3),
			ev(2.2, "m1", 0, Assigned, 2, 0, 1, 2, 3),
			ev(2.3, "m2", 0, Assigned, 2, 4, 5),
		},
		Partitions:    tps("t", 0, 1, 2, 3, 4, 5),
		BaselineStart: sec(1),
		End:           sec(3),
	}
	m := Analyze(rec)
	if want := []Window{{Start: sec(2.0), End: sec(2.3), Duration: sec(0.3)}}; !reflect.DeepEqual(m.Windows, want) {
		t.Errorf("windows = %+v, want %+v", m.Windows, want)
	}
	if m.Rebalances != 1 || m.Moved != 2 || m.Pause.Count != 4 {
		t.Errorf("rebalances %d, moved %d, pauses %d: want 1, 2 (p2 and p3 went to m1), 4", m.Rebalances, m.Moved, m.Pause.Count)
	}
}

// A cooperative crash: the survivor keeps what it had and, once the
// session expires, gets the dead member's partitions without giving
// anything up. Those two pause from the crash to the assignment; nothing
// stops the world.
func TestAnalyzeCrashCooperative(t *testing.T) {
	rec := &Recording{
		Events: []OwnerEvent{
			ev(0.5, "m1", 0, Assigned, 1, 0, 1),
			ev(0.5, "m2", 0, Assigned, 1, 2, 3),
			{At: sec(2), Member: "m2", Kind: Crashed, Generation: -1},
			// A late callback of the killed client is ignored.
			ev(3, "m2", 0, Revoked, 1, 2, 3),
			ev(8, "m1", 0, Assigned, 2, 2, 3),
		},
		Partitions:    tps("t", 0, 1, 2, 3),
		Actions:       []Action{{At: sec(2), What: "crash", Member: "m2"}},
		BaselineStart: sec(1),
		DisruptionEnd: sec(8),
		End:           sec(9),
	}
	m := Analyze(rec)
	want := []Pause{
		{TP: TP{"t", 2}, From: sec(2), To: sec(8), Duration: sec(6), Prev: "m2", Next: "m1"},
		{TP: TP{"t", 3}, From: sec(2), To: sec(8), Duration: sec(6), Prev: "m2", Next: "m1"},
	}
	if !reflect.DeepEqual(m.Pauses, want) {
		t.Errorf("pauses = %+v\nwant %+v", m.Pauses, want)
	}
	if m.StopTheWorld != 0 {
		t.Errorf("stop the world = %v, want 0", m.StopTheWorld)
	}
	if m.Moved != 2 {
		t.Errorf("moved = %d, want 2", m.Moved)
	}
	if want := []Window{{Start: sec(8), End: sec(8)}}; !reflect.DeepEqual(m.Windows, want) {
		t.Errorf("windows = %+v, want %+v (the survivor only saw an assignment)", m.Windows, want)
	}
	if m.Rebalances != 1 {
		t.Errorf("rebalances = %d, want 1", m.Rebalances)
	}
}

// A static restart: the member gives its partitions up as it closes and
// its next incarnation gets the very same ones back with no new
// generation. The partitions pause for the restart but none moves and no
// rebalance happened.
func TestAnalyzeStaticRestart(t *testing.T) {
	rec := &Recording{
		Events: []OwnerEvent{
			ev(0.5, "m1", 0, Assigned, 3, 0, 1),
			ev(0.5, "m2", 0, Assigned, 3, 2, 3),
			ev(2, "m1", 0, Revoked, 3, 0, 1),
			ev(2.7, "m1", 1, Assigned, 3, 0, 1),
		},
		Partitions:    tps("t", 0, 1, 2, 3),
		Actions:       []Action{{At: sec(2), What: "restart", Member: "m1"}},
		BaselineStart: sec(1),
		DisruptionEnd: sec(2.7),
		End:           sec(3),
	}
	m := Analyze(rec)
	if m.Moved != 0 || m.Rebalances != 0 {
		t.Errorf("moved %d, rebalances %d, want 0 and 0", m.Moved, m.Rebalances)
	}
	if m.Pause.Count != 2 || m.Pause.Max != 700 {
		t.Errorf("pause = %+v, want two of 700ms", m.Pause)
	}
}

// A member that overran its rebalance timeout keeps consuming (a zombie)
// until it learns it was fenced, while its partitions already have a new
// owner: no pause, no second window, and the hand-off counts as a move.
func TestAnalyzeZombieOverlap(t *testing.T) {
	rec := &Recording{
		Events: []OwnerEvent{
			ev(0.5, "m1", 0, Assigned, 1, 0),
			ev(0.5, "m2", 0, Assigned, 1, 1),
			ev(3, "m1", 0, Assigned, 2, 1),
			ev(5, "m2", 0, Lost, 1, 1),
		},
		Partitions:    tps("t", 0, 1),
		BaselineStart: sec(1),
		End:           sec(6),
	}
	m := Analyze(rec)
	if len(m.Pauses) != 0 || m.StopTheWorld != 0 {
		t.Errorf("pauses %+v, stop the world %v: want none", m.Pauses, m.StopTheWorld)
	}
	if len(m.Windows) != 1 || m.Moved != 1 {
		t.Errorf("windows %+v, moved %d: want one window and one move", m.Windows, m.Moved)
	}
}

// A partition nobody takes back pauses until the end, and the window that
// lost it never finishes.
func TestAnalyzeUnfinished(t *testing.T) {
	rec := &Recording{
		Events: []OwnerEvent{
			ev(0.5, "m1", 0, Assigned, 1, 0, 1),
			ev(2, "m1", 0, Revoked, 1, 1),
		},
		Partitions:    tps("t", 0, 1),
		BaselineStart: sec(1),
		End:           sec(5),
	}
	m := Analyze(rec)
	want := []Pause{{TP: TP{"t", 1}, From: sec(2), To: sec(5), Duration: sec(3), Prev: "m1"}}
	if !reflect.DeepEqual(m.Pauses, want) {
		t.Errorf("pauses = %+v, want %+v", m.Pauses, want)
	}
	if len(m.Windows) != 1 || !m.Windows[0].Unfinished || m.Windows[0].Duration != sec(3) {
		t.Errorf("windows = %+v, want one unfinished of 3s", m.Windows)
	}
}

// Records: one polled twice, one never polled, one whose key does not match
// what was acknowledged at its offset; throughput, backlog and latency with
// known values.
func TestAnalyzeRecords(t *testing.T) {
	p0 := TP{"t", 0}
	rec := &Recording{
		Produced: []Production{
			{At: sec(1.0), TP: p0, Offset: 0, Key: 10},
			{At: sec(1.1), TP: p0, Offset: 1, Key: 11},
			{At: sec(2.0), TP: p0, Offset: 2, Key: 12},
			{At: sec(2.1), TP: p0, Offset: 3, Key: 13},
			{At: sec(2.2), TP: p0, Offset: 4, Key: 14},
		},
		Consumed: []Consumption{
			{At: sec(1.01), Member: "m1", TP: p0, Offset: 0, Key: 10, ProducedAt: sec(1.0)},
			{At: sec(1.13), Member: "m1", TP: p0, Offset: 1, Key: 11, ProducedAt: sec(1.1)},
			// Produced in the disruption, consumed 500ms later.
			{At: sec(2.5), Member: "m2", TP: p0, Offset: 2, Key: 12, ProducedAt: sec(2.0)},
			// Polled again by the next owner: a duplicate.
			{At: sec(2.6), Member: "m2", TP: p0, Offset: 1, Key: 11, ProducedAt: sec(1.1)},
			// The wrong key at offset 3.
			{At: sec(2.7), Member: "m2", TP: p0, Offset: 3, Key: 99, ProducedAt: sec(2.1)},
			// Offset 4 is never consumed: lost.
		},
		Actions:       []Action{{At: sec(1.5), What: "crash", Member: "m1"}},
		BaselineStart: sec(1),
		DisruptionEnd: sec(2.5),
		End:           sec(3),
		Bucket:        500 * time.Millisecond,
	}
	m := Analyze(rec)
	if m.Consumed != 5 || m.Produced != 5 {
		t.Errorf("consumed %d produced %d, want 5 and 5", m.Consumed, m.Produced)
	}
	if m.Duplicates != 1 {
		t.Errorf("duplicates = %d, want 1", m.Duplicates)
	}
	if m.Lost != 1 || len(m.LostRecords) != 1 || m.LostRecords[0].Offset != 4 {
		t.Errorf("lost = %d %+v, want offset 4", m.Lost, m.LostRecords)
	}
	if m.Mismatched != 1 {
		t.Errorf("mismatched = %d, want 1", m.Mismatched)
	}
	// Baseline: offsets 0 and 1 (10ms and 30ms); disruption: offsets 2
	// and 3 (500ms and 600ms).
	if b := m.LatencyBaseline; b.Count != 2 || b.P50 != 10 || b.P99 != 30 || b.Max != 30 {
		t.Errorf("baseline latency = %+v", b)
	}
	if d := m.LatencyDisruption; d.Count != 2 || d.P50 != 500 || d.Max != 600 {
		t.Errorf("disruption latency = %+v", d)
	}
	wantRates := []float64{0, 0, 4, 0, 0, 6, 0}
	if len(m.Throughput) != len(wantRates) {
		t.Fatalf("throughput = %+v", m.Throughput)
	}
	for i, r := range wantRates {
		if m.Throughput[i].Rate != r || m.Throughput[i].At != time.Duration(i)*500*time.Millisecond {
			t.Errorf("throughput[%d] = %+v, want rate %v", i, m.Throughput[i], r)
		}
	}
	if m.BaselineRate != 4 || m.MinRate != 0 {
		t.Errorf("baseline rate %v min rate %v, want 4 and 0", m.BaselineRate, m.MinRate)
	}
	// At 2.2s offsets 2, 3 and 4 are acknowledged and unread.
	if m.Backlog != 3 {
		t.Errorf("backlog = %d, want 3", m.Backlog)
	}
}

func TestStatsNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 200; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := statsOf(ds)
	if s.Count != 200 || s.P50 != 100 || s.P99 != 198 || s.Max != 200 || s.Total != 20100 {
		t.Errorf("stats = %+v", s)
	}
	if (statsOf(nil) != Stats{}) {
		t.Errorf("stats of nothing = %+v", statsOf(nil))
	}
}

// A client that closed without giving up a partition in a callback owns it
// no more from the close on; its late callbacks are ignored.
func TestAnalyzeClosedReleases(t *testing.T) {
	rec := &Recording{
		Events: []OwnerEvent{
			ev(0.5, "m1", 0, Assigned, 1, 0),
			ev(0.5, "m2", 0, Assigned, 1, 1),
			{At: sec(2), Member: "m2", Kind: Closed, Generation: -1},
			ev(2.5, "m2", 0, Revoked, 1, 1),
			ev(3, "m1", 0, Assigned, 2, 1),
		},
		Partitions:    tps("t", 0, 1),
		BaselineStart: sec(1),
		End:           sec(4),
	}
	m := Analyze(rec)
	want := []Pause{{TP: TP{"t", 1}, From: sec(2), To: sec(3), Duration: sec(1), Prev: "m2", Next: "m1"}}
	if !reflect.DeepEqual(m.Pauses, want) {
		t.Errorf("pauses = %+v, want %+v", m.Pauses, want)
	}
	if want := []Window{{Start: sec(3), End: sec(3)}}; !reflect.DeepEqual(m.Windows, want) || m.Rebalances != 1 {
		t.Errorf("windows = %+v, rebalances %d: want %+v and 1", m.Windows, m.Rebalances, want)
	}
}
