// Package clocktest provides a virtual clock for tests of code that takes a
// clock as input (coordinator.Clock). Time moves only when the test calls
// Advance, and timers fire synchronously, in deadline order, inside Advance.
package clocktest

import (
	"sync"
	"time"
)

// Clock is a virtual clock. It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers map[uint64]*timer
}

type timer struct {
	seq      uint64
	deadline time.Time
	f        func()
}

// New returns a clock reading start.
func New(start time.Time) *Clock {
	return &Clock{now: start, timers: map[uint64]*timer{}}
}

// Now returns the virtual time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run when the clock has advanced by d. A timer
// that is already due (d <= 0) runs at once, on the caller's goroutine, as
// time.AfterFunc would run it soon; f must therefore not block on anything
// the caller holds. The returned stop reports whether it prevented f from
// running.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	if d <= 0 {
		c.mu.Unlock()
		f()
		return func() bool { return false }
	}
	c.seq++
	t := &timer{seq: c.seq, deadline: c.now.Add(d), f: f}
	c.timers[t.seq] = t
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.timers[t.seq]; !ok {
			return false
		}
		delete(c.timers, t.seq)
		return true
	}
}

// Advance moves the clock forward by d, running every timer that falls due
// on the way in deadline order (ties in the order they were scheduled), with
// Now reading each timer's deadline while it runs. Timers scheduled by those
// callbacks run too if they fall due within d. Callbacks run without the
// clock's lock held.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	for {
		var next *timer
		for _, t := range c.timers {
			if t.deadline.After(target) {
				continue
			}
			if next == nil || t.deadline.Before(next.deadline) ||
				(t.deadline.Equal(next.deadline) && t.seq < next.seq) {
				next = t
			}
		}
		if next == nil {
			break
		}
		delete(c.timers, next.seq)
		if next.deadline.After(c.now) {
			c.now = next.deadline
		}
		c.mu.Unlock()
		next.f()
		c.mu.Lock()
	}
	c.now = target
	c.mu.Unlock()
}

// Pending returns the number of scheduled timers.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// NextDeadline returns the earliest scheduled deadline, if any.
func (c *Clock) NextDeadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var min time.Time
	ok := false
	for _, t := range c.timers {
		if !ok || t.deadline.Before(min) {
			min, ok = t.deadline, true
		}
	}
	return min, ok
}
