package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// parkEnv is a Server with a real loopback listener whose connections
// park once they have waited parkAfter for a request.
type parkEnv struct {
	t    *testing.T
	srv  *Server
	addr string
	logs *syncBuffer
	done chan error
	once sync.Once
}

func newParkEnv(t *testing.T, cfg Config, parkAfter time.Duration) *parkEnv {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &parkEnv{t: t, addr: ln.Addr().String(), logs: &syncBuffer{}, done: make(chan error, 1)}
	cfg.Handler = memHandler{}
	cfg.Logger = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.srv = New(cfg)
	e.srv.parkAfter = parkAfter
	go func() { e.done <- e.srv.Serve(ln) }()
	t.Cleanup(func() {
		e.shutdown()
		if t.Failed() {
			t.Logf("server log:\n%s", e.logs.String())
		}
	})
	return e
}

func (e *parkEnv) shutdown() {
	e.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			e.t.Errorf("shutdown: %v", err)
		}
		<-e.done
		if l := e.logs.lines("level=ERROR"); len(l) > 0 {
			e.t.Errorf("errors logged: %q", l)
		}
	})
}

func (e *parkEnv) dial(n int) []net.Conn {
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	return conns
}

// waitFor polls cond until it holds; it fails the test after 10 seconds.
func (e *parkEnv) waitFor(what string, cond func() bool) {
	e.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// counts returns how many connections are open and how many of those
// are parked.
func (e *parkEnv) counts() (open, parked int) {
	e.srv.mu.Lock()
	defer e.srv.mu.Unlock()
	for c := range e.srv.conns {
		c.park.mu.Lock()
		if c.park.parked {
			parked++
		}
		c.park.mu.Unlock()
	}
	return len(e.srv.conns), parked
}

// serving counts the goroutines serving connections.
func serving() int {
	buf := make([]byte, 1<<22)
	return bytes.Count(buf[:runtime.Stack(buf, true)], []byte("server.(*conn).serve("))
}

func TestIdleConnectionsParkAndResume(t *testing.T) {
	e := newParkEnv(t, Config{}, time.Millisecond)
	conns := e.dial(50)
	for round := range 3 {
		exchange(t, conns, "idle")
		exchange(t, conns, "beat")
		e.waitFor("every connection to park", func() bool { open, parked := e.counts(); return open == 50 && parked == 50 })
		// A connection is marked parked just before its goroutine
		// returns; on a busy machine that return can come a little
		// later, but it must come.
		e.waitFor(fmt.Sprintf("round %d: no goroutine to serve the 50 parked connections", round), func() bool { return serving() == 0 })
		e.srv.mu.Lock()
		for c := range e.srv.conns {
			c.park.mu.Lock()
			held := c.fr.small != nil || c.fr.large != nil || c.out.b != nil
			c.park.mu.Unlock()
			if held {
				e.srv.mu.Unlock()
				t.Fatalf("round %d: a parked connection holds a buffer", round)
			}
		}
		e.srv.mu.Unlock()
	}
	// A request arriving in pieces resumes its connection at the first;
	// the rest must follow within the frame timeout, as ever.
	f := frameOf(kmsg.NewPtrApiVersionsRequest(), 7, "idle")
	frame := append(binary.BigEndian.AppendUint32(nil, uint32(len(f))), f...)
	if _, err := conns[0].Write(frame[:3]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // long enough to park, were it allowed
	if _, err := conns[0].Write(frame[3:]); err != nil {
		t.Fatal(err)
	}
	var size [4]byte
	if _, err := io.ReadFull(conns[0], size[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, conns[0], int64(binary.BigEndian.Uint32(size[:]))); err != nil {
		t.Fatal(err)
	}

	// Clients hanging up close parked connections.
	for _, c := range conns[:20] {
		c.Close()
	}
	e.waitFor("hung-up connections to close", func() bool { open, _ := e.counts(); return open == 30 })
	exchange(t, conns[20:], "idle")

	// Shutdown closes the parked rest.
	e.waitFor("the rest to park", func() bool { _, parked := e.counts(); return parked == 30 })
	e.shutdown()
	for _, c := range conns[20:] {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(size[:]); !errors.Is(err, io.EOF) {
			t.Fatalf("parked connection after shutdown: %v, want EOF", err)
		}
	}
}

func TestSparseConnectionsParkAtOnce(t *testing.T) {
	var mu sync.Mutex
	var parks []bool
	testHookParked = func(atOnce bool) {
		mu.Lock()
		parks = append(parks, atOnce)
		mu.Unlock()
	}
	defer func() { testHookParked = nil }()
	// Long enough that requests sent back to back come back sooner.
	e := newParkEnv(t, Config{}, 500*time.Millisecond)
	conns := e.dial(1)
	parked := func() []bool {
		mu.Lock()
		defer mu.Unlock()
		return append([]bool(nil), parks...)
	}
	for i := range 3 {
		exchange(t, conns, "beat")
		e.waitFor("the connection to park", func() bool { return len(parked()) == i+1 })
		// Each request after the first came after the connection had
		// parked, longer than parkAfter after the reply before it.
		time.Sleep(2 * e.srv.parkAfter)
	}
	if got := fmt.Sprint(parked()); got != "[false true true]" {
		t.Fatalf("parked at once: %s, want [false true true]", got)
	}
	// Requests back to back make it wait for the next before parking.
	exchange(t, conns, "beat")
	exchange(t, conns, "beat")
	e.waitFor("the connection to park", func() bool { return len(parked()) == 5 })
	if got := fmt.Sprint(parked()); got != "[false true true true false]" {
		t.Fatalf("parked at once: %s, want [false true true true false]", got)
	}
}

func TestParkedConnectionsAreClosedWhenIdle(t *testing.T) {
	e := newParkEnv(t, Config{IdleTimeout: 10 * time.Minute}, time.Millisecond)
	conns := e.dial(10)
	exchange(t, conns, "idle")
	e.waitFor("every connection to park", func() bool { _, parked := e.counts(); return parked == 10 })
	p := e.srv.poll.(*epoller)
	// The sweep at a given time, as the poller runs it every
	// sweepInterval: 9 minutes idle is not enough, 10 are.
	p.conns.sweep(time.Now().Add(9*time.Minute), 10*time.Minute)
	if open, parked := e.counts(); open != 10 || parked != 10 {
		t.Fatalf("after 9 minutes: %d open, %d parked", open, parked)
	}
	p.conns.sweep(time.Now().Add(10*time.Minute), 10*time.Minute)
	e.waitFor("idle connections to close", func() bool { open, _ := e.counts(); return open == 0 })
	var b [1]byte
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(b[:]); !errors.Is(err, io.EOF) {
			t.Fatalf("idle connection: %v, want EOF", err)
		}
	}
	if n := len(e.logs.lines("closing idle connection")); n != 10 {
		t.Fatalf("%d idle close log lines, want 10", n)
	}
	if strings.Contains(e.logs.String(), "level=WARN") {
		t.Fatalf("warnings: %s", e.logs.String())
	}
}
