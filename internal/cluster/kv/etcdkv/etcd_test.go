package etcdkv_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/kv/etcdkv"
	"github.com/groupd/groupd/internal/cluster/kv/kvtest"
)

// The members these tests start tick every 10ms with a 100ms election
// timeout, which brings etcd's minimum lease TTL down to 1s (1.5 election
// timeouts, rounded up to seconds): the lease tests then cost about two
// seconds of real time each, which etcd's own TTL and its half-second
// expiry loop force.
const (
	tickMs     = 10
	electionMs = 100
	testTTL    = time.Second
)

// TestConformanceEmbedded runs the suite on an etcd member embedded in the
// test process (the server module's version, pinned in go.mod).
func TestConformanceEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd member; a few seconds")
	}
	endpoint := startEmbedded(t)
	runConformance(t, endpoint)
}

// TestConformanceExternal runs the suite on an etcd binary, by default
// Debian's etcd-server (3.4) at /usr/bin/etcd, or $GROUPD_ETCD_BIN: the
// oldest server groupd supports. Skipped when there is none.
func TestConformanceExternal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd process; a few seconds")
	}
	bin := os.Getenv("GROUPD_ETCD_BIN")
	if bin == "" {
		bin = "/usr/bin/etcd"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no etcd binary at %s (apt-get install etcd-server, or set GROUPD_ETCD_BIN)", bin)
	}
	endpoint := startExternal(t, bin)
	runConformance(t, endpoint)
}

func runConformance(t *testing.T, endpoint string) {
	direct := newClient(t, endpoint)
	status, err := direct.Status(context.Background(), endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd server %s", status.Version)
	b := etcdkv.New(direct, nil)
	n := 0
	kvtest.Run(t, func(t *testing.T) *kvtest.Env {
		// A goes through a proxy the test can cut; each test gets its own.
		p := newProxy(t, endpoint)
		a := etcdkv.New(newClient(t, p.addr()), nil)
		n++
		return &kvtest.Env{
			A:      a,
			B:      b,
			Prefix: fmt.Sprintf("/groupd-test/%d/", n),
			Clock:  kv.RealClock(),
			Wait:   time.Sleep,
			Compact: func(rev int64) error {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return b.Compact(ctx, rev)
			},
			CutA:    p.cut,
			HealA:   p.heal,
			TTL:     testTTL,
			Timeout: 15 * time.Second,
		}
	})
}

func newClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func startEmbedded(t *testing.T) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = t.TempDir()
	cfg.TickMs, cfg.ElectionMs = tickMs, electionMs
	cfg.SnapshotCount = 100
	cfg.UnsafeNoFsync = true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	peer, client := freeURL(t), freeURL(t)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("embedded etcd not ready after 30s")
	}
	return client.Host
}

func startExternal(t *testing.T, bin string) string {
	t.Helper()
	peer, client := freeURL(t), freeURL(t)
	dir := t.TempDir()
	cmd := exec.Command(bin,
		"--name", "test",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-peer-urls", peer.String(),
		"--initial-advertise-peer-urls", peer.String(),
		"--listen-client-urls", client.String(),
		"--advertise-client-urls", client.String(),
		"--initial-cluster", "test="+peer.String(),
		"--heartbeat-interval", fmt.Sprint(tickMs),
		"--election-timeout", fmt.Sprint(electionMs),
		"--snapshot-count", "100",
		"--log-level", "error",
	)
	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
		if t.Failed() {
			if b, err := os.ReadFile(log.Name()); err == nil {
				t.Logf("etcd's log:\n%s", b)
			}
		}
	})
	// Ready when it answers a linearizable read.
	cli := newClient(t, client.Host)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "ready")
		cancel()
		if err == nil {
			return client.Host
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd at %s not ready after 30s: %v", client.Host, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeURL returns an http URL on a loopback port that was free a moment
// ago.
func freeURL(t *testing.T) url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return url.URL{Scheme: "http", Host: addr}
}

// proxy forwards TCP connections to etcd; while it is cut, it closes
// every connection and every new one at once, as a network that refuses a
// node would.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	isCut bool
	conns []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.isCut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.isCut {
			p.mu.Unlock()
			c.Close()
			s.Close()
			continue
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go pipe(c, s)
		go pipe(s, c)
	}
}

func pipe(dst, src net.Conn) {
	io.Copy(dst, src)
	dst.Close()
	src.Close()
}

func (p *proxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isCut = false
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isCut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
