package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the summary table: one line per scenario and protocol.
// LONGEST is the longest rebalance window; PAUSED counts the partitions
// that paused at least once; MOVED the hand-offs to another member;
// LOWEST RATE is the lowest consumption rate during the disruption against
// the quiet baseline's; LATENCY P99 the end-to-end p99 of the records
// produced during the disruption against the quiet one's; GROUPD SAW is
// groupd's own record of the same rebalances.
func WriteTable(w io.Writer, rep *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	cols := []string{"SCENARIO", "PROTOCOL", "REBALANCES", "LONGEST", "PAUSE P50", "PAUSE P99", "PAUSE MAX", "PAUSED", "MOVED", "STOP-THE-WORLD", "DUPLICATES", "LOST", "LOWEST RATE", "LATENCY P99", "GROUPD SAW"}
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	for _, res := range rep.Results {
		row := []string{res.Scenario, res.Protocol.Name}
		m := res.Measurements
		switch {
		case res.Unsupported != "" || m == nil:
			// Dashes keep the columns aligned; the reason follows
			// the table.
			row = append(row, "unsupported")
			if res.Unsupported == "" {
				row[len(row)-1] = "failed"
			}
			for len(row) < len(cols) {
				row = append(row, "-")
			}
		default:
			row = append(row,
				fmt.Sprint(m.Rebalances),
				fmtMs(m.RebalanceDuration.Max),
				fmtMs(m.Pause.P50),
				fmtMs(m.Pause.P99),
				fmtMs(m.Pause.Max),
				fmt.Sprint(m.PausedPartitions),
				fmt.Sprint(m.Moved),
				fmtMs(ms(m.StopTheWorld)),
				fmt.Sprint(m.Duplicates),
				fmt.Sprint(m.Lost),
				fmt.Sprintf("%.0f/s of %.0f/s", m.MinRate, m.BaselineRate),
				fmt.Sprintf("%s (quiet %s)", fmtMs(m.LatencyDisruption.P99), fmtMs(m.LatencyBaseline.P99)),
				brokerCell(&res),
			)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, res := range rep.Results {
		if res.Unsupported != "" {
			fmt.Fprintf(w, "%s / %s: unsupported by the broker: %s\n", res.Scenario, res.Protocol.Name, res.Unsupported)
		}
	}
	for _, res := range rep.Results {
		if res.Err != "" {
			fmt.Fprintf(w, "FAILED %s / %s: %s\n", res.Scenario, res.Protocol.Name, res.Err)
		}
	}
	return nil
}

// brokerCell is groupd's own count of the rebalances and its longest
// pause, or "-" where the broker keeps no such record.
func brokerCell(res *Result) string {
	if res.Broker == nil {
		return "-"
	}
	return fmt.Sprintf("%s, max pause %s", count(res.Broker.Rebalances, "rebalance"), fmtMs(res.Broker.MaxPause))
}

// count says "1 rebalance" and "2 rebalances".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// WriteJSON writes the whole report, raw figures included.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// ReadJSON reads a report WriteJSON wrote, to print or draw it again.
func ReadJSON(r io.Reader) (*Report, error) {
	var rep Report
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return nil, fmt.Errorf("reading a lab report: %w", err)
	}
	return &rep, nil
}
