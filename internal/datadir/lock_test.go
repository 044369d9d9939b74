package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestSecondLockIsRefusedAndChangesNothing(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no advisory locks on this platform")
	}
	dir := filepath.Join(t.TempDir(), "data")
	first, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, LockName)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(before)); got != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file says %q, want this process's pid", got)
	}
	st, _ := os.Stat(path)

	_, err = Acquire(dir)
	var inUse *InUseError
	if !errors.As(err, &inUse) || !errors.Is(err, ErrInUse) || inUse.PID != os.Getpid() {
		t.Fatalf("second Acquire: %v, want InUseError naming pid %d", err, os.Getpid())
	}
	for _, want := range []string{dir, strconv.Itoa(os.Getpid()), "--data-dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	after, _ := os.ReadFile(path)
	st2, _ := os.Stat(path)
	if string(after) != string(before) || !st2.ModTime().Equal(st.ModTime()) {
		t.Fatalf("the refused Acquire changed the lock file: %q (modified %v), was %q (%v)", after, st2.ModTime(), before, st.ModTime())
	}

	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	again, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	again.Release()
}
