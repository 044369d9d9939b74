package lab

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// TP names one partition of one topic.
type TP struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

func (tp TP) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

func compareTP(a, b TP) int {
	if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// EventKind says what an OwnerEvent did to a member's partitions.
type EventKind uint8

// The kinds of ownership event. Assigned, Revoked and Lost are the client's
// own callbacks (OnPartitionsAssigned, OnPartitionsRevoked,
// OnPartitionsLost). Crashed is the lab killing the member's client, and
// Closed the lab's clean close of it having returned: from then on it
// consumes nothing, whatever it still held, and later callbacks of that
// client are ignored.
const (
	Assigned EventKind = iota + 1
	Revoked
	Lost
	Crashed
	Closed
)

func (k EventKind) String() string {
	switch k {
	case Assigned:
		return "assigned"
	case Revoked:
		return "revoked"
	case Lost:
		return "lost"
	case Crashed:
		return "crashed"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MarshalText names the kind in JSON.
func (k EventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// OwnerEvent is one change of what a member owns, as its client reported it.
type OwnerEvent struct {
	// At is the time since the recording started.
	At time.Duration `json:"at_ns"`
	// Member is the member's stable name (m1, m2, ...): a restarted
	// member keeps its name, and its Incarnation goes up by one.
	Member      string    `json:"member"`
	Incarnation int       `json:"incarnation"`
	Kind        EventKind `json:"kind"`
	// Generation is the classic generation or the consumer protocol's
	// member epoch the client was in at the callback; -1 when unknown.
	Generation int32 `json:"generation"`
	Partitions []TP  `json:"partitions,omitempty"`
}

// Consumption is one record polled by a member.
type Consumption struct {
	At     time.Duration
	Member string
	TP
	Offset int64
	Key    uint64
	// ProducedAt is when the producer handed the record over, read from
	// the record itself.
	ProducedAt time.Duration
}

// Production is one record the broker acknowledged to the producer.
type Production struct {
	At time.Duration
	TP
	Offset int64
	Key    uint64
}

// Action is something the lab did to the group: a restart, a crash, a
// member added or leaving, partitions added, a subscription changed.
type Action struct {
	At     time.Duration `json:"at_ns"`
	What   string        `json:"what"`
	Member string        `json:"member,omitempty"`
}

// Recording is everything a run saw from the clients' side.
type Recording struct {
	Events   []OwnerEvent
	Consumed []Consumption
	Produced []Production
	Actions  []Action
	// Partitions are the partitions the group should own at the end.
	Partitions []TP
	// BaselineStart is when the group first settled: measurements start
	// there. The quiet baseline runs from it to the first action.
	BaselineStart time.Duration
	// DisruptionEnd is when the group settled after the last action.
	DisruptionEnd time.Duration
	// End closes the measured window: every record produced has been
	// consumed (or the drain gave up), and no member has stopped yet.
	End time.Duration
	// Bucket is the width of a throughput sample; zero is DefaultBucket.
	Bucket time.Duration
}

// DefaultBucket is the throughput sampling width.
const DefaultBucket = 250 * time.Millisecond

// Stats summarizes a set of durations, in milliseconds.
type Stats struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Total float64 `json:"total_ms"`
}

func statsOf(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var total time.Duration
	for _, d := range s {
		total += d
	}
	return Stats{Count: len(s), P50: ms(rank(s, 0.50)), P99: ms(rank(s, 0.99)), Max: ms(s[len(s)-1]), Total: ms(total)}
}

// rank is the nearest-rank percentile of sorted values.
func rank(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Span is one stretch of time during which one incarnation of a member
// owned one partition.
type Span struct {
	TP
	Member      string        `json:"member"`
	Incarnation int           `json:"incarnation"`
	From        time.Duration `json:"from_ns"`
	To          time.Duration `json:"to_ns"`
	// Open is set when the member still owned it at the end.
	Open bool `json:"open,omitempty"`
}

// Pause is one stretch of time during which nobody owned a partition that
// had been owned before.
type Pause struct {
	TP
	From     time.Duration `json:"from_ns"`
	To       time.Duration `json:"to_ns"`
	Duration time.Duration `json:"duration_ns"`
	// Prev owned it before; Next after (empty if nobody by the end).
	Prev string `json:"prev"`
	Next string `json:"next"`
}

// Window is one rebalance as the clients saw it: from the first event that
// took a partition away (or the first assignment, when nothing was taken
// away first) to the assignment after which every partition was owned again.
type Window struct {
	Start    time.Duration `json:"start_ns"`
	End      time.Duration `json:"end_ns"`
	Duration time.Duration `json:"duration_ns"`
	// Unfinished is set when the end of the recording came first.
	Unfinished bool `json:"unfinished,omitempty"`
}

// Point is one throughput sample: records consumed per second in the bucket
// that starts At.
type Point struct {
	At   time.Duration `json:"at_ns"`
	Rate float64       `json:"rate"`
}

// PartitionPause sums one partition's pauses.
type PartitionPause struct {
	TP
	Count int     `json:"count"`
	Total float64 `json:"total_ms"`
	Max   float64 `json:"max_ms"`
}

// Measurements are a run's figures, all computed from its Recording.
type Measurements struct {
	// Rebalances counts the generations (member epochs under the
	// consumer protocol) the clients saw after the baseline.
	Rebalances int      `json:"rebalances"`
	Windows    []Window `json:"windows"`
	// RebalanceDuration summarizes the windows.
	RebalanceDuration Stats   `json:"rebalance_duration"`
	Pauses            []Pause `json:"pauses"`
	// Pause summarizes Pauses; PausedPartitions counts the distinct
	// partitions with at least one.
	Pause             Stats            `json:"pause"`
	PausedPartitions  int              `json:"paused_partitions"`
	PausePerPartition []PartitionPause `json:"pause_per_partition"`
	// Moved counts hand-offs after the baseline to a member with another
	// name: a restarted member taking its own partitions back is not one.
	Moved int `json:"moved"`
	// StopTheWorld is the time after the baseline during which no
	// partition at all was owned.
	StopTheWorld time.Duration `json:"stop_the_world_ns"`
	Consumed     int           `json:"consumed"`
	Produced     int           `json:"produced"`
	// Duplicates counts the polls of an offset beyond its first.
	Duplicates int `json:"duplicates"`
	// Lost counts acknowledged records never consumed; LostRecords lists
	// the first of them.
	Lost        int          `json:"lost"`
	LostRecords []Production `json:"lost_records,omitempty"`
	// Mismatched counts consumed records whose key is not the key
	// acknowledged at that offset.
	Mismatched int     `json:"mismatched"`
	Throughput []Point `json:"throughput"`
	// BaselineRate is the mean consumption rate of the quiet baseline;
	// MinRate the lowest bucket from the first action to the settle.
	BaselineRate float64 `json:"baseline_rate"`
	MinRate      float64 `json:"min_rate"`
	// Backlog is the most records acknowledged and not yet consumed at
	// once, over the disruption.
	Backlog int `json:"backlog"`
	// LatencyBaseline and LatencyDisruption are the end-to-end latencies
	// (produce to first poll) of the records produced in the baseline
	// and from the first action to the settle.
	LatencyBaseline   Stats  `json:"latency_baseline"`
	LatencyDisruption Stats  `json:"latency_disruption"`
	Spans             []Span `json:"spans"`
}

// maxLostListed bounds Measurements.LostRecords.
const maxLostListed = 20

type owner struct {
	member      string
	incarnation int
}

// Analyze computes a run's measurements from its recording.
func Analyze(rec *Recording) *Measurements {
	m := &Measurements{}
	events := slices.Clone(rec.Events)
	slices.SortStableFunc(events, func(a, b OwnerEvent) int { return cmp.Compare(a.At, b.At) })

	spans, windows, gens := replay(rec, events)
	m.Spans = spans
	m.Windows = windows
	var wd []time.Duration
	for _, w := range windows {
		wd = append(wd, w.Duration)
	}
	m.RebalanceDuration = statsOf(wd)
	m.Rebalances = gens

	m.Pauses, m.Moved = pauses(rec, spans)
	var pd []time.Duration
	per := map[TP]*PartitionPause{}
	for _, p := range m.Pauses {
		pd = append(pd, p.Duration)
		pp := per[p.TP]
		if pp == nil {
			pp = &PartitionPause{TP: p.TP}
			per[p.TP] = pp
		}
		pp.Count++
		pp.Total += ms(p.Duration)
		pp.Max = max(pp.Max, ms(p.Duration))
	}
	m.Pause = statsOf(pd)
	m.PausedPartitions = len(per)
	for _, pp := range per {
		m.PausePerPartition = append(m.PausePerPartition, *pp)
	}
	slices.SortFunc(m.PausePerPartition, func(a, b PartitionPause) int { return compareTP(a.TP, b.TP) })
	m.StopTheWorld = stopTheWorld(rec, spans)

	records(rec, m)
	return m
}

// replay walks the ownership events in time order and returns the spans of
// ownership, the rebalance windows after the baseline, and how many
// generations the clients saw after it.
func replay(rec *Recording, events []OwnerEvent) ([]Span, []Window, int) {
	holding := map[TP]map[owner]time.Duration{} // partition -> owner -> since
	crashed := map[owner]bool{}
	everOwned := map[TP]bool{}
	var spans []Span
	release := func(tp TP, o owner, at time.Duration) bool {
		since, ok := holding[tp][o]
		if !ok {
			return false
		}
		delete(holding[tp], o)
		spans = append(spans, Span{TP: tp, Member: o.member, Incarnation: o.incarnation, From: since, To: at})
		return true
	}
	complete := func() bool {
		for tp := range everOwned {
			if len(holding[tp]) == 0 {
				return false
			}
		}
		return true
	}

	var windows []Window
	var open *Window
	lastGen := int32(-1) // the generation of the assignment that closed the last window
	var baselineGen int32 = -1
	seenGens := map[int32]bool{}
	for _, e := range events {
		if e.At > rec.End {
			break
		}
		o := owner{e.Member, e.Incarnation}
		if crashed[o] {
			continue
		}
		measured := e.At >= rec.BaselineStart
		if !measured {
			baselineGen = max(baselineGen, e.Generation)
		} else if e.Generation > baselineGen {
			seenGens[e.Generation] = true
		}
		switch e.Kind {
		case Assigned:
			for _, tp := range e.Partitions {
				if holding[tp] == nil {
					holding[tp] = map[owner]time.Duration{}
				}
				if _, ok := holding[tp][o]; !ok {
					holding[tp][o] = e.At
				}
				everOwned[tp] = true
			}
			if !measured || len(e.Partitions) == 0 {
				continue
			}
			// A member that gets its share of the generation that
			// closed the last window after the others (a partition
			// nobody owned before, added to the topic) is still in
			// that rebalance.
			if open == nil && len(windows) > 0 && e.Generation >= 0 && e.Generation == lastGen {
				w := &windows[len(windows)-1]
				w.End = e.At
				w.Duration = w.End - w.Start
				continue
			}
			if open == nil {
				open = &Window{Start: e.At}
			}
			if complete() {
				open.End = e.At
				open.Duration = open.End - open.Start
				windows = append(windows, *open)
				open = nil
				lastGen = e.Generation
			}
		case Revoked, Lost, Crashed, Closed:
			parts := e.Partitions
			gone := e.Kind == Crashed || e.Kind == Closed
			if gone {
				crashed[o] = true
				parts = nil
				for tp, hs := range holding {
					if _, ok := hs[o]; ok {
						parts = append(parts, tp)
					}
				}
				slices.SortFunc(parts, compareTP)
			}
			orphaned := false
			for _, tp := range parts {
				if release(tp, o, e.At) && len(holding[tp]) == 0 {
					orphaned = true
				}
			}
			// A crash or close is the lab's act, not something a
			// client saw: the window opens when the others hear of it.
			if measured && orphaned && open == nil && !gone {
				open = &Window{Start: e.At}
			}
		}
	}
	if open != nil {
		open.End = rec.End
		open.Duration = open.End - open.Start
		open.Unfinished = true
		windows = append(windows, *open)
	}
	for tp, hs := range holding {
		for o, since := range hs {
			spans = append(spans, Span{TP: tp, Member: o.member, Incarnation: o.incarnation, From: since, To: rec.End, Open: true})
		}
	}
	slices.SortFunc(spans, func(a, b Span) int {
		if c := compareTP(a.TP, b.TP); c != 0 {
			return c
		}
		if c := cmp.Compare(a.From, b.From); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Member, b.Member); c != 0 {
			return c
		}
		return cmp.Compare(a.Incarnation, b.Incarnation)
	})
	return spans, windows, len(seenGens)
}

// pauses finds, per partition, the gaps between its spans of ownership
// that begin after the baseline, and counts the hand-offs to another
// member. spans are sorted by partition, then start.
func pauses(rec *Recording, spans []Span) ([]Pause, int) {
	var out []Pause
	moved := 0
	for i := 0; i < len(spans); {
		j := i
		for j < len(spans) && spans[j].TP == spans[i].TP {
			j++
		}
		ps := spans[i:j]
		coveredTo := ps[0].To
		last := ps[0]
		for k := 1; k < len(ps); k++ {
			s := ps[k]
			if s.From >= rec.BaselineStart && s.Member != ps[k-1].Member {
				moved++
			}
			if s.From > coveredTo && coveredTo >= rec.BaselineStart {
				out = append(out, Pause{TP: s.TP, From: coveredTo, To: s.From, Duration: s.From - coveredTo, Prev: last.Member, Next: s.Member})
			}
			if s.To >= coveredTo {
				coveredTo, last = s.To, s
			}
		}
		if coveredTo < rec.End && coveredTo >= rec.BaselineStart {
			out = append(out, Pause{TP: ps[0].TP, From: coveredTo, To: rec.End, Duration: rec.End - coveredTo, Prev: last.Member})
		}
		i = j
	}
	return out, moved
}

// stopTheWorld is the time after the baseline during which no partition
// was owned.
func stopTheWorld(rec *Recording, spans []Span) time.Duration {
	type iv struct{ from, to time.Duration }
	var ivs []iv
	for _, s := range spans {
		from, to := max(s.From, rec.BaselineStart), min(s.To, rec.End)
		if to > from {
			ivs = append(ivs, iv{from, to})
		}
	}
	slices.SortFunc(ivs, func(a, b iv) int { return cmp.Compare(a.from, b.from) })
	var stw time.Duration
	at := rec.BaselineStart
	for _, v := range ivs {
		if v.from > at {
			stw += v.from - at
		}
		at = max(at, v.to)
	}
	if rec.End > at {
		stw += rec.End - at
	}
	return stw
}

type tpOffset struct {
	tp     TP
	offset int64
}

// records computes the figures of the records: duplicates, losses,
// throughput, backlog and latency.
func records(rec *Recording, m *Measurements) {
	firstAction := rec.End
	if len(rec.Actions) > 0 {
		firstAction = rec.Actions[0].At
	}
	disruptionEnd := max(rec.DisruptionEnd, firstAction)

	produced := make(map[tpOffset]uint64, len(rec.Produced))
	for _, p := range rec.Produced {
		produced[tpOffset{p.TP, p.Offset}] = p.Key
	}
	m.Produced = len(rec.Produced)

	consumed := slices.Clone(rec.Consumed)
	slices.SortStableFunc(consumed, func(a, b Consumption) int { return cmp.Compare(a.At, b.At) })
	seen := make(map[tpOffset]bool, len(consumed))
	var latBase, latDis []time.Duration
	for _, c := range consumed {
		if c.At > rec.End {
			break
		}
		m.Consumed++
		k := tpOffset{c.TP, c.Offset}
		if key, ok := produced[k]; ok && key != c.Key {
			m.Mismatched++
		}
		if seen[k] {
			m.Duplicates++
			continue
		}
		seen[k] = true
		lat := c.At - c.ProducedAt
		switch {
		case c.ProducedAt >= rec.BaselineStart && c.ProducedAt < firstAction:
			latBase = append(latBase, lat)
		case c.ProducedAt >= firstAction && c.ProducedAt <= disruptionEnd:
			latDis = append(latDis, lat)
		}
	}
	m.LatencyBaseline = statsOf(latBase)
	m.LatencyDisruption = statsOf(latDis)

	for _, p := range rec.Produced {
		if !seen[tpOffset{p.TP, p.Offset}] {
			m.Lost++
			if len(m.LostRecords) < maxLostListed {
				m.LostRecords = append(m.LostRecords, p)
			}
		}
	}

	bucket := rec.Bucket
	if bucket <= 0 {
		bucket = DefaultBucket
	}
	n := int(rec.End/bucket) + 1
	counts := make([]int, n)
	for _, c := range consumed {
		if c.At > rec.End || c.At < 0 {
			continue
		}
		counts[int(c.At/bucket)]++
	}
	perSecond := float64(time.Second) / float64(bucket)
	m.Throughput = make([]Point, n)
	var baseSum, baseN float64
	m.MinRate = -1
	for i, c := range counts {
		at := time.Duration(i) * bucket
		rate := float64(c) * perSecond
		m.Throughput[i] = Point{At: at, Rate: rate}
		// Only whole buckets inside a period count toward it.
		if at >= rec.BaselineStart && at+bucket <= firstAction {
			baseSum += rate
			baseN++
		}
		if at >= firstAction && at+bucket <= disruptionEnd && (m.MinRate < 0 || rate < m.MinRate) {
			m.MinRate = rate
		}
	}
	if baseN > 0 {
		m.BaselineRate = baseSum / baseN
	}
	m.MinRate = max(m.MinRate, 0)
	m.Backlog = backlog(rec, consumed, firstAction, disruptionEnd)
}

// backlog is the most records acknowledged and not yet consumed at any one
// moment between from and to.
func backlog(rec *Recording, consumed []Consumption, from, to time.Duration) int {
	type step struct {
		at    time.Duration
		delta int
	}
	var steps []step
	for _, p := range rec.Produced {
		steps = append(steps, step{p.At, +1})
	}
	seen := map[tpOffset]bool{}
	for _, c := range consumed {
		k := tpOffset{c.TP, c.Offset}
		if seen[k] || c.At > rec.End {
			continue
		}
		seen[k] = true
		steps = append(steps, step{c.At, -1})
	}
	// Consumptions first at equal times: a record polled the instant it
	// was acknowledged was never behind.
	slices.SortFunc(steps, func(a, b step) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.delta, b.delta)
	})
	level, peak := 0, 0
	for _, s := range steps {
		level += s.delta
		if s.at >= from && s.at <= to {
			peak = max(peak, level)
		}
	}
	return peak
}
