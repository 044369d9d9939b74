package lab

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The report's charts are drawn by gonum.org/v1/plot as SVG and inlined in
// the page, so the page needs nothing from anywhere else.

// palette colours members (and, in comparisons, the measures).
var palette = []color.Color{
	color.RGBA{0x4e, 0x79, 0xa7, 0xff}, color.RGBA{0xf2, 0x8e, 0x2b, 0xff},
	color.RGBA{0x59, 0xa1, 0x4f, 0xff}, color.RGBA{0xb0, 0x7a, 0xa1, 0xff},
	color.RGBA{0x76, 0xb7, 0xb2, 0xff}, color.RGBA{0xed, 0xc9, 0x48, 0xff},
	color.RGBA{0x9c, 0x75, 0x5f, 0xff}, color.RGBA{0xff, 0x9d, 0xa7, 0xff},
	color.RGBA{0xba, 0xb0, 0xac, 0xff}, color.RGBA{0xe1, 0x57, 0x59, 0xff},
}

var (
	windowShade = color.NRGBA{0xe1, 0x57, 0x59, 0x40}
	actionLine  = color.RGBA{0x33, 0x33, 0x33, 0xff}
)

func seconds(d time.Duration) float64 { return d.Seconds() }

// newPlot is a plot with its text in the sans-serif face of the fonts
// the plot library embeds (its default is the serif one).
func newPlot(title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font, &p.Legend.TextStyle.Font} {
		f.Variant = "Sans"
	}
	return p
}

// svg renders a plot as an inline SVG element.
func svg(p *plot.Plot, w, h vg.Length) (template.HTML, error) {
	c := vgsvg.New(w, h)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", err
	}
	s := buf.String()
	if i := strings.Index(s, "<svg"); i >= 0 {
		s = s[i:]
	}
	// The generated markup is the plot library's, from our numbers and
	// the run's own names.
	return template.HTML(s), nil //nolint:gosec
}

// shadeWindows adds the rebalance windows as bands from ymin to ymax, and
// the lab's actions as vertical lines.
func shadeWindows(p *plot.Plot, res *Result, ymin, ymax float64) error {
	for _, w := range res.Measurements.Windows {
		x0, x1 := seconds(w.Start), seconds(w.End)
		// A window of an instant still shows.
		x1 = max(x1, x0+0.05)
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: ymin}, {X: x1, Y: ymin}, {X: x1, Y: ymax}, {X: x0, Y: ymax}})
		if err != nil {
			return err
		}
		poly.Color = windowShade
		poly.LineStyle.Width = 0
		p.Add(poly)
	}
	for _, a := range res.Actions {
		l, err := plotter.NewLine(plotter.XYs{{X: seconds(a.At), Y: ymin}, {X: seconds(a.At), Y: ymax}})
		if err != nil {
			return err
		}
		l.Color = actionLine
		l.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		p.Add(l)
	}
	return nil
}

// throughputChart is records consumed per second over the run, with the
// rebalance windows shaded and the lab's actions marked.
func throughputChart(res *Result) (template.HTML, error) {
	m := res.Measurements
	p := newPlot("Records consumed per second")
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "records/s"
	var top float64
	xys := make(plotter.XYs, len(m.Throughput))
	for i, pt := range m.Throughput {
		xys[i] = plotter.XY{X: seconds(pt.At), Y: pt.Rate}
		top = max(top, pt.Rate)
	}
	top = max(top*1.1, 1)
	if err := shadeWindows(p, res, 0, top); err != nil {
		return "", err
	}
	line, err := plotter.NewLine(xys)
	if err != nil {
		return "", err
	}
	line.Color = palette[0]
	line.Width = vg.Points(1.2)
	p.Add(line)
	p.Y.Min, p.Y.Max = 0, top
	// The same time axis as the ownership chart below it.
	p.X.Min, p.X.Max = 0, seconds(res.End)*1.12
	return svg(p, 9*vg.Inch, 3*vg.Inch)
}

// ownershipChart draws who owned which partition when: one row per
// partition, one bar per stretch of ownership coloured by member, so a
// pause is a gap in its row.
func ownershipChart(res *Result) (template.HTML, error) {
	m := res.Measurements
	var parts []TP
	for _, s := range m.Spans {
		if !slices.Contains(parts, s.TP) {
			parts = append(parts, s.TP)
		}
	}
	slices.SortFunc(parts, compareTP)
	row := map[TP]int{}
	for i, tp := range parts {
		row[tp] = i
	}
	var members []string
	for _, s := range m.Spans {
		if !slices.Contains(members, s.Member) {
			members = append(members, s.Member)
		}
	}
	slices.SortFunc(members, compareMemberNames)
	colour := map[string]color.Color{}
	for i, name := range members {
		colour[name] = palette[i%len(palette)]
	}

	p := newPlot("Partition ownership (gaps are pauses)")
	p.X.Label.Text = "seconds"
	n := float64(len(parts))
	if err := shadeWindows(p, res, -0.5, n-0.5); err != nil {
		return "", err
	}
	inLegend := map[string]bool{}
	for _, s := range m.Spans {
		y := float64(row[s.TP])
		x0, x1 := seconds(s.From), seconds(s.To)
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: y - 0.35}, {X: x1, Y: y - 0.35}, {X: x1, Y: y + 0.35}, {X: x0, Y: y + 0.35}})
		if err != nil {
			return "", err
		}
		poly.Color = colour[s.Member]
		poly.LineStyle.Width = 0
		p.Add(poly)
		if !inLegend[s.Member] {
			inLegend[s.Member] = true
			p.Legend.Add(s.Member, poly)
		}
	}
	var ticks []plot.Tick
	step := max(1, len(parts)/16)
	for i, tp := range parts {
		if i%step == 0 {
			ticks = append(ticks, plot.Tick{Value: float64(i), Label: partitionLabel(res, tp)})
		}
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min, p.Y.Max = -0.5, n-0.5
	// Room at the right for the members' legend.
	p.X.Min, p.X.Max = 0, seconds(res.End)*1.12
	p.Legend.Top = true
	h := vg.Length(1.5+0.16*n) * vg.Inch
	return svg(p, 9*vg.Inch, h)
}

// partitionLabel names a partition briefly: p3 on the run's first topic,
// b/p3 on its second.
func partitionLabel(res *Result, tp TP) string {
	if i := slices.Index(res.Topics, tp.Topic); i > 0 {
		return fmt.Sprintf("%c/p%d", 'a'+i, tp.Partition)
	}
	return fmt.Sprintf("p%d", tp.Partition)
}

// compareMemberNames orders m2 before m10.
func compareMemberNames(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// comparisonCharts compare the protocols of one scenario: their partition
// pauses (p50, p99, max) and their records consumed twice.
func comparisonCharts(results []*Result) (pauses, dups template.HTML, err error) {
	var names []string
	var p50, p99, pmax, dup plotter.Values
	for _, r := range results {
		names = append(names, r.Protocol.Name)
		m := r.Measurements
		p50 = append(p50, m.Pause.P50)
		p99 = append(p99, m.Pause.P99)
		pmax = append(pmax, m.Pause.Max)
		dup = append(dup, float64(m.Duplicates))
	}
	w := vg.Points(14)
	pp := newPlot("Partition pause (ms)")
	for i, s := range []struct {
		name string
		vs   plotter.Values
	}{{"p50", p50}, {"p99", p99}, {"max", pmax}} {
		b, err := plotter.NewBarChart(s.vs, w)
		if err != nil {
			return "", "", err
		}
		b.Color = palette[i]
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(i-1)
		pp.Add(b)
		pp.Legend.Add(s.name, b)
	}
	pp.Legend.Top = true
	pp.NominalX(names...)
	// Headroom for the legend above the tallest bar.
	pp.Y.Min, pp.Y.Max = 0, max(slices.Max(pmax), 1)*1.6
	if pauses, err = svg(pp, 4.5*vg.Inch, 3*vg.Inch); err != nil {
		return "", "", err
	}
	dp := newPlot("Records consumed twice")
	b, err := plotter.NewBarChart(dup, 2*w)
	if err != nil {
		return "", "", err
	}
	b.Color = palette[9]
	b.LineStyle.Width = 0
	dp.Add(b)
	dp.NominalX(names...)
	dp.Y.Min = 0
	dups, err = svg(dp, 4.5*vg.Inch, 3*vg.Inch)
	return pauses, dups, err
}

type htmlRun struct {
	*Result
	Throughput template.HTML
	Ownership  template.HTML
}

type htmlScenario struct {
	Name, Doc   string
	Pauses      template.HTML
	Duplicates  template.HTML
	Runs        []htmlRun
	Unsupported []Result
}

// WriteHTML writes the report as one self-contained page: the summary
// table, then per scenario the protocols compared and, per protocol, its
// throughput and partition ownership over time.
func WriteHTML(w io.Writer, rep *Report) error {
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		return err
	}
	var scenarios []*htmlScenario
	byName := map[string]*htmlScenario{}
	for i := range rep.Results {
		res := &rep.Results[i]
		sc := byName[res.Scenario]
		if sc == nil {
			sc = &htmlScenario{Name: res.Scenario, Doc: ScenarioDoc[res.Scenario]}
			byName[res.Scenario] = sc
			scenarios = append(scenarios, sc)
		}
		if res.Measurements == nil {
			sc.Unsupported = append(sc.Unsupported, *res)
			continue
		}
		tc, err := throughputChart(res)
		if err != nil {
			return err
		}
		oc, err := ownershipChart(res)
		if err != nil {
			return err
		}
		sc.Runs = append(sc.Runs, htmlRun{Result: res, Throughput: tc, Ownership: oc})
	}
	for _, sc := range scenarios {
		var rs []*Result
		for _, r := range sc.Runs {
			rs = append(rs, r.Result)
		}
		if len(rs) == 0 {
			continue
		}
		var err error
		if sc.Pauses, sc.Duplicates, err = comparisonCharts(rs); err != nil {
			return err
		}
	}
	return reportPage.Execute(w, map[string]any{
		"Report":    rep,
		"Table":     table.String(),
		"Scenarios": scenarios,
	})
}

var reportPage = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":  fmtMs,
	"dur": func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"sec": func(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>groupd rebalance lab</title>
<style>
body { font: 14px/1.45 "Liberation Sans", Arial, Helvetica, sans-serif; margin: 24px; color: #222; max-width: 1400px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 36px; border-bottom: 1px solid #ccc; } h3 { font-size: 15px; margin-bottom: 4px; }
pre { background: #f6f6f6; padding: 10px; overflow-x: auto; font-size: 12px; }
svg text { font-family: "Liberation Sans", Arial, Helvetica, sans-serif; }
.pair { display: flex; flex-wrap: wrap; gap: 12px; }
.note { color: #555; }
.failed { color: #b00; font-weight: bold; }
table.kv td { padding: 1px 10px 1px 0; }
table.recs { border-collapse: collapse; font-size: 12px; } table.recs td, table.recs th { border: 1px solid #ddd; padding: 2px 6px; text-align: right; }
</style></head><body>
<h1>Rebalance lab</h1>
<p class="note">Against {{.Report.Broker}}, started {{.Report.Started.Format "2006-01-02 15:04:05"}}, {{dur .Report.Elapsed}} in all.
{{with .Report.Config}}{{.Members}} members, {{.Partitions}} partitions, {{.Rate}} records/s of {{.RecordBytes}} bytes, {{dur .Processing}} processing per record,
commit {{.CommitMode}}{{if eq .CommitMode "auto"}} every {{dur .AutoCommitInterval}}{{end}}, session timeout {{dur .SessionTimeout}}, rebalance timeout {{dur .RebalanceTimeout}},
heartbeat {{dur .HeartbeatInterval}}, seed {{.Seed}}.{{end}}</p>
<p class="note">All figures come from the clients' own callbacks and records. A pause is a stretch of time in which no member owned a partition
that had been owned before; "stopped" is the time no partition at all was owned; a rebalance window (shaded) runs from the first partition
given up to the assignment after which every partition was owned again; the dashed lines are the lab's actions.</p>
<pre>{{.Table}}</pre>
{{range .Scenarios}}
<h2>{{.Name}}</h2>
<p class="note">{{.Doc}}.</p>
{{range .Unsupported}}<p class="note">{{.Protocol.Name}}: not run: {{.Unsupported}}.</p>{{end}}
{{if .Runs}}<div class="pair">{{.Pauses}}{{.Duplicates}}</div>{{end}}
{{range .Runs}}
<h3>{{.Scenario}} / {{.Protocol.Name}}</h3>
{{if .Err}}<p class="failed">FAILED: {{.Err}}</p>{{end}}
{{with .Measurements}}<table class="kv">
<tr><td>rebalances (client view)</td><td>{{.Rebalances}}, longest window {{ms .RebalanceDuration.Max}}</td></tr>
<tr><td>partition pause</td><td>p50 {{ms .Pause.P50}}, p99 {{ms .Pause.P99}}, max {{ms .Pause.Max}} over {{.Pause.Count}} pauses of {{.PausedPartitions}} partitions; {{.Moved}} hand-offs to another member</td></tr>
<tr><td>no partition owned</td><td>{{dur .StopTheWorld}}</td></tr>
<tr><td>records</td><td>{{.Produced}} acknowledged, {{.Consumed}} polled, {{.Duplicates}} twice, {{.Lost}} lost</td></tr>
<tr><td>throughput</td><td>{{printf "%.0f" .BaselineRate}}/s in the quiet baseline, lowest {{printf "%.0f" .MinRate}}/s during the disruption; at most {{.Backlog}} records behind</td></tr>
<tr><td>end-to-end latency</td><td>p99 {{ms .LatencyDisruption.P99}} (max {{ms .LatencyDisruption.Max}}) during the disruption, against p99 {{ms .LatencyBaseline.P99}} when quiet</td></tr>
</table>{{end}}
{{with .Broker}}<p>groupd's own records: {{.Rebalances}} rebalances, longest {{ms .Duration.Max}}, {{.Changed}} partitions changed owner, longest pause {{ms .MaxPause}}.</p>
{{if .Records}}<table class="recs"><tr><th>seq</th><th>trigger</th><th>generation</th><th>duration</th><th>members in/out</th><th>moved</th><th>changed owner</th><th>max pause</th></tr>
{{range .Records}}<tr><td>{{.Seq}}</td><td>{{.Trigger}}</td><td>{{.GenerationBefore}}→{{.GenerationAfter}}</td><td>{{.DurationMs}} ms</td><td>{{len .MembersIn}}/{{len .MembersOut}}</td><td>{{len .Moved}}</td><td>{{.Changed}}</td><td>{{.MaxPause}}</td></tr>
{{end}}</table>{{end}}{{end}}
{{.Throughput}}
{{.Ownership}}
{{end}}
{{end}}
</body></html>
`))
