// Package server owns groupd's network edge: the TCP listener, Kafka
// request framing, per-connection reply ordering and dispatch to a Handler.
// It is the only package that touches net.
//
// Requests on one connection may be pipelined. As in Kafka, they are
// handled one at a time in the order they arrived (an idempotent producer's
// pipelined batches must be appended in order), while earlier replies are
// written concurrently. Each connection has two goroutines: one reads and
// handles requests, one writes replies. Handling on the reading goroutine
// saves a hand-off per request; it stops reading ahead only while a request
// blocks (a long-polling fetch), when the next request could not be handled
// anyway.
package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Request is one decoded request as handed to a Handler.
type Request struct {
	Header Header
	Msg    kmsg.Request
	Remote net.Addr
}

// Handler answers requests. Implementations must be safe for concurrent use.
type Handler interface {
	// Supports reports whether a request key and version is served. A
	// request outside the table closes its connection, as in Kafka;
	// ApiVersions is exempt because it must answer any version (KIP-511).
	Supports(key, version int16) bool
	// Handle answers one request. A nil response with a nil error means
	// the client expects no reply (a Produce with acks=0). An error closes
	// the connection after the replies before it have been written.
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
// the group's other members join) earlier replies are flushed first.
type Brief interface {
	Brief() bool
}

// Config configures a Server.
type Config struct {
	// MaxRequestBytes bounds a request frame; a larger frame closes the
	// connection before its body is read.
	MaxRequestBytes int32
	// MaxInFlight bounds the pipelined requests per connection that are
	// being handled or waiting for their reply to be written.
	MaxInFlight int
	Handler     Handler
	Logger      *slog.Logger
}

// Server accepts Kafka connections and serves them with a Handler.
type Server struct {
	cfg Config
	log *slog.Logger

	// ctx is cancelled when shutdown begins, so that handlers parked on a
	// long poll (a fetch at the log end) return early.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   bool
	wg        sync.WaitGroup
}

// New returns a Server; call Serve with a listener to start it.
func New(cfg Config) *Server {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 100 << 20
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		ctx:       ctx,
		cancel:    cancel,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
	}
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("server closed")

// Serve accepts connections on ln until Shutdown. It always closes ln.
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
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := &conn{srv: s, nc: nc, replies: make(chan reply, s.cfg.MaxInFlight), stop: make(chan struct{})}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// Shutdown stops accepting connections and stops reading new requests,
// lets in-flight requests finish and their replies be written, then closes
// every connection. If ctx ends first, remaining connections are closed
// at once and ctx's error is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.stopReading()
	}
	s.mu.Unlock()
	// Long polls return what they have rather than hold shutdown up.
	s.cancel()

	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

type reply struct {
	corr int32
	resp kmsg.Response
	err  error
}

type conn struct {
	srv     *Server
	nc      net.Conn
	replies chan reply // handled, waiting to be written

	stopOnce sync.Once
	stop     chan struct{}
}

// stopReading makes the read loop finish at its next frame boundary
// without cutting off replies that are still to be written.
func (c *conn) stopReading() {
	c.stopOnce.Do(func() {
		close(c.stop)
		// Unblock a read waiting for the next request; a frame half read
		// is abandoned, which is the same as the client never sending it.
		c.nc.SetReadDeadline(time.Now())
	})
}

func (c *conn) serve() {
	defer c.srv.wg.Done()
	defer func() {
		c.srv.mu.Lock()
		delete(c.srv.conns, c)
		c.srv.mu.Unlock()
	}()
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	c.readLoop()
	close(c.replies)
	<-writerDone
	c.nc.Close()
}

func (c *conn) readLoop() {
	remote := c.nc.RemoteAddr()
	log := c.srv.log.With("remote", remote.String())
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var size [4]byte
	for {
		frame, err := ReadFrame(br, size[:], c.srv.cfg.MaxRequestBytes)
		if err != nil {
			select {
			case <-c.stop:
				return
			default:
			}
			switch {
			case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
			case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
				// The client hung up, possibly mid-frame: not our
				// business to warn about.
				log.Debug("connection closed by client", "err", err)
			default:
				log.Warn("closing connection: bad frame", "err", err)
			}
			return
		}
		hdr, req, body, err := ParseHeader(frame)
		if err != nil {
			log.Warn("closing connection: bad request header", "err", err, "key", hdr.Key, "version", hdr.Version)
			return
		}
		if hdr.Key != int16(kmsg.ApiVersions) && !c.srv.cfg.Handler.Supports(hdr.Key, hdr.Version) {
			log.Warn("closing connection: unsupported request version", "api", kmsg.NameForKey(hdr.Key), "key", hdr.Key, "version", hdr.Version, "client", hdr.ClientID)
			return
		}
		if hdr.Key == int16(kmsg.ApiVersions) && hdr.Version > req.MaxVersion() {
			// A version newer than kmsg knows cannot be decoded; the
			// handler answers it in v0 form (KIP-511) from the header.
		} else if err := DecodeBody(req, body); err != nil {
			log.Warn("closing connection: request does not decode", "err", err, "api", kmsg.NameForKey(hdr.Key), "version", hdr.Version, "client", hdr.ClientID)
			return
		}
		select {
		case <-c.stop:
			return
		default:
		}
		resp, err := c.srv.cfg.Handler.Handle(c.srv.ctx, &Request{Header: hdr, Msg: req, Remote: remote})
		// The writer drains replies until they are closed, even after a
		// failure, so this send cannot block for good.
		c.replies <- reply{corr: hdr.CorrelationID, resp: resp, err: err}
	}
}

func (c *conn) writeLoop() {
	bw := bufio.NewWriterSize(c.nc, 64<<10)
	var buf []byte
	failed := false
	for r := range c.replies {
		if failed {
			continue // drain so the handler loop is not left blocked
		}
		if r.err != nil {
			c.srv.log.Warn("closing connection: request failed", "remote", c.nc.RemoteAddr().String(), "err", r.err)
			failed = true
			c.stopReading()
			continue
		}
		if r.resp == nil {
			continue
		}
		if w, ok := r.resp.(Waiter); ok {
			if b, ok := w.(Brief); !ok || !b.Brief() {
				// This may wait long: send what is buffered first.
				bw.Flush()
			}
			if err := w.Wait(); err != nil {
				c.srv.log.Warn("closing connection: request failed", "remote", c.nc.RemoteAddr().String(), "err", err)
				failed = true
				c.stopReading()
				continue
			}
		}
		buf = AppendResponse(buf[:0], r.corr, r.resp)
		if _, err := bw.Write(buf); err != nil {
			failed = true
			c.stopReading()
			continue
		}
		// Flush only when no further reply is ready, so pipelined
		// replies share a syscall.
		if len(c.replies) == 0 {
			if err := bw.Flush(); err != nil {
				failed = true
				c.stopReading()
			}
		}
	}
	if !failed {
		bw.Flush()
	}
}
