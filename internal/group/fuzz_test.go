package group

import (
	"slices"
	"testing"

	"github.com/groupd/groupd/assign"
	"github.com/groupd/groupd/internal/group/consumer"
)

// FuzzDecodeRecord checks that the record decoder never panics and that
// whatever it accepts re-encodes to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte{0, 1, 1, 'g'}, []byte(nil))
	f.Add(Record{Type: RecordOffsetCommit, Group: "g", Topic: "t", Offset: &OffsetCommit{Offset: 1, ExpireTimestamp: -1}}.Key(),
		Record{Type: RecordOffsetCommit, Group: "g", Topic: "t", Offset: &OffsetCommit{Offset: 1, ExpireTimestamp: -1}}.Value())
	reb := Record{Type: RecordRebalance, Group: "g", Seq: 3, Rebalance: sampleRebalance()}
	f.Add(reb.Key(), reb.Value())
	// A classic member of a consumer group (after an upgrade).
	classic := consumerRecord(consumer.Record{Type: consumer.RecordMemberMetadata, Group: "g", Member: "m",
		MemberMetadata: &consumer.MemberMetadata{ClientID: "c", SubscribedTopicNames: []string{"t"}, RebalanceTimeoutMs: 60000,
			Classic: &consumer.ClassicMemberMetadata{SessionTimeoutMs: 10000,
				SupportedProtocols: []consumer.ClassicProtocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 1, 0, 1, 't', 0, 0, 0, 0}}}}}})
	f.Add(classic.Key(), classic.Value())
	f.Fuzz(func(t *testing.T, key, value []byte) {
		r, err := DecodeRecord(key, value)
		if err != nil {
			return
		}
		if string(r.Key()) != string(key) {
			t.Fatalf("key %x re-encoded as %x", key, r.Key())
		}
		if value != nil && string(r.Value()) != string(value) {
			t.Fatalf("value %x re-encoded as %x", value, r.Value())
		}
	})
}

// FuzzWalkAssignment checks the history's in-place reading of member
// assignments against the assign package's decoder: the same bytes are
// accepted, with the same partitions in the same order.
func FuzzWalkAssignment(f *testing.F) {
	f.Add([]byte{})
	f.Add(assign.EncodeAssignment(0, []assign.TopicPartitions{{Topic: "t", Partitions: []int32{0, 3}}, {Topic: "u"}}, []byte("ud")))
	f.Add(assign.EncodeAssignment(3, []assign.TopicPartitions{{Topic: "t", Partitions: []int32{1}}}, nil)[:14])
	f.Add([]byte{0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var walked []topicPartition
		ok := walkAssignment(b, map[string]string{}, func(tp topicPartition) { walked = append(walked, tp) })
		_, tps, _, err := assign.DecodeAssignment(b)
		if ok != (err == nil) {
			t.Fatalf("walk ok=%v, decode err=%v", ok, err)
		}
		if !ok {
			if len(walked) != 0 {
				t.Fatalf("rejected assignment yielded %v", walked)
			}
			return
		}
		var decoded []topicPartition
		for _, tp := range tps {
			for _, p := range tp.Partitions {
				decoded = append(decoded, topicPartition{tp.Topic, p})
			}
		}
		if !slices.Equal(walked, decoded) {
			t.Fatalf("walked %v, decoded %v", walked, decoded)
		}
	})
}
