package offsetstopic

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"pgregory.net/rapid"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/inspect"
)

// storeRoundTrip is what the coordinator's store gives back for r: the
// reference for "lossless".
// tb is what the helpers need of a testing.T or a rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

func storeRoundTrip(t tb, r group.Record) group.Record {
	t.Helper()
	back, err := group.DecodeRecord(r.Key(), r.Value())
	if err != nil {
		t.Fatalf("store codec refused %v: %v", r.Type, err)
	}
	return back
}

// roundTrip encodes r, decodes it, and insists the result is what the
// store codec gives back.
func roundTrip(t tb, r group.Record) group.Record {
	t.Helper()
	key, value, err := Encode(r)
	if err != nil {
		t.Fatalf("encode %v %+v: %v", r.Type, r, err)
	}
	if r.Tombstone() != (value == nil) {
		t.Fatalf("%v: tombstone %v but value %x", r.Type, r.Tombstone(), value)
	}
	back, err := Decode(key, value)
	if err != nil {
		t.Fatalf("decode %v key %x value %x: %v", r.Type, key, value, err)
	}
	if want := storeRoundTrip(t, r); !reflect.DeepEqual(back, want) {
		t.Fatalf("%v round trip:\n got %s\nwant %s", r.Type, dump(back), dump(want))
	}
	return back
}

func dump(r group.Record) string {
	s := fmt.Sprintf("%+v", r)
	if r.Metadata != nil {
		s += fmt.Sprintf(" metadata %+v", *r.Metadata)
	}
	if r.Offset != nil {
		s += fmt.Sprintf(" offset %+v", *r.Offset)
	}
	if r.Consumer != nil {
		s += fmt.Sprintf(" consumer %+v", *r.Consumer)
	}
	return s
}

// TestMachineRecordsRoundTrip encodes every record a real machine wrote
// in a scenario of classic, simple and consumer groups, decodes them, and
// checks that each comes back as the store codec gives it back, and that
// a machine replaying the decoded records (every prefix of them)
// describes the same groups as one replaying what the store gives back
// today.
func TestMachineRecordsRoundTrip(t *testing.T) {
	recs, _ := scenario()
	seen := map[string]bool{}
	var decoded, stored []group.Record
	for _, r := range recs {
		seen[fmt.Sprintf("%v tombstone=%v", r.Type, r.Tombstone())] = true
		decoded = append(decoded, roundTrip(t, r))
		stored = append(stored, storeRoundTrip(t, r))
	}
	// The scenario must keep covering what it claims to.
	for _, want := range []string{
		"GroupMetadata tombstone=false", "OffsetCommit tombstone=false", "OffsetCommit tombstone=true",
		"Rebalance tombstone=false", "ConsumerGroupEpoch tombstone=false", "ConsumerMemberMetadata tombstone=false",
		"ConsumerMemberMetadata tombstone=true", "ConsumerTargetMember tombstone=false", "ConsumerTargetEpoch tombstone=false",
		"ConsumerCurrentAssignment tombstone=false", "ConsumerCurrentAssignment tombstone=true",
	} {
		if !seen[want] {
			t.Errorf("scenario wrote no %s record; it wrote %v", want, seen)
		}
	}
	expire := false
	for _, r := range recs {
		if r.Offset != nil && r.Offset.ExpireTimestamp != -1 {
			expire = true
		}
	}
	if !expire {
		t.Errorf("scenario wrote no offset commit with an expire timestamp")
	}

	now := t0.Add(time.Hour)
	describe := func(recs []group.Record) string {
		m := group.New(group.Config{InitialRebalanceDelay: -1})
		if _, err := m.Replay(now, recs); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, id := range m.Groups() {
			d, _ := m.Describe(id, now)
			rs, _ := m.Rebalances(id, now)
			j, err := json.Marshal([]any{d, rs})
			if err != nil {
				t.Fatal(err)
			}
			b.Write(j)
			b.WriteByte('\n')
		}
		return b.String()
	}
	// Every prefix, so that groups are compared with their members too.
	for i := range recs {
		if got, want := describe(decoded[:i+1]), describe(stored[:i+1]); got != want {
			t.Fatalf("replay of the first %d decoded records differs:\n got %s\nwant %s", i+1, got, want)
		}
	}
}

func genString(t *rapid.T, label string) string {
	return rapid.StringMatching(`[a-zA-Z0-9./_-]{0,12}|.{0,4}`).Draw(t, label)
}

func genBytes(t *rapid.T, label string) []byte {
	switch rapid.IntRange(0, 2).Draw(t, label+"-kind") {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	return rapid.SliceOfN(rapid.Byte(), 1, 16).Draw(t, label)
}

func genTopicPartitions(t *rapid.T, epochs bool) []consumer.TopicPartitions {
	ids := rapid.SliceOfNDistinct(rapid.Uint8(), 0, 3, rapid.ID[uint8]).Draw(t, "topics")
	slices.Sort(ids)
	var out []consumer.TopicPartitions
	for _, b := range ids {
		var tp consumer.TopicPartitions
		tp.TopicID[15] = b
		tp.Partitions = rapid.SliceOfNDistinct(rapid.Int32Range(0, 1000), 1, 5, rapid.ID[int32]).Draw(t, "partitions")
		slices.Sort(tp.Partitions)
		if epochs {
			tp.Epochs = rapid.SliceOfN(rapid.Int32(), len(tp.Partitions), len(tp.Partitions)).Draw(t, "epochs")
		}
		out = append(out, tp)
	}
	return out
}

func genRebalance(t *rapid.T, groupID string, seq uint64) *inspect.Rebalance {
	start := time.UnixMilli(rapid.Int64Range(0, 1<<42).Draw(t, "start")).UTC()
	r := &inspect.Rebalance{
		Group: groupID, Seq: seq,
		Protocol:         rapid.SampledFrom([]string{inspect.ProtocolEager, inspect.ProtocolCooperative, inspect.ProtocolConsumer}).Draw(t, "protocol"),
		GenerationBefore: rapid.Int32().Draw(t, "before"),
		GenerationAfter:  rapid.Int32().Draw(t, "after"),
		StartedAt:        start,
		DurationMs:       rapid.Int64Range(0, 1e6).Draw(t, "duration"),
		Trigger:          genString(t, "trigger"),
		MembersIn:        rapid.SliceOfN(rapid.StringN(1, 5, -1), 0, 3).Draw(t, "in"),
		MembersOut:       rapid.SliceOfN(rapid.StringN(1, 5, -1), 0, 3).Draw(t, "out"),
		WaitedFor:        []inspect.Wait{},
		Moved:            []inspect.Move{},
		Outcome:          genString(t, "outcome"),
		Storm:            rapid.Bool().Draw(t, "storm"),
		StormCause:       genString(t, "cause"),
	}
	if rapid.Bool().Draw(t, "ended") {
		end := start.Add(time.Duration(r.DurationMs) * time.Millisecond)
		r.EndedAt = &end
	}
	if rapid.Bool().Draw(t, "member") {
		r.Member = &inspect.MemberRef{MemberID: genString(t, "m"), InstanceID: genString(t, "i"), ClientID: genString(t, "c"), ClientHost: genString(t, "h")}
	}
	for range rapid.IntRange(0, 2).Draw(t, "waits") {
		r.WaitedFor = append(r.WaitedFor, inspect.Wait{Member: genString(t, "w"), WaitedMs: rapid.Int64Range(0, 1e6).Draw(t, "ms"), Rejoined: rapid.Bool().Draw(t, "rejoined")})
	}
	for range rapid.IntRange(0, 2).Draw(t, "moves") {
		assigned := start.Add(time.Duration(rapid.Int64Range(0, 1e6).Draw(t, "at")) * time.Millisecond)
		pause := rapid.Int64Range(0, 1e6).Draw(t, "pause")
		r.Moved = append(r.Moved, inspect.Move{Topic: genString(t, "topic"), Partition: rapid.Int32Range(0, 100).Draw(t, "p"),
			From: genString(t, "from"), To: genString(t, "to"), PauseMs: pause, AssignedAt: assigned,
			ReleasedAt: assigned.Add(-time.Duration(pause) * time.Millisecond),
			Committed:  rapid.Int64().Draw(t, "committed"), CommitGap: rapid.Int64().Draw(t, "gap")})
	}
	return r
}

// genRecord draws a record of any type, about a fifth of them tombstones.
func genRecord(t *rapid.T) group.Record {
	types := []group.RecordType{group.RecordGroupMetadata, group.RecordOffsetCommit, group.RecordRebalance,
		group.RecordConsumerGroupEpoch, group.RecordConsumerMemberMetadata, group.RecordConsumerTargetMember,
		group.RecordConsumerTargetEpoch, group.RecordConsumerCurrentAssignment}
	r := group.Record{Type: rapid.SampledFrom(types).Draw(t, "type"), Group: genString(t, "group")}
	live := rapid.IntRange(0, 4).Draw(t, "tombstone") > 0
	switch r.Type {
	case group.RecordOffsetCommit:
		r.Topic, r.Partition = genString(t, "topic"), rapid.Int32().Draw(t, "partition")
		if live {
			o := &group.OffsetCommit{Offset: rapid.Int64().Draw(t, "offset"), LeaderEpoch: -1, Metadata: genString(t, "metadata"),
				CommitTimestamp: rapid.Int64().Draw(t, "commit"), ExpireTimestamp: -1}
			// Kafka's format carries a leader epoch or an expire
			// timestamp, as the machine writes one or the other.
			if rapid.Bool().Draw(t, "expire") {
				o.ExpireTimestamp = rapid.Int64Range(0, 1<<50).Draw(t, "expireAt")
			} else {
				o.LeaderEpoch = rapid.Int32().Draw(t, "epoch")
			}
			r.Offset = o
		}
	case group.RecordGroupMetadata:
		if live {
			m := &group.GroupMetadata{ProtocolType: genString(t, "ptype"), Generation: rapid.Int32().Draw(t, "gen"),
				Protocol: genString(t, "protocol"), Leader: genString(t, "leader"), StateTimestamp: rapid.Int64().Draw(t, "ts")}
			for range rapid.IntRange(0, 3).Draw(t, "members") {
				m.Members = append(m.Members, group.MemberMetadata{
					MemberID: genString(t, "member"), InstanceID: genString(t, "instance"),
					ClientID: genString(t, "client"), ClientHost: genString(t, "host"),
					RebalanceTimeout: rapid.Int32().Draw(t, "rebalance"), SessionTimeout: rapid.Int32().Draw(t, "session"),
					Subscription: genBytes(t, "subscription"), Assignment: genBytes(t, "assignment"),
				})
			}
			r.Metadata = m
		}
	case group.RecordRebalance:
		r.Seq = rapid.Uint64().Draw(t, "seq")
		if live {
			r.Rebalance = genRebalance(t, r.Group, r.Seq)
		}
	default:
		c := consumer.Record{Type: consumer.RecordType(r.Type), Group: r.Group}
		if r.Type == group.RecordConsumerMemberMetadata || r.Type == group.RecordConsumerTargetMember || r.Type == group.RecordConsumerCurrentAssignment {
			c.Member = genString(t, "member")
		}
		if live {
			switch r.Type {
			case group.RecordConsumerGroupEpoch:
				c.GroupEpoch = &consumer.GroupEpoch{Epoch: rapid.Int32().Draw(t, "epoch"), MetadataHash: rapid.Uint64().Draw(t, "hash")}
			case group.RecordConsumerMemberMetadata:
				names := rapid.SliceOfNDistinct(rapid.StringN(1, 6, -1), 0, 3, rapid.ID[string]).Draw(t, "names")
				slices.Sort(names)
				if len(names) == 0 {
					names = nil
				}
				v := &consumer.MemberMetadata{InstanceID: genString(t, "instance"), RackID: genString(t, "rack"),
					ClientID: genString(t, "client"), ClientHost: genString(t, "host"), SubscribedTopicNames: names,
					SubscribedTopicRegex: genString(t, "regex"), RebalanceTimeoutMs: rapid.Int32().Draw(t, "rebalance"),
					ServerAssignor: genString(t, "assignor")}
				if rapid.Bool().Draw(t, "classic") {
					v.Classic = &consumer.ClassicMemberMetadata{SessionTimeoutMs: rapid.Int32().Draw(t, "session"),
						SupportedProtocols: []consumer.ClassicProtocol{{Name: genString(t, "name"), Metadata: genBytes(t, "md")}}}
				}
				c.MemberMetadata = v
			case group.RecordConsumerTargetMember:
				c.Target = &consumer.TargetAssignment{Partitions: genTopicPartitions(t, false)}
			case group.RecordConsumerTargetEpoch:
				c.TargetEpoch = &consumer.TargetAssignmentEpoch{AssignmentEpoch: rapid.Int32().Draw(t, "epoch")}
			case group.RecordConsumerCurrentAssignment:
				c.Current = &consumer.CurrentAssignment{MemberEpoch: rapid.Int32().Draw(t, "epoch"),
					PreviousMemberEpoch: rapid.Int32().Draw(t, "prev"), State: consumer.MemberState(rapid.Int8().Draw(t, "state")),
					Assigned: genTopicPartitions(t, true), PendingRevocation: genTopicPartitions(t, true)}
			}
		}
		r.Consumer = &c
	}
	return r
}

// TestRoundTrip encodes random records of every type, tombstones
// included, and decodes them back to what the store codec gives back;
// for the types without such slices (all but rebalances and consumer
// records, whose empty lists the store codec may read back as nil or
// empty), the record itself.
func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRecord(t)
		back := roundTrip(t, r)
		if r.Type == group.RecordGroupMetadata || r.Type == group.RecordOffsetCommit {
			if !reflect.DeepEqual(back, r) {
				t.Fatalf("round trip:\n got %s\nwant %s", dump(back), dump(r))
			}
		}
	})
}

// TestKafkaReadsCommits decodes groupd's offset commits the way a tool
// would, with kmsg's OffsetCommitKey and OffsetCommitValue, and checks the
// bytes against Kafka's schema written out by hand.
func TestKafkaReadsCommits(t *testing.T) {
	r := group.Record{Type: group.RecordOffsetCommit, Group: "g", Topic: "t", Partition: 2,
		Offset: &group.OffsetCommit{Offset: 100, LeaderEpoch: 5, Metadata: "m", CommitTimestamp: 1_700_000_000_000, ExpireTimestamp: -1}}
	key, value, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	// Key version 1, then group, topic (int16 lengths) and partition.
	if got, want := hex.EncodeToString(key), "0001"+"000167"+"000174"+"00000002"; got != want {
		t.Errorf("key %s, want %s", got, want)
	}
	// Value version 3: offset, leader epoch, metadata, commit timestamp.
	if got, want := hex.EncodeToString(value), "0003"+"0000000000000064"+"00000005"+"00016d"+"0000018bcfe56800"; got != want {
		t.Errorf("value %s, want %s", got, want)
	}
	var k kmsg.OffsetCommitKey
	if err := k.ReadFrom(key); err != nil || k.Version != 1 || k.Group != "g" || k.Topic != "t" || k.Partition != 2 {
		t.Errorf("kmsg reads key %+v, %v", k, err)
	}
	var v kmsg.OffsetCommitValue
	if err := v.ReadFrom(value); err != nil || v.Version != 3 || v.Offset != 100 || v.LeaderEpoch != 5 || v.Metadata != "m" || v.CommitTimestamp != 1_700_000_000_000 {
		t.Errorf("kmsg reads value %+v, %v", v, err)
	}

	// An old client's commit with a retention: version 1, as Kafka.
	r.Offset = &group.OffsetCommit{Offset: 100, LeaderEpoch: -1, Metadata: "m", CommitTimestamp: 1, ExpireTimestamp: 2}
	if _, value, err = Encode(r); err != nil {
		t.Fatal(err)
	}
	v = kmsg.OffsetCommitValue{}
	if err := v.ReadFrom(value); err != nil || v.Version != 1 || v.Offset != 100 || v.CommitTimestamp != 1 || v.ExpireTimestamp != 2 {
		t.Errorf("kmsg reads value %+v, %v", v, err)
	}
	// Both an epoch and an expire timestamp: Kafka's format has no room.
	r.Offset.LeaderEpoch = 3
	if _, _, err := Encode(r); !errors.Is(err, ErrUnrepresentable) {
		t.Errorf("epoch and expire: %v, want ErrUnrepresentable", err)
	}

	// The machine's commits, the same way.
	recs, _ := scenario()
	n := 0
	for _, r := range recs {
		if r.Type != group.RecordOffsetCommit || r.Offset == nil {
			continue
		}
		n++
		key, value, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		var k kmsg.OffsetCommitKey
		var v kmsg.OffsetCommitValue
		if err := k.ReadFrom(key); err != nil || k.Version != 1 || k.Group != r.Group || k.Topic != r.Topic || k.Partition != r.Partition {
			t.Errorf("kmsg reads key %+v, %v; want %+v", k, err, r)
		}
		wantVersion := int16(3)
		if r.Offset.ExpireTimestamp != -1 {
			wantVersion = 1
		}
		if err := v.ReadFrom(value); err != nil || v.Version != wantVersion || v.Offset != r.Offset.Offset ||
			v.Metadata != r.Offset.Metadata || v.CommitTimestamp != r.Offset.CommitTimestamp ||
			(wantVersion == 3 && v.LeaderEpoch != r.Offset.LeaderEpoch) || (wantVersion == 1 && v.ExpireTimestamp != r.Offset.ExpireTimestamp) {
			t.Errorf("kmsg reads value %+v, %v; want %+v", v, err, *r.Offset)
		}
	}
	if n < 3 {
		t.Fatalf("scenario wrote %d commits", n)
	}
}

// TestKafkaReadsGroupMetadata decodes group metadata with kmsg's
// GroupMetadataKey and GroupMetadataValue: version 3 as Kafka writes it,
// and version 4 with groupd's tagged field when an assignment is nil.
func TestKafkaReadsGroupMetadata(t *testing.T) {
	recs, _ := scenario()
	n := 0
	for _, r := range recs {
		if r.Type != group.RecordGroupMetadata {
			continue
		}
		n++
		key, value, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(key); err != nil || k.Version != 2 || k.Group != r.Group {
			t.Errorf("kmsg reads key %+v, %v", k, err)
		}
		var v kmsg.GroupMetadataValue
		if err := v.ReadFrom(value); err != nil || v.Version != 3 {
			t.Fatalf("kmsg reads value version %d, %v", v.Version, err)
		}
		m := r.Metadata
		if v.ProtocolType != m.ProtocolType || v.Generation != m.Generation || deref(v.Protocol) != m.Protocol ||
			deref(v.Leader) != m.Leader || v.CurrentStateTimestamp != m.StateTimestamp || len(v.Members) != len(m.Members) {
			t.Fatalf("kmsg reads %+v, want %+v", v, *m)
		}
		if m.Protocol == "" && v.Protocol != nil || m.Leader == "" && v.Leader != nil {
			t.Errorf("empty protocol or leader written as %q %q, want Kafka's null", deref(v.Protocol), deref(v.Leader))
		}
		for i, vm := range v.Members {
			mm := m.Members[i]
			if vm.MemberID != mm.MemberID || deref(vm.InstanceID) != mm.InstanceID || vm.ClientID != mm.ClientID ||
				vm.ClientHost != mm.ClientHost || vm.RebalanceTimeoutMillis != mm.RebalanceTimeout ||
				vm.SessionTimeoutMillis != mm.SessionTimeout || string(vm.Subscription) != string(mm.Subscription) ||
				string(vm.Assignment) != string(mm.Assignment) {
				t.Errorf("member %d: kmsg reads %+v, want %+v", i, vm, mm)
			}
			// The assignment is the consumer protocol's, readable as such.
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(vm.Assignment); err != nil || len(a.Topics) != 1 || a.Topics[0].Topic != "t" {
				t.Errorf("member %d assignment %+v, %v", i, a, err)
			}
		}
	}
	if n < 2 {
		t.Fatalf("scenario wrote %d group metadata records", n)
	}

	// A member without an assignment: version 4, the tag on that member.
	r := group.Record{Type: group.RecordGroupMetadata, Group: "g", Metadata: &group.GroupMetadata{
		ProtocolType: "consumer", Generation: 3, Protocol: "range", Leader: "a", StateTimestamp: 9,
		Members: []group.MemberMetadata{
			{MemberID: "a", ClientID: "c", ClientHost: "/h", RebalanceTimeout: 1, SessionTimeout: 2, Subscription: []byte{1}, Assignment: []byte{}},
			{MemberID: "b", InstanceID: "i", ClientID: "c", ClientHost: "/h", RebalanceTimeout: 1, SessionTimeout: 2, Subscription: []byte{1}},
		}}}
	_, value4, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	var v kmsg.GroupMetadataValue
	if err := v.ReadFrom(value4); err != nil || v.Version != 4 || len(v.Members) != 2 || v.Members[1].MemberID != "b" ||
		deref(v.Members[1].InstanceID) != "i" || len(v.Members[1].Assignment) != 0 {
		t.Fatalf("kmsg reads %+v, %v", v, err)
	}
	tags := func(ts kmsg.Tags) map[uint32]string {
		m := map[uint32]string{}
		ts.Each(func(k uint32, v []byte) { m[k] = hex.EncodeToString(v) })
		return m
	}
	if got := tags(v.Members[0].UnknownTags); len(got) != 0 {
		t.Errorf("member a tags %v, want none", got)
	}
	if got := tags(v.Members[1].UnknownTags); !reflect.DeepEqual(got, map[uint32]string{MemberNilTag: "02"}) {
		t.Errorf("member b tags %v, want the nil-assignment flag", got)
	}
	key, value, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(key, value)
	if err != nil || back.Metadata.Members[1].Assignment != nil || back.Metadata.Members[0].Assignment == nil {
		t.Fatalf("decoded %s, %v", dump(back), err)
	}
}

// TestKeyVersions checks which key versions each record type gets:
// Kafka's for offsets and group metadata, groupd's range for the rest,
// and that the two ranges cannot meet.
func TestKeyVersions(t *testing.T) {
	if KeyGroupdBase <= 24 || KeyGroupdLast < KeyGroupdBase {
		t.Fatalf("groupd's range %#x-%#x", KeyGroupdBase, KeyGroupdLast)
	}
	want := map[group.RecordType]int16{
		group.RecordOffsetCommit:              1,
		group.RecordGroupMetadata:             2,
		group.RecordRebalance:                 0x4703,
		group.RecordConsumerGroupEpoch:        0x4710,
		group.RecordConsumerMemberMetadata:    0x4711,
		group.RecordConsumerTargetMember:      0x4712,
		group.RecordConsumerTargetEpoch:       0x4713,
		group.RecordConsumerCurrentAssignment: 0x4714,
	}
	recs, _ := scenario()
	got := map[group.RecordType]int16{}
	for _, r := range recs {
		key, _, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		got[r.Type] = int16(binary.BigEndian.Uint16(key))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("key versions %v, want %v", got, want)
	}
}

// TestDecodeRefuses checks what Decode will not read: Kafka's other
// record types (returned as UnknownKeyError for the caller to skip or
// stop on), groupd's range for types with Kafka keys, value versions it
// does not know, trailing bytes, and a malformed groupd tag.
func TestDecodeRefuses(t *testing.T) {
	commit := group.Record{Type: group.RecordOffsetCommit, Group: "g", Topic: "t",
		Offset: &group.OffsetCommit{Offset: 1, LeaderEpoch: -1, ExpireTimestamp: -1}}
	ck, cv, _ := Encode(commit)
	meta := group.Record{Type: group.RecordGroupMetadata, Group: "g", Metadata: &group.GroupMetadata{
		Members: []group.MemberMetadata{{MemberID: "a", Subscription: []byte{}}}}}
	mk, mv, _ := Encode(meta)

	var unknown *UnknownKeyError
	// ConsumerGroupMetadataKey (Kafka's record type 3), group "g".
	if _, err := Decode([]byte{0, 3, 0, 1, 'g'}, []byte{0, 0, 0, 0, 0, 1}); !errors.As(err, &unknown) || unknown.Version != 3 {
		t.Errorf("Kafka's type 3: %v", err)
	}
	if _, err := Decode([]byte{0x47, 0x01, 0x01, 'g'}, nil); err == nil {
		t.Errorf("group metadata in groupd's range accepted")
	}
	bump := func(b []byte, v int16) []byte {
		c := slices.Clone(b)
		binary.BigEndian.PutUint16(c, uint16(v))
		return c
	}
	for name, kv := range map[string][2][]byte{
		"short key":              {{0}, nil},
		"commit key trailing":    {append(slices.Clone(ck), 0), nil},
		"commit value trailing":  {ck, append(slices.Clone(cv), 0)},
		"commit value truncated": {ck, cv[:len(cv)-1]},
		"commit value v5":        {ck, bump(cv, 5)},
		"commit value v-1":       {ck, bump(cv, -1)},
		"group value v5":         {mk, bump(mv, 5)},
		"group value trailing":   {mk, append(slices.Clone(mv), 0)},
		"group key trailing":     {append(slices.Clone(mk), 0), nil},
		"groupd value corrupt":   {[]byte{0x47, 0x03, 0x01, 'g', 0, 0, 0, 0, 0, 0, 0, 1}, []byte{0, 0, 1}},
	} {
		if r, err := Decode(kv[0], kv[1]); err == nil {
			t.Errorf("%s: accepted as %s", name, dump(r))
		}
	}

	// The nil flags with a non-empty assignment contradict each other.
	v := kmsg.NewGroupMetadataValue()
	v.Version = 4
	vm := kmsg.NewGroupMetadataValueMember()
	vm.Assignment = []byte{1}
	vm.UnknownTags.Set(MemberNilTag, []byte{nilAssignment})
	v.Members = []kmsg.GroupMetadataValueMember{vm}
	if r, err := Decode(mk, v.AppendTo(nil)); err == nil {
		t.Errorf("nil flag on a non-empty assignment accepted as %s", dump(r))
	}
	// A tag of a later Kafka is ignored, as Kafka ignores it.
	vm.Assignment = nil
	vm.UnknownTags = kmsg.Tags{}
	vm.UnknownTags.Set(7, []byte{1, 2})
	v.Members = []kmsg.GroupMetadataValueMember{vm}
	if r, err := Decode(mk, v.AppendTo(nil)); err != nil || r.Metadata.Members[0].Assignment == nil {
		t.Errorf("unknown tag: %s, %v", dump(r), err)
	}
}

// TestKafkaWrittenVersions decodes values in the older versions Kafka
// wrote and may still be on a topic.
func TestKafkaWrittenVersions(t *testing.T) {
	key, _, _ := Encode(group.Record{Type: group.RecordOffsetCommit, Group: "g", Topic: "t"})
	for version, want := range map[int16]group.OffsetCommit{
		0: {Offset: 5, LeaderEpoch: -1, Metadata: "m", CommitTimestamp: 7, ExpireTimestamp: -1},
		1: {Offset: 5, LeaderEpoch: -1, Metadata: "m", CommitTimestamp: 7, ExpireTimestamp: 9},
		2: {Offset: 5, LeaderEpoch: -1, Metadata: "m", CommitTimestamp: 7, ExpireTimestamp: -1},
		3: {Offset: 5, LeaderEpoch: 4, Metadata: "m", CommitTimestamp: 7, ExpireTimestamp: -1},
		4: {Offset: 5, LeaderEpoch: 4, Metadata: "m", CommitTimestamp: 7, ExpireTimestamp: -1},
	} {
		v := kmsg.NewOffsetCommitValue()
		v.Version, v.Offset, v.LeaderEpoch, v.Metadata, v.CommitTimestamp, v.ExpireTimestamp = version, 5, 4, "m", 7, 9
		v.TopicID[0] = 1 // Kafka 4.1's tagged topic id, in version 4
		r, err := Decode(key, v.AppendTo(nil))
		if err != nil || *r.Offset != want {
			t.Errorf("version %d: %+v, %v; want %+v", version, r.Offset, err, want)
		}
	}
	// Legacy key version 0 reads as an offset commit.
	k0 := slices.Clone(key)
	k0[1] = 0
	if r, err := Decode(k0, nil); err != nil || r.Type != group.RecordOffsetCommit || r.Group != "g" {
		t.Errorf("key version 0: %+v, %v", r, err)
	}

	gk, _, _ := Encode(group.Record{Type: group.RecordGroupMetadata, Group: "g"})
	for version := int16(0); version <= 4; version++ {
		v := kmsg.NewGroupMetadataValue()
		v.Version, v.ProtocolType, v.Generation = version, "consumer", 2
		p, l, i := "range", "a", "i"
		v.Protocol, v.Leader, v.CurrentStateTimestamp = &p, &l, 11
		m := kmsg.NewGroupMetadataValueMember()
		m.MemberID, m.InstanceID, m.ClientID, m.ClientHost = "a", &i, "c", "/h"
		m.RebalanceTimeoutMillis, m.SessionTimeoutMillis, m.Subscription, m.Assignment = 300, 100, []byte{1}, []byte{2}
		v.Members = []kmsg.GroupMetadataValueMember{m}
		r, err := Decode(gk, v.AppendTo(nil))
		if err != nil {
			t.Fatalf("version %d: %v", version, err)
		}
		want := group.GroupMetadata{ProtocolType: "consumer", Generation: 2, Protocol: "range", Leader: "a", StateTimestamp: 11,
			Members: []group.MemberMetadata{{MemberID: "a", InstanceID: "i", ClientID: "c", ClientHost: "/h",
				RebalanceTimeout: 300, SessionTimeout: 100, Subscription: []byte{1}, Assignment: []byte{2}}}}
		if version < 3 {
			want.Members[0].InstanceID = ""
		}
		if version < 2 {
			want.StateTimestamp = -1
		}
		if version < 1 {
			want.Members[0].RebalanceTimeout = 100
		}
		if !reflect.DeepEqual(*r.Metadata, want) {
			t.Errorf("version %d: %+v, want %+v", version, *r.Metadata, want)
		}
	}
}

// TestEncodeRefuses checks the records Encode will not write.
func TestEncodeRefuses(t *testing.T) {
	for name, r := range map[string]group.Record{
		"consumer type without its record": {Type: group.RecordConsumerGroupEpoch, Group: "g"},
		"consumer record of another group": {Type: group.RecordConsumerGroupEpoch, Group: "g",
			Consumer: &consumer.Record{Type: consumer.RecordGroupEpoch, Group: "h"}},
		"unknown type":     {Type: 99, Group: "g"},
		"long group":       {Type: group.RecordGroupMetadata, Group: strings.Repeat("g", 1<<15)},
		"long metadata":    {Type: group.RecordOffsetCommit, Group: "g", Offset: &group.OffsetCommit{Metadata: strings.Repeat("m", 1<<15), LeaderEpoch: -1, ExpireTimestamp: -1}},
		"long member host": {Type: group.RecordGroupMetadata, Group: "g", Metadata: &group.GroupMetadata{Members: []group.MemberMetadata{{ClientHost: strings.Repeat("h", 1<<15)}}}},
	} {
		if _, _, err := Encode(r); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	// The longest string Kafka's int16 length carries is fine.
	r := group.Record{Type: group.RecordGroupMetadata, Group: strings.Repeat("g", 1<<15-1)}
	roundTrip(t, r)
}
