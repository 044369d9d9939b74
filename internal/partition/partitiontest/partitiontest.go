// Package partitiontest holds test helpers for data directories: a
// snapshot of every file's content, to show that a refused open or start
// left the directory exactly as it found it.
package partitiontest

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/groupd/groupd/internal/datadir"
)

// Snapshot maps every path under dir (relative, with a leading separator)
// to its size and content digest, or to "dir" for a directory. The data
// directory's lock file (datadir.LockName at dir's top) is left out: every
// process that takes the lock, including a start that then refuses,
// writes its pid there.
func Snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(p, dir)
		if name == string(filepath.Separator)+datadir.LockName {
			return nil
		}
		if d.IsDir() {
			out[name] = "dir"
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[name] = fmt.Sprintf("%d bytes, sha256 %x", len(b), sha256.Sum256(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Same reports every path removed, changed or added between two snapshots.
func Same(t testing.TB, what string, before, after map[string]string) {
	t.Helper()
	for p, b := range before {
		if a, ok := after[p]; !ok {
			t.Errorf("%s: %s was removed", what, p)
		} else if a != b {
			t.Errorf("%s: %s changed (%s, was %s)", what, p, a, b)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s: %s appeared", what, p)
		}
	}
}
