package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

func sorted(s []string) []string {
	sort.Strings(s)
	return s
}

func median(values []float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	v := slices.Clone(values)
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// series is one figure on one side over the runs.
type series struct {
	unit   string
	higher bool
	values []float64
	p50    []float64
	p99    []float64
	cpu    []float64 // server CPU µs per operation
	errors int
}

// figure is one metric of one scenario: a series per side.
type figure struct {
	scenario, metric string
	sides            map[string]*series
}

// figures groups the records by scenario and metric, in the order they
// first appeared.
func figures(records []record) []*figure {
	var out []*figure
	byKey := map[string]*figure{}
	failed := map[string]map[string]int{} // scenario -> target -> failures
	for _, r := range records {
		if r.Result == nil {
			if failed[r.Scenario] == nil {
				failed[r.Scenario] = map[string]int{}
			}
			failed[r.Scenario][r.Target]++
			continue
		}
		key := r.Scenario + "\x00" + r.Result.Metric
		f := byKey[key]
		if f == nil {
			f = &figure{scenario: r.Scenario, metric: r.Result.Metric, sides: map[string]*series{}}
			byKey[key] = f
			out = append(out, f)
		}
		s := f.sides[r.Target]
		if s == nil {
			s = &series{unit: r.Result.Unit, higher: r.Result.HigherIsBetter}
			f.sides[r.Target] = s
		}
		s.values = append(s.values, r.Result.Value)
		if r.Result.P50ms > 0 {
			s.p50 = append(s.p50, r.Result.P50ms)
			s.p99 = append(s.p99, r.Result.P99ms)
		}
		if r.Result.ServerCPUusPerOp > 0 {
			s.cpu = append(s.cpu, r.Result.ServerCPUusPerOp)
		}
	}
	for _, f := range out {
		for t, n := range failed[f.scenario] {
			if s := f.sides[t]; s != nil {
				s.errors = n
			}
		}
	}
	return out
}

// format prints v as the unit reads best.
func format(v float64, unit string) string {
	if math.IsNaN(v) {
		return "–"
	}
	switch {
	case math.Abs(v) >= 999.5:
		return thousands(int64(math.Round(v)))
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// table is the summary (medians and ratios) and the details per side.
func (h *harness) table() string {
	var b strings.Builder
	figs := figures(h.records)
	b.WriteString("Medians over the runs (ratio = groupd / other side of the medians; for ms lower is better, else higher):\n\n")
	b.WriteString("| scenario | figure | groupd | kfake | naive | groupd/kfake | groupd/naive |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, f := range figs {
		unit := ""
		med := map[string]float64{}
		cells := make([]string, 0, 3)
		for _, t := range allTargets {
			s := f.sides[t]
			if s == nil {
				cells = append(cells, "")
				continue
			}
			unit = s.unit
			med[t] = median(s.values)
			cells = append(cells, format(med[t], s.unit))
		}
		ratio := func(other string) string {
			g, okG := med["groupd"]
			o, okO := med[other]
			if !okG || !okO || o == 0 {
				return ""
			}
			return fmt.Sprintf("%.2f", g/o)
		}
		fmt.Fprintf(&b, "| %s | %s (%s) | %s | %s | %s | %s | %s |\n", f.scenario, f.metric, unit,
			cells[0], cells[1], cells[2], ratio("kfake"), ratio("naive"))
	}
	b.WriteString("\nPer side (min–max over the runs; p50/p99 of the members' latencies, medians over the runs; server CPU per operation, median):\n\n")
	b.WriteString("| scenario | figure | side | runs | median | min–max | p50 ms | p99 ms | server CPU µs/op |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, f := range figs {
		for _, t := range allTargets {
			s := f.sides[t]
			if s == nil {
				continue
			}
			runs := fmt.Sprint(len(s.values))
			if s.errors > 0 {
				runs += fmt.Sprintf(" (+%d failed)", s.errors)
			}
			lat50, lat99, cpu := "", "", ""
			if len(s.p50) > 0 {
				lat50, lat99 = format(median(s.p50), "ms"), format(median(s.p99), "ms")
			}
			if len(s.cpu) > 0 {
				cpu = format(median(s.cpu), "us")
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s %s | %s–%s | %s | %s | %s |\n", f.scenario, f.metric, t, runs,
				format(median(s.values), s.unit), s.unit, format(slices.Min(s.values), s.unit), format(slices.Max(s.values), s.unit),
				lat50, lat99, cpu)
		}
	}
	if h.failures > 0 {
		fmt.Fprintf(&b, "\n%d runs failed:\n", h.failures)
		for _, r := range h.records {
			if r.Error != "" {
				fmt.Fprintf(&b, "- %s on %s, run %d: %s\n", r.Scenario, r.Target, r.Run, firstLine(r.Error))
			}
		}
	}
	if len(h.notes) > 0 {
		b.WriteString("\nThe servers:\n")
		for _, n := range h.notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
