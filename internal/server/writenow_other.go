//go:build !unix

package server

import "syscall"

// canWriteNow is whether writeNow writes: not on this system, where
// connections wait for their replies themselves.
const canWriteNow = false

func writeNow(syscall.RawConn, []byte) (int, error) { return 0, nil }
