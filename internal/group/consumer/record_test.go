package consumer

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func genTopicPartitions(t *rapid.T, epochs bool) []TopicPartitions {
	ids := rapid.SliceOfNDistinct(rapid.Uint8(), 0, 4, rapid.ID[uint8]).Draw(t, "topics")
	slices.Sort(ids)
	var out []TopicPartitions
	for _, b := range ids {
		var tp TopicPartitions
		tp.TopicID[0] = b
		tp.Partitions = rapid.SliceOfNDistinct(rapid.Int32Range(0, math.MaxInt32), 1, 6, rapid.ID[int32]).Draw(t, "partitions")
		slices.Sort(tp.Partitions)
		if epochs {
			tp.Epochs = rapid.SliceOfN(rapid.Int32(), len(tp.Partitions), len(tp.Partitions)).Draw(t, "epochs")
		}
		out = append(out, tp)
	}
	return out
}

// TestRecordRoundTrip encodes random records of every type and decodes
// them back.
func TestRecordRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := Record{
			Type:  rapid.SampledFrom([]RecordType{RecordGroupEpoch, RecordMemberMetadata, RecordTargetMember, RecordTargetEpoch, RecordCurrentAssignment}).Draw(t, "type"),
			Group: rapid.String().Draw(t, "group"),
		}
		if r.Type.memberKeyed() {
			r.Member = rapid.String().Draw(t, "member")
		}
		if rapid.IntRange(0, 4).Draw(t, "tombstone") > 0 {
			switch r.Type {
			case RecordGroupEpoch:
				r.GroupEpoch = &GroupEpoch{Epoch: rapid.Int32().Draw(t, "epoch"), MetadataHash: rapid.Uint64().Draw(t, "hash")}
			case RecordMemberMetadata:
				names := rapid.SliceOfNDistinct(rapid.String(), 0, 4, rapid.ID[string]).Draw(t, "names")
				slices.Sort(names)
				r.MemberMetadata = &MemberMetadata{
					InstanceID:           rapid.String().Draw(t, "instance"),
					RackID:               rapid.String().Draw(t, "rack"),
					ClientID:             rapid.String().Draw(t, "client"),
					ClientHost:           rapid.String().Draw(t, "host"),
					SubscribedTopicNames: names,
					SubscribedTopicRegex: rapid.String().Draw(t, "regex"),
					RebalanceTimeoutMs:   rapid.Int32().Draw(t, "rebalance"),
					ServerAssignor:       rapid.String().Draw(t, "assignor"),
				}
				if rapid.Bool().Draw(t, "classic") {
					c := &ClassicMemberMetadata{SessionTimeoutMs: rapid.Int32().Draw(t, "session")}
					for range rapid.IntRange(0, 3).Draw(t, "protocols") {
						c.SupportedProtocols = append(c.SupportedProtocols, ClassicProtocol{
							Name:     rapid.String().Draw(t, "name"),
							Metadata: rapid.SliceOf(rapid.Byte()).Draw(t, "metadata"),
						})
					}
					r.MemberMetadata.Classic = c
				}
			case RecordTargetMember:
				r.Target = &TargetAssignment{Partitions: genTopicPartitions(t, false)}
			case RecordTargetEpoch:
				r.TargetEpoch = &TargetAssignmentEpoch{AssignmentEpoch: rapid.Int32().Draw(t, "epoch")}
			case RecordCurrentAssignment:
				r.Current = &CurrentAssignment{
					MemberEpoch:         rapid.Int32().Draw(t, "epoch"),
					PreviousMemberEpoch: rapid.Int32().Draw(t, "prev"),
					State:               MemberState(rapid.Int8().Draw(t, "state")),
					Assigned:            genTopicPartitions(t, true),
					PendingRevocation:   genTopicPartitions(t, true),
				}
			}
		}
		back, err := DecodeRecord(r.Key(), r.Value())
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if !reflect.DeepEqual(normalize(back), normalize(r)) {
			t.Fatalf("%+v decoded as %+v", r, back)
		}
	})
}

// normalize makes empty and nil slices compare equal.
func normalize(r Record) Record {
	if v := r.MemberMetadata; v != nil && len(v.SubscribedTopicNames) == 0 {
		c := *v
		c.SubscribedTopicNames = nil
		r.MemberMetadata = &c
	}
	if v := r.Target; v != nil && len(v.Partitions) == 0 {
		r.Target = &TargetAssignment{}
	}
	if v := r.Current; v != nil {
		c := *v
		if len(c.Assigned) == 0 {
			c.Assigned = nil
		}
		if len(c.PendingRevocation) == 0 {
			c.PendingRevocation = nil
		}
		r.Current = &c
	}
	return r
}

// TestRecordsArePerMember checks the point of the record design: a member
// joining a large group writes records whose size does not grow with the
// group, apart from the target records of the members whose target
// changed.
func TestRecordsArePerMember(t *testing.T) {
	m := New(Config{})
	m.Step(epoch0, TopicsChanged{Topics: []Topic{{Name: "t", ID: TopicID{1}, Partitions: 2000}}})
	join := func(id string) Output {
		return m.Step(epoch0, Request{ID: 1, ClientID: "c", ClientHost: "/h", Msg: joinRequest(id, "t")})
	}
	for i := range 1000 {
		join(memberName(i))
	}
	out := join("newcomer")
	largest, targets := 0, 0
	for _, r := range out.Records {
		largest = max(largest, len(r.Value()))
		if r.Type == RecordTargetMember {
			targets++
		}
	}
	// Each member holds 2 partitions; a record is a few dozen bytes.
	if largest > 200 {
		t.Fatalf("largest record %d bytes", largest)
	}
	// Uniform moves one partition from each of two members to the
	// newcomer's target, plus the newcomer's own.
	if targets > 3 {
		t.Fatalf("%d target records for one join", targets)
	}
}

func memberName(i int) string { return fmt.Sprintf("m%05d", i) }

// TestMemberMetadataWithoutClassic checks that a MemberMetadata value
// written before the classic part existed still decodes, as a
// consumer-protocol member's, and that such a member's value has not
// changed.
func TestMemberMetadataWithoutClassic(t *testing.T) {
	r := Record{Type: RecordMemberMetadata, Group: "g", Member: "m", MemberMetadata: &MemberMetadata{
		ClientID: "c", SubscribedTopicNames: []string{"t"}, RebalanceTimeoutMs: 5000,
	}}
	old := r.Value()
	got, err := DecodeRecord(r.Key(), old)
	if err != nil || got.MemberMetadata.Classic != nil {
		t.Fatalf("old value decoded as %+v, %v", got.MemberMetadata, err)
	}
	r.MemberMetadata.Classic = &ClassicMemberMetadata{SessionTimeoutMs: 10000,
		SupportedProtocols: []ClassicProtocol{{Name: "range", Metadata: []byte{0, 0}}}}
	withClassic := r.Value()
	if string(withClassic[:len(old)]) != string(old) {
		t.Fatalf("the classic part is not a trailer: %x vs %x", withClassic, old)
	}
	got, err = DecodeRecord(r.Key(), withClassic)
	if err != nil || !reflect.DeepEqual(got.MemberMetadata, r.MemberMetadata) {
		t.Fatalf("decoded %+v, %v", got.MemberMetadata, err)
	}
	// A trailer that does not start with its marker is corrupt.
	bad := append(slices.Clone(old), 2)
	if _, err := DecodeRecord(r.Key(), bad); err == nil {
		t.Fatalf("accepted %x", bad)
	}
}
