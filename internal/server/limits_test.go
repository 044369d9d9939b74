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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// testHandler answers ApiVersions requests; the client id picks what it
// does instead of answering at once.
type testHandler struct {
	net   *fakeNet       // woken on every call
	calls map[string]int // guarded by net.mu
	// release ends the waits of "park" replies, gate those of "brief"
	// ones; unblock ends "block" handlers.
	release, gate, unblock chan struct{}
}

func newTestHandler(n *fakeNet) *testHandler {
	return &testHandler{net: n, calls: map[string]int{},
		release: make(chan struct{}), gate: make(chan struct{}), unblock: make(chan struct{})}
}

func (h *testHandler) Supports(key, version int16) bool { return true }

// count returns the calls from clientID; called with net.mu held (in
// waitFor) or not.
func (h *testHandler) count(clientID string) int { return h.calls[clientID] }

func (h *testHandler) countLocked(clientID string) int {
	h.net.mu.Lock()
	defer h.net.mu.Unlock()
	return h.calls[clientID]
}

func (h *testHandler) Handle(ctx context.Context, r *Request) (kmsg.Response, error) {
	h.net.mu.Lock()
	h.calls[r.Header.ClientID]++
	h.net.cond.Broadcast()
	h.net.mu.Unlock()
	resp := kmsg.NewPtrApiVersionsResponse()
	switch r.Header.ClientID {
	case "park": // a JoinGroup waiting for its group, or for shutdown
		return &testWaiter{Response: resp, wait: func() {
			select {
			case <-h.release:
			case <-ctx.Done():
			}
		}}, nil
	case "brief": // a commit waiting to be durable
		return &testBrief{testWaiter{Response: resp, wait: func() {
			select {
			case <-h.gate:
			case <-ctx.Done():
			}
		}}}, nil
	case "block": // a long-polling fetch
		select {
		case <-h.unblock:
		case <-ctx.Done():
		}
	case "panic":
		var m map[string]int
		m["handler bug"]++
	case "panic-wait":
		return &testWaiter{Response: resp, wait: func() { panic("wait bug") }}, nil
	case "big": // a fetch reply of 2 MiB
		f := kmsg.NewPtrFetchResponse()
		f.Version = 12
		f.Topics = []kmsg.FetchResponseTopic{{Topic: "t", Partitions: []kmsg.FetchResponseTopicPartition{{RecordBatches: make([]byte, 2<<20)}}}}
		return f, nil
	}
	return resp, nil
}

type testWaiter struct {
	kmsg.Response
	wait func()
}

func (w *testWaiter) Wait() error { w.wait(); return nil }

type testBrief struct{ testWaiter }

func (*testBrief) Brief() bool { return true }

// countingObserver counts what an Observer is told, and wakes the fake
// network's waiters after each count.
type countingObserver struct {
	net                              *fakeNet
	opened, closed, refused, handled atomic.Int32
	mu                               sync.Mutex
	failed                           []string // "key/version: err"
}

func (o *countingObserver) add(n *atomic.Int32) {
	o.net.mu.Lock()
	n.Add(1)
	o.net.cond.Broadcast()
	o.net.mu.Unlock()
}

func (o *countingObserver) ConnectionOpened()  { o.add(&o.opened) }
func (o *countingObserver) ConnectionClosed()  { o.add(&o.closed) }
func (o *countingObserver) ConnectionRefused() { o.add(&o.refused) }
func (o *countingObserver) RequestHandled(key, version int16, took time.Duration, err error) {
	if err != nil {
		o.mu.Lock()
		o.failed = append(o.failed, fmt.Sprintf("%d/%d: %v", key, version, err))
		o.mu.Unlock()
	}
	o.add(&o.handled)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lines returns the log lines containing msg.
func (s *syncBuffer) lines(msg string) []string {
	var out []string
	for _, l := range strings.Split(s.String(), "\n") {
		if strings.Contains(l, msg) {
			out = append(out, l)
		}
	}
	return out
}

type testEnv struct {
	t      *testing.T
	net    *fakeNet
	ln     *fakeListener
	srv    *Server
	h      *testHandler
	obs    *countingObserver
	logs   *syncBuffer
	served chan error
}

// newTestEnv serves cfg over a fake listener on a virtual clock; setup
// may adjust the server before it starts.
func newTestEnv(t *testing.T, cfg Config, setup ...func(*Server)) *testEnv {
	e := &testEnv{t: t, net: newFakeNet(t), ln: newFakeListener(), logs: &syncBuffer{}, served: make(chan error, 1)}
	e.h = newTestHandler(e.net)
	e.obs = &countingObserver{net: e.net}
	cfg.Handler = e.h
	cfg.Observer = e.obs
	cfg.Logger = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.srv = New(cfg)
	e.srv.now = e.net.Now
	for _, f := range setup {
		f(e.srv)
	}
	go func() { e.served <- e.srv.Serve(e.ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-e.served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", e.logs.String())
		}
	})
	return e
}

// dial opens a connection; outLimit bounds the reply bytes the client
// leaves unread before the server's writes block (0: unbounded).
func (e *testEnv) dial(outLimit int) (server, client *fakeConn) {
	server, client = e.net.pipe(outLimit)
	e.ln.accepts <- acceptResult{c: server}
	return server, client
}

// request is a size-prefixed ApiVersions frame from clientID.
func request(corr int32, clientID string) []byte {
	f := frameOf(kmsg.NewPtrApiVersionsRequest(), corr, clientID)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(f))), f...)
}

// expectReply reads the next reply at the client end and checks its
// correlation id.
func expectReply(t *testing.T, c *fakeConn, corr int32) {
	t.Helper()
	got, _, err := c.recv()
	if err != nil {
		t.Fatalf("reply %d: %v", corr, err)
	}
	if got != corr {
		t.Fatalf("reply to %d, want %d", got, corr)
	}
}

// expectCloseAfter moves the clock by open and checks that the server
// still waits on the connection, then by the rest of the timeout and
// checks that it closed the connection.
func (e *testEnv) expectCloseAfter(s, c *fakeConn, open, rest time.Duration) {
	e.t.Helper()
	e.net.advance(open)
	s.waitReading()
	if s.isClosed() {
		e.t.Fatalf("closed %v before its time", rest)
	}
	e.net.advance(rest)
	s.waitClosed()
	expectEOF(e.t, c)
}

// expectEOF checks that the server closed the connection.
func expectEOF(t *testing.T, c *fakeConn) {
	t.Helper()
	if corr, _, err := c.recv(); err == nil {
		t.Fatalf("reply %d; want the connection closed", corr)
	} else if !errors.Is(err, io.EOF) {
		t.Fatalf("client read: %v; want EOF", err)
	}
}

func TestMaxConnectionsClosesNewConnections(t *testing.T) {
	e := newTestEnv(t, Config{MaxConnections: 2})
	var kept []*fakeConn
	for i := range 2 {
		_, c := e.dial(0)
		c.send(request(int32(i), "ok"))
		expectReply(t, c, int32(i))
		kept = append(kept, c)
	}
	for range 5 {
		s, c := e.dial(0)
		s.waitClosed()
		expectEOF(t, c)
	}
	if n := e.obs.refused.Load(); n != 5 {
		t.Fatalf("%d connections reported refused, want 5", n)
	}
	// A flood of refusals is one log line per second, which counts the
	// lines held back.
	if l := e.logs.lines("refusing connection"); len(l) != 1 || !strings.Contains(l[0], "max_connections=2") {
		t.Fatalf("log lines for 5 refusals in one instant: %q", l)
	}
	e.net.advance(time.Second)
	s, _ := e.dial(0)
	s.waitClosed()
	if l := e.logs.lines("refusing connection"); len(l) != 2 || !strings.Contains(l[1], "suppressed=4") {
		t.Fatalf("log lines after a second: %q", l)
	}
	for _, c := range kept {
		c.send(request(9, "ok"))
		expectReply(t, c, 9)
	}
	// A closed connection makes room for a new one.
	kept[0].Close()
	e.net.waitFor("a connection to close", func() bool { return e.obs.closed.Load() == 1 })
	_, c := e.dial(0)
	c.send(request(1, "ok"))
	expectReply(t, c, 1)
	if o := e.obs.opened.Load(); o != 3 {
		t.Fatalf("%d connections reported opened, want 3", o)
	}
}

func TestAcceptErrorsAreRetriedWithBackoff(t *testing.T) {
	var (
		mu     sync.Mutex
		slept  []time.Duration
		emfile = &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	)
	e := newTestEnv(t, Config{}, func(s *Server) {
		s.sleep = func(d time.Duration) {
			mu.Lock()
			slept = append(slept, d)
			mu.Unlock()
		}
	})
	for range 10 {
		e.ln.accepts <- acceptResult{err: emfile}
	}
	_, c := e.dial(0)
	c.send(request(1, "ok"))
	expectReply(t, c, 1)
	select {
	case err := <-e.served:
		t.Fatalf("Serve returned %v after accept errors", err)
	default:
	}
	mu.Lock()
	got := fmt.Sprint(slept)
	mu.Unlock()
	if want := "[5ms 10ms 20ms 40ms 80ms 160ms 320ms 640ms 1s 1s]"; got != want {
		t.Fatalf("backoffs %s, want %s", got, want)
	}
	// The virtual clock stood still: one line, not ten.
	if l := e.logs.lines("accept failed"); len(l) != 1 || !strings.Contains(l[0], "too many open files") {
		t.Fatalf("accept failure log lines: %q", l)
	}
}

func TestIdleConnectionIsClosed(t *testing.T) {
	e := newTestEnv(t, Config{IdleTimeout: 10 * time.Minute})
	s, c := e.dial(0)
	s.waitReading()
	e.net.advance(5 * time.Minute)
	c.send(request(1, "ok"))
	expectReply(t, c, 1)
	// Idle time counts from the last request, not from the connect.
	s.waitReading()
	e.expectCloseAfter(s, c, 9*time.Minute, time.Minute)
	if l := e.logs.lines("closing idle connection"); len(l) != 1 {
		t.Fatalf("idle close log lines: %q", l)
	}
}

func TestParkedRequestIsNotIdle(t *testing.T) {
	e := newTestEnv(t, Config{IdleTimeout: 10 * time.Minute})
	s, c := e.dial(0)
	c.send(request(1, "park"))
	e.net.waitFor("the parked request", func() bool { return e.h.count("park") == 1 })
	// Thirty minutes parked: the connection stays.
	for range 3 {
		s.waitReading()
		e.net.advance(10 * time.Minute)
	}
	s.waitReading()
	if s.isClosed() {
		t.Fatal("closed while a request was parked")
	}
	// The reply goes out 5 minutes into the current idle window; idle
	// time counts from then.
	e.net.advance(5 * time.Minute)
	close(e.h.release)
	expectReply(t, c, 1)
	s.waitReading()
	e.net.advance(5 * time.Minute)
	s.waitReading()
	e.expectCloseAfter(s, c, 4*time.Minute, time.Minute)
}

func TestLongPollIsNotIdle(t *testing.T) {
	e := newTestEnv(t, Config{IdleTimeout: 10 * time.Minute})
	s, c := e.dial(0)
	c.send(request(1, "block"))
	e.net.waitFor("the long poll", func() bool { return e.h.count("block") == 1 })
	e.net.advance(30 * time.Minute)
	close(e.h.unblock)
	expectReply(t, c, 1)
	s.waitReading()
	if s.isClosed() {
		t.Fatal("closed after a long poll")
	}
	c.send(request(2, "ok"))
	expectReply(t, c, 2)
}

func TestStalledFrameIsClosed(t *testing.T) {
	e := newTestEnv(t, Config{FrameTimeout: time.Minute})
	s, c := e.dial(0)
	// A frame sent in two halves within the timeout is served.
	f := request(1, "ok")
	c.send(f[:6])
	s.waitReading()
	e.net.advance(59 * time.Second)
	c.send(f[6:])
	expectReply(t, c, 1)

	// One that stalls is not.
	f = request(2, "ok")
	c.send(f[:6])
	s.waitReading()
	e.expectCloseAfter(s, c, 59*time.Second, time.Second)
	if l := e.logs.lines("request frame not received in time"); len(l) != 1 {
		t.Fatalf("frame timeout log lines: %q", l)
	}
}

// stingyReader gives its bytes at most step at a time, then fails.
type stingyReader struct {
	b    []byte
	step int
}

func (r *stingyReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p[:min(len(p), r.step)], r.b)
	r.b = r.b[n:]
	return n, nil
}

func TestReadFrameMemoryFollowsBytesReceived(t *testing.T) {
	// ReadFrame, and the connection's buffered reader.
	readers := map[string]func(io.Reader) ([]byte, error){
		"ReadFrame": func(r io.Reader) ([]byte, error) {
			var size [4]byte
			return ReadFrame(r, size[:], 100<<20)
		},
		"frameReader": func(r io.Reader) ([]byte, error) {
			var f frameReader
			f.init(r)
			return f.readFrame(100 << 20)
		},
	}
	for name, read := range readers {
		// 100 MB announced, 1,000 bytes sent.
		in := append(binary.BigEndian.AppendUint32(nil, 100_000_000), make([]byte, 1000)...)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := read(&stingyReader{b: in, step: 100})
		runtime.ReadMemStats(&after)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%s: cut frame: %v", name, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Fatalf("%s: allocated %d bytes for 1,000 received", name, n)
		}

		// A large frame trickling in arrives whole.
		body := make([]byte, 1<<20+12345)
		for i := range body {
			body[i] = byte(i * 7)
		}
		in = append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
		got, err := read(&stingyReader{b: in, step: 4093})
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s: trickled frame: %v, %d bytes, equal=%v", name, err, len(got), bytes.Equal(got, body))
		}
	}
}

func TestPanicInHandlerClosesOnlyItsConnection(t *testing.T) {
	e := newTestEnv(t, Config{})
	_, bystander := e.dial(0)
	bystander.send(request(1, "ok"))
	expectReply(t, bystander, 1)

	s, c := e.dial(0)
	// Pipelined: the reply before the panic is written, the request after
	// it is never handled.
	var b []byte
	b = append(b, request(1, "ok")...)
	b = append(b, request(2, "panic")...)
	b = append(b, request(3, "after")...)
	c.send(b)
	expectReply(t, c, 1)
	expectEOF(t, c)
	s.waitClosed()
	if n := e.h.countLocked("after"); n != 0 {
		t.Fatalf("request after the panic handled %d times", n)
	}
	l := e.logs.lines("panic while handling request")
	if len(l) != 1 {
		t.Fatalf("panic log lines: %q", e.logs.String())
	}
	for _, want := range []string{"level=ERROR", "key=18", "version=0", "client=panic", "correlation_id=2", "assignment to entry in nil map", "stack=", "testHandler"} {
		if !strings.Contains(l[0], want) {
			t.Errorf("panic log line lacks %q: %s", want, l[0])
		}
	}
	e.obs.mu.Lock()
	failed := fmt.Sprint(e.obs.failed)
	e.obs.mu.Unlock()
	if !strings.Contains(failed, "18/0: panic while handling request") {
		t.Errorf("observer told of failures %s", failed)
	}

	bystander.send(request(2, "ok"))
	expectReply(t, bystander, 2)
	_, fresh := e.dial(0)
	fresh.send(request(1, "ok"))
	expectReply(t, fresh, 1)
}

func TestPanicWhileWaitingClosesItsConnection(t *testing.T) {
	e := newTestEnv(t, Config{})
	s, c := e.dial(0)
	c.send(append(request(1, "ok"), request(2, "panic-wait")...))
	expectReply(t, c, 1)
	expectEOF(t, c)
	s.waitClosed()
	if l := e.logs.lines("panic while handling request"); len(l) != 1 || !strings.Contains(l[0], "client=panic-wait") || !strings.Contains(l[0], "wait bug") {
		t.Fatalf("panic log lines: %q", l)
	}
	_, fresh := e.dial(0)
	fresh.send(request(1, "ok"))
	expectReply(t, fresh, 1)
}

func TestLargeRepliesAreHeldOneAtATime(t *testing.T) {
	waiting := watchReplyRoomWaits(t)
	e := newTestEnv(t, Config{})
	// The client reads nothing yet, so the 2 MiB reply stays unwritten.
	_, c := e.dial(64 << 10)
	c.send(append(request(1, "big"), request(2, "ok")...))
	<-waiting
	if n := e.h.countLocked("ok"); n != 0 {
		t.Fatal("next request handled while a large reply waits to be written")
	}
	expectReply(t, c, 1)
	expectReply(t, c, 2)
	if n := e.h.countLocked("ok"); n != 1 {
		t.Fatalf("next request handled %d times", n)
	}
}

func TestUnreadRepliesCloseTheConnection(t *testing.T) {
	e := newTestEnv(t, Config{IdleTimeout: 10 * time.Minute})
	s, c := e.dial(1 << 10)
	c.send(request(1, "big"))
	e.net.waitFor("the writer to block", func() bool { return s.writeBlocked })
	e.net.advance(10 * time.Minute)
	s.waitClosed()
	c.Close()
}

func TestReplyBufferDoesNotPinLargeReplies(t *testing.T) {
	var rb replyBuffer
	small := kmsg.NewPtrApiVersionsResponse()
	rb.encode(1, small, 0)
	rb.encode(2, small, 0)
	if n := rb.len(); n != len(AppendResponse(AppendResponse(nil, 1, small), 2, small)) {
		t.Fatalf("two replies encoded in %d bytes", n)
	}
	rb.release()
	if rb.b != nil {
		t.Fatal("buffer kept after release")
	}
	big := kmsg.NewPtrFetchResponse()
	big.Topics = []kmsg.FetchResponseTopic{{Partitions: []kmsg.FetchResponseTopicPartition{{RecordBatches: make([]byte, 4<<20)}}}}
	rb.encode(1, big, replyWeight(big))
	if n := rb.len(); n < 4<<20 {
		t.Fatalf("encoded %d bytes", n)
	}
	rb.release()
	// The pool hands back what it was given (this goroutine's share of
	// it first): never the large buffer.
	for range 100 {
		b := replyBuffers.Get().(*[]byte)
		if cap(*b) > retainReplyBytes {
			t.Fatalf("a %d byte buffer went back to the pool", cap(*b))
		}
	}
}

// watchReplyRoomWaits returns a channel that holds a value once a reader
// has waited for reply room (testHookReplyRoomWait) since it was last
// drained.
func watchReplyRoomWaits(t *testing.T) <-chan struct{} {
	waiting := make(chan struct{}, 1)
	testHookReplyRoomWait = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	t.Cleanup(func() { testHookReplyRoomWait = nil })
	return waiting
}
