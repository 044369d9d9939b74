//go:build unix

package server

import "syscall"

// canWriteNow is whether writeNow writes.
const canWriteNow = true

// writeNow writes as much of b as the socket takes without blocking and
// returns how much that was; a full socket is not an error.
func writeNow(rc syscall.RawConn, b []byte) (int, error) {
	var n int
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		for {
			n, werr = syscall.Write(int(fd), b)
			if werr != syscall.EINTR {
				return true // done, whether or not all was taken
			}
		}
	})
	if err != nil {
		return 0, err
	}
	if n < 0 {
		n = 0
	}
	if werr == syscall.EAGAIN {
		werr = nil
	}
	return n, werr
}
