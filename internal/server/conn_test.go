package server

import (
	"strings"
	"testing"
	"time"
)

// writesOf returns how many writes the server end has made.
func (e *testEnv) writesOf(s *fakeConn) int {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	return s.writes
}

// onlyConn returns the server's one open connection.
func (e *testEnv) onlyConn() *conn {
	e.t.Helper()
	e.srv.mu.Lock()
	defer e.srv.mu.Unlock()
	if len(e.srv.conns) != 1 {
		e.t.Fatalf("%d connections open, want 1", len(e.srv.conns))
	}
	for c := range e.srv.conns {
		return c
	}
	return nil
}

func TestRepliesBeforeAParkedOneAreWrittenFirst(t *testing.T) {
	e := newTestEnv(t, Config{})
	_, c := e.dial(0)
	var b []byte
	b = append(b, request(1, "ok")...)
	b = append(b, request(2, "park")...)
	b = append(b, request(3, "ok")...)
	b = append(b, request(4, "brief")...)
	c.send(b)
	// The reply before the parked one goes out while it waits; those
	// after it wait for it, though they are handled already.
	expectReply(t, c, 1)
	e.net.waitFor("the requests after the parked one", func() bool { return e.h.count("brief") == 1 })
	close(e.h.gate)
	close(e.h.release)
	for corr := int32(2); corr <= 4; corr++ {
		expectReply(t, c, corr)
	}
}

func TestPipelinedBriefRepliesShareAWrite(t *testing.T) {
	e := newTestEnv(t, Config{})
	s, c := e.dial(0)
	var b []byte
	for corr := range int32(4) {
		b = append(b, request(corr, "brief")...)
	}
	c.send(b)
	e.net.waitFor("the pipelined requests", func() bool { return e.h.count("brief") == 4 })
	if n := e.writesOf(s); n != 0 {
		t.Fatalf("%d writes before the waits ended", n)
	}
	close(e.h.gate)
	for corr := range int32(4) {
		expectReply(t, c, corr)
	}
	if n := e.writesOf(s); n != 1 {
		t.Fatalf("4 brief replies in %d writes, want 1", n)
	}
	// Alone, a brief reply is waited for and written by the connection's
	// reading goroutine: it is answered all the same.
	c.send(request(5, "brief"))
	expectReply(t, c, 5)
}

func TestMaxInFlightBoundsTheRepliesWaiting(t *testing.T) {
	waiting := watchReplyRoomWaits(t)
	e := newTestEnv(t, Config{MaxInFlight: 2})
	_, c := e.dial(0)
	var b []byte
	for corr := range int32(6) {
		b = append(b, request(corr, "park")...)
	}
	c.send(b)
	// The reader waits for room each time the queue is full; once the
	// writer has taken the first reply (and waits for it) the queue holds
	// two more, and the reader waits for good.
	for {
		select {
		case <-waiting:
		case <-time.After(20 * time.Second):
			t.Fatal("the reader never waited for room")
		}
		n := e.h.countLocked("park")
		if n > 3 {
			t.Fatalf("%d requests handled with MaxInFlight 2", n)
		}
		if n == 3 {
			break
		}
	}
	close(e.h.release)
	for corr := range int32(6) {
		expectReply(t, c, corr)
	}
}

func TestConnectionBetweenRequestsHoldsNoBuffers(t *testing.T) {
	e := newTestEnv(t, Config{})
	s, c := e.dial(0)
	// A burst of pipelined requests larger than the small read buffer,
	// with a parked reply in the middle that sends the rest to a writer.
	long := strings.Repeat("x", 300)
	var b []byte
	for corr := range int32(10) {
		b = append(b, request(corr, long)...)
	}
	b = append(b, request(10, "park")...)
	for corr := int32(11); corr < 20; corr++ {
		b = append(b, request(corr, long)...)
	}
	b = append(b, request(20, "brief")...)
	c.send(b)
	e.net.waitFor("the burst", func() bool { return e.h.count("brief") == 1 })
	cn := e.onlyConn()
	cn.mu.Lock()
	writing := cn.writing
	cn.mu.Unlock()
	if !writing {
		t.Fatal("no writer while a parked reply waits")
	}
	close(e.h.release)
	close(e.h.gate)
	for corr := range int32(21) {
		expectReply(t, c, corr)
	}
	s.waitReading()
	cn.writer.Wait()
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.writing || cn.queue != nil || cn.out.b != nil || cn.fr.large != nil {
		t.Fatalf("between requests: writer %v, queue %v, reply buffer %v, large read buffer %v",
			cn.writing, cn.queue != nil, cn.out.b != nil, cn.fr.large != nil)
	}
}
