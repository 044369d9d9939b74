package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestDeleteTopicOffsets(t *testing.T) {
	m := New(Config{})
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	commit := func(id RequestID, groupID string, topics ...string) {
		r := kmsg.NewPtrOffsetCommitRequest()
		r.Version, r.Group, r.Generation = 8, groupID, -1
		for _, tn := range topics {
			rt := kmsg.NewOffsetCommitRequestTopic()
			rt.Topic = tn
			for p := range int32(2) {
				rp := kmsg.NewOffsetCommitRequestTopicPartition()
				rp.Partition, rp.Offset = p, 10
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		m.Step(now, Request{ID: id, Msg: r})
	}
	commit(1, "a", "gone", "kept")
	commit(2, "b", "gone")
	out := m.DeleteTopicOffsets(now, []string{"gone"})
	var tombs, groups int
	for _, r := range out.Records {
		switch {
		case r.Type == RecordOffsetCommit && r.Tombstone() && r.Topic == "gone":
			tombs++
		case r.Type == RecordGroupMetadata && r.Tombstone() && r.Group == "b":
			groups++
		default:
			t.Fatalf("unexpected record %+v", r)
		}
	}
	if tombs != 4 || groups != 1 {
		t.Fatalf("%d offset tombstones and %d group tombstones, want 4 and 1", tombs, groups)
	}
	if m.HasTopicOffsets([]string{"gone"}) || !m.HasTopicOffsets([]string{"kept"}) {
		t.Fatal("wrong offsets left")
	}
	if _, ok := m.groups["b"]; ok {
		t.Fatal("group b, left with no offsets, still exists")
	}
	if out := m.DeleteTopicOffsets(now, []string{"gone"}); len(out.Records) != 0 {
		t.Fatalf("a second removal wrote %d records", len(out.Records))
	}
}
