package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/partition/partitiontest"
)

// runGroupd runs the binary to completion and returns its exit error and
// combined output.
func runGroupd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, groupdBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// refusesToStart runs `groupd serve` over dir and expects it to exit with
// an error instead of listening; it returns the output.
func refusesToStart(t *testing.T, dir string, extra ...string) string {
	t.Helper()
	out, err := runGroupd(t, append([]string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--log-level", "warn"}, extra...)...)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 || strings.Contains(out, "groupd listening on") {
		t.Fatalf("groupd started (or failed oddly: %v) over a data directory it should refuse:\n%s", err, out)
	}
	return out
}

// initProducerID asks the broker for a fresh producer id.
func initProducerID(t *testing.T, cl *kgo.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionTimeoutMillis = -1
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("InitProducerID: %v (error code %v)", err, resp)
	}
	return resp.ProducerID
}

// TestBinaryMissingMetadataRecover: with meta.json gone the binary refuses
// to start, names the file and `groupd recover`, and deletes nothing;
// `groupd recover` rebuilds it; the binary then serves every record
// produced before, group offsets still point at the right topics, and
// producer ids are not handed out again.
func TestBinaryMissingMetadataRecover(t *testing.T) {
	dir := t.TempDir()
	p := startGroupd(t, dir, "127.0.0.1:0")
	const n = 300
	createTopic(t, p.addr, "safe", 3)
	createTopic(t, p.addr, "other", 2)
	pc := newClient(t, p.addr) // idempotent by default: its batches carry a producer id
	produceKeyed(t, pc, "safe", n)
	produceKeyed(t, pc, "other", 40)
	pidBefore := initProducerID(t, pc)

	adm := kadm.NewClient(newClient(t, p.addr))
	commits := kadm.Offsets{}
	for part := range int32(3) {
		commits.Add(kadm.Offset{Topic: "safe", Partition: part, At: int64(10 + part), LeaderEpoch: -1})
	}
	for part := range int32(2) {
		commits.Add(kadm.Offset{Topic: "other", Partition: part, At: int64(3 + part), LeaderEpoch: -1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := adm.CommitOffsets(ctx, "keeper", commits); err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
	p.stop(t)

	logs := filepath.Join(dir, "logs")
	before := partitiontest.Snapshot(t, logs)
	if err := os.Remove(filepath.Join(dir, "meta.json")); err != nil {
		t.Fatal(err)
	}
	out := refusesToStart(t, dir)
	for _, want := range []string{filepath.Join(dir, "meta.json"), "groupd recover --data-dir " + dir} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal does not name %q:\n%s", want, out)
		}
	}
	partitiontest.Same(t, "after the refused start", before, partitiontest.Snapshot(t, logs))

	out, err := runGroupd(t, "recover", "--data-dir", dir)
	if err != nil {
		t.Fatalf("groupd recover: %v\n%s", err, out)
	}
	t.Logf("groupd recover:\n%s", out)
	for _, want := range []string{`topic "safe", 3 partitions`, `topic "other", 2 partitions`, "wrote " + filepath.Join(dir, "meta.json")} {
		if !strings.Contains(out, want) {
			t.Errorf("recover report does not say %q", want)
		}
	}
	partitiontest.Same(t, "after recover", before, partitiontest.Snapshot(t, logs))

	p = startGroupd(t, dir, "127.0.0.1:0")
	got := consumeAll(t, p.addr, "safe", n)
	total := 0
	for _, recs := range got {
		total += len(recs)
	}
	if total != n {
		t.Fatalf("%d records after recover, want %d", total, n)
	}
	consumeAll(t, p.addr, "other", 40)

	adm = kadm.NewClient(newClient(t, p.addr))
	fetched, err := adm.FetchOffsets(ctx, "keeper")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range commits.Sorted() {
		f, ok := fetched.Lookup(o.Topic, o.Partition)
		if !ok || f.Err != nil || f.At != o.At {
			t.Errorf("group offset %s/%d after recover: %+v, want %d", o.Topic, o.Partition, f, o.At)
		}
	}
	pc = newClient(t, p.addr)
	if pid := initProducerID(t, pc); pid <= pidBefore {
		t.Errorf("producer id %d after recover, %d was handed out before", pid, pidBefore)
	}
	// Appends continue where the log ended.
	res := pc.ProduceSync(ctx, &kgo.Record{Topic: "safe", Partition: 0, Value: []byte("after")})
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	if r, _ := res.First(); r.Partition == 0 && r.Offset != int64(len(got[0])) {
		t.Errorf("record after recover at offset %d of partition 0, which held %d", r.Offset, len(got[0]))
	}
}

// TestBinaryDamagedSegmentQuarantine: a damaged header in an old segment
// (below the recovery point, after a clean stop) makes the binary refuse
// to start, naming the file and offset, with nothing changed; with
// --quarantine-damaged-segments it starts, the segment is moved aside, the
// records of every other segment are still served, and the next record
// produced lands past the old end.
func TestBinaryDamagedSegmentQuarantine(t *testing.T) {
	dir := t.TempDir()
	seg := []string{"--segment-bytes", "2048"}
	p := startGroupd(t, dir, "127.0.0.1:0", seg...)
	createTopic(t, p.addr, "dmg", 1)
	pc := newClient(t, p.addr, kgo.DefaultProduceTopic("dmg"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 80
	for i := range n {
		// One record per request, so one batch each and several
		// segments of about a dozen batches.
		r := &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: bytes.Repeat([]byte{'a' + byte(i%26)}, 100)}
		if err := pc.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	p.stop(t)

	parts, _ := filepath.Glob(filepath.Join(dir, "logs", "*", "0"))
	if len(parts) != 1 {
		t.Fatalf("partition directories %v", parts)
	}
	segs, _ := filepath.Glob(filepath.Join(parts[0], "*.log"))
	if len(segs) < 4 {
		t.Fatalf("%d segments, want at least 4", len(segs))
	}
	damaged := segs[1]
	gapFrom, _ := strconv.ParseInt(strings.TrimSuffix(filepath.Base(segs[1]), ".log"), 10, 64)
	gapTo, _ := strconv.ParseInt(strings.TrimSuffix(filepath.Base(segs[2]), ".log"), 10, 64)
	raw, err := os.ReadFile(damaged)
	if err != nil {
		t.Fatal(err)
	}
	// The second batch's magic byte: its header no longer parses.
	first := 12 + int(binary.BigEndian.Uint32(raw[8:]))
	raw[first+16] = 7
	if err := os.WriteFile(damaged, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	before := partitiontest.Snapshot(t, dir)

	out := refusesToStart(t, dir, seg...)
	t.Logf("refused start with %d segments:\n%s", len(segs), out)
	for _, want := range []string{damaged, fmt.Sprintf("at offset %d", gapFrom+1), "--quarantine-damaged-segments"} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal does not say %q:\n%s", want, out)
		}
	}
	partitiontest.Same(t, "after the refused start", before, partitiontest.Snapshot(t, dir))

	p = startGroupd(t, dir, "127.0.0.1:0", append(seg, "--quarantine-damaged-segments")...)
	if _, err := os.Stat(damaged); !os.IsNotExist(err) {
		t.Errorf("damaged segment still in the log: %v", err)
	}
	moved, _ := filepath.Glob(filepath.Join(dir, "quarantine", "*", "0", filepath.Base(damaged)))
	if len(moved) != 1 {
		t.Errorf("damaged segment not in the quarantine: %v", moved)
	}

	cl := newClient(t, p.addr, kgo.ConsumeTopics("dmg"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	want := n - int(gapTo-gapFrom)
	var offsets []int64
	for len(offsets) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records: %v", len(offsets), want, ctx.Err())
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= gapFrom && r.Offset < gapTo {
				t.Fatalf("record at offset %d, inside the quarantined segment [%d, %d)", r.Offset, gapFrom, gapTo)
			}
			if k, _ := strconv.Atoi(string(r.Key)); int64(k) != r.Offset {
				t.Fatalf("record with key %s at offset %d", r.Key, r.Offset)
			}
			offsets = append(offsets, r.Offset)
		})
	}
	if offsets[len(offsets)-1] != n-1 {
		t.Errorf("last record served at %d, want %d", offsets[len(offsets)-1], n-1)
	}
	pc = newClient(t, p.addr, kgo.DefaultProduceTopic("dmg"))
	r, err := pc.ProduceSync(ctx, &kgo.Record{Value: []byte("after")}).First()
	if err != nil {
		t.Fatal(err)
	}
	if r.Offset < n {
		t.Errorf("record produced after the quarantine at offset %d, the old end was %d", r.Offset, n)
	}
}
