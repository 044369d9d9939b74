package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxPendingReplyBytes bounds the record data of the fetch replies one
// connection holds before they are written: a request is not handled while
// more than this waits for the client to read. Kafka handles one request
// per connection at a time; real clients send one fetch per broker at a
// time, so this costs them nothing, while a client that pipelines fetches
// and never reads the replies holds at most one of them.
const maxPendingReplyBytes = 1 << 20

// Reasons a connection stops reading.
var (
	errIdle         = errors.New("connection idle")
	errFrameTimeout = errors.New("request frame not received in time")
	errStopped      = errors.New("connection stopped")
	errParked       = errors.New("connection parked")
)

type reply struct {
	hdr  Header
	resp kmsg.Response
	err  error
	// start is when the frame had been read; zero without an observer.
	start time.Time
	// weight is the record data the reply holds (see replyWeight).
	weight int64
}

// A connection has one goroutine while it has traffic, which reads and
// handles its requests and writes their replies itself while nothing
// waits to be written ahead of them, or hands a brief reply to the
// goroutine that completes it (handOff) and reads on. A reply that must wait for something
// while the connection reads on (a JoinGroup parked until its group
// rebalances, a produce until it is durable, any reply behind those, a
// brief reply while further requests are already here) goes to a writer
// goroutine, started for it and ended when no reply has come for
// writerLinger. Between requests a connection holds no write buffer and a
// small read buffer; with nothing in flight for a while it parks
// (park.go) and holds neither a goroutine nor a buffer.
type conn struct {
	id  uint64 // Request.Conn
	srv *Server
	nc  net.Conn
	fr  frameReader
	// host is Request.ClientHost, set by the goroutine serving the
	// connection at its first request.
	host string
	// clientID is the client id of the last request (parseHeader), and
	// req the Request handed to the handler, reused: a handler does not
	// keep it past its call. Both belong to the goroutine serving the
	// connection.
	clientID string
	req      Request
	remote   net.Addr // the peer's address, read once
	// rdl is the read deadline last set (setReadDeadline), by the
	// goroutine serving the connection.
	rdl time.Time

	// stopping is set by stopReading; a reader waiting for reply room
	// is woken to see it.
	stopping atomic.Bool

	// inFlight counts the requests read whose reply has not yet been
	// written or dropped; idleSince is the clock reading (Unix
	// nanoseconds) when it last fell to zero. A connection with a
	// request in flight, such as a JoinGroup parked until its group
	// rebalances, is never idle.
	inFlight  atomic.Int32
	idleSince atomic.Int64
	// pendingBytes is the weight of the replies handed to the writer and
	// not yet written.
	pendingBytes atomic.Int64

	mu sync.Mutex
	// room wakes a reader waiting for pendingBytes to fall or the
	// writer's queue to shorten. It and wake are made with the first
	// writer: a connection that never needs one never has them.
	room chan struct{}
	// queue[head:] holds the replies handed to the writer goroutine, in
	// order. Its array is reused while the writer lives.
	queue []reply
	head  int
	// writing is set while a writer goroutine runs; the reading
	// goroutine starts one and waits for it (writer) before closing,
	// having set readerDone. wake ends the wait of a writer lingering
	// with nothing queued (writerWaits).
	writing     bool
	writerWaits bool
	readerDone  bool
	writer      sync.WaitGroup
	wake        chan struct{}

	// The output, owned by the reading goroutine while no writer runs and
	// by the writer while one does: replies encoded and not yet written,
	// whether a write failed (later replies are dropped), and the write
	// deadline.
	out           replyBuffer
	failed        bool
	writeDeadline time.Time

	park parkState

	// ho is what handing replies to their completer needs (handOff),
	// made with the first such reply.
	ho *handoff
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{srv: s, nc: nc}
	c.fr.init(nc)
	c.fr.budget = &s.frames
	c.idleSince.Store(s.now().UnixNano())
	return c
}

// logger is the server's logger with the connection's remote address; it
// is built only for a line to be logged, which is rare.
func (c *conn) logger() *slog.Logger {
	return c.srv.log.With("remote", c.nc.RemoteAddr().String())
}

// stopReading makes the read loop finish at its next frame boundary
// without cutting off replies that are still to be written.
func (c *conn) stopReading() {
	if c.stopping.Swap(true) {
		return
	}
	// Unblock a read waiting for the next request; a frame half read is
	// abandoned, which is the same as the client never sending it.
	c.nc.SetReadDeadline(c.srv.now())
	c.mu.Lock()
	room := c.room
	c.mu.Unlock()
	if room != nil {
		wake(room)
	}
	c.unpark(false)
}

func (c *conn) stopped() bool { return c.stopping.Load() }

// serve runs the connection until it parks or closes. It runs on a
// goroutine of its own, started when the connection is accepted and again
// each time it is resumed after parking.
func (c *conn) serve() {
	if c.readLoop() == errParked {
		return // the goroutine that resumes the connection takes over
	}
	// A writer still running drains its queue: the replies to the
	// requests read so far are written (or dropped after a failure).
	c.mu.Lock()
	c.readerDone = true
	c.wakeWriter()
	c.mu.Unlock()
	c.writer.Wait()
	c.forget()
	c.fr.release()
	c.nc.Close()
	c.srv.mu.Lock()
	delete(c.srv.conns, c)
	c.srv.mu.Unlock()
	if c.srv.obs != nil {
		c.srv.obs.ConnectionClosed()
	}
	if cc, ok := c.srv.cfg.Handler.(ConnCloser); ok {
		cc.ConnClosed(c.id)
	}
	c.srv.wg.Done()
}

// readLoop reads and serves requests until the connection must close,
// or parks (errParked).
func (c *conn) readLoop() error {
	for {
		frame, err := c.nextFrame()
		if err == errParked {
			return err
		}
		if err != nil {
			c.logReadError(err)
			return err
		}
		var start time.Time
		if c.srv.obs != nil {
			start = time.Now()
		}
		if !c.waitForReplyRoom() {
			return errStopped
		}
		if !c.serveRequest(frame, start) {
			return errStopped
		}
	}
}

func (c *conn) logReadError(err error) {
	if c.stopped() {
		return
	}
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		// The client hung up, possibly mid-frame: not our business to
		// warn about.
		c.logger().Debug("connection closed by client", "err", err)
	case errors.Is(err, errIdle):
		c.logger().Debug("closing idle connection", "idle_timeout", c.srv.cfg.IdleTimeout)
	case errors.Is(err, errFrameTimeout):
		if ok, suppressed := c.srv.frameLog.allow(c.srv.now()); ok {
			c.logger().Warn("closing connection: request frame not received in time",
				"frame_timeout", c.srv.cfg.FrameTimeout, "suppressed", suppressed)
		}
	default:
		c.logger().Warn("closing connection: bad frame", "err", err)
	}
}

// nextFrame reads the next request frame. Until its first byte arrives the
// connection may idle (awaitFrame); from then on the whole frame must
// arrive within FrameTimeout. A frame already buffered whole costs no
// deadline change.
func (c *conn) nextFrame() ([]byte, error) {
	if c.fr.buffered() == 0 {
		if err := c.awaitFrame(); err != nil {
			return nil, err
		}
	}
	if !c.fr.frameBuffered() {
		var dl time.Time
		if c.srv.cfg.FrameTimeout > 0 {
			dl = c.srv.now().Add(c.srv.cfg.FrameTimeout)
		}
		if err := c.setReadDeadline(dl); err != nil {
			return nil, err
		}
	}
	frame, err := c.fr.readFrame(c.srv.cfg.MaxRequestBytes)
	if err != nil && isTimeout(err) && !c.stopped() {
		return nil, errFrameTimeout
	}
	return frame, err
}

// awaitFrame waits for the first byte of a frame. The read deadline is the
// end of the idle timeout; when it passes, the connection is closed only
// if it has had nothing in flight all that time, and the deadline moves
// on otherwise. A connection that can park waits parkAfter at most, then
// parks if it has nothing in flight (errParked); one whose requests come
// further apart than that (sparse) parks at once.
func (c *conn) awaitFrame() error {
	if c.park.expired.Load() {
		return errIdle
	}
	if c.park.woken {
		c.park.woken = false
		// The read will not block: no deadline, so no timer.
		if err := c.setReadDeadline(time.Time{}); err != nil {
			return err
		}
		if err := c.fr.fill(); err == nil || !isTimeout(err) {
			c.noteGap()
			return err
		}
	}
	parkable := c.parkable()
	if parkable && c.park.sparse && c.parkNow(true) {
		return errParked
	}
	idle := c.srv.cfg.IdleTimeout
	from := c.srv.now()
	var parkAt time.Time
	if parkable {
		parkAt = from.Add(c.srv.parkAfter)
	}
	for {
		var dl time.Time
		if idle > 0 {
			dl = from.Add(idle)
		}
		if !parkAt.IsZero() && (dl.IsZero() || parkAt.Before(dl)) {
			dl = parkAt
		}
		if err := c.armReadDeadline(dl, from); err != nil {
			return err
		}
		err := c.fr.fill()
		if err == nil {
			c.noteGap()
			return nil
		}
		if !isTimeout(err) {
			return err
		}
		if c.stopped() {
			return errStopped
		}
		if now := c.srv.now(); !dl.IsZero() && now.Before(dl) {
			// An earlier deadline left armed (armReadDeadline) has
			// passed: wait on, now until dl.
			from = now
			continue
		}
		if !parkAt.IsZero() && !c.srv.now().Before(parkAt) {
			parkAt = time.Time{}
			if c.parkNow(false) {
				return errParked
			}
			continue
		}
		if c.inFlight.Load() > 0 {
			from = c.srv.now()
			continue
		}
		if since := time.Unix(0, c.idleSince.Load()); since.After(from) {
			from = since
			continue
		}
		return errIdle
	}
}

// noteGap records whether the request just begun came parkAfter or more
// after the last reply (sparse).
func (c *conn) noteGap() {
	if c.inFlight.Load() == 0 {
		c.park.sparse = c.srv.now().Sub(time.Unix(0, c.idleSince.Load())) >= c.srv.parkAfter
	}
}

// readDeadlineSlack is how much earlier than asked a read deadline may be
// left armed (armReadDeadline).
const readDeadlineSlack = DefaultParkAfter / 4

// armReadDeadline sets the read deadline to t, unless the one armed is
// still ahead of now and at most readDeadlineSlack before t: moving a
// deadline costs a timer update, and a connection with requests back to
// back would otherwise move it on every request. The read then wakes a
// little early, and the caller waits again.
func (c *conn) armReadDeadline(t, now time.Time) error {
	if !t.IsZero() && c.rdl.After(now) && !c.rdl.After(t) && t.Sub(c.rdl) <= readDeadlineSlack {
		if c.stopped() {
			return errStopped
		}
		return nil
	}
	return c.setReadDeadline(t)
}

// setReadDeadline sets the read deadline unless the connection is
// stopping. stopReading closes stop before it sets its own deadline, so
// either that deadline comes after this one or stop is seen closed here.
func (c *conn) setReadDeadline(t time.Time) error {
	c.rdl = t
	if err := c.nc.SetReadDeadline(t); err != nil {
		return err
	}
	if c.stopped() {
		return errStopped
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// waitForReplyRoom blocks while the replies waiting for the writer hold
// more than maxPendingReplyBytes, or number MaxInFlight. It reports false
// if the connection stops first. Either can only happen with a writer,
// which makes room first.
func (c *conn) waitForReplyRoom() bool {
	for c.pendingBytes.Load() > maxPendingReplyBytes || c.queued() >= c.srv.cfg.MaxInFlight {
		if testHookReplyRoomWait != nil {
			testHookReplyRoomWait()
		}
		if c.stopped() {
			return false
		}
		<-c.room // a writer exists, so room was made before it started
	}
	return !c.stopped()
}

func (c *conn) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue) - c.head
}

// wakeReader tells a reader waiting for reply room to look again; only a
// writer calls it.
func (c *conn) wakeReader() { wake(c.room) }

// wake leaves a token in ch, a channel of capacity 1, unless one is there:
// its receiver looks again at what it waits for.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// testHookReplyRoomWait, if set, is called when a reader starts waiting
// for reply room.
var testHookReplyRoomWait func()

// serveRequest decodes and handles one frame and queues its reply. It
// reports false if the connection must close: the request was refused or
// handling it panicked. A panic anywhere below (decoder, API handler,
// broker, coordinator call path) is logged with the request and closes
// only this connection; the replies before it are still written.
func (c *conn) serveRequest(frame []byte, start time.Time) (ok bool) {
	c.inFlight.Add(1)
	var hdr Header
	defer func() {
		if p := recover(); p != nil {
			err := c.logPanic(p, hdr)
			c.release(0)
			c.observe(hdr, start, err)
			ok = false
		}
	}()
	hdr, req, err := decodeRequest(frame, c.srv.cfg.Handler, &c.clientID)
	if err != nil {
		c.logger().Warn("closing connection: bad request", "err", err, "api", kmsg.NameForKey(hdr.Key),
			"key", hdr.Key, "version", hdr.Version, "client", hdr.ClientID)
		c.release(0)
		if errors.Is(err, ErrRequestDecode) {
			// Only requests the handler serves are observed: the key and
			// version of the others are whatever a client made up.
			c.observe(hdr, start, err)
		}
		return false
	}
	if c.stopped() {
		c.release(0)
		c.observe(hdr, start, errStopped)
		return false
	}
	if c.remote == nil {
		c.remote = c.nc.RemoteAddr()
		c.host = clientHost(c.remote)
	}
	c.req = Request{Header: hdr, Msg: req, Remote: c.remote, Conn: c.id, host: c.host, Stopping: c.srv.stopping}
	resp, err := c.srv.cfg.Handler.Handle(c.srv.ctx, &c.req)
	c.req = Request{} // nothing of the request is kept past its handling
	c.respond(reply{hdr: hdr, resp: resp, err: err, start: start, weight: replyWeight(resp)})
	return true
}

// inlineReplyBytes is the most record data a reply written by the reading
// goroutine holds. A larger one goes to a writer, so that the next
// request is read while the client takes its time reading this reply.
const inlineReplyBytes = 64 << 10

// respond writes r, or hands it to the writer goroutine (starting one if
// none runs). Replies are written in request order: r is written here
// only if nothing waits ahead of it, and only if it need not wait itself,
// or waits briefly while the client has sent nothing further yet.
func (c *conn) respond(r reply) {
	c.mu.Lock()
	if !c.writing {
		inline := r.weight <= inlineReplyBytes
		// A reply parked until other clients act (a JoinGroup waiting
		// for its group) is handed to the goroutine that completes it,
		// like a brief one, rather than to a writer goroutine of its
		// own that would only wait for it.
		handable := inline
		if wt, ok := r.resp.(Waiter); ok && inline {
			brief := isBrief(wt)
			inline = brief && !c.fr.frameBuffered()
			handable = inline || !brief
		}
		if handable {
			if cp, ok := r.resp.(Completer); ok && c.handOff(cp, r) {
				c.mu.Unlock()
				return
			}
		}
		if inline {
			c.mu.Unlock()
			c.writeReply(&r, true)
			return
		}
		c.writing = true
		c.makeWriterChans()
		c.writer.Add(1)
		go c.writeLoop()
	} else {
		// The output may be held by a completer (handOff) rather than
		// a writer: the reader may still have to wait for room.
		c.makeWriterChans()
	}
	if r.weight > 0 {
		c.pendingBytes.Add(r.weight)
	}
	c.queue = append(c.queue, r)
	c.wakeWriter()
	c.mu.Unlock()
}

// makeWriterChans makes room and wake, which a connection needs once
// replies queue for a writer; c.mu is held.
func (c *conn) makeWriterChans() {
	if c.wake == nil {
		c.room = make(chan struct{}, 1)
		c.wake = make(chan struct{}, 1)
	}
}

// handoff holds what a connection needs to hand a reply to its
// completer: the socket's raw connection, to write without blocking, the
// reply handed over, and the callback given to the completer.
type handoff struct {
	raw  syscall.RawConn // nil: the connection cannot hand replies over
	r    reply
	done func()
}

// handOff hands r, a brief reply the reading goroutine would otherwise
// wait for and write itself, to the goroutine that completes it
// (Completer), and reports whether it did. That goroutine then writes the
// reply (completed), without blocking, while this one reads on: the
// reading goroutine waits once per request, for the next one, rather
// than also for each reply. Until the reply is written the output is the
// completer's, as it is a writer goroutine's (c.writing); replies queued
// meanwhile go to a writer goroutine it starts. c.mu is held.
func (c *conn) handOff(cp Completer, r reply) bool {
	// A connection whose requests come far apart parks as soon as its
	// reply is written, which the reading goroutine then does itself.
	if !canWriteNow || c.failed || c.park.sparse {
		return false
	}
	h := c.ho
	if h == nil {
		h = &handoff{}
		if sc, ok := c.nc.(syscall.Conn); ok {
			if raw, err := sc.SyscallConn(); err == nil {
				h.raw = raw
			}
		}
		h.done = c.completed
		c.ho = h
	}
	if h.raw == nil {
		return false
	}
	h.r = r
	if !cp.OnDone(h.done) {
		h.r = reply{}
		return false
	}
	c.writing = true
	c.writer.Add(1)
	return true
}

// completed writes the reply handed to the completer, on the completer's
// goroutine, as far as the socket takes it without blocking; the rest, if
// any, is left to a goroutine of its own.
func (c *conn) completed() {
	h := c.ho
	r := h.r
	h.r = reply{}
	var err error
	if !c.failed {
		if err = c.encode(&r); err == nil && c.out.len() > 0 {
			var n int
			n, err = writeNow(h.raw, c.out.bytes())
			if err == nil && n < c.out.len() {
				c.out.consume(n)
				go c.finishHanded(r)
				return
			}
		}
		c.out.release()
		if err != nil {
			c.failed = true
			c.stopReading()
		}
	}
	c.doneHanded(r, err)
}

// finishHanded writes what the socket did not take at once of a handed
// reply, waiting as long as the write deadline allows.
func (c *conn) finishHanded(r reply) {
	err := c.flush()
	if err != nil {
		c.failed = true
		c.stopReading()
	}
	c.doneHanded(r, err)
}

// doneHanded accounts for a handed reply and gives the output back: to
// the reading goroutine, or to a writer goroutine for the replies queued
// behind it.
func (c *conn) doneHanded(r reply, err error) {
	c.release(0)
	c.observe(r.hdr, r.start, err)
	c.mu.Lock()
	if c.head < len(c.queue) {
		// The writer takes over the count handOff added.
		c.mu.Unlock()
		go c.writeLoop()
		return
	}
	c.writing = false
	c.mu.Unlock()
	c.writer.Done()
}

// wakeWriter ends the wait of a lingering writer; c.mu is held.
func (c *conn) wakeWriter() {
	if c.writerWaits {
		c.writerWaits = false
		wake(c.wake)
	}
}

func isBrief(w Waiter) bool {
	b, ok := w.(Brief)
	return ok && b.Brief()
}

func (c *conn) logPanic(p any, hdr Header) error {
	c.logger().Error("closing connection: panic while handling request", "api", kmsg.NameForKey(hdr.Key),
		"key", hdr.Key, "version", hdr.Version, "client", hdr.ClientID, "correlation_id", hdr.CorrelationID,
		"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return fmt.Errorf("panic while handling request: %v", p)
}

// replyWeight is the record data a reply holds: the part of a fetch reply
// that is as large as the client asks. Other replies are small.
func replyWeight(resp kmsg.Response) int64 {
	f, ok := resp.(*kmsg.FetchResponse)
	if !ok {
		return 0
	}
	var n int64
	for i := range f.Topics {
		for j := range f.Topics[i].Partitions {
			n += int64(len(f.Topics[i].Partitions[j].RecordBatches))
		}
	}
	return n
}

// release accounts for one request whose reply was written or dropped,
// or that closed the connection: weight is what its reply held.
func (c *conn) release(weight int64) {
	if weight > 0 && c.pendingBytes.Add(-weight) <= maxPendingReplyBytes {
		c.wakeReader()
	}
	if c.inFlight.Load() == 1 {
		c.idleSince.Store(c.srv.now().UnixNano())
	}
	c.inFlight.Add(-1)
}

// observe reports one request to the observer; err is why it closed the
// connection, if it did.
func (c *conn) observe(hdr Header, start time.Time, err error) {
	if c.srv.obs != nil {
		c.srv.obs.RequestHandled(hdr.Key, hdr.Version, time.Since(start), err)
	}
}

// writerLinger is how long a writer waits for another reply before it
// ends. A client that pipelines sends its next requests within a round
// trip, and keeps its writer; one that pauses longer does not hold it.
const writerLinger = 10 * time.Millisecond

// writeLoop writes the queued replies in order and ends when none has
// come for writerLinger, or the read loop has ended, after writing what
// it encoded.
func (c *conn) writeLoop() {
	defer c.writer.Done()
	// The timer runs once per writerLinger, not once per wait: a writer
	// that wrote something in the last period waits another.
	linger := time.NewTimer(writerLinger)
	defer linger.Stop()
	wrote, expired := false, false
	for {
		c.mu.Lock()
		if c.head == len(c.queue) {
			c.queue, c.head = c.queue[:0], 0
			if expired || c.readerDone {
				c.queue = nil // an idle connection holds no queue
				c.writing = false
				c.mu.Unlock()
				return
			}
			c.writerWaits = true
			c.mu.Unlock()
			select {
			case <-c.wake:
			case <-linger.C:
				if wrote {
					wrote = false
					linger.Reset(writerLinger)
				} else {
					expired = true
				}
			}
			continue
		}
		c.writerWaits = false
		r := c.queue[c.head]
		c.queue[c.head] = reply{}
		c.head++
		c.mu.Unlock()
		c.wakeReader()
		c.writeReply(&r, false)
		wrote = true
	}
}

// writeReply writes r after the replies already encoded: at once (inline),
// or once no further reply is queued or enough is encoded. The weight r
// added to pendingBytes, if queued, is released. An error (the request
// failed, the write failed, or the wait or the encoding panicked) closes
// the connection; the replies after it are dropped.
func (c *conn) writeReply(r *reply, inline bool) {
	var err error
	if !c.failed {
		if err = c.write(r, inline); err != nil {
			c.failed = true
			c.out.release()
			c.stopReading()
		}
	}
	if inline {
		r.weight = 0 // never added to pendingBytes
	}
	c.release(r.weight)
	c.observe(r.hdr, r.start, err)
}

// flushReplyBytes is how much encoded output the writer gathers at most
// before writing it, even with more replies ready.
const flushReplyBytes = 64 << 10

// write waits for a reply if it must, then encodes it and writes the
// output if it is time to.
func (c *conn) write(r *reply, inline bool) error {
	if err := c.encode(r); err != nil {
		return err
	}
	// Flush only when no further reply is ready, so that pipelined
	// replies share a syscall.
	if inline || c.out.len() >= flushReplyBytes || c.queued() == 0 {
		return c.flush()
	}
	return nil
}

// encode waits for a reply if it must, then encodes it after the output.
func (c *conn) encode(r *reply) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = c.logPanic(p, r.hdr)
		}
	}()
	if r.err != nil {
		c.logger().Warn("closing connection: request failed", "err", r.err, "api", kmsg.NameForKey(r.hdr.Key), "client", r.hdr.ClientID)
		return r.err
	}
	if wt, ok := r.resp.(Waiter); ok {
		if !isBrief(wt) {
			// This may wait long: send what is encoded first.
			if err := c.flush(); err != nil {
				return err
			}
		}
		if err := wt.Wait(); err != nil {
			c.logger().Warn("closing connection: request failed", "err", err, "api", kmsg.NameForKey(r.hdr.Key), "client", r.hdr.ClientID)
			return err
		}
	}
	if r.resp != nil {
		c.out.encode(r.hdr.CorrelationID, r.resp, r.weight)
		if rc, ok := r.resp.(Recycler); ok {
			rc.Recycle()
		}
		r.resp = nil // the encoding is all that is needed now
	}
	return nil
}

// flush writes the encoded replies and lets go of their buffer.
func (c *conn) flush() error {
	if c.out.len() == 0 {
		c.out.release()
		return nil
	}
	c.armWriteDeadline()
	_, err := c.nc.Write(c.out.bytes())
	c.out.release()
	return err
}

// armWriteDeadline keeps a write deadline IdleTimeout ahead, so a client
// that stops reading its replies is closed like an idle one. It moves the
// deadline only when less than half of it is left, not on every write.
func (c *conn) armWriteDeadline() {
	idle := c.srv.cfg.IdleTimeout
	if idle <= 0 {
		return
	}
	now := c.srv.now()
	if c.writeDeadline.Sub(now) < idle/2 {
		c.writeDeadline = now.Add(idle)
		c.nc.SetWriteDeadline(c.writeDeadline)
	}
}

// Reply encoding buffers are pooled: a connection takes one when it has a
// reply to write and gives it back once written.
const (
	replyBufferBytes = 4 << 10
	// retainReplyBytes is the largest buffer given back to the pool.
	// Most replies are far smaller; one large fetch reply must not pin
	// its size.
	retainReplyBytes = 256 << 10
)

var replyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, replyBufferBytes); return &b }}

// replyBuffer holds the encoding of replies not yet written.
type replyBuffer struct{ b *[]byte }

func (rb *replyBuffer) len() int {
	if rb.b == nil {
		return 0
	}
	return len(*rb.b)
}

func (rb *replyBuffer) bytes() []byte { return *rb.b }

// encode appends resp's frame; weight is the record data it holds
// (replyWeight). The buffer is sized for that data up front: grown by
// appending, a large reply would pass through copies of half, a
// quarter... of its size.
func (rb *replyBuffer) encode(corr int32, resp kmsg.Response, weight int64) {
	if rb.b == nil {
		rb.b = replyBuffers.Get().(*[]byte)
	}
	b := *rb.b
	if need := len(b) + int(weight) + 64<<10; weight > 0 && cap(b) < need {
		b = append(make([]byte, 0, need), b...)
	}
	*rb.b = AppendResponse(b, corr, resp)
}

// consume drops the first n bytes, which were written.
func (rb *replyBuffer) consume(n int) {
	b := *rb.b
	*rb.b = b[:copy(b, b[n:])]
}

// release lets go of the buffer: back to the pool unless it grew past
// retainReplyBytes.
func (rb *replyBuffer) release() {
	if rb.b == nil {
		return
	}
	if cap(*rb.b) <= retainReplyBytes {
		*rb.b = (*rb.b)[:0]
		replyBuffers.Put(rb.b)
	}
	rb.b = nil
}
