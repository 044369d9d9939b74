// Package app assembles a running groupd from its configuration: it opens
// the broker's data, binds the listeners and starts the servers. The
// command and the end-to-end tests start groupd the same way through it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/groupd/groupd/internal/admin"
	"github.com/groupd/groupd/internal/api"
	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/coordinator"
	"github.com/groupd/groupd/internal/coordlog"
	"github.com/groupd/groupd/internal/datadir"
	"github.com/groupd/groupd/internal/fetchsession"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/inspect"
	"github.com/groupd/groupd/internal/metrics"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/server"
	"github.com/groupd/groupd/internal/store"
)

// Config is everything needed to run groupd.
type Config struct {
	Listen string
	// AdvertiseHost and AdvertisePort are what Metadata tells clients;
	// empty means the listen address, with port 0 resolved.
	AdvertiseHost     string
	AdvertisePort     int32
	DataDir           string
	AutoCreateTopics  bool
	DefaultPartitions int32
	MaxRequestBytes   int32
	// MaxConnections bounds open client connections; 0 derives it from
	// the open-file limit (maxConnectionsFor).
	MaxConnections int
	// ConnectionsMaxIdle closes a connection with nothing in flight after
	// that long; 0 is Kafka's 10 minutes, negative never.
	ConnectionsMaxIdle time.Duration
	// FetchMaxBytes caps the record data of one fetch reply; 0 is Kafka's
	// 55 MiB.
	FetchMaxBytes int32
	Log           partition.Options

	// NodeID is the broker id Metadata, FindCoordinator and the other
	// responses that name a broker report.
	NodeID int32
	// FetchSessionCacheSlots bounds the incremental fetch sessions (KIP-227);
	// 0 is Kafka's 1,000, negative serves none.
	FetchSessionCacheSlots int

	// QuarantineDamagedSegments sets damaged partition segments aside on
	// start instead of refusing to start (see broker.Config).
	QuarantineDamagedSegments bool
	// TopicDefaults, RetentionCheckInterval, CleanerBackoff,
	// CleanerBufferBytes and OffsetsTopicPartitions are the broker's (see
	// broker.Config); zero values take Kafka's defaults.
	TopicDefaults          map[string]string
	RetentionCheckInterval time.Duration
	CleanerBackoff         time.Duration
	CleanerBufferBytes     int
	OffsetsTopicPartitions int32
	// Group configures the classic and consumer group protocols (zero
	// fields take Kafka's defaults).
	Group  group.Config
	Logger *slog.Logger
	// SkipUndecodableRecords starts groupd even if coordinator records do
	// not decode, skipping each with a log line naming its key; without
	// it such a record stops the start.
	SkipUndecodableRecords bool

	// HTTPListen is where the HTTP side listens (Prometheus metrics,
	// the JSON admin API, the status page); empty disables it.
	HTTPListen string
	// MetricsMaxGroups is how many groups get their own metric series;
	// the rest are aggregated.
	MetricsMaxGroups int
	// HTTPProfiling serves Go's runtime profiles on the HTTP side under
	// /debug/pprof/.
	HTTPProfiling bool
	// Cluster makes the node one of a cluster (cluster.go); its zero
	// value is a single node.
	Cluster ClusterConfig
}

// ErrStopped is reported by Done after Close.
var ErrStopped = server.ErrServerClosed

// App is a running groupd.
type App struct {
	broker *broker.Broker
	store  *store.Pebble
	coord  *coordinator.Coordinator
	srv    *server.Server
	ln     net.Listener
	adv    string
	done   chan error
	// stopped is closed by Close.
	stopped chan struct{}

	closeOnce sync.Once
	closeErr  error
	// cleanups is the removal of deleted topics' offsets left from before
	// the start.
	cleanups sync.WaitGroup

	// http is nil when HTTPListen is empty.
	http *admin.Server

	// handler serves the Kafka API (kept for its fetch session counters).
	handler *api.Handler
	// cluster is the node's membership of a cluster, nil on a single
	// node; cs holds it for the coordinator's lookups, which start
	// before the node joins.
	cluster *clusterSide
	cs      *atomic.Pointer[clusterSide]
	log     *slog.Logger
}

// Start opens the data directory and starts serving. It returns once the
// listener accepts connections.
func Start(cfg Config) (*App, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.Group.Validate(); err != nil {
		return nil, err
	}
	cfg.MaxConnections = checkOpenFileLimit(cfg.Logger, cfg.MaxConnections)
	// The broker says when its topics change; the coordinator is told off
	// the broker's locks, once per burst of changes.
	topicsChanged := make(chan struct{}, 1)
	b, err := broker.Open(broker.Config{
		DataDir:           cfg.DataDir,
		AutoCreateTopics:  cfg.AutoCreateTopics,
		DefaultPartitions: cfg.DefaultPartitions,
		NodeID:            cfg.NodeID,
		Log:               cfg.Log,
		Logger:            cfg.Logger,

		QuarantineDamagedSegments: cfg.QuarantineDamagedSegments,
		TopicDefaults:             cfg.TopicDefaults,
		RetentionCheckInterval:    cfg.RetentionCheckInterval,
		CleanerBackoff:            cfg.CleanerBackoff,
		CleanerBufferBytes:        cfg.CleanerBufferBytes,
		OffsetsTopicPartitions:    cfg.OffsetsTopicPartitions,
		TopicsChanged: func() {
			select {
			case topicsChanged <- struct{}{}:
			default:
			}
		},
	})
	if errors.Is(err, datadir.ErrInUse) {
		return nil, err // it names the directory and who holds it
	}
	if err != nil {
		return nil, fmt.Errorf("opening data directory %s: %w", cfg.DataDir, err)
	}
	// Coordinator records follow the partition logs' fsync policy:
	// fsynced before their reply, every interval, or left to the OS.
	sopts := store.Options{
		Sync:            cfg.Log.Sync == partition.SyncAlways,
		Logger:          cfg.Logger,
		SkipUndecodable: cfg.SkipUndecodableRecords,
	}
	if cfg.Log.Sync == partition.SyncInterval {
		sopts.SyncInterval = cfg.Log.SyncInterval
		if sopts.SyncInterval <= 0 {
			sopts.SyncInterval = partition.DefaultSyncInterval
		}
	}
	st, err := store.OpenPebble(filepath.Join(cfg.DataDir, "coordinator"), sopts)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("opening coordinator store: %w", err)
	}
	// Without an HTTP side nobody reads metrics, so nothing records them.
	var m *metrics.Metrics
	if cfg.HTTPListen != "" {
		m = metrics.New(metrics.Config{MaxGroups: cfg.MetricsMaxGroups})
	}
	var cobs coordinator.Observer
	if m != nil {
		cobs = m
	}
	hwOf, topics := highWatermark(b), topicsOf(b)
	cs := new(atomic.Pointer[clusterSide])
	ccfg := coordinator.Config{Group: cfg.Group, Store: st, Logger: cfg.Logger, Observer: cobs, Hooks: faultHooks()}
	var owners *shardOwners
	if cfg.Cluster.Enabled() {
		hwOf, topics = clusterHighWatermark(cs), clusterTopics(cs)
		// The shards are the partitions of __consumer_offsets, served
		// by their leaders, their records replicated with them.
		owners = newShardOwners(cfg.Logger)
		ccfg.Owned, ccfg.ShardOf, ccfg.NodeID = true, coordlog.ShardOf, cfg.NodeID
		ccfg.Group.LoadTrigger = inspect.TriggerCoordinatorMoved
		ccfg.Shards = int(b.OffsetsTopicPartitions())
		ccfg.Store = coordlog.New(coordlog.Config{Partitions: ccfg.Shards, Partition: offsetsPartitions(cs),
			NodeID: cfg.NodeID, Logger: cfg.Logger})
	}
	ccfg.HighWatermark, ccfg.Topics = hwOf, topics
	coord := coordinator.New(ccfg)
	// Read the coordinator's records before listening, so that one that
	// does not decode stops the start instead of a shard.
	if err := coord.WaitLoad(context.Background()); err != nil {
		coord.Close()
		st.Close()
		b.Close()
		return nil, fmt.Errorf("loading coordinator records: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		coord.Close()
		st.Close()
		b.Close()
		return nil, err
	}
	host, port := cfg.AdvertiseHost, cfg.AdvertisePort
	if host == "" {
		tcp := ln.Addr().(*net.TCPAddr)
		host, port = tcp.IP.String(), int32(tcp.Port)
		if tcp.IP.IsUnspecified() {
			host = "127.0.0.1"
		}
	}
	var obs server.Observer
	if m != nil {
		obs = m
	}
	opts := []api.Option{api.FetchMaxBytes(cfg.FetchMaxBytes), api.FetchSessionCacheSlots(cfg.FetchSessionCacheSlots)}
	var side *clusterSide
	if cfg.Cluster.Enabled() {
		// The node registers the address it listens on: other nodes'
		// replicas fetch from it once it serves, retrying until then.
		owners.setCoordinator(coord)
		side, err = startCluster(context.Background(), cfg.Cluster, cfg.NodeID, host, port, b, cfg.Logger, owners.leadership)
		if err == nil {
			err = side.checkOffsetsTopic(ccfg.Shards)
			if err != nil {
				side.close()
			}
		}
		if err != nil {
			ln.Close()
			coord.Close()
			st.Close()
			b.Close()
			return nil, err
		}
		cs.Store(side)
		opts = append(opts, api.InCluster(api.ClusterConfig{Node: side.node, Replicas: side.reps, ClusterID: cfg.Cluster.id(),
			DefaultReplicationFactor: cfg.Cluster.DefaultReplicationFactor}))
	}
	handler := api.New(b, coord, host, port, cfg.Logger, opts...)
	srv := server.New(server.Config{
		Observer:        obs,
		MaxRequestBytes: cfg.MaxRequestBytes,
		MaxConnections:  cfg.MaxConnections,
		IdleTimeout:     cfg.ConnectionsMaxIdle,
		Handler:         handler,
		Logger:          cfg.Logger,
	})
	a := &App{broker: b, store: st, coord: coord, srv: srv, ln: ln, handler: handler, log: cfg.Logger, adv: net.JoinHostPort(host, strconv.Itoa(int(port))),
		done: make(chan error, 3), stopped: make(chan struct{}), cluster: side, cs: cs}
	if m != nil && side != nil {
		m.WatchCluster(func() metrics.ClusterStats {
			s := side.counts.stats(side.node.View(), side.node.ID())
			s.ReplicaMaxLag = side.reps.MaxLag()
			return s
		})
	}
	if m != nil {
		m.WatchFetchSessions(func() metrics.FetchSessionStats {
			st := handler.FetchSessions()
			return metrics.FetchSessionStats{Sessions: st.Sessions, Partitions: st.Partitions, Created: st.Created, Evicted: st.Evicted}
		})
	}
	if m != nil {
		// The coordinator is what the admin API, the page and the group
		// gauges read. While its shards load it answers with an error
		// matching inspect.ErrUnavailable, which the API serves as 503.
		m.SetSource(coord)
		acfg := admin.Config{Source: coord, Metrics: m.Handler(), Logger: cfg.Logger, Profiling: cfg.HTTPProfiling}
		if side != nil {
			acfg.Cluster = side
		}
		a.http, err = admin.Listen(cfg.HTTPListen, acfg)
		if err != nil {
			if side != nil {
				side.close()
			}
			ln.Close()
			coord.Close()
			st.Close()
			b.Close()
			return nil, fmt.Errorf("HTTP listener: %w", err)
		}
	}
	go func() { a.done <- srv.Serve(ln) }()
	a.cleanups.Go(func() { finishOffsetCleanups(b, coord, cfg.Logger) })
	var viewChanged <-chan struct{}
	var nodeFailed <-chan struct{}
	if side != nil {
		// The cluster's topics are what the coordinator assigns.
		viewChanged, nodeFailed = side.node.Subscribe(), side.node.Failed()
	}
	go func() {
		for {
			select {
			case <-topicsChanged:
				coord.TopicsChanged()
			case <-viewChanged:
				v := side.node.View()
				side.counts.observe(v)
				side.applyTopicConfigs(b)
				coord.TopicsChanged()
				if gone := side.deletedTopics(v); len(gone) > 0 {
					// As Kafka's coordinators do when a topic is
					// deleted: each node, for the groups it
					// coordinates.
					a.cleanups.Go(func() { removeDeletedOffsets(coord, gone, cfg.Logger) })
				}
			case <-nodeFailed:
				a.done <- fmt.Errorf("cluster: %w", side.node.Err())
				nodeFailed = nil
			case <-a.stopped:
				return
			}
		}
	}()
	go func() {
		// A shard that meets an undecodable record when it reloads
		// stops; the process stops with it rather than serve without
		// its groups.
		select {
		case <-coord.Failed():
			a.done <- fmt.Errorf("coordinator: %w", coord.Err())
		case <-a.stopped:
		}
	}()
	return a, nil
}

// finishOffsetCleanups removes the committed offsets of topics deleted
// before a stop that came before their offsets were removed, once the
// coordinator has loaded.
func finishOffsetCleanups(b *broker.Broker, coord *coordinator.Coordinator, log *slog.Logger) {
	pending := b.PendingOffsetCleanups()
	if len(pending) == 0 {
		return
	}
	if err := coord.DeleteTopicOffsets(context.Background(), pending); err != nil {
		log.Warn("removing the committed offsets of deleted topics; retried on the next start", "topics", pending, "err", err)
		return
	}
	if err := b.OffsetsCleaned(pending); err != nil {
		log.Warn("recording the removal of deleted topics' offsets", "topics", pending, "err", err)
		return
	}
	log.Info("removed the committed offsets of topics deleted before the last stop", "topics", pending)
}

// removeDeletedOffsets removes the committed offsets of topics deleted
// from the cluster from the groups this node coordinates.
func removeDeletedOffsets(coord *coordinator.Coordinator, topics []string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := coord.DeleteTopicOffsets(ctx, topics); err != nil {
		log.Warn("removing the committed offsets of deleted topics", "topics", topics, "err", err)
		return
	}
	log.Info("removed the committed offsets of deleted topics from the groups this node coordinates", "topics", topics)
}

// highWatermark looks up a partition's high watermark in the broker.
func highWatermark(b *broker.Broker) func(string, int32) (int64, bool) {
	return func(topic string, partition int32) (int64, bool) {
		t, ok := b.Topic(topic)
		if !ok {
			return 0, false
		}
		l := t.Partition(partition)
		if l == nil {
			return 0, false
		}
		return l.HighWatermark(), true
	}
}

// topicsOf reads the broker's topic metadata for the coordinator.
func topicsOf(b *broker.Broker) func() []group.Topic {
	return func() []group.Topic {
		ts := b.Topics()
		out := make([]group.Topic, len(ts))
		for i, t := range ts {
			out[i] = group.Topic{Name: t.Name, ID: consumer.TopicID(t.ID), Partitions: int32(len(t.Partitions()))}
		}
		// Kafka's regular expressions match internal topics too, so a
		// consumer group may be assigned __consumer_offsets (its
		// partitions read as empty here).
		if ot, ok := b.OffsetsTopic(); ok {
			out = append(out, group.Topic{Name: broker.OffsetsTopicName, ID: consumer.TopicID(ot.ID), Partitions: ot.Partitions})
		}
		return out
	}
}

// Broker is the broker's data plane, for tests that run its background
// maintenance (retention, the log cleaner) by hand.
func (a *App) Broker() *broker.Broker { return a.broker }

// Inspect is the read-only view of the groups and their rebalance
// histories, for the admin side.
func (a *App) Inspect() inspect.Source { return a.coord }

// FetchSessions reports the incremental fetch session cache's counters.
func (a *App) FetchSessions() fetchsession.Stats { return a.handler.FetchSessions() }

// Addr is the address the listener is bound to.
func (a *App) Addr() string { return a.ln.Addr().String() }

// HTTPAddr is the address the HTTP side is bound to; empty when it is
// disabled.
func (a *App) HTTPAddr() string {
	if a.http == nil {
		return ""
	}
	return a.http.Addr()
}

// Advertised is the address Metadata gives clients.
func (a *App) Advertised() string { return a.adv }

// Done reports the server's end: ErrStopped after Close, or the error that
// stopped it.
func (a *App) Done() <-chan error { return a.done }

// servedGrace is how long Close waits, once the coordinator has answered
// everything it held, for connections still being served after the
// deadline before it closes the data under them.
const servedGrace = 2 * time.Second

// Close stops accepting and reading requests, lets the requests in flight
// finish and their replies be written (until ctx ends), then flushes and
// closes the data. Requests parked until other members act (a JoinGroup
// waiting for its group) are answered NOT_COORDINATOR, as when Kafka
// moves a coordinator away, and their clients look for it again.
// Calling it again returns the first call's result.
func (a *App) Close(ctx context.Context) error {
	a.closeOnce.Do(func() {
		if a.cluster != nil {
			// Leaderships move while this node still serves, so that its
			// followers catch up and clients are told where to go.
			a.cluster.shutdown(ctx)
		}
		close(a.stopped)
		// The HTTP side goes first: it reads from the coordinator.
		var herr error
		if a.http != nil {
			herr = a.http.Shutdown(ctx)
		}
		shut := make(chan error, 1)
		go func() { shut <- a.srv.Shutdown(ctx) }()
		<-a.srv.Stopping()
		// No request is read from here on. The coordinator makes the
		// requests it has taken durable and answers them, and answers
		// its parked ones, before the store under it closes; the
		// server writes their replies meanwhile.
		cerr := a.coord.Close()
		err := errors.Join(herr, <-shut)
		// Past the deadline, connections whose replies the coordinator
		// has now answered finish at once; a handler stuck elsewhere
		// is not waited for long.
		select {
		case <-a.srv.Served():
		case <-time.After(servedGrace):
			a.log.Error("connections still being served after shutdown; closing the data under them", "waited", servedGrace)
		}
		a.cleanups.Wait()
		var clerr error
		if a.cluster != nil {
			clerr = a.cluster.close()
		}
		a.closeErr = errors.Join(err, cerr, clerr, a.store.Close(), a.broker.Close())
	})
	return a.closeErr
}

// checkOpenFileLimit raises the soft open-file limit to the hard limit,
// logs both, and returns the connection cap: maxConns, or if that is 0 the
// default for the limit.
func checkOpenFileLimit(log *slog.Logger, maxConns int) int {
	soft, hard, before, err := raiseOpenFileLimit()
	if err != nil {
		log.Warn("could not raise the open-file limit", "err", err, "soft", soft, "hard", hard)
	}
	if maxConns <= 0 {
		maxConns = maxConnectionsFor(soft)
	}
	attrs := []any{"soft", soft, "hard", hard, "max_connections", maxConns}
	if before != soft {
		attrs = append(attrs, "raised_from", before)
	}
	log.Info("open-file limit", attrs...)
	if soft > 0 && uint64(maxConns) >= soft {
		log.Warn("max-connections is not below the open-file limit: accepts will fail (and be retried) before the cap is reached",
			"max_connections", maxConns, "open_file_limit", soft)
	}
	return maxConns
}

// maxConnectionsFor is the default connection cap under an open-file limit:
// three quarters of it, so that connections alone cannot take the
// descriptors that partition segments and the coordinator store need. An
// unknown or unlimited limit gives server.DefaultMaxConnections.
func maxConnectionsFor(openFileLimit uint64) int {
	if openFileLimit == 0 || openFileLimit >= 1<<31 {
		return server.DefaultMaxConnections
	}
	return max(int(openFileLimit/4*3), 1)
}
