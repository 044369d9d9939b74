// Package faultproxy is a TCP proxy for tests that puts network faults
// between the processes of a test: it forwards every connection it accepts
// to one target, and can be told to cut connections and to heal again.
//
// A cut has a mode. Reset closes the connections it applies to at once,
// with an RST, and resets every new one as soon as it is accepted: the
// peer learns of the fault immediately. Blackhole is what a network
// partition looks like: the connections stay open, but nothing is
// forwarded in either direction any more, and new connections are accepted
// and starved likewise; a peer learns of the fault only from its own
// timeouts. Heal ends the cut and closes the connections it starved (a
// partition long enough outlives the connections across it), so that
// their peers connect again; connections the cut did not apply to go on.
//
// A Classify function can tell connections apart by the first bytes their
// client sends, so that a cut applies to some of them only; KafkaClientID
// classifies Kafka connections by the client id of their first request.
package faultproxy

import (
	"bufio"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is how a cut treats the connections it applies to.
type Mode int

const (
	// Reset closes them with an RST.
	Reset Mode = iota + 1
	// Blackhole keeps them open and forwards nothing.
	Blackhole
)

func (m Mode) String() string {
	switch m {
	case Reset:
		return "reset"
	case Blackhole:
		return "blackhole"
	}
	return "mode?"
}

// Options configure a Proxy.
type Options struct {
	// Classify names a connection from the first bytes its client sends,
	// read with r.Peek only: what it peeks is forwarded all the same. It
	// runs before the connection to the target is opened. Without it
	// every connection's class is "".
	Classify func(r *bufio.Reader) string
}

// Proxy forwards the connections it accepts to a target.
type Proxy struct {
	ln     net.Listener
	target string
	opts   Options

	mu     sync.Mutex
	cut    *cut // nil while healed
	conns  map[*conn]struct{}
	closed bool
	wg     sync.WaitGroup

	accepted, cuts atomic.Int64
}

type cut struct {
	mode  Mode
	match func(class string) bool
}

func (c *cut) applies(class string) bool { return c.match == nil || c.match(class) }

// conn is one accepted connection and, once dialled, its connection to
// the target.
type conn struct {
	client net.Conn
	server net.Conn // nil until dialled
	br     *bufio.Reader

	class      string
	classified bool // class is known (under Proxy.mu)
	starved    atomic.Bool
	done       chan struct{}
	closeOnce  sync.Once
}

// close closes both sides; with rst, the client's with an RST.
func (c *conn) close(rst bool) {
	c.closeOnce.Do(func() {
		if tc, ok := c.client.(*net.TCPConn); ok && rst {
			tc.SetLinger(0)
		}
		c.client.Close()
		if c.server != nil {
			c.server.Close()
		}
		close(c.done)
	})
}

// Start listens on a free loopback port and forwards to target
// (host:port).
func Start(target string, opts Options) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, opts: opts, conns: map[*conn]struct{}{}}
	p.wg.Go(p.acceptLoop)
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted is how many connections the proxy has accepted.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Cuts is how many connections a cut has applied to: reset, or starved.
func (p *Proxy) Cuts() int64 { return p.cuts.Load() }

// Cut cuts the connections whose class match accepts (every connection if
// match is nil), those open now and those accepted until Heal. A later Cut
// replaces this one; connections it already cut stay cut until Heal.
func (p *Proxy) Cut(mode Mode, match func(class string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = &cut{mode: mode, match: match}
	for c := range p.conns {
		if c.classified {
			p.applyLocked(c)
		}
	}
}

// Heal ends the cut: new connections are forwarded again, and the
// connections the cut starved are closed.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = nil
	for c := range p.conns {
		if c.starved.Load() {
			c.close(false)
		}
	}
}

// applyLocked applies the current cut to c, if it applies to c, and
// reports whether it did.
func (p *Proxy) applyLocked(c *conn) bool {
	if p.cut == nil || !p.cut.applies(c.class) {
		return false
	}
	if p.cut.mode != Reset && c.starved.Swap(true) {
		return true // counted already
	}
	// Counted before the close, so a client that sees the reset also
	// sees it counted.
	p.cuts.Add(1)
	if p.cut.mode == Reset {
		c.close(true)
	}
	return true
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.close(false)
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		c := &conn{client: nc, br: bufio.NewReaderSize(nc, 64<<10), done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			nc.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() {
			p.serve(c)
			c.close(false)
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		})
	}
}

// serve classifies c, then forwards it unless a cut applies to it.
func (p *Proxy) serve(c *conn) {
	var class string
	if p.opts.Classify != nil {
		class = p.opts.Classify(c.br)
	}
	p.mu.Lock()
	c.class, c.classified = class, true
	cut := p.applyLocked(c)
	p.mu.Unlock()
	if cut {
		<-c.done // reset already, or starved until Heal or Close
		return
	}
	sc, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		return
	}
	p.mu.Lock()
	select {
	case <-c.done:
		p.mu.Unlock()
		sc.Close()
		return
	default:
	}
	c.server = sc
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(c, c.br, sc) })
	wg.Go(func() { p.pipe(c, sc, c.client) })
	wg.Wait()
}

// pipe copies from src to dst until either fails or c is starved; a
// starved connection waits, forwarding nothing, until it is closed. Either
// direction ending closes both: there are no half-closed connections.
func (p *Proxy) pipe(c *conn, src interface{ Read([]byte) (int, error) }, dst net.Conn) {
	defer c.close(false)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if c.starved.Load() {
			<-c.done
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// KafkaClientID is a Classify function for Kafka connections: the client
// id in the header of the connection's first request (int32 size, int16
// API key, int16 API version, int32 correlation id, nullable string client
// id, in every request header version), or "" if the first bytes are not
// such a header.
func KafkaClientID(r *bufio.Reader) string {
	const fixed = 4 + 2 + 2 + 4 + 2
	b, err := r.Peek(fixed)
	if err != nil {
		return ""
	}
	size := int32(binary.BigEndian.Uint32(b))
	n := int16(binary.BigEndian.Uint16(b[fixed-2:]))
	if n < 0 || size < fixed-4+int32(n) {
		return ""
	}
	b, err = r.Peek(fixed + int(n))
	if err != nil {
		return ""
	}
	return string(b[fixed:])
}
