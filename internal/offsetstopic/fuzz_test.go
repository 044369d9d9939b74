package offsetstopic

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/group"
)

// FuzzDecode checks that Decode never panics on what it reads from the
// topic, and that a record it accepts encodes to bytes that decode to the
// same record. It is seeded with every record of the scenario, a group
// metadata value with groupd's tag, and Kafka's older value versions.
func FuzzDecode(f *testing.F) {
	recs, _ := scenario()
	recs = append(recs, group.Record{Type: group.RecordGroupMetadata, Group: "g", Metadata: &group.GroupMetadata{
		Members: []group.MemberMetadata{{MemberID: "a", Subscription: []byte{1}}}}})
	for _, r := range recs {
		key, value, err := Encode(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(key, value)
	}
	ck, _, _ := Encode(group.Record{Type: group.RecordOffsetCommit, Group: "g", Topic: "t"})
	gk, _, _ := Encode(group.Record{Type: group.RecordGroupMetadata, Group: "g"})
	for v := int16(0); v <= 4; v++ {
		o := kmsg.NewOffsetCommitValue()
		o.Version, o.Offset, o.Metadata = v, 1, "m"
		f.Add(ck, o.AppendTo(nil))
		g := kmsg.NewGroupMetadataValue()
		g.Version = v
		m := kmsg.NewGroupMetadataValueMember()
		m.MemberID = "a"
		g.Members = []kmsg.GroupMetadataValueMember{m}
		f.Add(gk, g.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, key, value []byte) {
		r, err := Decode(key, value)
		if err != nil {
			return
		}
		if r.Tombstone() != (value == nil) {
			t.Fatalf("value %x decoded with tombstone %v", value, r.Tombstone())
		}
		k2, v2, err := Encode(r)
		if err != nil {
			t.Fatalf("decoded %s does not encode: %v", dump(r), err)
		}
		back, err := Decode(k2, v2)
		if err != nil {
			t.Fatalf("re-encoded %x %x does not decode: %v", k2, v2, err)
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("re-encoding changed the record:\n got %s\nwant %s", dump(back), dump(r))
		}
	})
}
