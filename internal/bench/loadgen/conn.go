package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// clientID is the client id in every request header.
const clientID = "loadgen"

// frame encodes req as a request frame (size, key, version, correlation id
// 0, client id, the empty tagged fields of a flexible header, body). The
// correlation id is patched in place when the frame is sent, so that a
// frame is encoded once and sent any number of times.
func frame(req kmsg.Request) []byte {
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(clientID)))
	b = append(b, clientID...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// prepared is a request encoded before the window that sends it, with the
// request it encodes (to decode its answer as the right type and version).
type prepared struct {
	req   kmsg.Request
	frame []byte
}

func prepare(req kmsg.Request) prepared { return prepared{req, frame(req)} }

// conn is a raw Kafka connection. The server answers a connection's
// requests in order, so answers are matched to the queue of requests sent.
// One goroutine uses it at a time.
type conn struct {
	nc     net.Conn
	r      *bufio.Reader
	w      *bufio.Writer
	corr   int32
	queued []kmsg.Request
	buf    []byte // the last answer's frame
}

func dial(addr string) (*conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc, r: bufio.NewReaderSize(nc, 16<<10), w: bufio.NewWriterSize(nc, 16<<10)}, nil
}

// dialN opens n connections, a few at a time.
func dialN(addr string, n int) ([]*conn, error) {
	conns := make([]*conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	const dialers = 8
	for d := range dialers {
		wg.Go(func() {
			for i := d; i < n; i += dialers {
				conns[i], errs[i] = dial(addr)
				if errs[i] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll(conns)
		return nil, fmt.Errorf("dial %d connections to %s (open-file limit?): %w", n, addr, err)
	}
	return conns, nil
}

func closeAll(conns []*conn) {
	for _, c := range conns {
		if c != nil {
			c.nc.Close()
		}
	}
}

// arm sets one deadline for everything the connection does next.
func (c *conn) arm(d time.Duration) { c.nc.SetDeadline(time.Now().Add(d)) }

func armAll(conns []*conn, d time.Duration) {
	for _, c := range conns {
		c.arm(d)
	}
}

// send queues a prepared request: it patches the correlation id into the
// frame and copies the frame into the write buffer.
func (c *conn) send(p prepared) error {
	c.corr++
	c.queued = append(c.queued, p.req)
	binary.BigEndian.PutUint32(p.frame[8:], uint32(c.corr))
	_, err := c.w.Write(p.frame)
	return err
}

func (c *conn) flush() error { return c.w.Flush() }

// recv reads the answer to the oldest request in flight and decodes it
// with kmsg.
func (c *conn) recv() (kmsg.Response, error) {
	if len(c.queued) == 0 {
		return nil, errors.New("recv with nothing in flight")
	}
	req := c.queued[0]
	c.queued = c.queued[1:]
	if len(c.queued) == 0 {
		c.queued = c.queued[:0:0]
	}
	want := c.corr - int32(len(c.queued))
	var size [4]byte
	if _, err := io.ReadFull(c.r, size[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(size[:]))
	if cap(c.buf) < n {
		c.buf = make([]byte, n)
	}
	body := c.buf[:n]
	if _, err := io.ReadFull(c.r, body); err != nil {
		return nil, err
	}
	if n < 4 {
		return nil, errors.New("short answer")
	}
	if corr := int32(binary.BigEndian.Uint32(body)); corr != want {
		return nil, fmt.Errorf("correlation id %d, want %d", corr, want)
	}
	body = body[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() && resp.Key() != 18 { // ApiVersions' header is never flexible
		var err error
		if body, err = skipTags(body); err != nil {
			return nil, err
		}
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decode %T: %w", resp, err)
	}
	return resp, nil
}

// roundTrip sends p and waits for its answer.
func (c *conn) roundTrip(p prepared) (kmsg.Response, error) {
	if err := c.send(p); err != nil {
		return nil, err
	}
	if err := c.flush(); err != nil {
		return nil, err
	}
	return c.recv()
}

// do encodes and sends req and waits for its answer (setup only).
func (c *conn) do(req kmsg.Request) (kmsg.Response, error) { return c.roundTrip(prepare(req)) }

// pipeline sends reqs in order, keeping up to window in flight, and checks
// every answer. It flushes only before waiting for the server, so that
// requests sent while answers were already buffered share a write.
func (c *conn) pipeline(reqs []prepared, window int, check func(kmsg.Response) error) error {
	sent := 0
	for got := range reqs {
		for sent < len(reqs) && sent-got < window {
			if err := c.send(reqs[sent]); err != nil {
				return err
			}
			sent++
		}
		if c.r.Buffered() == 0 {
			if err := c.flush(); err != nil {
				return err
			}
		}
		resp, err := c.recv()
		if err != nil {
			return err
		}
		if err := check(resp); err != nil {
			return err
		}
	}
	return nil
}

// skipTags skips a header's tagged fields.
func skipTags(b []byte) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errors.New("bad tag count")
	}
	b = b[k:]
	for range n {
		if _, k = binary.Uvarint(b); k <= 0 {
			return nil, errors.New("bad tag")
		}
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < size {
			return nil, errors.New("bad tag size")
		}
		b = b[k+int(size):]
	}
	return b, nil
}

// parallel runs fn for every i in [0, n) at once, each on its own
// goroutine, after all have started, and returns how long they took
// together and their errors.
func parallel(n int, fn func(i int) error) (time.Duration, error) {
	errs := make([]error, n)
	var wg, ready sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	for i := range n {
		wg.Go(func() {
			ready.Done()
			<-start
			errs[i] = fn(i)
		})
	}
	ready.Wait()
	begin := time.Now()
	close(start)
	wg.Wait()
	return time.Since(begin), errors.Join(errs...)
}
