package broker

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/groupd/groupd/internal/batch/batchtest"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/partition/partitiontest"
)

func readMetaT(t *testing.T, dir string) metaFile {
	t.Helper()
	m, ok, err := readMeta(dir)
	if err != nil || !ok {
		t.Fatalf("meta.json: %v %v", ok, err)
	}
	return m
}

// withData creates topics a (2 partitions, with records from producer 42)
// and b (1 partition) and closes the broker.
func withData(t *testing.T, dir string) (a, bt TopicID, cluster string) {
	t.Helper()
	b := open(t, dir)
	ta, err := b.CreateTopic("a", 2, map[string]string{"retention.ms": "1000"}, false)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := b.CreateTopic("b", 1, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for seq := int32(0); seq < 6; seq += 2 {
		s := batchtest.Spec{FirstTimestamp: 1, ProducerID: 42, BaseSequence: seq, Records: batchtest.Values("x", "y")}
		if _, err := ta.Partition(1).Append([][]byte{batchtest.Build(s)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tb.Partition(0).Append([][]byte{batchtest.Build(batchtest.NonIdempotent(1, batchtest.Values("z")...))}); err != nil {
		t.Fatal(err)
	}
	cluster = b.ClusterID()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return ta.ID, tb.ID, cluster
}

// TestMissingMetadataRefused: without meta.json but with partition data,
// Open refuses, names the file and the recover command, and deletes
// nothing. Without partition data it is a fresh start.
func TestMissingMetadataRefused(t *testing.T) {
	dir := t.TempDir()
	withData(t, dir)
	if err := os.Remove(filepath.Join(dir, metaName)); err != nil {
		t.Fatal(err)
	}
	before := partitiontest.Snapshot(t, dir)
	_, err := Open(Config{DataDir: dir})
	if !errors.Is(err, ErrMetadata) || !strings.Contains(err.Error(), filepath.Join(dir, metaName)) || !strings.Contains(err.Error(), "groupd recover --data-dir "+dir) {
		t.Fatalf("open without meta.json: %v", err)
	}
	partitiontest.Same(t, "after the refused start", before, partitiontest.Snapshot(t, dir))

	fresh := t.TempDir()
	b := open(t, fresh)
	if b.ClusterID() == "" || len(b.Topics()) != 0 {
		t.Fatalf("fresh start: cluster %q, %d topics", b.ClusterID(), len(b.Topics()))
	}
	b.Close()
}

// TestUnreadableMetadataRefused: a meta.json that does not parse, or does
// not hold together, is refused even with no partition data.
func TestUnreadableMetadataRefused(t *testing.T) {
	for name, content := range map[string]string{
		"truncated":  `{"cluster_id": "x", "topics": [`,
		"bad-id":     `{"cluster_id": "x", "topics": [{"name": "a", "id": "zz", "partitions": 1}]}`,
		"no-cluster": `{"topics": []}`,
		"live-topic-removal": `{"cluster_id": "x", "topics": [{"name": "a", "id": "00112233445566778899aabbccddeeff", "partitions": 1}],
			"pending_removals": [{"topic": "a", "id": "00112233445566778899aabbccddeeff", "from_partition": 0}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, metaName), []byte(content), 0o644)
			before := partitiontest.Snapshot(t, dir)
			_, err := Open(Config{DataDir: dir})
			if !errors.Is(err, ErrMetadata) || !strings.Contains(err.Error(), "groupd recover") {
				t.Fatalf("open: %v", err)
			}
			after := partitiontest.Snapshot(t, dir)
			delete(after, "/logs") // Open makes the logs directory first
			partitiontest.Same(t, "after the refused start", before, after)
		})
	}
}

// TestUnknownDirRefused: an entry under logs/ that is neither a known
// topic nor a recorded removal stops the start, named, and stays.
func TestUnknownDirRefused(t *testing.T) {
	cases := map[string]func(dir string, a TopicID) string{
		"orphan-topic-dir": func(dir string, _ TopicID) string {
			p := filepath.Join(dir, "logs", "00112233445566778899aabbccddeeff")
			os.MkdirAll(filepath.Join(p, "0"), 0o755)
			return p
		},
		"not-a-topic-id": func(dir string, _ TopicID) string {
			p := filepath.Join(dir, "logs", "backup")
			os.MkdirAll(p, 0o755)
			return p
		},
		"extra-partition": func(dir string, a TopicID) string {
			p := filepath.Join(dir, "logs", a.String(), "2")
			os.MkdirAll(p, 0o755)
			return p
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			a, _, _ := withData(t, dir)
			path := mk(dir, a)
			before := partitiontest.Snapshot(t, dir)
			_, err := Open(Config{DataDir: dir})
			var u *UnknownDirError
			if !errors.As(err, &u) || u.Path != path {
				t.Fatalf("open: %v, want an unknown directory error for %s", err, path)
			}
			partitiontest.Same(t, "after the refused start", before, partitiontest.Snapshot(t, dir))
		})
	}
}

// TestMissingPartitionDirRefused: a partition the metadata lists but whose
// directory is gone stops the start instead of coming back empty.
func TestMissingPartitionDirRefused(t *testing.T) {
	dir := t.TempDir()
	a, _, _ := withData(t, dir)
	pdir := filepath.Join(dir, "logs", a.String(), "1")
	os.RemoveAll(pdir)
	_, err := Open(Config{DataDir: dir})
	if !errors.Is(err, ErrMetadata) || !strings.Contains(err.Error(), pdir) {
		t.Fatalf("open: %v", err)
	}
	if _, err := os.Stat(pdir); !os.IsNotExist(err) {
		t.Fatal("the missing partition was recreated")
	}
}

// TestCrashBetweenRecordingDeletionAndRemoval: the deletion is recorded,
// the files are not removed (as if the process died), and the next start
// removes them and forgets the record.
func TestCrashBetweenRecordingDeletionAndRemoval(t *testing.T) {
	dir := t.TempDir()
	a, bt, _ := withData(t, dir)
	b := open(t, dir)
	removeAll = func(string) error { return errors.New("crashed") }
	err := b.DeleteTopic("a")
	removeAll = os.RemoveAll
	if err != nil {
		t.Fatal(err)
	}
	adir := filepath.Join(dir, "logs", a.String())
	if _, err := os.Stat(adir); err != nil {
		t.Fatalf("the files were removed after all: %v", err)
	}
	m := readMetaT(t, dir)
	if len(m.PendingRemovals) != 1 || m.PendingRemovals[0].ID != a.String() || m.PendingRemovals[0].FromPartition != 0 {
		t.Fatalf("recorded removals %+v", m.PendingRemovals)
	}
	// No Close: the process died.
	b.crash()
	b2 := open(t, dir)
	defer b2.Close()
	if _, err := os.Stat(adir); !os.IsNotExist(err) {
		t.Fatalf("recorded deletion not finished on start: %v", err)
	}
	if m := readMetaT(t, dir); len(m.PendingRemovals) != 0 {
		t.Fatalf("removals still recorded: %+v", m.PendingRemovals)
	}
	if tb, ok := b2.TopicByID(bt); !ok || tb.Partition(0).HighWatermark() != 1 {
		t.Fatal("the other topic did not survive")
	}
}

// TestUnfinishedCreationsUndoneOnStart: a topic creation or a partition
// creation recorded but not committed (the process died half way) is
// removed on start, and only the recorded directories are.
func TestUnfinishedCreationsUndoneOnStart(t *testing.T) {
	dir := t.TempDir()
	a, _, _ := withData(t, dir)
	m := readMetaT(t, dir)
	newID := "00112233445566778899aabbccddeeff"
	os.MkdirAll(filepath.Join(dir, "logs", newID, "0"), 0o755)
	os.MkdirAll(filepath.Join(dir, "logs", a.String(), "2"), 0o755)
	os.MkdirAll(filepath.Join(dir, "logs", a.String(), "3"), 0o755)
	m.PendingRemovals = []removal{
		{Topic: "c", ID: newID, Reason: "create"},
		{Topic: "a", ID: a.String(), FromPartition: 2, Reason: "create-partitions"},
	}
	if err := writeMeta(dir, m); err != nil {
		t.Fatal(err)
	}
	b := open(t, dir)
	defer b.Close()
	for _, gone := range []string{filepath.Join("logs", newID), filepath.Join("logs", a.String(), "2"), filepath.Join("logs", a.String(), "3")} {
		if _, err := os.Stat(filepath.Join(dir, gone)); !os.IsNotExist(err) {
			t.Errorf("%s survived the start: %v", gone, err)
		}
	}
	ta, _ := b.Topic("a")
	if n := len(ta.Partitions()); n != 2 || ta.Partition(1).HighWatermark() != 6 {
		t.Fatalf("topic a: %d partitions", n)
	}
	if m := readMetaT(t, dir); len(m.PendingRemovals) != 0 {
		t.Fatalf("removals still recorded: %+v", m.PendingRemovals)
	}
}

// TestDescriptors: each topic directory describes its topic; it follows
// CreatePartitions, and a directory without one (as written by older
// versions) gains it on start.
func TestDescriptors(t *testing.T) {
	dir := t.TempDir()
	a, _, cluster := withData(t, dir)
	adir := filepath.Join(dir, "logs", a.String())
	d, err := readDescriptor(adir)
	if err != nil {
		t.Fatal(err)
	}
	want := descriptor{Name: "a", ID: a.String(), Partitions: 2, Configs: map[string]string{"retention.ms": "1000"}, ClusterID: cluster}
	if !d.equal(want) {
		t.Fatalf("descriptor %+v, want %+v", d, want)
	}
	b := open(t, dir)
	if err := b.CreatePartitions("a", 4, false); err != nil {
		t.Fatal(err)
	}
	if d, _ := readDescriptor(adir); d.Partitions != 4 {
		t.Fatalf("descriptor says %d partitions after growing to 4", d.Partitions)
	}
	b.Close()
	os.Remove(filepath.Join(adir, descriptorName))
	b = open(t, dir)
	b.Close()
	if d, err := readDescriptor(adir); err != nil || d.Partitions != 4 || d.Name != "a" {
		t.Fatalf("descriptor not restored on start: %+v %v", d, err)
	}
}

// TestQuarantineThroughBroker: a damaged segment stops Open naming the
// file; with QuarantineDamagedSegments it is moved under quarantine/.
func TestQuarantineThroughBroker(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(Config{DataDir: dir, Log: partition.Options{Sync: partition.SyncNever, SegmentBytes: 200}})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := b.CreateTopic("q", 1, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := tp.Partition(0).Append([][]byte{batchtest.Build(batchtest.NonIdempotent(int64(i), batchtest.Values("0123456789", "abcdefghij")...))}); err != nil {
			t.Fatal(err)
		}
	}
	end := tp.Partition(0).HighWatermark()
	b.Close()
	pdir := filepath.Join(dir, "logs", tp.ID.String(), "0")
	segs, _ := filepath.Glob(filepath.Join(pdir, "*.log"))
	if len(segs) < 3 {
		t.Fatalf("%d segments", len(segs))
	}
	raw, _ := os.ReadFile(segs[1])
	raw[16] = 0 // the first batch's magic
	os.WriteFile(segs[1], raw, 0o644)

	_, err = Open(Config{DataDir: dir})
	if !errors.Is(err, partition.ErrDamaged) || !strings.Contains(err.Error(), segs[1]) {
		t.Fatalf("open with a damaged segment: %v", err)
	}
	b, err = Open(Config{DataDir: dir, QuarantineDamagedSegments: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := os.Stat(filepath.Join(dir, quarantineName, tp.ID.String(), "0", filepath.Base(segs[1]))); err != nil {
		t.Fatalf("segment not in the quarantine: %v", err)
	}
	q, _ := b.Topic("q")
	if q.Partition(0).HighWatermark() != end {
		t.Fatalf("log end %d after quarantine, want %d", q.Partition(0).HighWatermark(), end)
	}
}

// TestCheckpointLogs: the periodic checkpoint records each partition's
// recovery point as its fsyncs moved it.
func TestCheckpointLogs(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(Config{DataDir: dir, Log: partition.Options{Sync: partition.SyncAlways}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tp, err := b.CreateTopic("c", 2, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Partition(1).Append([][]byte{batchtest.Build(batchtest.NonIdempotent(1, batchtest.Values("a", "b", "c")...))}); err != nil {
		t.Fatal(err)
	}
	if err := b.CheckpointLogs(); err != nil {
		t.Fatal(err)
	}
	for p, want := range []int64{0, 3} {
		sv, err := partition.SurveyDir(filepath.Join(dir, "logs", tp.ID.String(), strconv.Itoa(p)))
		if err != nil || sv.RecoveryPoint != want {
			t.Fatalf("partition %d: recovery point %d (%v), want %d", p, sv.RecoveryPoint, err, want)
		}
	}
}
