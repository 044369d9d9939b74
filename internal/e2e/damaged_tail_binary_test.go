package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/groupd/groupd/internal/partition/partitiontest"
)

// TestBinaryDamagedTailQuarantineAndDump: after a kill -9 the recovery
// point lags the log end, so a damaged batch in the middle of the last
// segment sits in the tail a start checks for torn writes. With intact
// batches after it, that is damage: the binary refuses to start, naming
// the file and the offset, and changes nothing. With
// --quarantine-damaged-segments it copies the tail aside, serves the
// records before the damage, puts new records past the tail, and
// `groupd quarantine dump` prints every record after the damage.
func TestBinaryDamagedTailQuarantineAndDump(t *testing.T) {
	dir := t.TempDir()
	p := startGroupd(t, dir, "127.0.0.1:0")
	createTopic(t, p.addr, "tail", 1)
	pc := newClient(t, p.addr, kgo.DefaultProduceTopic("tail"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 40
	for i := range n {
		// One record per request: one batch each.
		r := &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: fmt.Appendf(nil, "tail-%d", i)}
		if err := pc.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	p.signal(syscall.SIGKILL)
	<-p.exited

	segs, _ := filepath.Glob(filepath.Join(dir, "logs", "*", "0", "*.log"))
	if len(segs) != 1 {
		t.Fatalf("segments %v, want one", segs)
	}
	raw, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	// Walk to batch 25 (offset 25) and flip a byte of its records: its
	// CRC no longer matches, and 14 intact batches follow it.
	const bad = 25
	pos := 0
	for range bad {
		pos += 12 + int(binary.BigEndian.Uint32(raw[pos+8:]))
	}
	end := pos + 12 + int(binary.BigEndian.Uint32(raw[pos+8:]))
	raw[end-3] ^= 0xff
	if err := os.WriteFile(segs[0], raw, 0o644); err != nil {
		t.Fatal(err)
	}
	before := partitiontest.Snapshot(t, dir)

	out := refusesToStart(t, dir)
	for _, want := range []string{segs[0], fmt.Sprintf("at offset %d", bad), "intact batches", "--quarantine-damaged-segments"} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal does not say %q:\n%s", want, out)
		}
	}
	partitiontest.Same(t, "after the refused start", before, partitiontest.Snapshot(t, dir))

	p = startGroupd(t, dir, "127.0.0.1:0", "--quarantine-damaged-segments")
	tails, _ := filepath.Glob(filepath.Join(dir, "quarantine", "*", "0", "*.tail-at-byte-*"))
	if len(tails) != 1 {
		t.Fatalf("quarantined tails %v, want one", tails)
	}
	if !strings.Contains(p.stderr.String(), "set a damaged segment tail aside") {
		t.Errorf("no error line about the tail set aside:\n%s", p.stderr.String())
	}
	got := consumeAll(t, p.addr, "tail", bad)
	if len(got[0]) != bad {
		t.Fatalf("%d records served, want the %d before the damage", len(got[0]), bad)
	}
	pc = newClient(t, p.addr, kgo.DefaultProduceTopic("tail"))
	res := pc.ProduceSync(ctx, &kgo.Record{Value: []byte("after")})
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	if r, _ := res.First(); r.Offset < n {
		t.Fatalf("a new record got offset %d, inside the tail set aside (up to %d)", r.Offset, n-1)
	}

	dump, err := runGroupd(t, "quarantine", "dump", "--file", tails[0])
	if err != nil {
		t.Fatalf("groupd quarantine dump: %v\n%s", err, dump)
	}
	var lines []string
	for _, l := range strings.Split(dump, "\n") {
		if strings.Count(l, "\t") == 2 {
			lines = append(lines, l)
		}
	}
	if len(lines) != n-bad-1 {
		t.Fatalf("dump printed %d records, want the %d intact ones after the damage:\n%s", len(lines), n-bad-1, dump)
	}
	for i, l := range lines {
		off := bad + 1 + i
		want := fmt.Sprintf("%d\t%q\t%q", off, strconv.Itoa(off), fmt.Sprintf("tail-%d", off))
		if l != want {
			t.Fatalf("dump line %d: %q, want %q", i, l, want)
		}
	}
}
