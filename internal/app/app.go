// Package app assembles a running groupd from its configuration: it opens
// the broker's data, binds the listener and starts the server. The command
// and the end-to-end tests start groupd the same way through it.
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

	"github.com/groupd/groupd/internal/api"
	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/coordinator"
	"github.com/groupd/groupd/internal/group"
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
	Log               partition.Options
	// Group configures the classic group protocol (zero fields take
	// Kafka's defaults).
	Group  group.Config
	Logger *slog.Logger
	// SkipUndecodableRecords starts groupd even if coordinator records do
	// not decode, skipping each with a log line naming its key; without
	// it such a record stops the start.
	SkipUndecodableRecords bool
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
}

// Start opens the data directory and starts serving. It returns once the
// listener accepts connections.
func Start(cfg Config) (*App, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b, err := broker.Open(broker.Config{
		DataDir:           cfg.DataDir,
		AutoCreateTopics:  cfg.AutoCreateTopics,
		DefaultPartitions: cfg.DefaultPartitions,
		Log:               cfg.Log,
		Logger:            cfg.Logger,
	})
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
	coord := coordinator.New(coordinator.Config{Group: cfg.Group, Store: st, Logger: cfg.Logger})
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
	srv := server.New(server.Config{
		MaxRequestBytes: cfg.MaxRequestBytes,
		Handler:         api.New(b, coord, host, port, cfg.Logger),
		Logger:          cfg.Logger,
	})
	a := &App{broker: b, store: st, coord: coord, srv: srv, ln: ln, adv: net.JoinHostPort(host, strconv.Itoa(int(port))),
		done: make(chan error, 2), stopped: make(chan struct{})}
	go func() { a.done <- srv.Serve(ln) }()
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

// Addr is the address the listener is bound to.
func (a *App) Addr() string { return a.ln.Addr().String() }

// Advertised is the address Metadata gives clients.
func (a *App) Advertised() string { return a.adv }

// Done reports the server's end: ErrStopped after Close, or the error that
// stopped it.
func (a *App) Done() <-chan error { return a.done }

// Close stops accepting, lets in-flight requests finish (until ctx ends),
// then flushes and closes the data.
// Calling it again returns the first call's result.
func (a *App) Close(ctx context.Context) error {
	a.closeOnce.Do(func() {
		close(a.stopped)
		err := a.srv.Shutdown(ctx)
		// The coordinator answers its parked requests before the store
		// under it closes.
		a.closeErr = errors.Join(err, a.coord.Close(), a.store.Close(), a.broker.Close())
	})
	return a.closeErr
}
