package kv

import "time"

// Clock is the only source of time of a Lease's keep-alives and of the
// model's lease expiry, so that both run in virtual time in tests and in
// the simulator. It has the shape of coordinator.Clock, and the virtual
// clock of package clocktest satisfies it.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f, on some goroutine, once d has elapsed. f must not
	// block. stop cancels the call and reports whether it did so before f
	// started.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// RealClock returns the wall clock. Its Now carries Go's monotonic reading,
// so deadlines computed from it do not jump with the wall clock.
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
