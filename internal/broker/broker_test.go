package broker

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/partition"
)

func open(t *testing.T, dir string) *Broker {
	t.Helper()
	b, err := Open(Config{DataDir: dir, DefaultPartitions: 2, Log: partition.Options{Sync: partition.SyncNever}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTopicsSurviveReopen: names, ids, partition counts and configs come
// back as they were, and so does the cluster id.
func TestTopicsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir)
	a, err := b.CreateTopic("a", 3, map[string]string{"cleanup.policy": "delete"}, false)
	if err != nil {
		t.Fatal(err)
	}
	d, err := b.CreateTopic("d", -1, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CreatePartitions("d", 4, false); err != nil {
		t.Fatal(err)
	}
	cluster := b.ClusterID()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = open(t, dir)
	defer b.Close()
	if b.ClusterID() != cluster {
		t.Fatalf("cluster id %q after reopen, want %q", b.ClusterID(), cluster)
	}
	for _, want := range []struct {
		name string
		id   TopicID
		n    int
	}{{"a", a.ID, 3}, {"d", d.ID, 4}} {
		got, ok := b.Topic(want.name)
		if !ok || got.ID != want.id || len(got.Partitions()) != want.n {
			t.Fatalf("topic %s after reopen: %+v", want.name, got)
		}
		if byID, ok := b.TopicByID(want.id); !ok || byID != got {
			t.Fatalf("topic %s not found by id", want.name)
		}
	}
	if got, _ := b.Topic("a"); got.Configs()["cleanup.policy"] != "delete" {
		t.Fatalf("configs after reopen: %v", got.Configs())
	}
}

func TestTopicErrors(t *testing.T) {
	b := open(t, t.TempDir())
	defer b.Close()
	if _, err := b.CreateTopic("t.x", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		n    int32
		want *kerr.Error
	}{
		{"t.x", 1, kerr.TopicAlreadyExists},
		{"t_x", 1, kerr.InvalidTopicException}, // collides with t.x in metric names
		{"bad/name", 1, kerr.InvalidTopicException},
		{"zero", 0, kerr.InvalidPartitions},
	} {
		if _, err := b.CreateTopic(c.name, c.n, nil, false); !errors.Is(err, c.want) {
			t.Errorf("create %q with %d partitions: %v, want %v", c.name, c.n, err, c.want)
		}
	}
	if _, err := b.CreateTopic("only-validated", 1, nil, true); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Topic("only-validated"); ok {
		t.Fatal("validate-only created the topic")
	}
	if err := b.CreatePartitions("t.x", 1, false); !errors.Is(err, kerr.InvalidPartitions) {
		t.Fatalf("shrinking: %v", err)
	}
	if err := b.DeleteTopic("missing"); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("deleting a missing topic: %v", err)
	}
}

// TestDeletedTopicDataIsRemoved: a deletion removes the logs and leaves no
// pending removal behind; a recreated topic gets a new id and starts empty.
func TestDeletedTopicDataIsRemoved(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir)
	old, err := b.CreateTopic("t", 1, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteTopic("t"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", old.ID.String())); !os.IsNotExist(err) {
		t.Fatalf("deleted topic's data still there: %v", err)
	}
	if m := readMetaT(t, dir); len(m.PendingRemovals) != 0 {
		t.Fatalf("pending removals after a finished deletion: %+v", m.PendingRemovals)
	}
	again, err := b.CreateTopic("t", 1, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID == old.ID {
		t.Fatal("recreated topic reuses the old id")
	}
	if hw := again.Partition(0).HighWatermark(); hw != 0 {
		t.Fatalf("recreated topic starts at %d", hw)
	}
	b.Close()
}

// TestProducerIDsNeverRepeat: ids handed out before a reopen, even without
// a clean close, are never handed out again.
func TestProducerIDsNeverRepeat(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir)
	seen := map[int64]bool{}
	for range 1500 { // crosses a block boundary
		id, err := b.NextProducerID()
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("producer id %d handed out twice", id)
		}
		seen[id] = true
	}
	// No Close: as after a crash, only the metadata file tells.
	b.crash()
	b2 := open(t, dir)
	defer b2.Close()
	for range 10 {
		id, err := b2.NextProducerID()
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("producer id %d reused after reopen", id)
		}
	}
}

// crash lets go of the data directory's lock as the kernel does when a
// process dies, leaving everything else as it is: a test then opens the
// directory again as the next start after a crash would.
func (b *Broker) crash() { b.lock.Release() }
