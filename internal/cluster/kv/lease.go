package kv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// LeaseConn is how a Lease reaches the store: implementations of KV
// provide one per lease and hand it to NewLease, which owns the keep-alive
// schedule and the deadline, so that both implementations keep leases
// alive, and compute deadlines, the same way.
type LeaseConn interface {
	// KeepAlive sends one keep-alive and calls reply exactly once, with
	// the TTL the store answered (> 0) or an error. An error wrapping
	// ErrLeaseNotFound means the store no longer has the lease; any other
	// error means no answer (a later keep-alive may still succeed).
	// reply may run before KeepAlive returns or later on another
	// goroutine; KeepAlive must not block for long.
	KeepAlive(reply func(ttl time.Duration, err error))
	// Revoke asks the store to revoke the lease.
	Revoke(ctx context.Context) error
}

// NewLease starts keeping a granted lease alive. sentAt is the clock's
// reading when the grant was sent, ttl the TTL its answer gave: the first
// deadline is sentAt+ttl.
//
// It sends a keep-alive every ttl/3 after the last answered one was sent
// (as etcd's own client does), one at a time, and retries an unanswered
// one after ttl/10. All its timing goes through clock.
func NewLease(clock Clock, id LeaseID, ttl time.Duration, sentAt time.Time, conn LeaseConn) Lease {
	l := &lease{
		clock:    clock,
		id:       id,
		ttl:      ttl,
		conn:     conn,
		deadline: sentAt.Add(ttl),
		done:     make(chan struct{}),
	}
	l.scheduleDeadline()
	l.scheduleSend(sentAt.Add(l.interval()))
	return l
}

type lease struct {
	clock Clock
	id    LeaseID
	ttl   time.Duration
	conn  LeaseConn

	mu       sync.Mutex
	deadline time.Time
	err      error // set once, when lost; done is closed then
	done     chan struct{}
	inFlight bool
	// Timers are told apart by generation: a callback whose generation is
	// no longer current does nothing, so a timer that could not be stopped
	// in time is harmless.
	sendGen, deadlineGen   uint64
	stopSend, stopDeadline func() bool
}

func (l *lease) ID() LeaseID           { return l.id }
func (l *lease) TTL() time.Duration    { return l.ttl }
func (l *lease) Done() <-chan struct{} { return l.done }

func (l *lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *lease) Revoke(ctx context.Context) error {
	// Stop acting on the lease before its keys go away: others act on
	// their deletion.
	l.mu.Lock()
	l.loseLocked(ErrLeaseRevoked)
	l.mu.Unlock()
	if err := l.conn.Revoke(ctx); err != nil && !errors.Is(err, ErrLeaseNotFound) {
		return fmt.Errorf("kv: revoke lease %x: %w", int64(l.id), err)
	}
	return nil
}

func (l *lease) interval() time.Duration { return l.ttl / 3 }
func (l *lease) retry() time.Duration    { return l.ttl / 10 }

// loseLocked marks the lease lost for err, once. Holds l.mu.
func (l *lease) loseLocked(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	close(l.done)
	l.sendGen++
	l.deadlineGen++
	if l.stopSend != nil {
		l.stopSend()
		l.stopSend = nil
	}
	if l.stopDeadline != nil {
		l.stopDeadline()
		l.stopDeadline = nil
	}
}

// scheduleSend arranges the next keep-alive at at. Called without l.mu:
// a virtual clock may run a due callback inside AfterFunc.
func (l *lease) scheduleSend(at time.Time) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.sendGen++
	gen := l.sendGen
	if l.stopSend != nil {
		l.stopSend()
		l.stopSend = nil
	}
	l.mu.Unlock()
	stop := l.clock.AfterFunc(at.Sub(l.clock.Now()), func() { l.send(gen) })
	l.mu.Lock()
	if l.sendGen == gen {
		l.stopSend = stop
	}
	l.mu.Unlock()
}

// scheduleDeadline arranges a check at the current deadline. Called
// without l.mu.
func (l *lease) scheduleDeadline() {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.deadlineGen++
	gen := l.deadlineGen
	if l.stopDeadline != nil {
		l.stopDeadline()
		l.stopDeadline = nil
	}
	at := l.deadline
	l.mu.Unlock()
	stop := l.clock.AfterFunc(at.Sub(l.clock.Now()), func() { l.checkDeadline(gen) })
	l.mu.Lock()
	if l.deadlineGen == gen {
		l.stopDeadline = stop
	}
	l.mu.Unlock()
}

func (l *lease) checkDeadline(gen uint64) {
	l.mu.Lock()
	if gen != l.deadlineGen || l.err != nil {
		l.mu.Unlock()
		return
	}
	l.stopDeadline = nil
	if l.clock.Now().Before(l.deadline) {
		// Woken early (the deadline moved after this timer was set).
		l.mu.Unlock()
		l.scheduleDeadline()
		return
	}
	l.loseLocked(fmt.Errorf("%w: no keep-alive answered before the deadline", ErrLeaseExpired))
	l.mu.Unlock()
}

func (l *lease) send(gen uint64) {
	l.mu.Lock()
	if gen != l.sendGen || l.err != nil || l.inFlight {
		l.mu.Unlock()
		return
	}
	l.stopSend = nil
	l.inFlight = true
	l.mu.Unlock()
	sent := l.clock.Now()
	l.conn.KeepAlive(func(ttl time.Duration, err error) { l.answered(sent, ttl, err) })
}

// answered takes the answer to the keep-alive sent at sent.
func (l *lease) answered(sent time.Time, ttl time.Duration, err error) {
	l.mu.Lock()
	l.inFlight = false
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	now := l.clock.Now()
	if !now.Before(l.deadline) {
		// Lost is final, even if the timer that says so has not run yet.
		l.loseLocked(fmt.Errorf("%w: no keep-alive answered before the deadline", ErrLeaseExpired))
		l.mu.Unlock()
		return
	}
	if err == nil && ttl <= 0 {
		err = ErrLeaseNotFound
	}
	if errors.Is(err, ErrLeaseNotFound) {
		l.loseLocked(fmt.Errorf("%w: the store no longer has it", ErrLeaseExpired))
		l.mu.Unlock()
		return
	}
	var next time.Time
	moved := false
	if err != nil {
		next = now.Add(l.retry())
	} else {
		// The store started ttl when it received the keep-alive, after
		// sent: it cannot expire the lease before sent+ttl.
		if d := sent.Add(ttl); d.After(l.deadline) {
			l.deadline = d
			moved = true
		}
		next = sent.Add(l.interval())
	}
	l.mu.Unlock()
	if moved {
		l.scheduleDeadline()
	}
	l.scheduleSend(next)
}
