package server

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Parking. A consumer's connection to its coordinator carries a heartbeat
// every few seconds and little else, so most connections of a busy broker
// are waiting for their next request. A goroutine blocked in a read keeps
// a stack of 4 KiB or more, a good part of what such a connection costs.
// So a connection that has had nothing in flight for parkAfter gives up
// its goroutine and its read buffer: a poller (epoll on Linux) watches its
// socket and starts a goroutine for it when a request arrives, when the
// server stops, or when the idle timeout has passed. Elsewhere, and for
// connections without a file descriptor, connections keep their goroutine.

// DefaultParkAfter is how long a connection with nothing in flight keeps
// its goroutine waiting for the next request. A client that pipelines or
// sends requests back to back comes back within a round trip and never
// parks; one that heartbeats every few seconds parks between heartbeats.
const DefaultParkAfter = 100 * time.Millisecond

// poller watches parked connections.
type poller interface {
	// arm watches c's socket until it is readable or hung up, then
	// calls c.unpark, once. c.park.mu is held.
	arm(c *conn, fd int) error
	// disarm stops watching c for good. c.park.mu is held.
	disarm(c *conn, fd int)
	// close stops the poller; no connection may be parked.
	close()
}

var errNotParkable = errors.New("connections cannot park here")

// parkState is a connection's part in parking.
type parkState struct {
	mu sync.Mutex
	// parked is set while no goroutine serves the connection.
	parked bool
	// armed is set once the poller knows the connection, until disarm.
	armed bool
	// id names the connection to the poller.
	id uint32
	// expired is set when the idle timeout passed while parked.
	expired atomic.Bool
	// woken is set when the poller resumed the connection: its socket
	// has bytes, a hang-up or an error to read. Owned by the goroutine
	// serving the connection from then on, like sparse.
	woken bool
	// sparse is set when the last request came parkAfter or more after
	// the reply before it: the connection parks as soon as it has
	// answered, without waiting parkAfter (and a timer) again.
	sparse bool
}

// parkable reports whether the connection can park: the server has a
// poller and the connection a file descriptor.
func (c *conn) parkable() bool {
	if c.srv.parkAfter <= 0 {
		return false
	}
	if _, ok := c.nc.(syscall.Conn); !ok {
		return false
	}
	return c.srv.poller() != nil
}

// withFD calls fn with the connection's file descriptor, which stays open
// during the call.
func (c *conn) withFD(fn func(fd int) error) error {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return errNotParkable
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// parkNow parks the connection if it has nothing in flight and is not
// stopping; the calling goroutine must then return without touching it.
// Nothing is buffered: awaitFrame parks only before a frame's first byte.
// atOnce says the connection did not wait parkAfter first (sparse).
func (c *conn) parkNow(atOnce bool) bool {
	if c.inFlight.Load() > 0 {
		return false
	}
	p := c.srv.poller()
	if p == nil {
		return false
	}
	c.fr.release()
	c.park.mu.Lock()
	defer c.park.mu.Unlock()
	if c.stopped() {
		return false
	}
	if err := c.withFD(func(fd int) error { return p.arm(c, fd) }); err != nil {
		c.logger().Debug("cannot park connection", "err", err)
		return false
	}
	c.park.parked = true
	if testHookParked != nil {
		testHookParked(atOnce)
	}
	return true
}

// testHookParked, if set, is told of each connection parking.
var testHookParked func(atOnce bool)

// unpark gives a parked connection a goroutine again; it reports whether
// the connection was parked. woken says the poller saw its socket ready.
func (c *conn) unpark(woken bool) bool {
	c.park.mu.Lock()
	parked := c.park.parked
	c.park.parked = false
	if parked {
		c.park.woken = woken
	}
	c.park.mu.Unlock()
	if parked {
		go c.serve()
	}
	return parked
}

// expireIfIdle closes a connection parked for the whole idle timeout: it
// is given a goroutine that closes it as idle.
func (c *conn) expireIfIdle(now time.Time, idle time.Duration) {
	c.park.mu.Lock()
	if !c.park.parked || now.Sub(time.Unix(0, c.idleSince.Load())) < idle {
		c.park.mu.Unlock()
		return
	}
	c.park.parked = false
	c.park.expired.Store(true)
	c.park.mu.Unlock()
	go c.serve()
}

// forget tells the poller the connection is closing.
func (c *conn) forget() {
	c.park.mu.Lock()
	defer c.park.mu.Unlock()
	if c.park.armed {
		p := c.srv.poll // made before the connection was armed
		if err := c.withFD(func(fd int) error { p.disarm(c, fd); return nil }); err != nil {
			// The descriptor is gone, and with it the poller's watch.
			p.disarm(c, -1)
		}
	}
}

// sweepInterval is how often the poller looks for parked connections past
// the idle timeout: a twentieth of it, within bounds. A connection may
// stay that much longer than the timeout.
func sweepInterval(idle time.Duration) time.Duration {
	return min(max(idle/20, 100*time.Millisecond), 30*time.Second)
}

// parkedConns holds the connections a poller knows by id.
type parkedConns struct {
	mu    sync.Mutex
	conns map[uint32]*conn
	next  uint32
}

// add gives c an id, which the poller's events carry.
func (pc *parkedConns) add(c *conn) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.conns == nil {
		pc.conns = make(map[uint32]*conn)
	}
	for {
		pc.next++
		if _, used := pc.conns[pc.next]; !used && pc.next != 0 {
			break
		}
	}
	c.park.id = pc.next
	pc.conns[pc.next] = c
}

func (pc *parkedConns) remove(c *conn) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	delete(pc.conns, c.park.id)
}

func (pc *parkedConns) get(id uint32) *conn {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.conns[id]
}

// all returns the connections the poller knows, to be called outside pc.mu
// (unpark and expireIfIdle take a connection's lock).
func (pc *parkedConns) all() []*conn {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	conns := make([]*conn, 0, len(pc.conns))
	for _, c := range pc.conns {
		conns = append(conns, c)
	}
	return conns
}

// unparkAll gives every parked connection a goroutine again.
func (pc *parkedConns) unparkAll() {
	for _, c := range pc.all() {
		c.unpark(false)
	}
}

// sweep closes the parked connections that have been idle for idle.
func (pc *parkedConns) sweep(now time.Time, idle time.Duration) {
	if idle <= 0 {
		return
	}
	for _, c := range pc.all() {
		c.expireIfIdle(now, idle)
	}
}
