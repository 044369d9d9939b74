// Package storetest holds fault injection for tests and simulations of the
// coordinator store on pebble's filesystems.
package storetest

import (
	"errors"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// Fault modes for WALFaults.Arm.
const (
	None      = 0
	FailWrite = 1 // the next write to a WAL file fails; nothing of it is written
	FailSync  = 2 // the next fsync of a WAL file fails; what was written stays
)

// ErrInjected is the error an armed WALFaults returns.
var ErrInjected = errors.New("injected I/O error")

// WALFaults is an errorfs.Injector that fails one write or fsync of a
// pebble WAL file (a name ending in ".log") once armed; nothing else on the
// filesystem fails. Wrap a filesystem with errorfs.Wrap(fs, &faults).
type WALFaults struct{ armed atomic.Int32 }

// Arm sets the fault the next matching operation meets (None disarms).
func (f *WALFaults) Arm(mode int) { f.armed.Store(int32(mode)) }

// MaybeError implements errorfs.Injector.
func (f *WALFaults) MaybeError(op errorfs.Op) error {
	if !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt:
		if f.armed.CompareAndSwap(FailWrite, None) {
			return ErrInjected
		}
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		if f.armed.CompareAndSwap(FailSync, None) {
			return ErrInjected
		}
	}
	return nil
}

func (f *WALFaults) String() string { return "WALFaults" }
