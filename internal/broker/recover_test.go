package broker

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	if !ok || ta.Name != "a" || ta.Partition(1).HighWatermark() != 6 || ta.Configs["retention.ms"] != "1000" {
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
