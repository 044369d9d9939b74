package broker

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/groupd/groupd/internal/batch/batchtest"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/partition/partitiontest"
)

// TestRecoverRebuildsMetadata: after meta.json is lost, Recover brings
// back every topic with its id, partitions and configs, the cluster id,
// and a producer-id limit above every id in the logs by the margin; the
// broker then opens with all records in place.
func TestRecoverRebuildsMetadata(t *testing.T) {
	dir := t.TempDir()
	a, bt, cluster := withData(t, dir)
	before := readMetaT(t, dir)
	os.Remove(filepath.Join(dir, metaName))
	logsBefore := partitiontest.Snapshot(t, filepath.Join(dir, "logs"))

	var out bytes.Buffer
	if err := Recover(RecoverOptions{DataDir: dir, Out: &out}); err != nil {
		t.Fatalf("recover: %v\n%s", err, out.String())
	}
	partitiontest.Same(t, "after recover", logsBefore, partitiontest.Snapshot(t, filepath.Join(dir, "logs")))
	for _, want := range []string{`topic "a", 2 partitions`, `topic "b", 1 partitions`, "highest producer id 42", cluster} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report does not say %q:\n%s", want, out.String())
		}
	}
	m := readMetaT(t, dir)
	if m.ClusterID != cluster {
		t.Fatalf("cluster id %q, want %q", m.ClusterID, cluster)
	}
	if want := int64(43 + ProducerIDMargin); m.ProducerIDLimit != want {
		t.Fatalf("producer id limit %d, want %d", m.ProducerIDLimit, want)
	}
	if len(m.Topics) != len(before.Topics) {
		t.Fatalf("topics %+v, want %+v", m.Topics, before.Topics)
	}
	for i, tm := range m.Topics {
		w := before.Topics[i]
		if tm.Name != w.Name || tm.ID != w.ID || tm.Partitions != w.Partitions || len(tm.Configs) != len(w.Configs) {
			t.Fatalf("topic %+v, want %+v", tm, w)
		}
	}

	b := open(t, dir)
	defer b.Close()
	ta, ok := b.TopicByID(a)
	if !ok || ta.Name != "a" || ta.Partition(1).HighWatermark() != 6 || ta.Configs()["retention.ms"] != "1000" {
		t.Fatalf("topic a after recover: %+v", ta)
	}
	if tb, ok := b.TopicByID(bt); !ok || tb.Partition(0).HighWatermark() != 1 {
		t.Fatal("topic b after recover")
	}
	if id, err := b.NextProducerID(); err != nil || id <= 42 {
		t.Fatalf("next producer id %d (%v) after recover", id, err)
	}
}

// TestRecoverRefusesReadableMetadata: a present, readable meta.json is
// replaced only with Force, and kept as a backup then.
func TestRecoverRefusesReadableMetadata(t *testing.T) {
	dir := t.TempDir()
	withData(t, dir)
	old, _ := os.ReadFile(filepath.Join(dir, metaName))
	if err := Recover(RecoverOptions{DataDir: dir}); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("recover over a readable meta.json: %v", err)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, metaName)); !bytes.Equal(now, old) {
		t.Fatal("meta.json changed")
	}
	if err := Recover(RecoverOptions{DataDir: dir, Force: true}); err != nil {
		t.Fatal(err)
	}
	baks, _ := filepath.Glob(filepath.Join(dir, metaName+".bak-*"))
	if len(baks) != 1 {
		t.Fatalf("backups %v", baks)
	}
	if kept, _ := os.ReadFile(baks[0]); !bytes.Equal(kept, old) {
		t.Fatal("backup differs from the old meta.json")
	}
	if m := readMetaT(t, dir); m.ProducerIDLimit < readMetaFile(t, baks[0]).ProducerIDLimit {
		t.Fatal("forced recover lowered the producer id limit")
	}
}

func readMetaFile(t *testing.T, path string) metaFile {
	t.Helper()
	tmp := t.TempDir()
	raw, _ := os.ReadFile(path)
	os.WriteFile(filepath.Join(tmp, metaName), raw, 0o644)
	return readMetaT(t, tmp)
}

// TestRecoverUnknownDirs: a directory without a descriptor is named and
// nothing is written, unless AdoptUnknown adopts it as recovered-<id>; two
// directories claiming one topic name are refused.
func TestRecoverUnknownDirs(t *testing.T) {
	dir := t.TempDir()
	a, _, _ := withData(t, dir)
	os.Remove(filepath.Join(dir, metaName))
	adir := filepath.Join(dir, "logs", a.String())
	os.Remove(filepath.Join(adir, descriptorName))

	var out bytes.Buffer
	if err := Recover(RecoverOptions{DataDir: dir, Out: &out}); err == nil || !strings.Contains(out.String(), adir) {
		t.Fatalf("recover with an undescribed directory: %v\n%s", err, out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, metaName)); !os.IsNotExist(err) {
		t.Fatal("meta.json written despite a problem")
	}
	if err := Recover(RecoverOptions{DataDir: dir, AdoptUnknown: true, Out: &out}); err != nil {
		t.Fatalf("recover adopting: %v\n%s", err, out.String())
	}
	b := open(t, dir)
	ta, ok := b.Topic("recovered-" + a.String())
	if !ok || ta.ID != a || len(ta.Partitions()) != 2 || ta.Partition(1).HighWatermark() != 6 {
		t.Fatalf("adopted topic: %+v", ta)
	}
	b.Close()

	// A second directory claiming topic "b".
	os.Remove(filepath.Join(dir, metaName))
	twin := filepath.Join(dir, "logs", "00112233445566778899aabbccddeeff")
	os.MkdirAll(filepath.Join(twin, "0"), 0o755)
	writeDescriptor(twin, descriptor{Name: "b", ID: "00112233445566778899aabbccddeeff", Partitions: 1})
	out.Reset()
	if err := Recover(RecoverOptions{DataDir: dir, AdoptUnknown: true, Out: &out}); err == nil || !strings.Contains(out.String(), `both hold topic "b"`) {
		t.Fatalf("recover with two directories for one name: %v\n%s", err, out.String())
	}
}

// TestRecoverMissingPartition: a partition directory below the count the
// descriptor gives is named, and nothing is written.
func TestRecoverMissingPartition(t *testing.T) {
	dir := t.TempDir()
	a, _, _ := withData(t, dir)
	os.Remove(filepath.Join(dir, metaName))
	pdir := filepath.Join(dir, "logs", a.String(), "0")
	os.RemoveAll(pdir)
	var out bytes.Buffer
	if err := Recover(RecoverOptions{DataDir: dir, Out: &out}); err == nil || !strings.Contains(out.String(), pdir) {
		t.Fatalf("recover with a missing partition: %v\n%s", err, out.String())
	}
	// Accepting the loss explicitly: an empty directory.
	os.MkdirAll(pdir, 0o755)
	if err := Recover(RecoverOptions{DataDir: dir, Out: &out}); err != nil {
		t.Fatalf("recover: %v\n%s", err, out.String())
	}
}

// TestRecoverAfterCrashInCreatePartitions: at every point where a crash
// can stop CreatePartitions (growing topic a from 2 to 4 partitions), a
// forced recover writes a meta.json from which the broker opens, serving
// every partition whose directory is there and every record in them. A
// recorded removal of partitions whose directories exist is dropped, and
// the report says so; with the first new directory lost (the creation
// never committed) the others are removed by the start only if they hold
// no records.
func TestRecoverAfterCrashInCreatePartitions(t *testing.T) {
	cases := []struct {
		name string
		// crash replays CreatePartitions("a", 4) up to a crash point,
		// with the broker's own steps.
		crash func(t *testing.T, b *Broker, ta *Topic)
		// want is the partition count of a after recover and start;
		// report is what the report must say about the removal.
		want   int32
		report string
	}{
		{"removal-recorded", func(t *testing.T, b *Broker, ta *Topic) {}, 2, "kept the pending removal of partitions 2 and up"},
		{"first-partition-made", func(t *testing.T, b *Broker, ta *Topic) { growT(t, b, ta, 3) }, 3, "dropped the pending removal of partitions 2 and up"},
		{"partitions-made", func(t *testing.T, b *Broker, ta *Topic) { growT(t, b, ta, 4) }, 4, "dropped"},
		{"descriptor-written", func(t *testing.T, b *Broker, ta *Topic) {
			growT(t, b, ta, 4)
			describeT(t, b, ta, 4)
			appendT(t, ta.Partition(3), "in a partition whose creation did not commit")
		}, 4, "dropped"},
		// persistLocked failed; the undo wrote the old descriptor back
		// and could not remove the directories.
		{"undo-stopped", func(t *testing.T, b *Broker, ta *Topic) {
			growT(t, b, ta, 4)
			describeT(t, b, ta, 4)
			describeT(t, b, ta, 2)
		}, 4, "dropped"},
		// Partition 2's directory entry was never made durable (the
		// directory goes once the broker is closed, see below).
		{"first-new-directory-lost", func(t *testing.T, b *Broker, ta *Topic) { growT(t, b, ta, 4) },
			2, "partition 2's directory is missing, so the creation never finished"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			a, bt, cluster := withData(t, dir)
			b := open(t, dir)
			ta, _ := b.TopicByID(a)
			b.mu.Lock()
			err := b.recordRemoval(removal{Topic: "a", ID: a.String(), FromPartition: 2, Reason: "create-partitions"})
			b.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			c.crash(t, b, ta)
			// The process dies: meta.json still records the removal.
			// Close only closes files; it writes no metadata.
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if c.name == "first-new-directory-lost" {
				if err := os.RemoveAll(filepath.Join(dir, "logs", a.String(), "2")); err != nil {
					t.Fatal(err)
				}
			}
			if m := readMetaT(t, dir); len(m.PendingRemovals) != 1 || m.Topics[0].Partitions != 2 {
				t.Fatalf("meta.json after the crash: %+v", m)
			}

			var out bytes.Buffer
			if err := Recover(RecoverOptions{DataDir: dir, Force: true, Out: &out}); err != nil {
				t.Fatalf("recover: %v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), c.report) || !strings.Contains(out.String(), `topic "a" (create-partitions)`) {
				t.Errorf("report does not say %q about the removal:\n%s", c.report, out.String())
			}
			b2, err := Open(Config{DataDir: dir, Log: partition.Options{Sync: partition.SyncNever}})
			if err != nil {
				t.Fatalf("start after recover: %v\n%s", err, out.String())
			}
			defer b2.Close()
			if b2.ClusterID() != cluster {
				t.Fatalf("cluster id %q, want %q", b2.ClusterID(), cluster)
			}
			ta2, ok := b2.TopicByID(a)
			if !ok || int32(len(ta2.Partitions())) != c.want {
				t.Fatalf("topic a after recover and start: %+v, want %d partitions\n%s", ta2, c.want, out.String())
			}
			if ta2.Partition(1).HighWatermark() != 6 {
				t.Fatalf("partition 1 ends at %d, want 6", ta2.Partition(1).HighWatermark())
			}
			if c.want == 4 {
				want := int64(0)
				if c.name == "descriptor-written" {
					want = 1
				}
				if hw := ta2.Partition(3).HighWatermark(); hw != want {
					t.Fatalf("partition 3 ends at %d, want %d", hw, want)
				}
			}
			parts, _, _ := partitionDirs(filepath.Join(dir, "logs", a.String()))
			if int32(len(parts)) != c.want {
				t.Fatalf("partition directories %v, want %d", parts, c.want)
			}
			if tb, ok := b2.TopicByID(bt); !ok || tb.Partition(0).HighWatermark() != 1 {
				t.Fatal("topic b after recover")
			}
			if m := readMetaT(t, dir); len(m.PendingRemovals) != 0 {
				t.Fatalf("removals still recorded after the start: %+v", m.PendingRemovals)
			}
			// The topic grows again as asked.
			if err := b2.CreatePartitions("a", 5, false); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRecoverKeepsRecordsOfUnfinishedPartitions: when the first new
// partition's directory is lost and another new one holds records,
// finishing the removal would delete them: recover names the problem and
// writes nothing, and after the operator accepts the loss of the missing
// partition (mkdir) it keeps them all.
func TestRecoverKeepsRecordsOfUnfinishedPartitions(t *testing.T) {
	dir := t.TempDir()
	a, _, _ := withData(t, dir)
	b := open(t, dir)
	ta, _ := b.TopicByID(a)
	b.mu.Lock()
	err := b.recordRemoval(removal{Topic: "a", ID: a.String(), FromPartition: 2, Reason: "create-partitions"})
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	growT(t, b, ta, 4)
	appendT(t, ta.Partition(3), "kept")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	p2 := filepath.Join(dir, "logs", a.String(), "2")
	os.RemoveAll(p2)
	old, _ := os.ReadFile(filepath.Join(dir, metaName))

	var out bytes.Buffer
	if err := Recover(RecoverOptions{DataDir: dir, Force: true, Out: &out}); err == nil || !strings.Contains(out.String(), p2) || !strings.Contains(out.String(), "partition 3 holds records") {
		t.Fatalf("recover: %v\n%s", err, out.String())
	}
	if now, _ := os.ReadFile(filepath.Join(dir, metaName)); !bytes.Equal(now, old) {
		t.Fatal("meta.json changed despite the problem")
	}
	os.MkdirAll(p2, 0o755)
	out.Reset()
	if err := Recover(RecoverOptions{DataDir: dir, Force: true, Out: &out}); err != nil {
		t.Fatalf("recover after mkdir: %v\n%s", err, out.String())
	}
	b2 := open(t, dir)
	defer b2.Close()
	ta2, _ := b2.TopicByID(a)
	if len(ta2.Partitions()) != 4 || ta2.Partition(3).HighWatermark() != 1 {
		t.Fatalf("topic a: %d partitions", len(ta2.Partitions()))
	}
}

// growT opens (creates) ta's partitions up to n, as CreatePartitions does
// after recording the removal.
func growT(t *testing.T, b *Broker, ta *Topic, n int32) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.openPartitions(ta, n); err != nil {
		t.Fatal(err)
	}
}

// describeT writes ta's descriptor with n partitions, as CreatePartitions
// (n new) and its undo (n old) do.
func describeT(t *testing.T, b *Broker, ta *Topic, n int32) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := writeDescriptor(b.topicDir(ta), b.descriptorOf(ta, n)); err != nil {
		t.Fatal(err)
	}
}

func appendT(t *testing.T, l *partition.Log, value string) {
	t.Helper()
	if _, err := l.Append([][]byte{batchtest.Build(batchtest.NonIdempotent(1, batchtest.Values(value)...))}); err != nil {
		t.Fatal(err)
	}
}
