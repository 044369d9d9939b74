//go:build unix

package app

import "syscall"

// raiseOpenFileLimit raises the soft open-file limit to the hard limit.
// It returns the limits in force afterwards and the soft limit before
// (equal to soft if nothing was raised); a limit of 0 is unknown.
func raiseOpenFileLimit() (soft, hard, before uint64, err error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, 0, err
	}
	before = uint64(rl.Cur)
	if rl.Cur < rl.Max {
		raised := rl
		raised.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			return uint64(rl.Cur), uint64(rl.Max), before, err
		}
		rl = raised
	}
	return uint64(rl.Cur), uint64(rl.Max), before, nil
}
