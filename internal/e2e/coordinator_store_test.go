package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/store"
)

// TestBinaryUndecodableCoordinatorRecord writes a coordinator record that
// does not decode into the store of a stopped groupd. The next start must
// fail with a non-zero exit and an error naming the record's key and the
// flag that skips it, without listening; with the flag, groupd starts, logs
// the key, serves the other groups' offsets, and leaves the record in the
// store.
func TestBinaryUndecodableCoordinatorRecord(t *testing.T) {
	dir := t.TempDir()
	p := startGroupd(t, dir, "127.0.0.1:0")
	const topic = "undecodable"
	createTopic(t, p.addr, topic, 2)
	adm := kadm.NewClient(newClient(t, p.addr))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	offs := kadm.Offsets{}
	offs.AddOffset(topic, 0, 7, -1)
	offs.AddOffset(topic, 1, 9, -1)
	if err := adm.CommitAllOffsets(ctx, "keep", offs); err != nil {
		t.Fatal(err)
	}
	p.stop(t)

	// A record of group "broken" whose value has a version no groupd
	// knows, as a newer release or a damaged disk could leave it.
	storeDir := filepath.Join(dir, "coordinator")
	rec := group.Record{Type: group.RecordOffsetCommit, Group: "broken", Topic: topic, Partition: 0}
	key := binary.BigEndian.AppendUint16(nil, uint16(store.ShardOf(rec.Group, store.DefaultShards)))
	key = rec.AppendKey(key)
	db, err := pebble.Open(storeDir, &pebble.Options{Logger: quietPebble{t}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(key, []byte{0x7f, 0x7f, 1, 2, 3}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	hexKey := fmt.Sprintf("%x", key)

	runCtx, runCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer runCancel()
	began := time.Now()
	out, err := exec.CommandContext(runCtx, groupdBinary(t), "--listen", "127.0.0.1:0", "--data-dir", dir).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("groupd over an undecodable record: %v, want a non-zero exit\n%s", err, out)
	}
	for _, want := range []string{hexKey, "--skip-undecodable-records"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not name %q:\n%s", want, out)
		}
	}
	t.Logf("refused in %v:\n%s", time.Since(began).Round(time.Millisecond), out)
	if strings.Contains(string(out), "groupd listening on") {
		t.Errorf("groupd listened before refusing:\n%s", out)
	}

	p = startGroupd(t, dir, "127.0.0.1:0", "--skip-undecodable-records")
	adm = kadm.NewClient(newClient(t, p.addr))
	fetched, err := adm.FetchOffsets(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	for part, want := range map[int32]int64{0: 7, 1: 9} {
		if o, ok := fetched.Lookup(topic, part); !ok || o.Err != nil || o.At != want {
			t.Errorf("group keep %s/%d after skipping: %+v, want offset %d", topic, part, o, want)
		}
	}
	if !strings.Contains(p.stderr.String(), hexKey) {
		t.Errorf("no log line names the skipped key %s:\n%s", hexKey, p.stderr.String())
	}
	p.stop(t)

	db, err = pebble.Open(storeDir, &pebble.Options{Logger: quietPebble{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, closer, err := db.Get(key); err != nil {
		t.Errorf("the skipped record is gone from the store: %v", err)
	} else {
		closer.Close()
	}
}

// quietPebble keeps pebble's informational lines out of the test output.
type quietPebble struct{ t *testing.T }

func (quietPebble) Infof(string, ...any)                {}
func (q quietPebble) Errorf(format string, args ...any) { q.t.Logf(format, args...) }
func (quietPebble) Fatalf(format string, args ...any)   { panic(fmt.Sprintf(format, args...)) }
