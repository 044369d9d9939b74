// Package etcddev runs an etcd member inside the process, for a cluster to
// try on one machine (groupd dev-cluster) and for tests: one member on
// free loopback ports with its data in a directory of the caller's.
package etcddev

import (
	"fmt"
	"net"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Member is a running embedded etcd member.
type Member struct {
	e        *embed.Etcd
	endpoint string
}

// Options tune the member; zero values are fine.
type Options struct {
	// Fast shortens etcd's heartbeat and election timeouts (10 ms and
	// 100 ms), which also lowers its minimum lease TTL to one second:
	// for tests. A dev cluster keeps etcd's defaults.
	Fast bool
	// NoFsync skips etcd's fsyncs: for tests only.
	NoFsync bool
}

// Start starts a member with its data in dir and waits until it serves.
func Start(dir string, opts Options) (*Member, error) {
	cfg := embed.NewConfig()
	cfg.Name = "groupd-dev"
	cfg.Dir = dir
	if opts.Fast {
		cfg.TickMs, cfg.ElectionMs = 10, 100
	}
	cfg.UnsafeNoFsync = opts.NoFsync
	cfg.SnapshotCount = 10000
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = "periodic", "1h"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	peer, err := freeURL()
	if err != nil {
		return nil, err
	}
	client, err := freeURL()
	if err != nil {
		return nil, err
	}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting an embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("the embedded etcd did not become ready within a minute")
	}
	return &Member{e: e, endpoint: client.String()}, nil
}

// Endpoint is the member's client URL.
func (m *Member) Endpoint() string { return m.endpoint }

// Close stops the member.
func (m *Member) Close() { m.e.Close() }

func freeURL() (url.URL, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	addr := ln.Addr().String()
	ln.Close()
	return url.URL{Scheme: "http", Host: addr}, nil
}
