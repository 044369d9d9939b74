package server

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// completerHandler answers "hold" with a brief reply completed by the
// test (complete), on the test's goroutine, as a coordinator shard
// completes a heartbeat's; "ready" with one already complete; anything
// else at once.
type completerHandler struct {
	mu      sync.Mutex
	held    []*testCompleter
	handled atomic.Int32
}

func (*completerHandler) Supports(key, version int16) bool { return true }

func (h *completerHandler) Handle(_ context.Context, r *Request) (kmsg.Response, error) {
	h.handled.Add(1)
	resp := r.Msg.ResponseKind()
	switch r.Header.ClientID {
	case "hold":
		w := &testCompleter{Response: resp, done: make(chan struct{})}
		h.mu.Lock()
		h.held = append(h.held, w)
		h.mu.Unlock()
		return w, nil
	case "ready":
		w := &testCompleter{Response: resp, done: make(chan struct{})}
		w.finish()
		return w, nil
	}
	return resp, nil
}

// take returns the held replies not yet taken.
func (h *completerHandler) take() []*testCompleter {
	h.mu.Lock()
	defer h.mu.Unlock()
	held := h.held
	h.held = nil
	return held
}

// testCompleter is a brief reply (Completer) whose completion runs the
// callback the connection gave, if it gave one.
type testCompleter struct {
	kmsg.Response
	mu     sync.Mutex
	done   chan struct{}
	fn     func()
	handed bool
}

func (w *testCompleter) Wait() error { <-w.done; return nil }
func (w *testCompleter) Brief() bool { return true }

func (w *testCompleter) OnDone(fn func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
		return false
	default:
	}
	w.fn, w.handed = fn, true
	return true
}

func (w *testCompleter) finish() {
	w.mu.Lock()
	close(w.done)
	fn := w.fn
	w.mu.Unlock()
	if fn != nil {
		fn()
	}
}

func newCompleterEnv(t *testing.T) (*completerHandler, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &completerHandler{}
	srv := New(Config{Handler: h, Logger: slog.New(slog.DiscardHandler)})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
	})
	// Before the shutdown: replies still held when a test fails.
	t.Cleanup(func() {
		for _, w := range h.take() {
			w.finish()
		}
	})
	return h, ln.Addr().String()
}

func sendRequest(t *testing.T, c net.Conn, corr int32, clientID string) {
	t.Helper()
	if _, err := c.Write(request(corr, clientID)); err != nil {
		t.Fatal(err)
	}
}

// readReply reads one reply frame and returns its correlation id.
func readReply(t *testing.T, c net.Conn) int32 {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	return int32(binary.BigEndian.Uint32(body))
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A brief reply that another goroutine completes is handed to it: the
// connection reads and handles its next request meanwhile, and the reply
// after it, though ready at once, waits for the handed one and follows
// it in order.
func TestHandedReplyIsWrittenByItsCompleterInOrder(t *testing.T) {
	h, addr := newCompleterEnv(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sendRequest(t, c, 1, "hold")
	waitUntil(t, "the held request", func() bool { return h.handled.Load() == 1 })
	// Waiting for the reply itself, the connection would not handle
	// this one until the first is complete.
	sendRequest(t, c, 2, "now")
	waitUntil(t, "the request after the held one", func() bool { return h.handled.Load() == 2 })
	held := h.take()
	if len(held) != 1 || !held[0].handed {
		t.Fatalf("held %d replies, handed %v", len(held), len(held) == 1 && held[0].handed)
	}
	held[0].finish()
	for corr := int32(1); corr <= 2; corr++ {
		if got := readReply(t, c); got != corr {
			t.Fatalf("reply to %d, want %d", got, corr)
		}
	}
	// Back to back, each reply is written by its completer; one that
	// is complete by the time it is handed is written by the
	// connection.
	for corr := int32(3); corr < 200; corr++ {
		id := "hold"
		if corr%5 == 0 {
			id = "ready"
		}
		sendRequest(t, c, corr, id)
		if id == "hold" {
			var held []*testCompleter
			waitUntil(t, "a held request", func() bool { held = append(held, h.take()...); return len(held) == 1 })
			go held[0].finish()
		}
		if got := readReply(t, c); got != corr {
			t.Fatalf("reply to %d, want %d", got, corr)
		}
	}
}

// A handed reply the client never waits for does not keep the
// connection from closing: the server shuts down once the completer
// wrote it.
func TestHandedReplyOnAClosingConnection(t *testing.T) {
	h, addr := newCompleterEnv(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	sendRequest(t, c, 1, "hold")
	var held []*testCompleter
	waitUntil(t, "the held request", func() bool { held = append(held, h.take()...); return len(held) == 1 })
	c.Close()
	time.Sleep(10 * time.Millisecond)
	held[0].finish()
}
