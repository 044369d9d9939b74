package consumer

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/groupd/groupd/internal/group/core"
)

// RecordType says what a record's key names. The records follow Kafka's
// consumer group records: the group's state is split per member, so a change
// to one member of a 10,000-member group writes that member's records, not
// the whole group.
type RecordType uint8

// Record types. The numbers leave the classic group's record types (1 and
// 2) free; they sort group-level records of a type together in key order,
// and Replay does not depend on the order anyway.
const (
	// RecordGroupEpoch is Kafka's ConsumerGroupMetadata: the group epoch
	// and the metadata hash of its subscribed topics. Keyed by group.
	RecordGroupEpoch RecordType = 16
	// RecordMemberMetadata is ConsumerGroupMemberMetadata: a member's
	// subscription and client details. Keyed by group and member.
	RecordMemberMetadata RecordType = 17
	// RecordTargetMember is ConsumerGroupTargetAssignmentMember: a
	// member's target assignment. Keyed by group and member.
	RecordTargetMember RecordType = 18
	// RecordTargetEpoch is ConsumerGroupTargetAssignmentMetadata: the
	// epoch of the target assignment. Keyed by group.
	RecordTargetEpoch RecordType = 19
	// RecordCurrentAssignment is ConsumerGroupCurrentMemberAssignment: a
	// member's epochs, state, assigned partitions (with KIP-1251
	// assignment epochs) and partitions pending revocation. Keyed by
	// group and member.
	RecordCurrentAssignment RecordType = 20
)

func (t RecordType) String() string {
	switch t {
	case RecordGroupEpoch:
		return "GroupEpoch"
	case RecordMemberMetadata:
		return "MemberMetadata"
	case RecordTargetMember:
		return "TargetMember"
	case RecordTargetEpoch:
		return "TargetEpoch"
	case RecordCurrentAssignment:
		return "CurrentAssignment"
	}
	return fmt.Sprintf("RecordType(%d)", uint8(t))
}

func (t RecordType) memberKeyed() bool {
	return t == RecordMemberMetadata || t == RecordTargetMember || t == RecordCurrentAssignment
}

// Record is a key and value for the coordinator store. Exactly one value
// field matches Type; a nil value is a tombstone (the key is deleted).
// Values share slices with the machine's state and must not be modified.
type Record struct {
	Type   RecordType
	Group  string
	Member string // member-keyed types only

	GroupEpoch     *GroupEpoch
	MemberMetadata *MemberMetadata
	Target         *TargetAssignment
	TargetEpoch    *TargetAssignmentEpoch
	Current        *CurrentAssignment
}

// GroupEpoch is the value of RecordGroupEpoch.
type GroupEpoch struct {
	Epoch int32
	// MetadataHash summarizes the subscribed topics (name, id, partition
	// count) the epoch was bumped for; 0 when none exists.
	MetadataHash uint64
}

// MemberMetadata is the value of RecordMemberMetadata. Empty strings stand
// for Kafka's nulls: an empty instance id, rack id or assignor is refused
// on the wire, so none is lost.
type MemberMetadata struct {
	InstanceID           string
	RackID               string
	ClientID             string
	ClientHost           string
	SubscribedTopicNames []string // sorted, distinct
	SubscribedTopicRegex string
	RebalanceTimeoutMs   int32
	ServerAssignor       string
	// Classic is set for a member that speaks the classic protocol
	// (JoinGroup, SyncGroup, Heartbeat) inside the consumer group, as
	// Kafka's ClassicMemberMetadata; nil for a consumer-protocol member.
	Classic *ClassicMemberMetadata
}

// ClassicMemberMetadata is what a classic member of a consumer group told
// in its latest JoinGroup: its session timeout and the protocols it offers,
// in its order of preference.
type ClassicMemberMetadata struct {
	SessionTimeoutMs   int32
	SupportedProtocols []ClassicProtocol
}

// ClassicProtocol is one protocol of a JoinGroup: a name (the client-side
// assignor) and its ConsumerProtocolSubscription bytes.
type ClassicProtocol struct {
	Name     string
	Metadata []byte
}

// TopicPartitions is one topic's partitions in a record, ascending. Epochs,
// when present, has one assignment epoch per partition.
type TopicPartitions struct {
	TopicID    TopicID
	Partitions []int32
	Epochs     []int32
}

// TargetAssignment is the value of RecordTargetMember.
type TargetAssignment struct {
	Partitions []TopicPartitions // sorted by topic id
}

// TargetAssignmentEpoch is the value of RecordTargetEpoch.
type TargetAssignmentEpoch struct {
	AssignmentEpoch int32
}

// CurrentAssignment is the value of RecordCurrentAssignment.
type CurrentAssignment struct {
	MemberEpoch         int32
	PreviousMemberEpoch int32
	State               MemberState
	Assigned            []TopicPartitions // with Epochs
	PendingRevocation   []TopicPartitions // with Epochs
}

// Tombstone reports whether the record deletes its key.
func (r Record) Tombstone() bool {
	switch r.Type {
	case RecordGroupEpoch:
		return r.GroupEpoch == nil
	case RecordMemberMetadata:
		return r.MemberMetadata == nil
	case RecordTargetMember:
		return r.Target == nil
	case RecordTargetEpoch:
		return r.TargetEpoch == nil
	case RecordCurrentAssignment:
		return r.Current == nil
	}
	return true
}

const (
	keyVersion   = 0
	valueVersion = 0
	// classicTrailer starts the classic part of a MemberMetadata value.
	classicTrailer = 1
)

// Key encodes the record's key: version, type, group, and member for
// member-keyed types. The keys of one group and type share a prefix.
func (r Record) Key() []byte { return r.AppendKey(nil) }

// AppendKey appends the encoding of Key to b.
func (r Record) AppendKey(b []byte) []byte {
	b = append(b, keyVersion, byte(r.Type))
	b = core.AppendString(b, r.Group)
	if r.Type.memberKeyed() {
		b = core.AppendString(b, r.Member)
	}
	return b
}

// Value encodes the record's value, nil for a tombstone.
func (r Record) Value() []byte {
	if r.Tombstone() {
		return nil
	}
	return r.AppendValue(nil)
}

// AppendValue appends the encoding of Value to b; a tombstone appends
// nothing.
func (r Record) AppendValue(b []byte) []byte {
	if r.Tombstone() {
		return b
	}
	b = binary.BigEndian.AppendUint16(b, valueVersion)
	switch r.Type {
	case RecordGroupEpoch:
		b = binary.AppendVarint(b, int64(r.GroupEpoch.Epoch))
		b = binary.BigEndian.AppendUint64(b, r.GroupEpoch.MetadataHash)
	case RecordMemberMetadata:
		v := r.MemberMetadata
		b = core.AppendString(b, v.InstanceID)
		b = core.AppendString(b, v.RackID)
		b = core.AppendString(b, v.ClientID)
		b = core.AppendString(b, v.ClientHost)
		b = binary.AppendUvarint(b, uint64(len(v.SubscribedTopicNames)))
		for _, n := range v.SubscribedTopicNames {
			b = core.AppendString(b, n)
		}
		b = core.AppendString(b, v.SubscribedTopicRegex)
		b = binary.AppendVarint(b, int64(v.RebalanceTimeoutMs))
		b = core.AppendString(b, v.ServerAssignor)
		// The classic part is a trailer, so that records written before
		// it existed (which end here) still decode, and a
		// consumer-protocol member's record is unchanged.
		if c := v.Classic; c != nil {
			b = append(b, classicTrailer)
			b = binary.AppendVarint(b, int64(c.SessionTimeoutMs))
			b = binary.AppendUvarint(b, uint64(len(c.SupportedProtocols)))
			for _, p := range c.SupportedProtocols {
				b = core.AppendString(b, p.Name)
				b = core.AppendBytes(b, p.Metadata)
			}
		}
	case RecordTargetMember:
		b = appendTopicPartitions(b, r.Target.Partitions, false)
	case RecordTargetEpoch:
		b = binary.AppendVarint(b, int64(r.TargetEpoch.AssignmentEpoch))
	case RecordCurrentAssignment:
		v := r.Current
		b = binary.AppendVarint(b, int64(v.MemberEpoch))
		b = binary.AppendVarint(b, int64(v.PreviousMemberEpoch))
		b = append(b, byte(v.State))
		b = appendTopicPartitions(b, v.Assigned, true)
		b = appendTopicPartitions(b, v.PendingRevocation, true)
	}
	return b
}

// appendTopicPartitions writes topics with partitions as deltas from the
// previous partition, which keeps a member's run of partitions near one byte
// each.
func appendTopicPartitions(b []byte, ts []TopicPartitions, epochs bool) []byte {
	b = binary.AppendUvarint(b, uint64(len(ts)))
	for _, t := range ts {
		b = append(b, t.TopicID[:]...)
		b = binary.AppendUvarint(b, uint64(len(t.Partitions)))
		prev := int64(-1)
		for _, p := range t.Partitions {
			b = binary.AppendUvarint(b, uint64(int64(p)-prev-1))
			prev = int64(p)
		}
		if epochs {
			for _, e := range t.Epochs {
				b = binary.AppendVarint(b, int64(e))
			}
		}
	}
	return b
}

var errCorrupt = fmt.Errorf("consumer: %w", core.ErrCorrupt)

// reader reads record values; see core.Reader.
type reader struct{ core.Reader }

// topicPartitions reads what appendTopicPartitions wrote and insists on its
// canonical form: topics ascending by id, none empty, partitions ascending
// and distinct within int32. The machine's partition sets rely on it.
func (r *reader) topicPartitions(epochs bool) []TopicPartitions {
	n := r.Count(17)
	var out []TopicPartitions
	for i := 0; i < n && r.Err == nil; i++ {
		var t TopicPartitions
		copy(t.TopicID[:], r.Take(16))
		if i > 0 && compareIDs(out[i-1].TopicID, t.TopicID) >= 0 {
			r.Fail()
		}
		np := r.Count(1)
		if np == 0 {
			r.Fail()
		}
		t.Partitions = make([]int32, 0, np)
		prev := int64(-1)
		for j := 0; j < np && r.Err == nil; j++ {
			p := prev + 1 + int64(r.Uvarint())
			if p > math.MaxInt32 {
				r.Fail()
			}
			t.Partitions = append(t.Partitions, int32(p))
			prev = p
		}
		if epochs {
			t.Epochs = make([]int32, 0, np)
			for j := 0; j < np && r.Err == nil; j++ {
				t.Epochs = append(t.Epochs, r.Int32())
			}
		}
		out = append(out, t)
	}
	return out
}

// DecodeRecord decodes a key and value written by Record.Key and
// Record.Value; a nil value decodes to a tombstone. It never panics on
// corrupt input, and whatever it accepts encodes back to the same bytes.
func DecodeRecord(key, value []byte) (Record, error) {
	var rec Record
	if len(key) < 2 || key[0] != keyVersion {
		return rec, errCorrupt
	}
	rec.Type = RecordType(key[1])
	switch rec.Type {
	case RecordGroupEpoch, RecordMemberMetadata, RecordTargetMember, RecordTargetEpoch, RecordCurrentAssignment:
	default:
		return Record{}, fmt.Errorf("consumer: unknown record type %d", key[1])
	}
	kr := reader{core.NewReader(key[2:])}
	rec.Group = kr.String()
	if rec.Type.memberKeyed() {
		rec.Member = kr.String()
	}
	if kr.Err != nil || len(kr.B) != 0 {
		return Record{}, errCorrupt
	}
	if value == nil {
		return rec, nil
	}
	if len(value) < 2 {
		return Record{}, errCorrupt
	}
	if v := binary.BigEndian.Uint16(value); v != valueVersion {
		return Record{}, fmt.Errorf("consumer: unknown record value version %d", v)
	}
	r := reader{core.NewReader(value[2:])}
	switch rec.Type {
	case RecordGroupEpoch:
		v := &GroupEpoch{Epoch: r.Int32()}
		if h := r.Take(8); r.Err == nil {
			v.MetadataHash = binary.BigEndian.Uint64(h)
		}
		rec.GroupEpoch = v
	case RecordMemberMetadata:
		v := &MemberMetadata{}
		v.InstanceID = r.String()
		v.RackID = r.String()
		v.ClientID = r.String()
		v.ClientHost = r.String()
		n := r.Count(1)
		for i := 0; i < n && r.Err == nil; i++ {
			name := r.String()
			// Sorted and distinct, as the machine writes them.
			if i > 0 && v.SubscribedTopicNames[i-1] >= name {
				r.Fail()
			}
			v.SubscribedTopicNames = append(v.SubscribedTopicNames, name)
		}
		v.SubscribedTopicRegex = r.String()
		v.RebalanceTimeoutMs = r.Int32()
		v.ServerAssignor = r.String()
		if len(r.B) > 0 && r.Err == nil {
			if t := r.Take(1); r.Err == nil && t[0] != classicTrailer {
				r.Fail()
			}
			c := &ClassicMemberMetadata{SessionTimeoutMs: r.Int32()}
			n := r.Count(2)
			for i := 0; i < n && r.Err == nil; i++ {
				c.SupportedProtocols = append(c.SupportedProtocols, ClassicProtocol{Name: r.String(), Metadata: r.Bytes()})
			}
			v.Classic = c
		}
		rec.MemberMetadata = v
	case RecordTargetMember:
		rec.Target = &TargetAssignment{Partitions: r.topicPartitions(false)}
	case RecordTargetEpoch:
		rec.TargetEpoch = &TargetAssignmentEpoch{AssignmentEpoch: r.Int32()}
	case RecordCurrentAssignment:
		v := &CurrentAssignment{}
		v.MemberEpoch = r.Int32()
		v.PreviousMemberEpoch = r.Int32()
		if s := r.Take(1); r.Err == nil {
			v.State = MemberState(int8(s[0]))
		}
		v.Assigned = r.topicPartitions(true)
		v.PendingRevocation = r.topicPartitions(true)
		rec.Current = v
	}
	if r.Err != nil || len(r.B) != 0 {
		return Record{}, errCorrupt
	}
	return rec, nil
}

// toPartSet turns record partitions into a partition set, sharing the
// slices. Decoded records are canonical, so no sorting is needed.
func toPartSet(ts []TopicPartitions, withEpochs bool) partSet {
	if len(ts) == 0 {
		return nil
	}
	s := make(partSet, len(ts))
	for i, t := range ts {
		s[i] = topicParts{id: t.TopicID, parts: t.Partitions}
		if withEpochs {
			s[i].epochs = t.Epochs
		}
	}
	return s
}

// fromPartSet is the reverse of toPartSet.
func fromPartSet(s partSet) []TopicPartitions {
	if len(s) == 0 {
		return nil
	}
	out := make([]TopicPartitions, len(s))
	for i, t := range s {
		out[i] = TopicPartitions{TopicID: t.id, Partitions: t.parts, Epochs: t.epochs}
	}
	return out
}
