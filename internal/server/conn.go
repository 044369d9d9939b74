package server

import (
	"bufio"
	"encoding/binary"
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

// Reasons a connection is closed while reading.
var (
	errIdle         = errors.New("connection idle")
	errFrameTimeout = errors.New("request frame not received in time")
	errStopped      = errors.New("connection stopped")
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

type conn struct {
	srv     *Server
	nc      net.Conn
	br      *bufio.Reader
	size    [4]byte
	replies chan reply // handled, waiting to be written
	log     *slog.Logger

	stopOnce sync.Once
	stop     chan struct{}

	// inFlight counts the requests read whose reply has not yet been
	// written or dropped; idleSince is the clock reading (Unix
	// nanoseconds) when it last fell to zero. A connection with a
	// request in flight, such as a JoinGroup parked until its group
	// rebalances, is never idle.
	inFlight  atomic.Int32
	idleSince atomic.Int64
	// pendingBytes is the weight of the replies handed to the writer and
	// not yet written; drained wakes a reader waiting for it to fall.
	pendingBytes atomic.Int64
	drained      chan struct{}

	// writeDeadline is the writer's current deadline (writer only).
	writeDeadline time.Time
}

func newConn(s *Server, nc net.Conn) *conn {
	return &conn{
		srv:     s,
		nc:      nc,
		replies: make(chan reply, s.cfg.MaxInFlight),
		stop:    make(chan struct{}),
		drained: make(chan struct{}, 1),
	}
}

// stopReading makes the read loop finish at its next frame boundary
// without cutting off replies that are still to be written.
func (c *conn) stopReading() {
	c.stopOnce.Do(func() {
		close(c.stop)
		// Unblock a read waiting for the next request; a frame half read
		// is abandoned, which is the same as the client never sending it.
		c.nc.SetReadDeadline(c.srv.now())
	})
}

func (c *conn) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

func (c *conn) serve() {
	defer c.srv.wg.Done()
	defer func() {
		c.srv.mu.Lock()
		delete(c.srv.conns, c)
		c.srv.mu.Unlock()
		if c.srv.obs != nil {
			c.srv.obs.ConnectionClosed()
		}
	}()
	c.log = c.srv.log.With("remote", c.nc.RemoteAddr().String())
	c.br = bufio.NewReaderSize(c.nc, 64<<10)
	c.idleSince.Store(c.srv.now().UnixNano())
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
	for {
		frame, err := c.nextFrame()
		if err != nil {
			c.logReadError(err)
			return
		}
		var start time.Time
		if c.srv.obs != nil {
			start = time.Now()
		}
		if !c.waitForReplyRoom() {
			return
		}
		if !c.serveRequest(frame, start) {
			return
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
		c.log.Debug("connection closed by client", "err", err)
	case errors.Is(err, errIdle):
		c.log.Debug("closing idle connection", "idle_timeout", c.srv.cfg.IdleTimeout)
	case errors.Is(err, errFrameTimeout):
		if ok, suppressed := c.srv.frameLog.allow(c.srv.now()); ok {
			c.log.Warn("closing connection: request frame not received in time",
				"frame_timeout", c.srv.cfg.FrameTimeout, "suppressed", suppressed)
		}
	default:
		c.log.Warn("closing connection: bad frame", "err", err)
	}
}

// nextFrame reads the next request frame. Until its first byte arrives the
// connection may idle (awaitFrame); from then on the whole frame must
// arrive within FrameTimeout. A frame already buffered whole costs no
// deadline change.
func (c *conn) nextFrame() ([]byte, error) {
	if c.br.Buffered() == 0 {
		if err := c.awaitFrame(); err != nil {
			return nil, err
		}
	}
	if !c.frameBuffered() {
		var dl time.Time
		if c.srv.cfg.FrameTimeout > 0 {
			dl = c.srv.now().Add(c.srv.cfg.FrameTimeout)
		}
		if err := c.setReadDeadline(dl); err != nil {
			return nil, err
		}
	}
	frame, err := ReadFrame(c.br, c.size[:], c.srv.cfg.MaxRequestBytes)
	if err != nil && isTimeout(err) && !c.stopped() {
		return nil, errFrameTimeout
	}
	return frame, err
}

// awaitFrame waits for the first byte of a frame. The read deadline is the
// end of the idle timeout; when it passes, the connection is closed only
// if it has had nothing in flight all that time, and the deadline moves
// on otherwise.
func (c *conn) awaitFrame() error {
	idle := c.srv.cfg.IdleTimeout
	from := c.srv.now()
	for {
		var dl time.Time
		if idle > 0 {
			dl = from.Add(idle)
		}
		if err := c.setReadDeadline(dl); err != nil {
			return err
		}
		_, err := c.br.Peek(1)
		if err == nil {
			return nil
		}
		if !isTimeout(err) {
			return err
		}
		if c.stopped() {
			return errStopped
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

// setReadDeadline sets the read deadline unless the connection is
// stopping. stopReading closes stop before it sets its own deadline, so
// either that deadline comes after this one or stop is seen closed here.
func (c *conn) setReadDeadline(t time.Time) error {
	if err := c.nc.SetReadDeadline(t); err != nil {
		return err
	}
	if c.stopped() {
		return errStopped
	}
	return nil
}

// frameBuffered reports whether a whole frame is in the read buffer.
func (c *conn) frameBuffered() bool {
	n := c.br.Buffered()
	if n < 4 {
		return false
	}
	b, _ := c.br.Peek(4)
	size := int32(binary.BigEndian.Uint32(b))
	return size >= 0 && int(size) <= n-4
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// waitForReplyRoom blocks while the replies waiting for the writer hold
// more than maxPendingReplyBytes. It reports false if the connection
// stops first.
func (c *conn) waitForReplyRoom() bool {
	for c.pendingBytes.Load() > maxPendingReplyBytes {
		if testHookReplyRoomWait != nil {
			testHookReplyRoomWait()
		}
		select {
		case <-c.drained:
		case <-c.stop:
			return false
		}
	}
	return true
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
	hdr, req, err := DecodeRequest(frame, c.srv.cfg.Handler)
	if err != nil {
		c.log.Warn("closing connection: bad request", "err", err, "api", kmsg.NameForKey(hdr.Key),
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
	resp, err := c.srv.cfg.Handler.Handle(c.srv.ctx, &Request{Header: hdr, Msg: req, Remote: c.nc.RemoteAddr()})
	w := replyWeight(resp)
	if w > 0 {
		c.pendingBytes.Add(w)
	}
	// The writer drains replies until they are closed, even after a
	// failure, so this send cannot block for good.
	c.replies <- reply{hdr: hdr, resp: resp, err: err, start: start, weight: w}
	return true
}

func (c *conn) logPanic(p any, hdr Header) error {
	c.log.Error("closing connection: panic while handling request", "api", kmsg.NameForKey(hdr.Key),
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
		select {
		case c.drained <- struct{}{}:
		default:
		}
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

func (c *conn) writeLoop() {
	w := replyWriter{c: c, bw: bufio.NewWriterSize(c.nc, 64<<10)}
	failed := false
	for r := range c.replies {
		var err error
		if !failed {
			if err = w.write(&r); err != nil {
				failed = true
				c.stopReading()
			}
		}
		c.release(r.weight)
		c.observe(r.hdr, r.start, err)
	}
	if !failed {
		c.armWriteDeadline()
		w.bw.Flush()
	}
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

// replyWriter writes one connection's replies in order.
type replyWriter struct {
	c   *conn
	bw  *bufio.Writer
	buf replyBuffer
}

// write waits for a reply if it must, then encodes and writes it. An
// error (the request failed, the write failed, or the wait or the encoding
// panicked) closes the connection.
func (w *replyWriter) write(r *reply) (err error) {
	c := w.c
	defer func() {
		if p := recover(); p != nil {
			err = c.logPanic(p, r.hdr)
		}
	}()
	if r.err != nil {
		c.log.Warn("closing connection: request failed", "err", r.err, "api", kmsg.NameForKey(r.hdr.Key), "client", r.hdr.ClientID)
		return r.err
	}
	if r.resp == nil {
		return nil
	}
	if wt, ok := r.resp.(Waiter); ok {
		if b, ok := wt.(Brief); !ok || !b.Brief() {
			// This may wait long: send what is buffered first.
			c.armWriteDeadline()
			w.bw.Flush()
		}
		if err := wt.Wait(); err != nil {
			c.log.Warn("closing connection: request failed", "err", err, "api", kmsg.NameForKey(r.hdr.Key), "client", r.hdr.ClientID)
			return err
		}
	}
	frame := w.buf.encode(r.hdr.CorrelationID, r.resp, r.weight)
	r.resp = nil // the encoding is all that is needed now
	c.armWriteDeadline()
	_, err = w.bw.Write(frame)
	w.buf.release()
	if err != nil {
		return err
	}
	// Flush only when no further reply is ready, so pipelined replies
	// share a syscall.
	if len(c.replies) == 0 {
		return w.bw.Flush()
	}
	return nil
}

// retainReplyBytes is the largest reply encoding buffer kept between
// replies. Most replies are far smaller; one large fetch reply must not
// pin its size for the life of the connection.
const retainReplyBytes = 256 << 10

// replyBuffer holds the encoding of one reply at a time.
type replyBuffer struct{ b []byte }

// encode encodes resp; weight is the record data it holds (replyWeight).
// The buffer is sized for that data up front: grown by appending, a large
// reply would pass through copies of half, a quarter... of its size.
func (rb *replyBuffer) encode(corr int32, resp kmsg.Response, weight int64) []byte {
	if need := int(weight) + 64<<10; cap(rb.b) < need {
		rb.b = make([]byte, 0, need)
	}
	rb.b = AppendResponse(rb.b[:0], corr, resp)
	return rb.b
}

// release lets go of a buffer grown past retainReplyBytes.
func (rb *replyBuffer) release() {
	if cap(rb.b) > retainReplyBytes {
		rb.b = nil
	}
}
