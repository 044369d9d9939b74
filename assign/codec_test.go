package assign

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
	"pgregory.net/rapid"
)

func TestDecodeKafkaGoV1WithoutOwned(t *testing.T) {
	// The exact bytes kafka-go sends: version 1, one topic "probe", null
	// user data, and no OwnedPartitions array.
	b := []byte{0, 1, 0, 0, 0, 1, 0, 5, 'p', 'r', 'o', 'b', 'e', 0xff, 0xff, 0xff, 0xff}
	md, err := DecodeMetadata(b)
	if err != nil {
		t.Fatal(err)
	}
	if md.Version != 1 || !reflect.DeepEqual(md.Topics, []string{"probe"}) || md.UserData != nil || md.Owned != nil || md.Generation != -1 {
		t.Fatalf("got %+v", md)
	}
}

func TestDecodeTruncatedTrailingFields(t *testing.T) {
	full := (&Metadata{Topics: []string{"a", "b"}, UserData: []byte("u"), Owned: []TopicPartitions{tp("a", 1, 2)}, Generation: 7, Rack: "r1"}).Encode(3)
	// Cutting anywhere after the topic list must decode without error and
	// keep every field that was complete.
	topicsEnd := 2 + 4 + 2 + 1 + 2 + 1
	for n := topicsEnd; n <= len(full); n++ {
		md, err := DecodeMetadata(full[:n])
		if err != nil {
			t.Fatalf("len %d: %v", n, err)
		}
		if !reflect.DeepEqual(md.Topics, []string{"a", "b"}) {
			t.Fatalf("len %d: topics %v", n, md.Topics)
		}
		if n == len(full) && (md.Generation != 7 || md.Rack != "r1" || len(md.Owned) != 1) {
			t.Fatalf("full decode lost fields: %+v", md)
		}
	}
	for n := 0; n < topicsEnd; n++ {
		if _, err := DecodeMetadata(full[:n]); err == nil {
			t.Fatalf("len %d: want error for cut topic list", n)
		}
	}
	if _, err := DecodeMetadata([]byte{0xff, 0xff, 0, 0, 0, 0}); err == nil {
		t.Fatal("negative version must fail")
	}
}

func TestDecodeFutureVersion(t *testing.T) {
	// Kafka reads versions above its highest as the highest and ignores
	// trailing bytes it does not know.
	b := (&Metadata{Topics: []string{"x"}, Generation: 3, Rack: "z"}).Encode(3)
	b[1] = 9
	b = append(b, 1, 2, 3, 4)
	md, err := DecodeMetadata(b)
	if err != nil || md.Version != 9 || md.Generation != 3 || md.Rack != "z" {
		t.Fatalf("got %+v, %v", md, err)
	}
}

func toKmsgMeta(md Metadata, v int16) kmsg.ConsumerMemberMetadata {
	k := kmsg.NewConsumerMemberMetadata()
	k.Version = v
	k.Topics = md.Topics
	k.UserData = md.UserData
	for _, o := range md.Owned {
		k.OwnedPartitions = append(k.OwnedPartitions, kmsg.ConsumerMemberMetadataOwnedPartition{Topic: o.Topic, Partitions: o.Partitions})
	}
	k.Generation = md.Generation
	if md.Rack != "" {
		r := md.Rack
		k.Rack = &r
	}
	return k
}

func genTPs(t *rapid.T, label string) []TopicPartitions {
	return rapid.SliceOfN(rapid.Custom(func(t *rapid.T) TopicPartitions {
		return TopicPartitions{
			Topic:      rapid.StringMatching(`[a-z]{1,6}`).Draw(t, "topic"),
			Partitions: rapid.SliceOfN(rapid.Int32Range(0, 1000), 1, 5).Draw(t, "ps"),
		}
	}), 0, 4).Draw(t, label)
}

// TestMetadataMatchesKmsg checks the hand-written codec byte-for-byte
// against kmsg in both directions, for every version.
func TestMetadataMatchesKmsg(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := rapid.Int16Range(0, 3).Draw(t, "v")
		md := Metadata{
			Version:    v,
			Topics:     rapid.SliceOfN(rapid.StringMatching(`[a-z.]{0,8}`), 0, 5).Draw(t, "topics"),
			Generation: -1,
		}
		if rapid.Bool().Draw(t, "ud") {
			md.UserData = rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "userdata")
		}
		if v >= 1 {
			md.Owned = genTPs(t, "owned")
		}
		if v >= 2 {
			md.Generation = rapid.Int32().Draw(t, "gen")
		}
		if v >= 3 {
			md.Rack = rapid.StringMatching(`[a-z]{0,3}`).Draw(t, "rack")
		}
		ours := md.Encode(v)
		k := toKmsgMeta(md, v)
		theirs := k.AppendTo(nil)
		if !bytes.Equal(ours, theirs) {
			t.Fatalf("encode differs\nours   %x\ntheirs %x", ours, theirs)
		}
		got, err := DecodeMetadata(theirs)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Encode(v), theirs) {
			t.Fatalf("decode/encode round trip differs")
		}
		var back kmsg.ConsumerMemberMetadata
		if err := back.ReadFrom(ours); err != nil {
			t.Fatalf("kmsg cannot read ours: %v", err)
		}
	})
}

func TestAssignmentMatchesKmsg(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := rapid.Int16Range(0, 3).Draw(t, "v")
		tps := genTPs(t, "assigned")
		var ud []byte
		if rapid.Bool().Draw(t, "ud") {
			ud = rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "userdata")
		}
		ours := EncodeAssignment(v, tps, ud)
		if len(ours) != assignmentSize(tps, ud) {
			t.Fatalf("assignmentSize %d, encoded %d", assignmentSize(tps, ud), len(ours))
		}
		k := kmsg.NewConsumerMemberAssignment()
		k.Version = v
		for _, x := range tps {
			k.Topics = append(k.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: x.Topic, Partitions: x.Partitions})
		}
		k.UserData = ud
		theirs := k.AppendTo(nil)
		if !bytes.Equal(ours, theirs) {
			t.Fatalf("encode differs\nours   %x\ntheirs %x", ours, theirs)
		}
		gv, gtps, gud, err := DecodeAssignment(theirs)
		if err != nil || gv != v || !bytes.Equal(EncodeAssignment(gv, gtps, gud), theirs) {
			t.Fatalf("decode mismatch: %v", err)
		}
	})
}

func TestStickyUserDataMatchesKmsg(t *testing.T) {
	k := kmsg.NewStickyMemberMetadata()
	k.Generation = 5
	k.CurrentAssignment = []kmsg.StickyMemberMetadataCurrentAssignment{{Topic: "t", Partitions: []int32{0, 3}}}
	b := k.AppendTo(nil)
	sd, ok := DecodeStickyUserData(b)
	if !ok || sd.Generation != 5 || !reflect.DeepEqual(sd.Owned, []TopicPartitions{tp("t", 0, 3)}) {
		t.Fatalf("got %+v %v", sd, ok)
	}
	if !bytes.Equal(EncodeStickyUserData(sd), b) {
		t.Fatal("encode differs from kmsg")
	}
	// V0 (pre KIP-341) has no generation.
	sd, ok = DecodeStickyUserData(b[:len(b)-4])
	if !ok || sd.Generation != -1 || len(sd.Owned) != 1 {
		t.Fatalf("v0: got %+v %v", sd, ok)
	}
}

// FuzzDecode makes sure no input panics or allocates absurdly.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 5, 'p', 'r', 'o', 'b', 'e', 0xff, 0xff, 0xff, 0xff})
	f.Add((&Metadata{Topics: []string{"a"}, Owned: []TopicPartitions{tp("a", 1)}, Generation: 2, Rack: "r"}).Encode(3))
	f.Add(EncodeAssignment(3, []TopicPartitions{tp("a", 1, 2)}, []byte("x")))
	f.Fuzz(func(t *testing.T, b []byte) {
		if md, err := DecodeMetadata(b); err == nil {
			md.Encode(md.Version)
		}
		DecodeAssignment(b)
		DecodeStickyUserData(b)
	})
}
