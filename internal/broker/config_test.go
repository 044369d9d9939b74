package broker

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/batch/batchtest"
	"github.com/groupd/groupd/internal/partition"
)

func TestConfigDefsSortedAndDefaultsValid(t *testing.T) {
	if !slices.IsSortedFunc(configDefs, func(a, b ConfigDef) int { return strings.Compare(a.Name, b.Name) }) {
		t.Fatal("configDefs are not sorted by name")
	}
	for _, d := range configDefs {
		if d.Default == "" && d.Type != kmsg.ConfigTypeList {
			t.Errorf("%s has no default", d.Name)
		}
		v := d.Default
		if err := ValidateConfig(d.Name, &v); err != nil && d.Default != "" {
			t.Errorf("%s: its default %q is refused: %v", d.Name, d.Default, err)
		}
	}
}

func TestValidateConfig(t *testing.T) {
	cases := []struct {
		name, value, want string // want: "" for valid, else part of the message
	}{
		{"retention.ms", "3600000", ""},
		{"retention.ms", "-1", ""},
		{"retention.ms", "-2", "at least -1"},
		{"retention.ms", "1h", "integer"},
		{"cleanup.policy", "compact,delete", ""},
		{"cleanup.policy", " delete , compact", ""},
		{"cleanup.policy", "forever", "unknown policy"},
		{"cleanup.policy", "", "delete, compact or both"},
		{"message.timestamp.type", "LogAppendTime", ""},
		{"message.timestamp.type", "logappendtime", "one of"},
		{"max.message.bytes", "4294967296", "32-bit"},
		{"min.cleanable.dirty.ratio", "0.01", ""},
		{"min.cleanable.dirty.ratio", "1.5", "between 0 and 1"},
		{"segment.bytes", "13", "at least 14"},
		{"remote.storage.enable", "true", "not supported"},
		{"min.insync.replicas", "1", ""},
		{"kfake.is_internal", "true", "unknown topic config name: kfake.is_internal"},
	}
	for _, c := range cases {
		v := c.value
		err := ValidateConfig(c.name, &v)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s=%q: %v", c.name, c.value, err)
		case c.want != "" && (!errors.Is(err, kerr.InvalidConfig) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s=%q: %v, want INVALID_CONFIG saying %q", c.name, c.value, err, c.want)
		}
	}
	if err := ValidateConfig("retention.ms", nil); !errors.Is(err, kerr.InvalidConfig) {
		t.Errorf("null value: %v", err)
	}
}

// TestTopicConfigsResolveAndPersist: a topic's own value beats the broker
// flag, which beats the default; changes are durable and reach the logs.
func TestTopicConfigsResolveAndPersist(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Log: partition.Options{Sync: partition.SyncNever},
		TopicDefaults: map[string]string{"retention.ms": "3600000"}}
	b, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateTopic("bad", 1, map[string]string{"retention.ms": "x"}, false); !errors.Is(err, kerr.InvalidConfig) {
		t.Fatalf("create with a bad config: %v", err)
	}
	if _, ok := b.Topic("bad"); ok {
		t.Fatal("topic created despite a bad config")
	}
	tp, err := b.CreateTopic("t", 2, map[string]string{"max.message.bytes": "2000"}, false)
	if err != nil {
		t.Fatal(err)
	}
	source := func(name string) (string, kmsg.ConfigSource, int) {
		t.Helper()
		vs, err := b.TopicConfigs("t")
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(vs, func(v ConfigValue) bool { return v.Def.Name == name })
		return vs[i].Value, vs[i].Source, len(vs[i].Synonyms)
	}
	if v, s, n := source("max.message.bytes"); v != "2000" || s != kmsg.ConfigSourceDynamicTopicConfig || n != 2 {
		t.Fatalf("max.message.bytes = %s from %v (%d synonyms)", v, s, n)
	}
	if v, s, n := source("retention.ms"); v != "3600000" || s != kmsg.ConfigSourceStaticBrokerConfig || n != 2 {
		t.Fatalf("retention.ms = %s from %v (%d synonyms)", v, s, n)
	}
	if v, s, _ := source("segment.ms"); v != "604800000" || s != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("segment.ms = %s from %v", v, s)
	}
	if c := tp.Partition(1).Config(); c.MaxMessageBytes != 2000 || c.RetentionMs != 3600000 || !c.Delete || c.Compact {
		t.Fatalf("log config %+v", c)
	}

	if err := b.SetTopicConfigs("t", map[string]string{"cleanup.policy": "compact"}, true); err != nil {
		t.Fatal(err)
	}
	if c := tp.Partition(0).Config(); c.Compact {
		t.Fatal("validate-only changed the log")
	}
	if err := b.SetTopicConfigs("t", map[string]string{"cleanup.policy": "compact", "retention.ms": "-1"}, false); err != nil {
		t.Fatal(err)
	}
	if c := tp.Partition(0).Config(); !c.Compact || c.Delete || c.MaxMessageBytes != 1048588 || c.RetentionMs != -1 {
		t.Fatalf("log config after the change %+v", c)
	}
	if err := b.SetTopicConfigs("nope", nil, false); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("unknown topic: %v", err)
	}
	b.Close()

	b, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tp, _ = b.Topic("t")
	if c := tp.Partition(1).Config(); !c.Compact || c.RetentionMs != -1 {
		t.Fatalf("log config after reopen %+v", c)
	}
	d, err := readDescriptor(b.topicDir(tp))
	if err != nil || d.Configs["cleanup.policy"] != "compact" {
		t.Fatalf("descriptor %+v, %v", d, err)
	}
}

func TestBrokerDefaultsChecked(t *testing.T) {
	for _, defaults := range []map[string]string{{"retention.ms": "soon"}, {"no.such.config": "1"}, {"remote.storage.enable": "false"}} {
		if _, err := Open(Config{DataDir: t.TempDir(), TopicDefaults: defaults}); err == nil {
			t.Errorf("opened with broker defaults %v", defaults)
		}
	}
}

func TestOffsetsTopic(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir)
	if _, ok := b.OffsetsTopic(); ok {
		t.Fatal("offsets topic before any group")
	}
	if _, err := b.CreateTopic(OffsetsTopicName, 1, nil, false); !errors.Is(err, kerr.InvalidRequest) {
		t.Fatalf("creating %s: %v", OffsetsTopicName, err)
	}
	ot, err := b.EnsureOffsetsTopic()
	if err != nil || ot.Partitions != DefaultOffsetsTopicPartitions {
		t.Fatalf("EnsureOffsetsTopic = %+v, %v", ot, err)
	}
	if again, _ := b.EnsureOffsetsTopic(); again != ot {
		t.Fatalf("a second call made %+v, first %+v", again, ot)
	}
	if _, err := b.CreateTopic(OffsetsTopicName, 1, nil, false); !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("creating %s once it exists: %v", OffsetsTopicName, err)
	}
	if err := b.SetTopicConfigs(OffsetsTopicName, nil, false); !errors.Is(err, kerr.InvalidRequest) {
		t.Fatalf("altering %s: %v", OffsetsTopicName, err)
	}
	if vs, err := b.TopicConfigs(OffsetsTopicName); err != nil || !slices.ContainsFunc(vs, func(v ConfigValue) bool {
		return v.Def.Name == "cleanup.policy" && v.Value == "compact"
	}) {
		t.Fatalf("configs of %s: %v", OffsetsTopicName, err)
	}
	b.Close()
	b = open(t, dir)
	defer b.Close()
	if got, ok := b.OffsetsTopic(); !ok || got != ot {
		t.Fatalf("after reopen %+v, %v; want %+v", got, ok, ot)
	}
}

// TestDeletedTopicOffsetsCleanupRecorded: deleting a topic records that
// its group offsets are to go, durably, until OffsetsCleaned.
func TestDeletedTopicOffsetsCleanupRecorded(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir)
	for _, n := range []string{"x", "y"} {
		if _, err := b.CreateTopic(n, 1, nil, false); err != nil {
			t.Fatal(err)
		}
		if err := b.DeleteTopic(n); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	b = open(t, dir)
	if got := b.PendingOffsetCleanups(); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("pending cleanups after reopen %v", got)
	}
	if err := b.OffsetsCleaned([]string{"x"}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	b = open(t, dir)
	defer b.Close()
	if got := b.PendingOffsetCleanups(); !slices.Equal(got, []string{"y"}) {
		t.Fatalf("pending cleanups %v, want [y]", got)
	}
}

// TestBrokerRetention: the broker's retention pass deletes old segments of
// delete-policy topics and leaves compacted ones alone.
func TestBrokerRetention(t *testing.T) {
	now := time.UnixMilli(100_000_000)
	b, err := Open(Config{DataDir: t.TempDir(), Log: partition.Options{Sync: partition.SyncNever, SegmentBytes: 200,
		Now: func() time.Time { return now }}, TopicDefaults: map[string]string{"retention.ms": "60000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	del, _ := b.CreateTopic("del", 1, nil, false)
	cmp, _ := b.CreateTopic("cmp", 1, map[string]string{"cleanup.policy": "compact"}, false)
	for _, tp := range []*Topic{del, cmp} {
		for range 5 {
			s := batchtest.NonIdempotent(now.UnixMilli(), batchtest.Record{Key: []byte("k"), Value: []byte("some value")})
			if _, err := tp.Partition(0).Append([][]byte{batchtest.Build(s)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	now = now.Add(2 * time.Minute)
	segs := del.Partition(0).Segments()
	if n := b.EnforceRetention(); n != segs {
		t.Fatalf("retention deleted %d segments, want all %d", n, segs)
	}
	if del.Partition(0).LogStartOffset() != 5 || cmp.Partition(0).LogStartOffset() != 0 {
		t.Fatalf("log starts %d and %d", del.Partition(0).LogStartOffset(), cmp.Partition(0).LogStartOffset())
	}
	if n := b.CleanLogs(partition.NewKeyMap(1 << 16)); n != 1 {
		t.Fatalf("%d cleans, want the compacted topic's one", n)
	}
}
