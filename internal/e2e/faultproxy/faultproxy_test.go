package faultproxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// echoServer echoes every connection back and reports, when a connection
// ends, everything it received on it.
type echoServer struct {
	ln       net.Listener
	received chan []byte
	mu       sync.Mutex
	accepted int
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln, received: make(chan []byte, 16)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.accepted++
			s.mu.Unlock()
			go func() {
				defer c.Close()
				var got bytes.Buffer
				io.Copy(io.MultiWriter(c, &got), c)
				s.received <- got.Bytes()
			}()
		}
	}()
	return s
}

func (s *echoServer) acceptedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

func startProxy(t *testing.T, target string, opts Options) *Proxy {
	t.Helper()
	p, err := Start(target, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back; the deadline only keeps a broken
// proxy from hanging the test.
func roundTrip(c net.Conn, msg []byte) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("echoed " + string(got))
	}
	return nil
}

// expectClosed reads from c until it fails and expects the failure to be
// the connection's end, not the guard deadline.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("connection still open")
	}
}

func TestForwards(t *testing.T) {
	s := startEcho(t)
	p := startProxy(t, s.ln.Addr().String(), Options{})
	c := dial(t, p.Addr())
	for _, m := range []string{"one", "two", string(bytes.Repeat([]byte("x"), 100000))} {
		if err := roundTrip(c, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if p.Accepted() != 1 || p.Cuts() != 0 {
		t.Fatalf("accepted %d, cut %d", p.Accepted(), p.Cuts())
	}
}

func TestResetClosesAndRefusesUntilHealed(t *testing.T) {
	s := startEcho(t)
	p := startProxy(t, s.ln.Addr().String(), Options{})
	old := dial(t, p.Addr())
	if err := roundTrip(old, []byte("before")); err != nil {
		t.Fatal(err)
	}
	p.Cut(Reset, nil)
	expectClosed(t, old)
	// A new connection is accepted and reset before it reaches the
	// target.
	// The reset may reach the client while it is still connecting, so a
	// failed dial is the cut working too.
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		defer c.Close()
		if err := roundTrip(c, []byte("during")); err == nil {
			t.Fatal("a connection made during the cut was forwarded")
		}
	}
	if got := <-s.received; string(got) != "before" {
		t.Fatalf("target received %q", got)
	}
	if n := s.acceptedCount(); n != 1 {
		t.Fatalf("target accepted %d connections, want only the one made before the cut", n)
	}
	if p.Cuts() != 2 {
		t.Fatalf("%d connections cut, want 2", p.Cuts())
	}
	p.Heal()
	if err := roundTrip(dial(t, p.Addr()), []byte("after")); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}

func TestBlackholeForwardsNothingAndHealCloses(t *testing.T) {
	s := startEcho(t)
	p := startProxy(t, s.ln.Addr().String(), Options{})
	old := dial(t, p.Addr())
	if err := roundTrip(old, []byte("before")); err != nil {
		t.Fatal(err)
	}
	p.Cut(Blackhole, nil)
	// The connection stays open and swallows what is written to it.
	if _, err := old.Write([]byte("lost")); err != nil {
		t.Fatalf("write to a blackholed connection: %v", err)
	}
	// A new one is accepted, never reaches the target, and swallows
	// what is written to it too.
	c := dial(t, p.Addr())
	if _, err := c.Write([]byte("also lost")); err != nil {
		t.Fatalf("write to a new blackholed connection: %v", err)
	}
	// Heal closes both: what they swallowed never arrives.
	waitCuts(t, p, 2)
	p.Heal()
	expectClosed(t, old)
	expectClosed(t, c)
	if got := <-s.received; string(got) != "before" {
		t.Fatalf("target received %q, want only what was sent before the cut", got)
	}
	if n := s.acceptedCount(); n != 1 {
		t.Fatalf("target accepted %d connections, want 1", n)
	}
	if err := roundTrip(dial(t, p.Addr()), []byte("after")); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}

// waitCuts waits until the proxy has cut n connections: a new connection
// is cut once the proxy has accepted and classified it.
func waitCuts(t *testing.T, p *Proxy, n int64) {
	t.Helper()
	for i := 0; p.Cuts() < n; i++ {
		if i == 1000 {
			t.Fatalf("%d connections cut, want %d", p.Cuts(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kafkaFrame is a Kafka request frame with the given client id (nil: a
// null one).
func kafkaFrame(t *testing.T, req kmsg.Request, clientID *string) []byte {
	t.Helper()
	var opts []kmsg.RequestFormatterOpt
	if clientID != nil {
		opts = append(opts, kmsg.FormatterClientID(*clientID))
	}
	return kmsg.NewRequestFormatter(opts...).AppendRequest(nil, req, 7)
}

func TestKafkaClientID(t *testing.T) {
	id := "groupd-replica-fetcher-2"
	empty := ""
	flexible := kmsg.NewPtrApiVersionsRequest()
	flexible.Version = 3 // request header v2
	old := kmsg.NewPtrApiVersionsRequest()
	old.Version = 0
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version = 13
	for _, tc := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"api versions v3", kafkaFrame(t, flexible, &id), id},
		{"api versions v0", kafkaFrame(t, old, &id), id},
		{"fetch v13", kafkaFrame(t, fetch, &id), id},
		{"empty id", kafkaFrame(t, old, &empty), ""},
		{"null id", kafkaFrame(t, old, nil), ""},
		{"not kafka", []byte("GET / HTTP/1.1\r\n\r\n"), ""},
		{"short", []byte{0, 0}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := KafkaClientID(bufio.NewReader(bytes.NewReader(tc.frame)))
			if got != tc.want {
				t.Fatalf("client id %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCutByClass cuts only the connections of one Kafka client id: the
// others, open and new, go on being forwarded, with the bytes the
// classifier peeked.
func TestCutByClass(t *testing.T) {
	s := startEcho(t)
	p := startProxy(t, s.ln.Addr().String(), Options{Classify: KafkaClientID})
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	a, b := "peer", "client"
	open := func(id string) net.Conn {
		c := dial(t, p.Addr())
		if err := roundTrip(c, kafkaFrame(t, req, &id)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca, cb := open(a), open(b)
	for _, mode := range []Mode{Reset, Blackhole} {
		t.Run(mode.String(), func(t *testing.T) {
			p.Cut(mode, func(class string) bool { return class == a })
			if mode == Blackhole {
				ca.Write([]byte("x"))
				p.Heal()
			}
			expectClosed(t, ca)
			if err := roundTrip(cb, []byte("still")); err != nil {
				t.Fatalf("the other client's connection: %v", err)
			}
			p.Cut(mode, func(class string) bool { return class == a })
			if err := roundTrip(dial(t, p.Addr()), kafkaFrame(t, req, &b)); err != nil {
				t.Fatalf("a new connection of the other client: %v", err)
			}
			before := p.Cuts()
			c := dial(t, p.Addr())
			c.Write(kafkaFrame(t, req, &a))
			waitCuts(t, p, before+1)
			p.Heal()
			expectClosed(t, c)
			ca = open(a)
		})
	}
}
