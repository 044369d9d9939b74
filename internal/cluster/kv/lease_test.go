package kv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/coordinator/clocktest"
)

var start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// conn is a LeaseConn whose keep-alives wait for the test to answer them,
// so that the test decides how late each answer comes.
type conn struct {
	clock   *clocktest.Clock
	sent    []time.Time
	pending []func(time.Duration, error)
	revoked int
	// doneAtRevoke records whether Done was closed when Revoke reached the
	// store.
	lease        kv.Lease
	doneAtRevoke bool
}

func (c *conn) KeepAlive(reply func(time.Duration, error)) {
	c.sent = append(c.sent, c.clock.Now())
	c.pending = append(c.pending, reply)
}

func (c *conn) Revoke(ctx context.Context) error {
	c.revoked++
	select {
	case <-c.lease.Done():
		c.doneAtRevoke = true
	default:
	}
	return kv.ErrLeaseNotFound
}

// answer answers the oldest pending keep-alive.
func (c *conn) answer(t *testing.T, ttl time.Duration, err error) {
	t.Helper()
	if len(c.pending) == 0 {
		t.Fatal("no keep-alive pending")
	}
	reply := c.pending[0]
	c.pending = c.pending[1:]
	reply(ttl, err)
}

func newLease(ttl time.Duration) (kv.Lease, *conn, *clocktest.Clock) {
	clk := clocktest.New(start)
	c := &conn{clock: clk}
	l := kv.NewLease(clk, 7, ttl, start, c)
	c.lease = l
	return l, c, clk
}

func done(l kv.Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

const ttl = 9 * time.Second

// The deadline is the send time of the answered keep-alive plus the TTL,
// however late the answer came.
func TestDeadlineFromSendTime(t *testing.T) {
	l, c, clk := newLease(ttl)
	if !l.Deadline().Equal(start.Add(ttl)) {
		t.Fatalf("first deadline %v", l.Deadline())
	}
	clk.Advance(3 * time.Second)
	if len(c.sent) != 1 || !c.sent[0].Equal(start.Add(3*time.Second)) {
		t.Fatalf("keep-alives sent at %v, want one at +3s", c.sent)
	}
	clk.Advance(2 * time.Second) // the answer takes 2s
	c.answer(t, ttl, nil)
	if want := start.Add(3*time.Second + ttl); !l.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want send time + TTL = %v", l.Deadline(), want)
	}
	// The next keep-alive is due ttl/3 after the last one was sent, which
	// is now already past: it goes at once, and only one is in flight.
	clk.Advance(time.Second)
	if len(c.sent) != 2 || len(c.pending) != 1 {
		t.Fatalf("sent %v, %d pending", c.sent, len(c.pending))
	}
}

// An answer that comes at or after the deadline does not save the lease:
// lost is final.
func TestLateAnswerAfterDeadline(t *testing.T) {
	l, c, clk := newLease(ttl)
	clk.Advance(3 * time.Second)
	clk.Advance(ttl - 3*time.Second - time.Nanosecond)
	if done(l) {
		t.Fatal("lost before the deadline")
	}
	clk.Advance(time.Nanosecond)
	if !done(l) || !errors.Is(l.Err(), kv.ErrLeaseExpired) {
		t.Fatalf("not lost at the deadline: %v", l.Err())
	}
	c.answer(t, ttl, nil)
	if !done(l) || !l.Deadline().Equal(start.Add(ttl)) {
		t.Fatalf("a late answer moved a lost lease: deadline %v", l.Deadline())
	}
	clk.Advance(time.Minute)
	if len(c.sent) != 1 {
		t.Fatalf("keep-alives after the lease was lost: %v", c.sent)
	}
	if clk.Pending() != 0 {
		t.Fatalf("%d timers left", clk.Pending())
	}
}

// An unanswered keep-alive is retried after ttl/10; while retries fail the
// deadline stays, and the lease is lost at it.
func TestRetryThenLose(t *testing.T) {
	l, c, clk := newLease(ttl)
	clk.Advance(3 * time.Second)
	c.answer(t, 0, kv.ErrUnavailable)
	clk.Advance(900 * time.Millisecond)
	if len(c.sent) != 2 || !c.sent[1].Equal(start.Add(3900*time.Millisecond)) {
		t.Fatalf("retry sent at %v, want +3.9s", c.sent)
	}
	for !done(l) {
		for len(c.pending) > 0 {
			c.answer(t, 0, kv.ErrUnavailable)
		}
		clk.Advance(100 * time.Millisecond)
	}
	if !clk.Now().Equal(start.Add(ttl)) || !l.Deadline().Equal(start.Add(ttl)) {
		t.Fatalf("lost at %v with deadline %v, want both at the first deadline", clk.Now(), l.Deadline())
	}
}

// A store that no longer has the lease ends it at once.
func TestNotFoundLoses(t *testing.T) {
	for _, answer := range []struct {
		ttl time.Duration
		err error
	}{{0, kv.ErrLeaseNotFound}, {0, nil}} {
		l, c, clk := newLease(ttl)
		clk.Advance(3 * time.Second)
		c.answer(t, answer.ttl, answer.err)
		if !done(l) || !errors.Is(l.Err(), kv.ErrLeaseExpired) {
			t.Fatalf("answer %v: done=%v err=%v", answer, done(l), l.Err())
		}
	}
}

// Revoke closes Done before it asks the store, and a store that no longer
// has the lease is no error.
func TestRevoke(t *testing.T) {
	l, c, clk := newLease(ttl)
	if err := l.Revoke(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.revoked != 1 || !c.doneAtRevoke || !errors.Is(l.Err(), kv.ErrLeaseRevoked) {
		t.Fatalf("revoked=%d doneAtRevoke=%v err=%v", c.revoked, c.doneAtRevoke, l.Err())
	}
	clk.Advance(time.Minute)
	if len(c.sent) != 0 || clk.Pending() != 0 {
		t.Fatalf("keep-alives after revoke: %v, %d timers", c.sent, clk.Pending())
	}
}

func TestCheckTxn(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []kv.Op
		want error
	}{
		{"ok", []kv.Op{kv.Put("a", nil, 0), kv.Put("b", nil, 0), kv.Delete("c"), kv.DeletePrefix("c")}, nil},
		{"put twice", []kv.Op{kv.Put("a", nil, 0), kv.Put("a", nil, 0)}, kv.ErrDuplicateKey},
		{"put deleted", []kv.Op{kv.Delete("a"), kv.Put("a", nil, 0)}, kv.ErrDuplicateKey},
		{"put under deleted prefix", []kv.Op{kv.Put("ab", nil, 0), kv.DeletePrefix("a")}, kv.ErrDuplicateKey},
		{"put beside deleted prefix", []kv.Op{kv.Put("b", nil, 0), kv.DeletePrefix("a")}, nil},
		{"empty", []kv.Op{kv.Delete("")}, kv.ErrEmptyKey},
		{"unknown type", []kv.Op{{Type: 99, Key: "a"}}, errors.New("")},
	} {
		err := kv.CheckTxn(nil, c.ops)
		switch {
		case c.want == nil && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != nil && err == nil:
			t.Errorf("%s: accepted", c.name)
		case c.want != nil && c.want.Error() != "" && !errors.Is(err, c.want):
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := kv.CheckTxn([]kv.Cond{{Key: "a", Target: 0}}, nil); err == nil {
		t.Error("condition without a target accepted")
	}
}
