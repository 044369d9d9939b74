//go:build !unix

package datadir

import "os"

// tryLock cannot lock on this platform: the directory is not guarded.
func tryLock(*os.File) (bool, error) { return true, nil }
