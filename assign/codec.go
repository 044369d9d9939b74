package assign

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The consumer protocol blobs are not Kafka requests: they are opaque bytes
// inside JoinGroup/SyncGroup that only the group leader (or a KIP-848
// coordinator converting a classic group) parses. kmsg can read them, but it
// rejects the truncated blobs real clients send (kafka-go declares v1 and
// omits OwnedPartitions), and it allocates per topic name. The codecs here
// are hand-written so they can be lenient and can intern names; tests check
// them byte-for-byte against kmsg.

// Metadata is a decoded ConsumerProtocolSubscription (JoinGroup protocol
// metadata for protocol type "consumer").
type Metadata struct {
	// Version is the version the blob declared. Versions above 3 are
	// read as version 3, as Kafka does, and trailing bytes are ignored.
	Version int16
	Topics  []string
	// UserData is nil when absent or null.
	UserData []byte
	// Owned is v1+; nil when absent.
	Owned []TopicPartitions
	// Generation is v2+; -1 when absent.
	Generation int32
	// Rack is v3+; empty when absent or null.
	Rack string
}

// MaxMetadataVersion is the highest ConsumerProtocolSubscription and
// ConsumerProtocolAssignment version this package writes.
const MaxMetadataVersion = 3

// ErrMalformed reports a consumer protocol blob too broken to read even
// leniently: a missing or negative version, or an unreadable topic list.
var ErrMalformed = errors.New("assign: malformed consumer protocol data")

// Member returns the assignor's view of a member with this metadata.
func (md *Metadata) Member(memberID, instanceID string) Member {
	return Member{
		ID:         memberID,
		InstanceID: instanceID,
		Topics:     md.Topics,
		Owned:      md.Owned,
		Generation: md.Generation,
		Rack:       md.Rack,
		UserData:   md.UserData,
	}
}

// DecodeMetadata reads a ConsumerProtocolSubscription.
//
// Only the version and the topic list are required. Any later field that is
// missing or cut short is treated as absent: kafka-go writes version 1 with no
// OwnedPartitions (segmentio/kafka-go#1156), and other clients have shipped
// similar bugs; refusing those blobs would fail the whole rebalance.
func DecodeMetadata(b []byte) (Metadata, error) {
	return decodeMetadata(b, nil)
}

func decodeMetadata(b []byte, in *interner) (Metadata, error) {
	md := Metadata{Generation: -1}
	r := reader{b: b, in: in}
	v, ok := r.int16()
	if !ok || v < 0 {
		return md, fmt.Errorf("%w: bad subscription version", ErrMalformed)
	}
	md.Version = v
	if md.Topics, ok = r.strings(); !ok {
		return md, fmt.Errorf("%w: bad subscription topics", ErrMalformed)
	}
	// From here on, a short read ends decoding without an error.
	var ud []byte
	if ud, ok = r.bytes(); !ok {
		return md, nil
	}
	md.UserData = ud
	if v < 1 {
		return md, nil
	}
	var owned []TopicPartitions
	if owned, ok = r.topicPartitions(); !ok {
		return md, nil
	}
	md.Owned = owned
	if v < 2 {
		return md, nil
	}
	var gen int32
	if gen, ok = r.int32(); !ok {
		return md, nil
	}
	md.Generation = gen
	if v < 3 {
		return md, nil
	}
	if rack, ok := r.nullableString(); ok {
		md.Rack = rack
	}
	return md, nil
}

// Encode writes the metadata as a ConsumerProtocolSubscription of the given
// version (clamped to 0..3); fields the version lacks are dropped.
func (md *Metadata) Encode(version int16) []byte {
	return md.AppendTo(nil, version)
}

// AppendTo is Encode appending to dst.
func (md *Metadata) AppendTo(dst []byte, version int16) []byte {
	version = max(0, min(version, MaxMetadataVersion))
	dst = binary.BigEndian.AppendUint16(dst, uint16(version))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(md.Topics)))
	for _, t := range md.Topics {
		dst = appendString(dst, t)
	}
	dst = appendBytes(dst, md.UserData)
	if version >= 1 {
		dst = appendTopicPartitions(dst, md.Owned)
	}
	if version >= 2 {
		dst = binary.BigEndian.AppendUint32(dst, uint32(md.Generation))
	}
	if version >= 3 {
		if md.Rack == "" {
			dst = binary.BigEndian.AppendUint16(dst, 0xffff)
		} else {
			dst = appendString(dst, md.Rack)
		}
	}
	return dst
}

// DecodeAssignment reads a ConsumerProtocolAssignment (the SyncGroup member
// assignment). All versions 0–3 share one layout. An empty blob is an empty
// assignment, which is what the coordinator hands a member the leader left
// out. Missing user data is treated as absent.
func DecodeAssignment(b []byte) (version int16, partitions []TopicPartitions, userData []byte, err error) {
	if len(b) == 0 {
		return 0, nil, nil, nil
	}
	r := reader{b: b}
	v, ok := r.int16()
	if !ok || v < 0 {
		return 0, nil, nil, fmt.Errorf("%w: bad assignment version", ErrMalformed)
	}
	if partitions, ok = r.topicPartitions(); !ok {
		return v, nil, nil, fmt.Errorf("%w: bad assigned partitions", ErrMalformed)
	}
	userData, _ = r.bytes()
	return v, partitions, userData, nil
}

// EncodeAssignment writes a ConsumerProtocolAssignment.
func EncodeAssignment(version int16, partitions []TopicPartitions, userData []byte) []byte {
	return AppendAssignment(nil, version, partitions, userData)
}

// AppendAssignment is EncodeAssignment appending to dst.
func AppendAssignment(dst []byte, version int16, partitions []TopicPartitions, userData []byte) []byte {
	version = max(0, min(version, MaxMetadataVersion))
	dst = binary.BigEndian.AppendUint16(dst, uint16(version))
	dst = appendTopicPartitions(dst, partitions)
	return appendBytes(dst, userData)
}

// assignmentSize is the encoded size of an assignment, so that many
// assignments can be written into one buffer without regrowing it.
func assignmentSize(partitions []TopicPartitions, userData []byte) int {
	n := 2 + 4 + 4 + len(userData)
	for _, tp := range partitions {
		n += 2 + len(tp.Topic) + 4 + 4*len(tp.Partitions)
	}
	return n
}

// StickyUserData is the sticky assignor's user data (Java's
// StickyAssignor "StickyAssignorUserData"): the member's current assignment
// and, from KIP-341 on, its generation. Old members omit the generation.
type StickyUserData struct {
	Owned      []TopicPartitions
	Generation int32 // -1 when absent
}

// DecodeStickyUserData reads StickyAssignor user data (V0 or V1). The
// cooperative-sticky assignor's user data, a bare int32 generation, is
// accepted too.
func DecodeStickyUserData(b []byte) (StickyUserData, bool) {
	sd := StickyUserData{Generation: -1}
	if len(b) == 4 {
		sd.Generation = int32(binary.BigEndian.Uint32(b))
		return sd, true
	}
	r := reader{b: b}
	tps, ok := r.topicPartitions()
	if !ok {
		return sd, false
	}
	sd.Owned = tps
	if g, ok := r.int32(); ok {
		sd.Generation = g
	}
	return sd, true
}

// EncodeStickyUserData writes StickyAssignor user data V1 (with generation).
func EncodeStickyUserData(sd StickyUserData) []byte {
	dst := appendTopicPartitions(nil, sd.Owned)
	return binary.BigEndian.AppendUint32(dst, uint32(sd.Generation))
}

func appendString(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.BigEndian.AppendUint32(dst, 0xffffffff)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

func appendTopicPartitions(dst []byte, tps []TopicPartitions) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(tps)))
	for _, tp := range tps {
		dst = appendString(dst, tp.Topic)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(tp.Partitions)))
		for _, p := range tp.Partitions {
			dst = binary.BigEndian.AppendUint32(dst, uint32(p))
		}
	}
	return dst
}

// interner returns one string per distinct topic name, so decoding a
// thousand members' subscriptions to the same topics allocates each name
// once. A map lookup keyed by string(bytes) does not allocate.
type interner struct{ m map[string]string }

func (in *interner) intern(b []byte) string {
	if in == nil {
		return string(b)
	}
	if s, ok := in.m[string(b)]; ok {
		return s
	}
	s := string(b)
	if in.m == nil {
		in.m = make(map[string]string)
	}
	in.m[s] = s
	return s
}

// reader reads big-endian Kafka primitives; every method reports false on a
// short or invalid read instead of panicking.
type reader struct {
	b  []byte
	in *interner
}

func (r *reader) int16() (int16, bool) {
	if len(r.b) < 2 {
		return 0, false
	}
	v := int16(binary.BigEndian.Uint16(r.b))
	r.b = r.b[2:]
	return v, true
}

func (r *reader) int32() (int32, bool) {
	if len(r.b) < 4 {
		return 0, false
	}
	v := int32(binary.BigEndian.Uint32(r.b))
	r.b = r.b[4:]
	return v, true
}

// arrayLen reads an array length; -1 (null) reads as 0. The length is
// checked against the bytes left (each element needs at least min bytes) so
// a corrupt count cannot trigger a huge allocation.
func (r *reader) arrayLen(minElem int) (int, bool) {
	n, ok := r.int32()
	if !ok || n < -1 {
		return 0, false
	}
	if n == -1 {
		return 0, true
	}
	if int64(n)*int64(minElem) > int64(len(r.b)) {
		return 0, false
	}
	return int(n), true
}

func (r *reader) stringBytes() ([]byte, bool) {
	n, ok := r.int16()
	if !ok || n < 0 || int(n) > len(r.b) {
		return nil, false
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s, true
}

func (r *reader) nullableString() (string, bool) {
	if len(r.b) >= 2 && int16(binary.BigEndian.Uint16(r.b)) == -1 {
		r.b = r.b[2:]
		return "", true
	}
	s, ok := r.stringBytes()
	if !ok {
		return "", false
	}
	return r.in.intern(s), true
}

func (r *reader) strings() ([]string, bool) {
	n, ok := r.arrayLen(2)
	if !ok {
		return nil, false
	}
	out := make([]string, n)
	for i := range out {
		s, ok := r.stringBytes()
		if !ok {
			return nil, false
		}
		out[i] = r.in.intern(s)
	}
	return out, true
}

func (r *reader) bytes() ([]byte, bool) {
	n, ok := r.int32()
	if !ok || n < -1 || int(n) > len(r.b) {
		return nil, false
	}
	if n == -1 {
		return nil, true
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b, true
}

// topicPartitions reads [topic string, partitions [int32]]. All partition
// numbers of one blob share a single backing array.
func (r *reader) topicPartitions() ([]TopicPartitions, bool) {
	n, ok := r.arrayLen(6)
	if !ok {
		return nil, false
	}
	if n == 0 {
		return nil, true
	}
	out := make([]TopicPartitions, n)
	// Size the shared backing array by a first pass over the counts.
	total, probe := 0, reader{b: r.b}
	for range n {
		if _, ok := probe.stringBytes(); !ok {
			return nil, false
		}
		c, ok := probe.arrayLen(4)
		if !ok {
			return nil, false
		}
		total += c
		probe.b = probe.b[4*c:]
	}
	back := make([]int32, total)
	for i := range out {
		s, _ := r.stringBytes()
		c, _ := r.arrayLen(4)
		ps := back[:c:c]
		back = back[c:]
		for j := range ps {
			ps[j] = int32(binary.BigEndian.Uint32(r.b[4*j:]))
		}
		r.b = r.b[4*c:]
		out[i] = TopicPartitions{Topic: r.in.intern(s), Partitions: ps}
	}
	return out, true
}
