package coordinator

import "time"

// Clock is the coordinator's only source of time. Every deadline of the
// group machines goes through AfterFunc, so a test can substitute a virtual
// clock (package clocktest) and move time explicitly.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f, on some goroutine, once d has elapsed. f must not
	// block. stop cancels the call and reports whether it did so before f
	// started.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// RealClock returns the wall clock.
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
