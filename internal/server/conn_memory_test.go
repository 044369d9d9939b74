package server

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// memHandler answers ApiVersions at once, or, for client id "beat", with a
// brief reply released by another goroutine, as the coordinator releases a
// heartbeat's.
type memHandler struct{}

func (memHandler) Supports(key, version int16) bool { return true }

func (memHandler) Handle(_ context.Context, r *Request) (kmsg.Response, error) {
	resp := kmsg.NewPtrApiVersionsResponse()
	if r.Header.ClientID != "beat" {
		return resp, nil
	}
	done := make(chan struct{})
	go close(done)
	return &briefWaiter{Response: resp, done: done}, nil
}

type briefWaiter struct {
	kmsg.Response
	done chan struct{}
}

func (w *briefWaiter) Wait() error { <-w.done; return nil }
func (w *briefWaiter) Brief() bool { return true }

// exchange sends one request on each connection in turn and reads its
// reply.
func exchange(tb testing.TB, conns []net.Conn, clientID string) {
	tb.Helper()
	f := frameOf(kmsg.NewPtrApiVersionsRequest(), 1, clientID)
	frame := append(binary.BigEndian.AppendUint32(nil, uint32(len(f))), f...)
	var size [4]byte
	for _, c := range conns {
		if _, err := c.Write(frame); err != nil {
			tb.Fatal(err)
		}
		if _, err := io.ReadFull(c, size[:]); err != nil {
			tb.Fatal(err)
		}
		if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(size[:]))); err != nil {
			tb.Fatal(err)
		}
	}
}

// inUse is the heap and stack memory in use once the garbage is collected.
func inUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

// connMemory opens n loopback connections and returns the heap and stack
// memory in use with them open: served by a Server after each has sent
// an ApiVersions request and a brief one (serve true), waiting for their
// next request or, with park, once they have parked; or merely accepted
// and held (serve false, where nothing is sent).
func connMemory(b *testing.B, n int, serve, park bool) int64 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var (
		srv  *Server
		mu   sync.Mutex
		held []net.Conn
		done = make(chan struct{})
	)
	if serve {
		srv = New(Config{Handler: memHandler{}, Logger: slog.New(slog.DiscardHandler)})
		srv.parkAfter = 0
		if park {
			srv.parkAfter = time.Millisecond
		}
		go func() { srv.Serve(ln); close(done) }()
	} else {
		go func() {
			defer close(done)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			}
		}()
	}
	conns := make([]net.Conn, n)
	for i := range conns {
		if conns[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
			b.Fatalf("dial %d (is the open-file limit high enough?): %v", i, err)
		}
	}
	if serve {
		exchange(b, conns, "idle")
		exchange(b, conns, "beat")
		for park && parked(srv) < n && !srv.pollerFailed.Load() {
			time.Sleep(time.Millisecond)
		}
	} else {
		for {
			mu.Lock()
			got := len(held)
			mu.Unlock()
			if got == n {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	used := inUse()
	for _, c := range conns {
		c.Close()
	}
	if serve {
		srv.Shutdown(context.Background())
	} else {
		ln.Close()
		for _, c := range held {
			c.Close()
		}
	}
	<-done
	return used
}

// parked counts the server's parked connections.
func parked(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		c.park.mu.Lock()
		if c.park.parked {
			n++
		}
		c.park.mu.Unlock()
	}
	return n
}

// BenchmarkConnMemory reports the heap and stack memory the server holds
// per open connection beyond the socket itself (a connection accepted and
// held by nothing else), after garbage collection, for a connection that
// has sent a request and a brief one, as a heartbeating member does:
// waiting with its goroutine for the next (waiting-B/conn), and parked
// (parked-B/conn; where connections cannot park, as waiting).
//
//	go test ./internal/server -run '^$' -bench ConnMemory -benchtime 3x
func BenchmarkConnMemory(b *testing.B) {
	const n = 2000
	var waiting, parkedBytes float64
	for range b.N {
		held := connMemory(b, n, false, false)
		waiting += float64(connMemory(b, n, true, false)-held) / n
		parkedBytes += float64(connMemory(b, n, true, true)-held) / n
	}
	b.ReportMetric(waiting/float64(b.N), "waiting-B/conn")
	b.ReportMetric(parkedBytes/float64(b.N), "parked-B/conn")
}
