package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fileState is what a refused start must leave as it was: size, mode and
// modification time of every file, and the content of every file small
// enough to read each time (a write to a larger one moves its
// modification time).
type fileState struct {
	size  int64
	mode  fs.FileMode
	mtime time.Time
	sum   [sha256.Size]byte
}

func dirState(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fileState{size: fi.Size(), mode: fi.Mode(), mtime: fi.ModTime()}
		if fi.Mode().IsRegular() && fi.Size() <= 1<<20 {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			st.sum = sha256.Sum256(b)
		}
		if d.IsDir() {
			st.size = 0 // a directory's size follows its entries' names
		}
		out[strings.TrimPrefix(p, dir)] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameState(t *testing.T, what string, before, after map[string]fileState) {
	t.Helper()
	for p, b := range before {
		a, ok := after[p]
		switch {
		case !ok:
			t.Errorf("%s: %s was removed", what, p)
		case a != b:
			t.Errorf("%s: %s changed: size %d mode %v modified %v, was size %d mode %v modified %v (content same: %v)",
				what, p, a.size, a.mode, a.mtime, b.size, b.mode, b.mtime, a.sum == b.sum)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s: %s appeared", what, p)
		}
	}
}

// waitStopped waits until every thread of process pid has stopped (after
// SIGSTOP): a write it was making when the signal came has then finished.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(tasks) == 0 {
			t.Fatalf("listing the threads of %d: %v", pid, err)
		}
		stopped := true
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			if err != nil {
				continue // the thread ended
			}
			// "pid (comm) state ...": the state follows the last ')'.
			i := bytes.LastIndexByte(b, ')')
			if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				stopped = false
				break
			}
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop", pid)
		}
	}
}

// TestBinarySecondStartOnALiveDataDirectory starts a second groupd 30
// times on the data directory of a running one that takes 20 KB records.
// Each time the running one is stopped (SIGSTOP) while the second starts,
// so that any change in the directory is the second's: each must refuse
// at once, naming the directory and the pid holding it, and leave every
// file as it was. 30 more starts run while the first one serves on. Every
// record acknowledged throughout is then read back.
func TestBinarySecondStartOnALiveDataDirectory(t *testing.T) {
	needProcFS(t)
	dir := t.TempDir()
	p := startGroupd(t, dir, "127.0.0.1:0")
	pid := p.cmd.Process.Pid
	const topic = "busy"
	createTopic(t, p.addr, topic, 2)

	cl := newClient(t, p.addr, kgo.ProducerLinger(0), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordRetries(1000), kgo.ProduceRequestTimeout(30*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu     sync.Mutex
		acked  = map[string]string{} // "partition/offset" -> key
		failed error
		wg     sync.WaitGroup
	)
	value := bytes.Repeat([]byte("v"), 20<<10)
	wg.Go(func() {
		// Eight in flight, acknowledged one by one.
		sem := make(chan struct{}, 8)
		for i := 0; ctx.Err() == nil; i++ {
			sem <- struct{}{}
			key := strconv.Itoa(i)
			cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte(key), Value: value}, func(r *kgo.Record, err error) {
				mu.Lock()
				if err != nil && failed == nil {
					failed = err
				} else if err == nil {
					acked[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = key
				}
				mu.Unlock()
				<-sem
			})
		}
		cl.Flush(context.Background())
	})
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	waitFor := func(n int) {
		for deadline := time.Now().Add(30 * time.Second); count() < n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("only %d records acknowledged, waiting for %d", count(), n)
			}
		}
	}
	waitFor(50)

	refused := func(i int) {
		t.Helper()
		out, err := runGroupd(t, "--listen", "127.0.0.1:0", "--data-dir", dir, "--http-listen", "127.0.0.1:0")
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 || strings.Contains(out, "groupd listening on") {
			t.Fatalf("start %d: a second groupd started (or failed oddly: %v):\n%s", i, err, out)
		}
		want := fmt.Sprintf("data directory %s is in use by another process (pid %d)", dir, pid)
		if !strings.Contains(out, want) {
			t.Fatalf("start %d: the refusal does not say %q:\n%s", i, want, out)
		}
		for _, noise := range []string{"truncating", "recover", "quarantine"} {
			if strings.Contains(out, noise) {
				t.Fatalf("start %d: the refused start did something (%q):\n%s", i, noise, out)
			}
		}
	}
	for i := range 30 {
		p.signal(syscall.SIGSTOP)
		waitStopped(t, pid)
		before := dirState(t, dir)
		refused(i)
		sameState(t, fmt.Sprintf("start %d, the first groupd stopped", i), before, dirState(t, dir))
		p.signal(syscall.SIGCONT)
		if t.Failed() {
			t.FailNow()
		}
		waitFor(count() + 5) // it serves on between the tries
	}
	for i := range 30 {
		refused(30 + i)
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if failed != nil {
		t.Fatalf("a produce failed: %v", failed)
	}
	p.expectAlive(t)

	// Every acknowledged record, read back from the running groupd.
	cc := newClient(t, p.addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	rctx, rcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer rcancel()
	found := 0
	for found < len(acked) {
		fetches := cc.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("read back %d of %d acknowledged records: %v", found, len(acked), rctx.Err())
		}
		fetches.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch partition %d: %v", p, err) })
		fetches.EachRecord(func(r *kgo.Record) {
			key, ok := acked[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]
			if !ok {
				return // produced but its acknowledgement not waited for
			}
			if string(r.Key) != key || !bytes.Equal(r.Value, value) {
				t.Fatalf("partition %d offset %d: key %q (%d bytes), acknowledged as key %q", r.Partition, r.Offset, r.Key, len(r.Value), key)
			}
			found++
		})
	}
	t.Logf("%d acknowledged records of 20 KB read back after 60 refused starts", found)
}
