package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/groupd/groupd/internal/lab"
)

// labCmd is `groupd lab`: the rebalance lab.
func labCmd() *cobra.Command {
	cfg := lab.DefaultConfig()
	var (
		protocols = "eager,cooperative,consumer"
		scenarios = strings.Join(cfg.Scenarios, ",")
		jsonOut   bool
		htmlFile  string
		logLevel  = "error"
		fromJSON  string
	)
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Measure eager, cooperative and consumer-protocol rebalances on a live workload",
		Long: `Runs a producer and a group of consumers (franz-go, each member its own
client) against an embedded groupd, or any Kafka cluster with
--bootstrap-server, disturbs the group as each scenario says under each
protocol, each on a fresh group, and measures from the clients' own view what
every rebalance cost: rebalances, their duration, how long each partition
stopped being consumed, the time no partition was consumed, records consumed
twice, records lost (the run fails if any), throughput and end-to-end latency.

Scenarios: ` + scenarioList() + `
Protocols: eager (range), cooperative (cooperative-sticky), consumer (KIP-848,
the server's uniform assignor), each optionally -static (group.instance.id);
"all" runs all six.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Protocols, err = lab.ParseProtocols(protocols); err != nil {
				return fmt.Errorf("--protocols: %w", err)
			}
			if cfg.Scenarios, err = lab.ParseScenarios(scenarios); err != nil {
				return fmt.Errorf("--scenarios: %w", err)
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
			cfg.Progress = cmd.ErrOrStderr()
			cfg.Terminal = isTerminal(cmd.ErrOrStderr())
			var rep *lab.Report
			var runErr error
			if fromJSON != "" {
				if rep, err = readReport(fromJSON); err != nil {
					return err
				}
			} else {
				ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
				defer stop()
				if rep, runErr = lab.Run(ctx, cfg); rep == nil {
					return runErr
				}
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := lab.WriteJSON(out, rep); err != nil {
					return err
				}
			} else if err := lab.WriteTable(out, rep); err != nil {
				return err
			}
			if htmlFile != "" {
				if err := writeReport(htmlFile, rep); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "report written to %s\n", htmlFile)
			}
			if errors.Is(runErr, lab.ErrFailed) {
				return fmt.Errorf("%w: %d of %d runs failed", runErr, len(rep.Failed()), len(rep.Results))
			}
			return runErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Bootstrap, "bootstrap-server", "", "run against this cluster (HOST:PORT, several separated by commas) instead of an embedded groupd")
	f.StringVar(&cfg.AdminAddr, "admin-addr", "", "groupd's HTTP side (its --http-listen), to show its own rebalance records beside the clients' view when --bootstrap-server is a groupd")
	f.StringVar(&protocols, "protocols", protocols, "protocols to run, comma-separated: eager, cooperative, consumer, each optionally -static; static; all")
	f.StringVar(&scenarios, "scenarios", scenarios, "scenarios to run, comma-separated, or all")
	f.IntVar(&cfg.Members, "members", cfg.Members, "members in the group before the scenario")
	f.IntVar(&cfg.Change, "change", cfg.Change, "members added by scale-out and removed by scale-in")
	f.IntVar(&cfg.Partitions, "partitions", cfg.Partitions, "partitions of the topic")
	f.IntVar(&cfg.Rate, "rate", cfg.Rate, "records produced per second")
	f.IntVar(&cfg.RecordBytes, "record-bytes", cfg.RecordBytes, "size of each record's value")
	f.DurationVar(&cfg.Processing, "processing", cfg.Processing, "processing time per record polled")
	f.IntVar(&cfg.MaxPollRecords, "max-poll-records", cfg.MaxPollRecords, "most records one poll returns")
	f.StringVar(&cfg.CommitMode, "commit", cfg.CommitMode, "commit mode: auto (every --auto-commit-interval and on revoke), sync (after each poll), revoke (only when partitions are given up)")
	f.DurationVar(&cfg.AutoCommitInterval, "auto-commit-interval", cfg.AutoCommitInterval, "interval of --commit auto")
	f.DurationVar(&cfg.SessionTimeout, "session-timeout", cfg.SessionTimeout, "members' session timeout (classic protocol; the consumer protocol's is the broker's)")
	f.DurationVar(&cfg.RebalanceTimeout, "rebalance-timeout", cfg.RebalanceTimeout, "members' rebalance timeout")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", cfg.HeartbeatInterval, "members' heartbeat interval (classic protocol; the consumer protocol's is the broker's)")
	f.DurationVar(&cfg.Quiet, "quiet", cfg.Quiet, "quiet baseline measured before the scenario acts")
	f.DurationVar(&cfg.Cooldown, "cooldown", cfg.Cooldown, "time measured after the group settled")
	f.DurationVar(&cfg.RestartDelay, "restart-delay", cfg.RestartDelay, "how long a restarting member is down")
	f.DurationVar(&cfg.SettleTimeout, "settle-timeout", cfg.SettleTimeout, "longest wait for the group to settle after a step; longer fails the run")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed that picks the members the scenarios act on")
	f.BoolVar(&jsonOut, "json", false, "print the raw figures as JSON instead of the table")
	f.StringVar(&htmlFile, "report", "", "write a self-contained HTML report with charts to this file")
	f.StringVar(&fromJSON, "from-json", "", "run nothing: print the table, or write the --report, of a run saved with --json")
	f.StringVar(&logLevel, "log-level", logLevel, "log level of the clients and the embedded groupd: debug, info, warn or error")
	return cmd
}

func scenarioList() string {
	var b strings.Builder
	for _, s := range lab.Scenarios {
		fmt.Fprintf(&b, "\n  %-20s %s", s, lab.ScenarioDoc[s])
	}
	return b.String()
}

func writeReport(file string, rep *lab.Report) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := lab.WriteHTML(f, rep); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readReport(file string) (*lab.Report, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return lab.ReadJSON(f)
}

// isTerminal says whether w is a character device that can redraw a line.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
