package group

import "testing"

// FuzzDecodeRecord checks that the record decoder never panics and that
// whatever it accepts re-encodes to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte{0, 1, 1, 'g'}, []byte(nil))
	f.Add(Record{Type: RecordOffsetCommit, Group: "g", Topic: "t", Offset: &OffsetCommit{Offset: 1, ExpireTimestamp: -1}}.Key(),
		Record{Type: RecordOffsetCommit, Group: "g", Topic: "t", Offset: &OffsetCommit{Offset: 1, ExpireTimestamp: -1}}.Value())
	reb := Record{Type: RecordRebalance, Group: "g", Seq: 3, Rebalance: sampleRebalance()}
	f.Add(reb.Key(), reb.Value())
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
