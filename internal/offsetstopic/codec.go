// Package offsetstopic is the codec between the coordinator's records
// (group.Record) and the records of the compacted __consumer_offsets topic.
//
// The topic is Kafka's, and tools read it: Burrow, Kafka's console consumer
// with its OffsetsMessageFormatter, or anyone with kmsg. So the records
// Kafka has schemas for are written with Kafka's schemas, in the versions
// Kafka 4.x writes:
//
//   - An offset commit is key version 1, OffsetCommitKey (group, topic,
//     partition), with OffsetCommitValue version 3 (offset, leader epoch,
//     metadata, commit timestamp), or version 1 (without the leader epoch,
//     with the expire timestamp) when the commit has an expire timestamp:
//     only OffsetCommit versions 2 to 4 set one, and they carry no leader
//     epoch.
//   - A classic group's metadata is key version 2, GroupMetadataKey, with
//     GroupMetadataValue version 3. Empty protocol, leader and instance ids
//     are Kafka's nulls. group.MemberMetadata tells a nil subscription or
//     assignment from an empty one, which Kafka's non-nullable bytes
//     cannot; a value with a nil one is written as version 4, Kafka's
//     flexible version (which Kafka 3.5 and later read), with each such
//     member carrying tagged field 18244 (0x4744, "GD") whose one byte
//     says which is nil (bit 0 the subscription, bit 1 the assignment).
//     Kafka's schema declares that version and its readers keep unknown
//     tagged fields apart, so tools still see a valid GroupMetadataValue.
//
// The records Kafka has no schema for (a group's rebalance history), and
// the consumer-group records, keep groupd's own encoding (group.Record.Key
// and Value) behind a key version Kafka never uses: 0x4700 plus the
// record type, so 0x4703 for a rebalance and 0x4710 to 0x4714 for the
// consumer-group records. Kafka numbers its record types (the key
// version) from 0 upwards, one per record schema, and has used 0 to 24 so
// far; 0x4700 (18176) and up leaves it room for thousands more. Kafka's
// coordinator skips a key version it does not know with a warning ("It
// could be a left over from an aborted upgrade"), and its console
// formatters skip such records; Burrow logs and skips them.
//
// Kafka's own KIP-848 records (key versions 3 to 8) are not used for the
// consumer-group records: the Kafka schema checked
// (ConsumerGroupCurrentMemberAssignmentValue version 0) has no
// per-partition assignment epoch, which groupd keeps (KIP-1251), and a
// record of Kafka's type that a Kafka coordinator would misread is worse
// than one it skips. Mapping them is possible later, record by record.
//
// A nil value is a tombstone for its key, as in Kafka's compacted topic.
// Every record of one logical key is encoded to the same key bytes,
// which is what compaction needs; Decode therefore refuses groupd's key
// range for the two record types that have Kafka keys.
package offsetstopic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/group"
)

// Key versions (Kafka 4.x calls them record types).
const (
	// KeyLegacyOffsetCommit is Kafka's version 0 offset commit key: the
	// same layout as KeyOffsetCommit. Decode reads it; Encode never
	// writes it.
	KeyLegacyOffsetCommit int16 = 0
	// KeyOffsetCommit is Kafka's OffsetCommitKey.
	KeyOffsetCommit int16 = 1
	// KeyGroupMetadata is Kafka's GroupMetadataKey.
	KeyGroupMetadata int16 = 2

	// KeyGroupdBase is the first key version of groupd's own records;
	// the low byte is the group.RecordType.
	KeyGroupdBase int16 = 0x4700
	// KeyGroupdLast is the last key version of groupd's range.
	KeyGroupdLast int16 = 0x47ff
)

// Value versions written.
const (
	offsetValueVersion       = 3
	offsetValueVersionExpire = 1
	groupValueVersion        = 3
	groupValueVersionTagged  = 4
	maxOffsetValueVersion    = 4
	maxGroupValueVersion     = 4
)

// MemberNilTag is the tagged field of a GroupMetadataValue member (version
// 4) that says which of its subscription (bit 0) and assignment (bit 1)
// is nil rather than empty.
const MemberNilTag = 0x4744

const (
	nilSubscription = 1 << 0
	nilAssignment   = 1 << 1
)

// ErrUnrepresentable is returned by Encode for a record that the format
// cannot carry without loss.
var ErrUnrepresentable = errors.New("offsetstopic: record cannot be encoded without loss")

// ErrCorrupt is returned by Decode for bytes that are not a record.
var ErrCorrupt = errors.New("offsetstopic: corrupt record")

// UnknownKeyError is returned by Decode for a key version that is neither
// Kafka's offset commit or group metadata nor groupd's: Kafka's other
// record types (KIP-848, share and streams groups) or a future one. The
// caller decides whether to skip it, as Kafka does, or to stop.
type UnknownKeyError struct{ Version int16 }

func (e *UnknownKeyError) Error() string {
	return fmt.Sprintf("offsetstopic: unknown key version %d", e.Version)
}

// Encode returns the key and value of r on __consumer_offsets; the value
// is nil for a tombstone.
func Encode(r group.Record) (key, value []byte, err error) {
	switch r.Type {
	case group.RecordOffsetCommit:
		return encodeOffsetCommit(r)
	case group.RecordGroupMetadata:
		return encodeGroupMetadata(r)
	case group.RecordRebalance:
	default:
		if !r.Type.Consumer() {
			return nil, nil, fmt.Errorf("offsetstopic: unknown record type %v", r.Type)
		}
		// group.Record's encoding needs the consumer record, of the
		// same type and group.
		if c := r.Consumer; c == nil || group.RecordType(c.Type) != r.Type || c.Group != r.Group {
			return nil, nil, fmt.Errorf("offsetstopic: %v record without its consumer record", r.Type)
		}
	}
	gk := r.Key()
	key = binary.BigEndian.AppendUint16(make([]byte, 0, len(gk)), uint16(KeyGroupdBase)|uint16(r.Type))
	key = append(key, gk[2:]...)
	return key, r.Value(), nil
}

// Decode decodes a record of __consumer_offsets; a nil value is a
// tombstone. It never panics, and a record it returns encodes (Encode)
// to bytes that decode to the same record.
func Decode(key, value []byte) (group.Record, error) {
	if len(key) < 2 {
		return group.Record{}, ErrCorrupt
	}
	v := int16(binary.BigEndian.Uint16(key))
	switch {
	case v == KeyLegacyOffsetCommit || v == KeyOffsetCommit:
		return decodeOffsetCommit(key, value)
	case v == KeyGroupMetadata:
		return decodeGroupMetadata(key, value)
	case v >= KeyGroupdBase && v <= KeyGroupdLast:
		return decodeGroupd(key, value)
	}
	return group.Record{}, &UnknownKeyError{Version: v}
}

// checkString refuses a string longer than Kafka's int16 length prefix.
func checkString(s string) error {
	if len(s) > math.MaxInt16 {
		return fmt.Errorf("%w: a string of %d bytes", ErrUnrepresentable, len(s))
	}
	return nil
}

func encodeOffsetCommit(r group.Record) (key, value []byte, err error) {
	for _, s := range []string{r.Group, r.Topic} {
		if err := checkString(s); err != nil {
			return nil, nil, err
		}
	}
	k := kmsg.NewOffsetCommitKey()
	k.Version = KeyOffsetCommit
	k.Group, k.Topic, k.Partition = r.Group, r.Topic, r.Partition
	key = k.AppendTo(nil)
	o := r.Offset
	if o == nil {
		return key, nil, nil
	}
	if err := checkString(o.Metadata); err != nil {
		return nil, nil, err
	}
	v := kmsg.NewOffsetCommitValue()
	v.Offset, v.Metadata, v.CommitTimestamp = o.Offset, o.Metadata, o.CommitTimestamp
	if o.ExpireTimestamp == -1 {
		v.Version = offsetValueVersion
		v.LeaderEpoch = o.LeaderEpoch
	} else {
		// As Kafka: version 1 is the one with an expire timestamp,
		// and it has no leader epoch.
		if o.LeaderEpoch != -1 {
			return nil, nil, fmt.Errorf("%w: an offset commit with both a leader epoch and an expire timestamp", ErrUnrepresentable)
		}
		v.Version = offsetValueVersionExpire
		v.ExpireTimestamp = o.ExpireTimestamp
	}
	return key, v.AppendTo(nil), nil
}

func decodeOffsetCommit(key, value []byte) (group.Record, error) {
	var k kmsg.OffsetCommitKey
	if err := k.ReadFrom(key); err != nil || len(k.AppendTo(nil)) != len(key) {
		return group.Record{}, ErrCorrupt
	}
	rec := group.Record{Type: group.RecordOffsetCommit, Group: k.Group, Topic: k.Topic, Partition: k.Partition}
	if value == nil {
		return rec, nil
	}
	var v kmsg.OffsetCommitValue
	if err := readValue(&v, value, maxOffsetValueVersion); err != nil {
		return group.Record{}, err
	}
	o := &group.OffsetCommit{
		Offset:          v.Offset,
		LeaderEpoch:     -1,
		Metadata:        v.Metadata,
		CommitTimestamp: v.CommitTimestamp,
		ExpireTimestamp: -1,
	}
	if v.Version >= 3 {
		o.LeaderEpoch = v.LeaderEpoch
	}
	if v.Version == 1 {
		o.ExpireTimestamp = v.ExpireTimestamp
	}
	if err := checkString(o.Metadata); err != nil {
		return group.Record{}, ErrCorrupt
	}
	rec.Offset = o
	return rec, nil
}

// versionedValue is a kmsg record value.
type versionedValue interface {
	ReadFrom([]byte) error
	AppendTo([]byte) []byte
}

// readValue reads a value of a version from 0 to max into v and insists
// that it spans exactly the input: kmsg does not check for trailing bytes.
func readValue(v versionedValue, value []byte, max int16) error {
	if len(value) < 2 {
		return ErrCorrupt
	}
	if ver := int16(binary.BigEndian.Uint16(value)); ver < 0 || ver > max {
		return fmt.Errorf("offsetstopic: unknown value version %d", ver)
	}
	if err := v.ReadFrom(value); err != nil || len(v.AppendTo(nil)) != len(value) {
		return ErrCorrupt
	}
	return nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func encodeGroupMetadata(r group.Record) (key, value []byte, err error) {
	if err := checkString(r.Group); err != nil {
		return nil, nil, err
	}
	k := kmsg.NewGroupMetadataKey()
	k.Version = KeyGroupMetadata
	k.Group = r.Group
	key = k.AppendTo(nil)
	m := r.Metadata
	if m == nil {
		return key, nil, nil
	}
	for _, s := range []string{m.ProtocolType, m.Protocol, m.Leader} {
		if err := checkString(s); err != nil {
			return nil, nil, err
		}
	}
	v := kmsg.NewGroupMetadataValue()
	v.Version = groupValueVersion
	v.ProtocolType = m.ProtocolType
	v.Generation = m.Generation
	v.Protocol = nullable(m.Protocol)
	v.Leader = nullable(m.Leader)
	v.CurrentStateTimestamp = m.StateTimestamp
	if len(m.Members) > 0 {
		v.Members = make([]kmsg.GroupMetadataValueMember, len(m.Members))
	}
	for i, mm := range m.Members {
		for _, s := range []string{mm.MemberID, mm.InstanceID, mm.ClientID, mm.ClientHost} {
			if err := checkString(s); err != nil {
				return nil, nil, err
			}
		}
		vm := &v.Members[i]
		vm.Default()
		vm.MemberID = mm.MemberID
		vm.InstanceID = nullable(mm.InstanceID)
		vm.ClientID = mm.ClientID
		vm.ClientHost = mm.ClientHost
		vm.RebalanceTimeoutMillis = mm.RebalanceTimeout
		vm.SessionTimeoutMillis = mm.SessionTimeout
		vm.Subscription = mm.Subscription
		vm.Assignment = mm.Assignment
		var nils byte
		if mm.Subscription == nil {
			nils |= nilSubscription
		}
		if mm.Assignment == nil {
			nils |= nilAssignment
		}
		if nils != 0 {
			v.Version = groupValueVersionTagged
			vm.UnknownTags.Set(MemberNilTag, []byte{nils})
		}
	}
	return key, v.AppendTo(nil), nil
}

func decodeGroupMetadata(key, value []byte) (group.Record, error) {
	var k kmsg.GroupMetadataKey
	if err := k.ReadFrom(key); err != nil || len(k.AppendTo(nil)) != len(key) {
		return group.Record{}, ErrCorrupt
	}
	rec := group.Record{Type: group.RecordGroupMetadata, Group: k.Group}
	if value == nil {
		return rec, nil
	}
	var v kmsg.GroupMetadataValue
	if err := readValue(&v, value, maxGroupValueVersion); err != nil {
		return group.Record{}, err
	}
	m := &group.GroupMetadata{
		ProtocolType:   v.ProtocolType,
		Generation:     v.Generation,
		Protocol:       deref(v.Protocol),
		Leader:         deref(v.Leader),
		StateTimestamp: v.CurrentStateTimestamp,
	}
	strs := []string{m.ProtocolType, m.Protocol, m.Leader}
	if len(v.Members) > 0 {
		m.Members = make([]group.MemberMetadata, len(v.Members))
	}
	for i := range v.Members {
		vm := &v.Members[i]
		mm := group.MemberMetadata{
			MemberID:         vm.MemberID,
			InstanceID:       deref(vm.InstanceID),
			ClientID:         vm.ClientID,
			ClientHost:       vm.ClientHost,
			RebalanceTimeout: vm.RebalanceTimeoutMillis,
			SessionTimeout:   vm.SessionTimeoutMillis,
			Subscription:     append([]byte{}, vm.Subscription...),
			Assignment:       append([]byte{}, vm.Assignment...),
		}
		if v.Version == 0 {
			// Before version 1 the session timeout was the
			// rebalance timeout too, as Kafka reads it.
			mm.RebalanceTimeout = mm.SessionTimeout
		}
		var nils byte
		bad := false
		vm.UnknownTags.Each(func(tag uint32, b []byte) {
			if tag != MemberNilTag {
				return // a field of a later Kafka: ignored, as Kafka does
			}
			if len(b) != 1 || b[0] == 0 || b[0]&^(nilSubscription|nilAssignment) != 0 {
				bad = true
				return
			}
			nils = b[0]
		})
		if bad {
			return group.Record{}, ErrCorrupt
		}
		if nils&nilSubscription != 0 {
			if len(mm.Subscription) > 0 {
				return group.Record{}, ErrCorrupt
			}
			mm.Subscription = nil
		}
		if nils&nilAssignment != 0 {
			if len(mm.Assignment) > 0 {
				return group.Record{}, ErrCorrupt
			}
			mm.Assignment = nil
		}
		strs = append(strs, mm.MemberID, mm.InstanceID, mm.ClientID, mm.ClientHost)
		m.Members[i] = mm
	}
	// Version 4's compact strings have no int16 limit; Kafka writes
	// version 3, whose strings do, and so does Encode.
	for _, s := range strs {
		if checkString(s) != nil {
			return group.Record{}, ErrCorrupt
		}
	}
	rec.Metadata = m
	return rec, nil
}

func decodeGroupd(key, value []byte) (group.Record, error) {
	t := group.RecordType(key[1])
	if t == group.RecordOffsetCommit || t == group.RecordGroupMetadata {
		// These have Kafka's keys; a second key for the same record
		// would defeat compaction.
		return group.Record{}, fmt.Errorf("%w: %v in groupd's key range", ErrCorrupt, t)
	}
	gk := make([]byte, 0, len(key))
	gk = append(gk, 0, byte(t))
	gk = append(gk, key[2:]...)
	r, err := group.DecodeRecord(gk, value)
	if err != nil {
		return group.Record{}, err
	}
	return r, nil
}
