// Package datadir guards a data directory against two groupd processes at
// once. Two processes over one directory destroy each other's data: the
// second one's start-up recovery cuts the active segment that the first
// one is appending to, and rewrites its producer snapshots. So a process
// locks the directory before it reads or writes anything in it, and holds
// the lock for as long as it uses the directory; one that cannot take it
// touches nothing and says which process holds it.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// LockName is the lock file's name in the data directory. It holds the
// pid of the process that holds the lock, for the message of a process
// refused; the lock itself is an advisory lock on the open file, which
// the kernel drops when the process ends, however it ends.
const LockName = "groupd.lock"

// InUseError is returned by Lock when another process holds the lock.
type InUseError struct {
	Dir string
	// PID is the holder's process id as its lock file says, 0 if it
	// cannot be read.
	PID int
}

func (e *InUseError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "another process (pid " + strconv.Itoa(e.PID) + ")"
	}
	return fmt.Sprintf("data directory %s is in use by %s, which holds %s; this process changed nothing in it. Stop that process first, or give this one another --data-dir",
		e.Dir, holder, filepath.Join(e.Dir, LockName))
}

// ErrInUse is matched by an InUseError with errors.Is.
var ErrInUse = errors.New("data directory in use")

func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// Lock is a held lock on a data directory.
type Lock struct {
	f    *os.File
	once sync.Once
}

// Acquire creates dir if it does not exist and locks it, or returns an
// *InUseError without changing anything in it if another process (or
// another Lock in this one) holds it.
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, LockName)
	// No O_TRUNC: a process refused must not change the holder's file.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the data directory's lock file: %w", err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if !held {
		pid := holderPID(f)
		f.Close()
		return nil, &InUseError{Dir: dir, PID: pid}
	}
	// Ours now: say who holds it.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// holderPID reads the pid the holder wrote, 0 if there is none.
func holderPID(f *os.File) int {
	var b [32]byte
	n, _ := f.ReadAt(b[:], 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		return 0
	}
	return pid
}

// Release gives the lock up. The file stays: removing it would let a
// process that opened it just before lock a file no longer in the
// directory while a third creates a new one. Releasing twice does
// nothing.
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	var err error
	l.once.Do(func() { err = l.f.Close() })
	return err
}
