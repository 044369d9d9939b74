// Package server owns groupd's network edge: the TCP listener, Kafka
// request framing, per-connection reply ordering and dispatch to a Handler.
// It is the only package that touches net.
//
// Requests on one connection may be pipelined. As in Kafka, they are
// handled one at a time in the order they arrived (an idempotent producer's
// pipelined batches must be appended in order), while earlier replies are
// written concurrently. A connection's goroutine reads and handles its
// requests, which saves a hand-off per request; it stops reading ahead only
// while a request blocks (a long-polling fetch), when the next request
// could not be handled anyway. It also writes a reply itself when nothing
// waits to be written ahead of it, waiting for it first if the wait is
// brief and the client has sent nothing further: a member with one request
// in flight costs no other goroutine. Replies that wait while the
// connection reads on go to a writer goroutine that lives while they do.
// Between requests a connection holds a 512-byte read buffer and nothing
// else: larger read buffers and reply buffers come from pools while there
// is traffic. A connection with nothing in flight for DefaultParkAfter
// parks (on Linux): it gives up its goroutine and its read buffer, and a
// poller starts a goroutine for it when its next request arrives, so a
// consumer heartbeating every few seconds costs its socket and little
// more.
//
// The edge defends itself: connections over MaxConnections are closed as
// soon as they are accepted; failing accepts (out of file descriptors) are
// retried with backoff; a frame must arrive within FrameTimeout of its first
// byte and its buffer grows with the bytes received, not the size
// announced; a connection with nothing in flight is closed after
// IdleTimeout; a connection holds at most one large fetch reply at a time;
// and a panic while handling a request closes that connection only.
package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Request is one decoded request as handed to a Handler.
type Request struct {
	Header Header
	Msg    kmsg.Request
	Remote net.Addr
	// Conn identifies the connection the request came on; no two
	// connections of a Server share it.
	Conn uint64
	// Stopping is closed when the server begins to shut down. A handler
	// waiting for something that may never come (a long-polling fetch)
	// then answers with what it has; one waiting for its own work to
	// finish (a commit becoming durable) goes on until the handler's
	// context ends, which is when Shutdown's deadline passes.
	Stopping <-chan struct{}
	// host is ClientHost, formatted once per connection.
	host string
}

// ClientHost is the client's address as Kafka reports it (DescribeGroups'
// client host): "/" and the remote IP, or "" if the remote is not TCP.
func (r *Request) ClientHost() string {
	if r.host != "" {
		return r.host
	}
	return clientHost(r.Remote)
}

func clientHost(remote net.Addr) string {
	if tcp, ok := remote.(*net.TCPAddr); ok {
		return "/" + tcp.IP.String()
	}
	return ""
}

// ConnCloser is implemented by a Handler that keeps state per connection
// (fetch sessions): ConnClosed is called once when connection conn has
// closed, after its last request was handled.
type ConnCloser interface {
	ConnClosed(conn uint64)
}

// Handler answers requests. Implementations must be safe for concurrent use.
type Handler interface {
	// Supports reports whether a request key and version is served. A
	// request outside the table closes its connection, as in Kafka;
	// ApiVersions is exempt because it must answer any version (KIP-511).
	Supports(key, version int16) bool
	// Handle answers one request. A nil response with a nil error means
	// the client expects no reply (a Produce with acks=0). An error closes
	// the connection after the replies before it have been written. r is
	// the handler's only for the call: the server reuses it for the
	// connection's next request, so a handler keeps what it needs of it
	// (r.Msg, r.Header.ClientID), never r itself.
	Handle(ctx context.Context, r *Request) (kmsg.Response, error)
}

// Waiter is implemented by a response that may only be sent later: the
// handler did, in request order, what had to be ordered (an append), and
// Wait blocks until the response may be written (the append is durable,
// the coordinator has answered). Wait may still change the response, for
// example to report a failed fsync; an error closes the connection.
// Waiting happens in reply order while later requests on the connection
// are already being handled, so pipelined requests share the wait.
type Waiter interface {
	kmsg.Response
	Wait() error
}

// Brief is implemented by a Waiter whose wait ends without any other
// client's action, such as a write becoming durable. The writer does not
// flush earlier replies before such a wait: they go out with this reply a
// moment later, in one write, which is what lets a connection's pipelined
// commits share syscalls. Before any other wait (a JoinGroup parked until
// the group's other members join) earlier replies are flushed first. With
// no reply ahead of it and no further request received, the reading
// goroutine waits for a brief reply itself.
type Brief interface {
	Brief() bool
}

// Completer is implemented by a Waiter whose reply is completed by another
// goroutine (a coordinator shard's). OnDone either takes fn, to call it on
// that goroutine once Wait would not block, and reports true, or reports
// false (it is ready already, or cannot say), and the connection waits for
// the reply itself. fn writes the reply without blocking; what the socket
// does not take at once is written by a goroutine of its own. With no
// reply ahead of it (and, for a brief one, no further request received), a
// connection hands such a reply to its completer and reads on, instead of
// waiting for it: one goroutine switch fewer per request, and no writer
// goroutine parked with a JoinGroup.
type Completer interface {
	Waiter
	OnDone(fn func()) bool
}

// Recycler is implemented by a response the server hands back once it has
// encoded it: its handler may then reuse it for another request.
type Recycler interface {
	Recycle()
}

// Observer is told about connections and requests, for metrics. Methods must be cheap and safe
// for concurrent use.
type Observer interface {
	ConnectionOpened()
	ConnectionClosed()
	// RequestHandled reports one request from its frame being read to its reply being written
	// (or dropped); err is the reason the connection closed instead, if any.
	RequestHandled(key, version int16, took time.Duration, err error)
	// ConnectionRefused reports a connection closed at once (over --max-connections).
	ConnectionRefused()
}

// Defaults for the zero values of Config.
const (
	DefaultMaxRequestBytes = 100 << 20
	DefaultMaxInFlight     = 64
	// DefaultMaxConnections is far above what one broker's clients need
	// (a consumer holds a handful of connections), and low enough that
	// idle connections alone cannot take the memory and descriptors the
	// data needs. groupd's command derives its default from the
	// open-file limit instead.
	DefaultMaxConnections = 10000
	// DefaultIdleTimeout is Kafka's connections.max.idle.ms.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultFrameTimeout is as long as the most patient common client
	// waits for a reply (librdkafka's socket.timeout.ms): a request still
	// arriving after that has been given up by its sender.
	DefaultFrameTimeout = 60 * time.Second
)

// Config configures a Server.
type Config struct {
	// MaxRequestBytes bounds a request frame; a larger frame closes the
	// connection before its body is read.
	MaxRequestBytes int32
	// MaxInFlight bounds the pipelined requests per connection that are
	// being handled or waiting for their reply to be written.
	MaxInFlight int
	// MaxConnections bounds the open connections; one accepted beyond it
	// is closed at once.
	MaxConnections int
	// IdleTimeout closes a connection that has had no request in flight
	// and received no byte for that long, and one whose reply the client
	// has not read for that long. Negative disables it.
	IdleTimeout time.Duration
	// FrameTimeout bounds the time from a request frame's first byte to
	// its last. Negative disables it.
	FrameTimeout time.Duration
	Handler      Handler
	// Observer, if not nil, is told about connections and requests.
	Observer Observer
	Logger   *slog.Logger
}

// Server accepts Kafka connections and serves them with a Handler.
type Server struct {
	cfg Config
	log *slog.Logger
	obs Observer

	// now and sleep are the clock; tests replace them before Serve.
	now   func() time.Time
	sleep func(time.Duration)

	// parkAfter is how long an idle connection keeps its goroutine
	// (park.go); tests shorten it. The poller is made when a connection
	// first parks; pollerFailed is set when it cannot be, or fails.
	parkAfter    time.Duration
	pollerOnce   sync.Once
	poll         poller
	pollerFailed atomic.Bool

	// stopping is closed when shutdown begins, so that handlers parked
	// on a long poll (a fetch at the log end) return early; ctx, the
	// handlers' context, is cancelled only when Shutdown's deadline
	// passes, so that requests in flight finish and are answered.
	stopping chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc

	// Refused connections and failing accepts come in floods; so would
	// their log lines.
	refusedLog, acceptLog, frameLog logLimiter

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   bool
	wg        sync.WaitGroup
	// served is closed once shutdown has begun and every connection has
	// finished.
	served     chan struct{}
	servedOnce sync.Once

	// lastConnID is the id of the connection accepted last (under mu).
	lastConnID uint64

	// frames is the budget of large request frames being received with
	// their whole buffer.
	frames frameBudget
}

// New returns a Server; call Serve with a listener to start it.
func New(cfg Config) *Server {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.FrameTimeout == 0 {
		cfg.FrameTimeout = DefaultFrameTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		obs:       cfg.Observer,
		now:       time.Now,
		parkAfter: DefaultParkAfter,
		stopping:  make(chan struct{}),
		served:    make(chan struct{}),
		ctx:       ctx,
		cancel:    cancel,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
	}
	s.sleep = s.sleepUnlessClosing
	s.frames.limit = max(DefaultFrameBudget, int64(cfg.MaxRequestBytes))
	return s
}

// DefaultFrameBudget is how many bytes of large request frames being
// received may hold their whole buffer at once: past it, further frames'
// buffers grow with the bytes that arrive (see frameReader.readFrame).
const DefaultFrameBudget = 256 << 20

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("server closed")

// Serve accepts connections on ln until Shutdown. It always closes ln.
// Failing accepts are retried with backoff: running out of file
// descriptors must slow the broker down, not stop it.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err // closed under us: nothing left to retry
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if ok, suppressed := s.acceptLog.allow(s.now()); ok {
				s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff, "suppressed", suppressed)
			}
			s.sleep(backoff)
			continue
		}
		backoff = 0
		if err := s.admit(nc); err != nil {
			return err
		}
	}
}

// admit starts serving nc, or closes it at once when the server is at
// MaxConnections.
func (s *Server) admit(nc net.Conn) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		nc.Close()
		return ErrServerClosed
	}
	if open := len(s.conns); open >= s.cfg.MaxConnections {
		s.mu.Unlock()
		if s.obs != nil {
			s.obs.ConnectionRefused()
		}
		if ok, suppressed := s.refusedLog.allow(s.now()); ok {
			s.log.Warn("refusing connection: too many open", "remote", nc.RemoteAddr().String(),
				"open", open, "max_connections", s.cfg.MaxConnections, "suppressed", suppressed)
		}
		nc.Close()
		return nil
	}
	c := newConn(s, nc)
	s.lastConnID++
	c.id = s.lastConnID
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	if s.obs != nil {
		s.obs.ConnectionOpened()
	}
	go c.serve()
	return nil
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// poller returns the poller of parked connections, or nil if connections
// cannot park.
func (s *Server) poller() poller {
	if s.pollerFailed.Load() {
		return nil
	}
	s.pollerOnce.Do(func() {
		p, err := newPoller(s)
		if err != nil {
			if !errors.Is(err, errNotParkable) {
				s.log.Warn("idle connections keep their goroutines", "err", err)
			}
			s.pollerFailed.Store(true)
			return
		}
		s.poll = p
	})
	if s.pollerFailed.Load() {
		return nil
	}
	return s.poll
}

// closePoller stops the poller once no connection is left.
func (s *Server) closePoller() {
	s.pollerOnce.Do(func() {}) // none made after this
	if s.poll != nil {
		s.poll.close()
	}
}

// sleepUnlessClosing waits d, or less if shutdown begins.
func (s *Server) sleepUnlessClosing(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stopping:
	}
}

// Shutdown stops accepting connections and stops reading new requests,
// lets in-flight requests finish and their replies be written, then closes
// every connection. Long polls (a fetch waiting for data) answer at once
// with what they have (Request.Stopping). If ctx ends first, the handlers'
// context is cancelled, remaining connections are closed at once, and
// ctx's error is returned without waiting further: a handler that still
// does not return (its reply is never completed) cannot hold Shutdown up.
// Served reports when the last connection has finished.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	first := !s.closing
	s.closing = true
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.stopReading()
	}
	s.mu.Unlock()
	if first {
		close(s.stopping)
		go func() {
			s.wg.Wait()
			s.closePoller()
			s.servedOnce.Do(func() { close(s.served) })
		}()
	}
	select {
	case <-s.served:
		return nil
	case <-ctx.Done():
		s.cancel()
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// Stopping is closed once Shutdown has begun: no connection is accepted
// and no request read from then on.
func (s *Server) Stopping() <-chan struct{} { return s.stopping }

// Served is closed once Shutdown has begun and every connection has
// finished: its requests were handled and its replies written or dropped.
func (s *Server) Served() <-chan struct{} { return s.served }

// logLimiter lets one log line through per second and counts the lines it
// held back, which the next line reports.
type logLimiter struct {
	mu         sync.Mutex
	next       time.Time
	suppressed int
}

func (l *logLimiter) allow(now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next) {
		l.suppressed++
		return false, 0
	}
	l.next = now.Add(time.Second)
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
