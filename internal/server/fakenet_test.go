package server

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// fakeNet is a virtual clock and in-memory connections whose deadlines
// follow it, so timeouts are tested by moving the clock, never by
// sleeping. One mutex guards the clock and every connection; any change
// wakes every waiter, which then re-checks its own condition.
type fakeNet struct {
	t    testing.TB
	mu   sync.Mutex
	cond *sync.Cond
	now  time.Time
	// expired is set after a generous real-time limit, so that a test
	// whose server never acts fails instead of hanging.
	expired bool
}

func newFakeNet(t testing.TB) *fakeNet {
	n := &fakeNet{t: t, now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	n.cond = sync.NewCond(&n.mu)
	stop := time.AfterFunc(20*time.Second, func() {
		n.mu.Lock()
		n.expired = true
		n.cond.Broadcast()
		n.mu.Unlock()
	})
	t.Cleanup(func() { stop.Stop() })
	return n
}

func (n *fakeNet) Now() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.now
}

func (n *fakeNet) advance(d time.Duration) {
	n.mu.Lock()
	n.now = n.now.Add(d)
	n.cond.Broadcast()
	n.mu.Unlock()
}

// waitFor blocks until cond (called with the lock held) holds.
func (n *fakeNet) waitFor(what string, cond func() bool) {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	for !cond() {
		if n.expired {
			n.t.Fatalf("gave up waiting for %s", what)
		}
		n.cond.Wait()
	}
}

var errExpired = errors.New("fake network: test took too long")

// pipe returns the two ends of a connection; the server gets the first.
// outLimit bounds the bytes the server may write that the client has not
// read (0: unbounded).
func (n *fakeNet) pipe(outLimit int) (server, client *fakeConn) {
	server = &fakeConn{net: n, limit: outLimit, remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}}
	client = &fakeConn{net: n, remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9092}}
	server.peer, client.peer = client, server
	return server, client
}

// fakeConn is one end of an in-memory connection.
type fakeConn struct {
	net    *fakeNet
	peer   *fakeConn
	remote net.Addr
	limit  int // most unread bytes this end may have written to its peer

	// Guarded by net.mu.
	in                          []byte // written by the peer, not yet read
	closed                      bool
	readDeadline, writeDeadline time.Time
	readBlocked, writeBlocked   bool
	writes                      int // Write calls that wrote something
}

func (c *fakeConn) past(dl time.Time) bool { return !dl.IsZero() && !c.net.now.Before(dl) }

func (c *fakeConn) Read(p []byte) (int, error) {
	n := c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	defer func() { c.readBlocked = false }()
	for {
		switch {
		case c.closed:
			return 0, net.ErrClosed
		case c.past(c.readDeadline):
			// Like a real connection, an expired deadline fails the read
			// even when bytes are waiting.
			return 0, os.ErrDeadlineExceeded
		case len(c.in) > 0:
			m := copy(p, c.in)
			c.in = c.in[m:]
			n.cond.Broadcast()
			return m, nil
		case c.peer.closed:
			return 0, io.EOF
		case n.expired:
			return 0, errExpired
		}
		if !c.readBlocked {
			c.readBlocked = true
			n.cond.Broadcast() // someone may wait for this read to block
		}
		n.cond.Wait()
	}
}

func (c *fakeConn) Write(p []byte) (int, error) {
	n := c.net
	n.mu.Lock()
	defer n.mu.Unlock()
	defer func() { c.writeBlocked = false }()
	written := 0
	defer func() {
		if written > 0 {
			c.writes++
		}
	}()
	for written < len(p) {
		switch {
		case c.closed:
			return written, net.ErrClosed
		case c.peer.closed:
			return written, io.ErrClosedPipe
		case c.past(c.writeDeadline):
			return written, os.ErrDeadlineExceeded
		case n.expired:
			return written, errExpired
		}
		room := len(p) - written
		if c.limit > 0 {
			room = min(room, c.limit-len(c.peer.in))
		}
		if room > 0 {
			c.peer.in = append(c.peer.in, p[written:written+room]...)
			written += room
			n.cond.Broadcast()
			continue
		}
		if !c.writeBlocked {
			c.writeBlocked = true
			n.cond.Broadcast()
		}
		n.cond.Wait()
	}
	return written, nil
}

// change makes a change under the lock and wakes every waiter.
func (c *fakeConn) change(f func()) error {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	f()
	c.net.cond.Broadcast()
	return nil
}

func (c *fakeConn) Close() error { return c.change(func() { c.closed = true }) }

func (c *fakeConn) SetReadDeadline(t time.Time) error {
	return c.change(func() { c.readDeadline = t })
}

func (c *fakeConn) SetWriteDeadline(t time.Time) error {
	return c.change(func() { c.writeDeadline = t })
}

func (c *fakeConn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *fakeConn) LocalAddr() net.Addr  { return c.peer.remote }
func (c *fakeConn) RemoteAddr() net.Addr { return c.remote }

// waitReading waits until the server end has read everything sent and is
// blocked reading with a deadline after the current time: it has decided
// what to wait for next.
func (c *fakeConn) waitReading() {
	c.net.t.Helper()
	c.net.waitFor("the server to wait for a request", func() bool {
		return c.readBlocked && len(c.in) == 0 && (c.readDeadline.IsZero() || c.net.now.Before(c.readDeadline)) || c.closed
	})
}

// waitClosed waits until this end has been closed.
func (c *fakeConn) waitClosed() {
	c.net.t.Helper()
	c.net.waitFor("the connection to be closed", func() bool { return c.closed })
}

func (c *fakeConn) isClosed() bool {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	return c.closed
}

// send writes b from the client end.
func (c *fakeConn) send(b []byte) {
	c.net.t.Helper()
	if _, err := c.Write(b); err != nil {
		c.net.t.Fatalf("client write: %v", err)
	}
}

// recv reads one response frame at the client end and returns its
// correlation id, or the error that ended the connection.
func (c *fakeConn) recv() (int32, []byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return 0, nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		return 0, nil, err
	}
	return int32(binary.BigEndian.Uint32(body)), body[4:], nil
}

// fakeListener hands out connections and errors queued by the test.
type fakeListener struct {
	accepts chan acceptResult
	done    chan struct{}
	once    sync.Once
}

type acceptResult struct {
	c   net.Conn
	err error
}

func newFakeListener() *fakeListener {
	return &fakeListener{accepts: make(chan acceptResult, 1024), done: make(chan struct{})}
}

func (l *fakeListener) Accept() (net.Conn, error) {
	select {
	case r := <-l.accepts:
		return r.c, r.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *fakeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9092} }
