package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"
)

// A reply handed to a completer that never completes it (a handler gone
// wrong) cannot hold Shutdown past its deadline: the connection is closed
// and Shutdown returns the deadline's error; Served follows once the
// completer lets go.
func TestShutdownEndsAtItsDeadlineWhateverAHandlerDid(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &completerHandler{}
	srv := New(Config{Handler: h, Logger: slog.New(slog.DiscardHandler)})
	go srv.Serve(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sendRequest(t, c, 1, "hold")
	waitUntil(t, "the held request", func() bool { return h.handled.Load() == 1 })
	held := h.take()
	if len(held) != 1 {
		t.Fatalf("%d replies held, want 1", len(held))
	}
	waitUntil(t, "the reply handed to its completer", func() bool {
		held[0].mu.Lock()
		defer held[0].mu.Unlock()
		return held[0].handed
	})

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- srv.Shutdown(ctx) }()
	select {
	case err := <-returned:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v, want its deadline's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown still waits for a reply that never comes (hang guard)")
	}
	select {
	case <-srv.Served():
		t.Fatal("Served before the held reply's completer let go")
	default:
	}
	held[0].finish()
	select {
	case <-srv.Served():
	case <-time.After(10 * time.Second):
		t.Fatal("connections never finished after the completer let go (hang guard)")
	}
}
