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
	"github.com/spf13/pflag"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/cli"
	"github.com/groupd/groupd/internal/fetchsession"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/group/consumer"
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
	root.AddCommand(cli.GroupsCmd(), cli.TopicsCmd(), cli.ClusterCmd())
	root.AddCommand(recoverCmd(), quarantineCmd())
	root.AddCommand(labCmd())
	root.AddCommand(devClusterCmd())
	return root
}

func serveCmd() *cobra.Command {
	var (
		cfg           app.Config
		advertise     string
		logLevel      string
		fsync         string
		topicDefaults = map[string]*string{}
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
			cfg.TopicDefaults = map[string]string{}
			for _, d := range topicDefaultFlags {
				if cmd.Flags().Changed(d.flag) {
					cfg.TopicDefaults[d.config] = *topicDefaults[d.flag]
				}
			}
			if cfg.ConnectionsMaxIdle <= 0 {
				cfg.ConnectionsMaxIdle = -1 // never close idle connections
			}
			if cfg.Group.InitialRebalanceDelay <= 0 {
				cfg.Group.InitialRebalanceDelay = -1 // the machine's "no delay"
			}
			if err := cfg.Group.Validate(); err != nil {
				return fmt.Errorf("consumer group settings: %w", err)
			}
			cfg.Logger = log
			if cfg.NodeID < 0 {
				return fmt.Errorf("--node-id: %d is negative", cfg.NodeID)
			}
			if cfg.FetchSessionCacheSlots <= 0 {
				cfg.FetchSessionCacheSlots = -1 // no sessions
			}
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
	f.Int32Var(&cfg.NodeID, "node-id", 0, "this broker's id, as Metadata, FindCoordinator and DescribeCluster report it (node.id)")
	f.IntVar(&cfg.FetchSessionCacheSlots, "max-incremental-fetch-session-cache-slots", fetchsession.DefaultMaxSessions, "most incremental fetch sessions (KIP-227) kept at once (max.incremental.fetch.session.cache.slots); 0 serves none")
	f.StringVar(&fsync, "fsync", "always", "when partition logs and coordinator records are fsynced: always (before a produce or commit is acknowledged), interval (every --fsync-interval), never (left to the OS)")
	f.DurationVar(&cfg.Log.SyncInterval, "fsync-interval", time.Second, "fsync period for --fsync=interval")
	f.BoolVar(&cfg.SkipUndecodableRecords, "skip-undecodable-records", false, "start even if coordinator records (offsets, group metadata) do not decode, skipping each with a log line; without it such a record stops the start")
	f.Int64Var(&cfg.Log.SegmentBytes, "segment-bytes", 256<<20, "roll a partition's segment file after this many bytes")
	f.StringVar(&cfg.HTTPListen, "http-listen", "127.0.0.1:9644", "address of the HTTP side: Prometheus metrics at /metrics, the JSON admin API under /api/v1, the status page at /; empty disables it")
	f.BoolVar(&cfg.HTTPProfiling, "http-pprof", false, "serve Go's runtime profiles (CPU, heap, goroutines) on the HTTP side under /debug/pprof/")
	f.IntVar(&cfg.MetricsMaxGroups, "metrics-max-groups", metrics.DefaultMaxGroups, "most groups with their own members and lag series (the groups with the most lag); the others are summed into aggregate series; 0 gives no per-group series")
	f.BoolVar(&cfg.QuarantineDamagedSegments, "quarantine-damaged-segments", false, "on start, set damaged partition data aside in quarantine/ in the data directory and serve the rest, instead of refusing to start: a segment damaged below its recovery point is moved there, a damaged tail with intact batches behind it is copied there and cut")
	for _, d := range topicDefaultFlags {
		def, _ := broker.LookupConfig(d.config)
		topicDefaults[d.flag] = f.String(d.flag, def.Default, fmt.Sprintf("%s (%s): the default of the topic config %s", d.usage, def.BrokerName, d.config))
	}
	f.DurationVar(&cfg.RetentionCheckInterval, "log-retention-check-interval", broker.DefaultRetentionCheckInterval, "how often old segments are deleted and idle idempotent producers expire (log.retention.check.interval.ms)")
	f.DurationVar(&cfg.CleanerBackoff, "log-cleaner-backoff", broker.DefaultCleanerBackoff, "how often the log cleaner looks for compacted topics to clean (log.cleaner.backoff.ms)")
	f.IntVar(&cfg.CleanerBufferBytes, "log-cleaner-dedupe-buffer-size", broker.DefaultCleanerBufferBytes, "memory of the log cleaner's map of keys (log.cleaner.dedupe.buffer.size), allocated when a compacted topic is first cleaned")
	f.DurationVar(&cfg.Log.ProducerIDExpiration, "producer-id-expiration", partition.DefaultProducerIDExpiration, "how long an idempotent producer's state is kept after its last batch (producer.id.expiration.ms)")
	f.Int32Var(&cfg.OffsetsTopicPartitions, "offsets-topic-partitions", broker.DefaultOffsetsTopicPartitions, "partitions of __consumer_offsets when it is created (offsets.topic.num.partitions)")
	f.BoolVar(&cfg.Log.FullStartCheck, "full-start-check", false, "on start, read every batch header of every segment instead of trusting the sealed segments the producer snapshots describe")
	f.BoolVar(&cfg.Log.HeaderOnlyCompressed, "header-only-compressed-validation", false, "check compressed produced batches by their header and CRC only, without decoding their records as Kafka does (compacted topics still decode); for producers trusted to send well-formed records")
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
	addConsumerGroupFlags(f, &cfg.Group.Consumer)
	addClusterFlags(f, &cfg.Cluster)
	f.Var(&cfg.Group.MigrationPolicy, "group-consumer-migration-policy", "whether a running group may change protocol: bidirectional, upgrade (classic to consumer), downgrade (consumer to classic) or disabled (group.consumer.migration.policy); empty groups always may")
	return cmd
}

// addConsumerGroupFlags adds the settings of consumer (KIP-848) groups,
// named after Kafka's group.consumer.* configs with their defaults. The
// combination is checked as Kafka checks it when groupd starts.
func addConsumerGroupFlags(f *pflag.FlagSet, c *consumer.Config) {
	d := consumer.DefaultConfig()
	f.DurationVar(&c.SessionTimeout, "group-consumer-session-timeout", d.SessionTimeout, "a consumer-group member that does not heartbeat for this long is removed (group.consumer.session.timeout.ms)")
	f.DurationVar(&c.MinSessionTimeout, "group-consumer-min-session-timeout", d.MinSessionTimeout, "lower bound of --group-consumer-session-timeout (group.consumer.min.session.timeout.ms)")
	f.DurationVar(&c.MaxSessionTimeout, "group-consumer-max-session-timeout", d.MaxSessionTimeout, "upper bound of --group-consumer-session-timeout (group.consumer.max.session.timeout.ms)")
	f.DurationVar(&c.HeartbeatInterval, "group-consumer-heartbeat-interval", d.HeartbeatInterval, "how often consumer-group members are told to heartbeat (group.consumer.heartbeat.interval.ms)")
	f.DurationVar(&c.MinHeartbeatInterval, "group-consumer-min-heartbeat-interval", d.MinHeartbeatInterval, "lower bound of --group-consumer-heartbeat-interval (group.consumer.min.heartbeat.interval.ms)")
	f.DurationVar(&c.MaxHeartbeatInterval, "group-consumer-max-heartbeat-interval", d.MaxHeartbeatInterval, "upper bound of --group-consumer-heartbeat-interval (group.consumer.max.heartbeat.interval.ms)")
	f.IntVar(&c.MaxSize, "group-consumer-max-size", d.MaxSize, "most members a consumer group may have (group.consumer.max.size)")
	f.StringSliceVar(&c.Assignors, "group-consumer-assignors", d.Assignors, "server assignors consumer-group members may name, the first being the default: uniform, range (group.consumer.assignors)")
}

// topicDefaultFlags set the broker's defaults of topic configs, named
// after Kafka's broker configs.
var topicDefaultFlags = []struct{ flag, config, usage string }{
	{"log-retention-ms", "retention.ms", "delete segments whose newest record is older than this; -1 keeps them"},
	{"log-retention-bytes", "retention.bytes", "delete the oldest segments while a partition is larger than this; -1 for no limit"},
	{"log-roll-ms", "segment.ms", "roll the active segment once its records span this long"},
	{"message-max-bytes", "max.message.bytes", "largest record batch a producer may append"},
	{"log-cleanup-policy", "cleanup.policy", "delete, compact, or compact,delete"},
	{"log-message-timestamp-type", "message.timestamp.type", "CreateTime or LogAppendTime"},
	{"log-cleaner-min-compaction-lag-ms", "min.compaction.lag.ms", "records younger than this are not compacted"},
	{"log-cleaner-delete-retention-ms", "delete.retention.ms", "how long a tombstone stays readable after it was first compacted"},
	{"log-cleaner-min-cleanable-ratio", "min.cleanable.dirty.ratio", "uncleaned share of a compacted log that makes it due for cleaning"},
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
