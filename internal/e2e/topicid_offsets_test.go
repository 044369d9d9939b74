package e2e

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestOffsetsByTopicID commits and fetches with the topic-id versions
// (v10): a known id round-trips, an unknown one gets UNKNOWN_TOPIC_ID.
func TestOffsetsByTopicID(t *testing.T) {
	a := startServer(t, t.TempDir())
	createTopic(t, a.Addr(), "ids", 2)
	id := topicIDOf(t, a.Addr(), "ids")
	bogus := [16]byte{1, 2, 3}
	rc := dialRaw(t, a.Addr())

	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version = 10
	commit.Group, commit.Generation = "simple", -1
	for _, tid := range [][16]byte{id, bogus} {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.TopicID = tid
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 1, 42
		rt.Partitions = append(rt.Partitions, rp)
		commit.Topics = append(commit.Topics, rt)
	}
	resp, err := rc.do(commit)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[[16]byte]int16{}
	for _, rt := range resp.(*kmsg.OffsetCommitResponse).Topics {
		codes[rt.TopicID] = rt.Partitions[0].ErrorCode
	}
	if codes[id] != 0 || codes[bogus] != kerr.UnknownTopicID.Code || len(codes) != 2 {
		t.Fatalf("commit error codes by topic id: %v", codes)
	}

	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Version = 10
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = "simple"
	for _, tid := range [][16]byte{id, bogus} {
		rt := kmsg.NewOffsetFetchRequestGroupTopic()
		rt.TopicID, rt.Partitions = tid, []int32{1}
		g.Topics = append(g.Topics, rt)
	}
	fetch.Groups = append(fetch.Groups, g)
	fresp, err := rc.do(fetch)
	if err != nil {
		t.Fatal(err)
	}
	got := map[[16]byte]kmsg.OffsetFetchResponseGroupTopicPartition{}
	for _, rt := range fresp.(*kmsg.OffsetFetchResponse).Groups[0].Topics {
		got[rt.TopicID] = rt.Partitions[0]
	}
	if p := got[id]; p.ErrorCode != 0 || p.Offset != 42 {
		t.Fatalf("fetch by known id: %+v, want offset 42", p)
	}
	if p := got[bogus]; p.ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("fetch by unknown id: %+v, want UNKNOWN_TOPIC_ID", p)
	}
}
