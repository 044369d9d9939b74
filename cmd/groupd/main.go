// Command groupd runs a Kafka-compatible broker. With no arguments it
// serves on 127.0.0.1:9092 with its data under ./groupd-data.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/cli"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/metrics"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/store"
)

func main() {
	// 0 success, 1 failure, 2 usage error of the groups and topics commands.
	os.Exit(cli.ExitCode(rootCmd().Execute()))
}

func rootCmd() *cobra.Command {
	serve := serveCmd()
	root := &cobra.Command{
		Use:           "groupd",
		Short:         "A Kafka-compatible broker built around the consumer-group coordinator",
		SilenceUsage:  true,
		SilenceErrors: false,
		// Running groupd bare serves with the defaults.
		RunE: serve.RunE,
	}
	root.Flags().AddFlagSet(serve.Flags())
	root.AddCommand(serve)
	root.AddCommand(cli.GroupsCmd(), cli.TopicsCmd())
	root.AddCommand(recoverCmd())
	return root
}

func serveCmd() *cobra.Command {
	var (
		cfg       app.Config
		advertise string
		logLevel  string
		fsync     string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the Kafka protocol",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			pol, err := partition.ParseSyncPolicy(fsync)
			if err != nil {
				return fmt.Errorf("--fsync: %w", err)
			}
			cfg.Log.Sync = pol
			if cfg.ConnectionsMaxIdle <= 0 {
				cfg.ConnectionsMaxIdle = -1 // never close idle connections
			}
			if cfg.Group.InitialRebalanceDelay <= 0 {
				cfg.Group.InitialRebalanceDelay = -1 // the machine's "no delay"
			}
			cfg.Logger = log
			if advertise != "" {
				host, port, err := splitHostPort(advertise)
				if err != nil {
					return fmt.Errorf("--advertise: %w", err)
				}
				cfg.AdvertiseHost, cfg.AdvertisePort = host, port
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			a, err := app.Start(cfg)
			var undecodable *store.UndecodableError
			if errors.As(err, &undecodable) {
				return fmt.Errorf("%w\nthe record is left in place; to start anyway, skipping every record that does not decode with a log line naming it, pass --skip-undecodable-records", err)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "groupd listening on %s (advertised as %s), data in %s\n", a.Addr(), a.Advertised(), cfg.DataDir)
			if h := a.HTTPAddr(); h != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "status page, admin API and metrics on http://%s/\n", h)
			}
			select {
			case <-ctx.Done():
				log.Info("shutting down")
			case err := <-a.Done():
				if err != nil && !errors.Is(err, app.ErrStopped) {
					a.Close(context.Background())
					return err
				}
			}
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return a.Close(sctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:9092", "address to accept Kafka connections on (HOST:PORT; port 0 picks a free port)")
	f.StringVar(&advertise, "advertise", "", "HOST:PORT that Metadata tells clients (default: the listen address)")
	f.StringVar(&cfg.DataDir, "data-dir", "./groupd-data", "directory for partition logs and metadata")
	f.BoolVar(&cfg.AutoCreateTopics, "auto-create-topics", true, "create topics that Metadata requests name, when the request allows it")
	f.Int32Var(&cfg.DefaultPartitions, "default-partitions", 1, "partition count of auto-created topics and of CreateTopics without a count")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.Int32Var(&cfg.MaxRequestBytes, "max-request-bytes", 100<<20, "largest request frame accepted; larger frames close the connection")
	f.IntVar(&cfg.MaxConnections, "max-connections", 0, "most open client connections; one more is closed as soon as it is accepted (0: three quarters of the open-file limit)")
	f.DurationVar(&cfg.ConnectionsMaxIdle, "connections-max-idle", 10*time.Minute, "close a connection that has had nothing in flight for this long (connections.max.idle.ms); 0 never")
	f.Int32Var(&cfg.FetchMaxBytes, "fetch-max-bytes", 55<<20, "most record bytes in one fetch reply, whatever the request asks (fetch.max.bytes); a larger first batch is still returned whole")
	f.StringVar(&fsync, "fsync", "always", "when partition logs and coordinator records are fsynced: always (before a produce or commit is acknowledged), interval (every --fsync-interval), never (left to the OS)")
	f.DurationVar(&cfg.Log.SyncInterval, "fsync-interval", time.Second, "fsync period for --fsync=interval")
	f.BoolVar(&cfg.SkipUndecodableRecords, "skip-undecodable-records", false, "start even if coordinator records (offsets, group metadata) do not decode, skipping each with a log line; without it such a record stops the start")
	f.Int64Var(&cfg.Log.SegmentBytes, "segment-bytes", 256<<20, "roll a partition's segment file after this many bytes")
	f.StringVar(&cfg.HTTPListen, "http-listen", "127.0.0.1:9644", "address of the HTTP side: Prometheus metrics at /metrics, the JSON admin API under /api/v1, the status page at /; empty disables it")
	f.IntVar(&cfg.MetricsMaxGroups, "metrics-max-groups", metrics.DefaultMaxGroups, "most groups with their own members and lag series (the groups with the most lag); the others are summed into aggregate series; 0 gives no per-group series")
	f.BoolVar(&cfg.QuarantineDamagedSegments, "quarantine-damaged-segments", false, "on start, move partition segments found damaged below their recovery point to quarantine/ in the data directory and serve the rest, instead of refusing to start")
	g := group.DefaultConfig()
	f.DurationVar(&cfg.Group.InitialRebalanceDelay, "group-initial-rebalance-delay", g.InitialRebalanceDelay, "how long a new or empty group waits for more members before its first rebalance completes (group.initial.rebalance.delay.ms); 0 or less disables it")
	f.DurationVar(&cfg.Group.MinSessionTimeout, "group-min-session-timeout", g.MinSessionTimeout, "smallest session timeout a member may ask for (group.min.session.timeout.ms)")
	f.DurationVar(&cfg.Group.MaxSessionTimeout, "group-max-session-timeout", g.MaxSessionTimeout, "largest session timeout a member may ask for (group.max.session.timeout.ms)")
	f.IntVar(&cfg.Group.MaxGroupSize, "group-max-size", g.MaxGroupSize, "most members a classic group may have (group.max.size)")
	f.DurationVar(&cfg.Group.OffsetsRetention, "offsets-retention", g.OffsetsRetention, "how long committed offsets of an empty group are kept (offsets.retention.minutes)")
	f.IntVar(&cfg.Group.OffsetMetadataMaxBytes, "offset-metadata-max-bytes", g.OffsetMetadataMaxBytes, "largest metadata string of a committed offset (offset.metadata.max.bytes)")
	f.IntVar(&cfg.Group.HistorySize, "rebalance-history", g.HistorySize, "rebalances kept per group, durably (the oldest beyond this are deleted)")
	f.DurationVar(&cfg.Group.StormWindow, "rebalance-storm-window", g.StormWindow, "a rebalance is flagged a storm when its trigger came from the same member --rebalance-storm-count times within this window")
	f.IntVar(&cfg.Group.StormCount, "rebalance-storm-count", g.StormCount, "how many rebalances with the same trigger from the same member within --rebalance-storm-window make a storm")
	return cmd
}

func splitHostPort(s string) (string, int32, error) {
	host, ps, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", ps, err)
	}
	return host, int32(port), nil
}
