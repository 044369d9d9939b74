//go:build !linux

package server

// newPoller reports that connections do not park on this system: each
// keeps its goroutine.
func newPoller(*Server) (poller, error) { return nil, errNotParkable }
