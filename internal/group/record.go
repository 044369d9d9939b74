package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/groupd/groupd/internal/inspect"
)

// RecordType says what a record's key names.
type RecordType uint8

// Record types. Group metadata sorts before offsets in key order so a store
// scan meets a group before its offsets (Replay does not rely on it).
const (
	RecordGroupMetadata RecordType = 1
	RecordOffsetCommit  RecordType = 2
	// RecordRebalance is one finished rebalance of a group's history,
	// keyed by group and sequence number.
	RecordRebalance RecordType = 3
)

func (t RecordType) String() string {
	switch t {
	case RecordGroupMetadata:
		return "GroupMetadata"
	case RecordOffsetCommit:
		return "OffsetCommit"
	case RecordRebalance:
		return "Rebalance"
	}
	return fmt.Sprintf("RecordType(%d)", uint8(t))
}

// Record is a key and value for the coordinator store. A nil Metadata (for
// RecordGroupMetadata), Offset (for RecordOffsetCommit) or Rebalance (for
// RecordRebalance) is a tombstone: the key is deleted.
type Record struct {
	Type      RecordType
	Group     string
	Topic     string // offsets only
	Partition int32  // offsets only
	Seq       uint64 // rebalances only
	Metadata  *GroupMetadata
	Offset    *OffsetCommit
	// Rebalance's Group and Seq are the record's.
	Rebalance *inspect.Rebalance
}

// GroupMetadata is the whole persisted state of a classic group, like Kafka's
// GroupMetadataValue: written when a group is created, when its join phase
// ends Empty, when the leader's assignment is accepted, and on static member
// replacement.
type GroupMetadata struct {
	ProtocolType string
	Generation   int32
	Protocol     string
	Leader       string
	// StateTimestamp is when the group entered its current state (unix ms);
	// offsets of an Empty group expire relative to it.
	StateTimestamp int64
	Members        []MemberMetadata
}

// MemberMetadata is one member in GroupMetadata.
type MemberMetadata struct {
	MemberID         string
	InstanceID       string
	ClientID         string
	ClientHost       string
	RebalanceTimeout int32 // ms
	SessionTimeout   int32 // ms
	// Subscription is the member's metadata for the group's protocol.
	Subscription []byte
	Assignment   []byte
}

// OffsetCommit is a committed offset.
type OffsetCommit struct {
	Offset          int64
	LeaderEpoch     int32
	Metadata        string
	CommitTimestamp int64 // unix ms
	ExpireTimestamp int64 // unix ms; -1 unless an old client asked for a retention
}

// Tombstone reports whether the record deletes its key.
func (r Record) Tombstone() bool {
	switch r.Type {
	case RecordGroupMetadata:
		return r.Metadata == nil
	case RecordOffsetCommit:
		return r.Offset == nil
	case RecordRebalance:
		return r.Rebalance == nil
	}
	return true
}

const (
	keyVersion   = 0
	valueVersion = 0
)

// Key encodes the record's key: version, type, group, and for offsets topic
// and partition. Keys of one group share a prefix.
func (r Record) Key() []byte { return r.AppendKey(nil) }

// AppendKey appends the encoding of Key to b, so a caller can reuse a
// buffer across records.
func (r Record) AppendKey(b []byte) []byte {
	b = append(b, keyVersion, byte(r.Type))
	b = appendString(b, r.Group)
	switch r.Type {
	case RecordOffsetCommit:
		b = appendString(b, r.Topic)
		b = binary.BigEndian.AppendUint32(b, uint32(r.Partition))
	case RecordRebalance:
		b = binary.BigEndian.AppendUint64(b, r.Seq)
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

// AppendValue appends the encoding of Value to b; for a tombstone it
// returns b unchanged.
func (r Record) AppendValue(b []byte) []byte {
	if r.Tombstone() {
		return b
	}
	b = binary.BigEndian.AppendUint16(b, valueVersion)
	switch r.Type {
	case RecordGroupMetadata:
		v := r.Metadata
		b = appendString(b, v.ProtocolType)
		b = binary.AppendVarint(b, int64(v.Generation))
		b = appendString(b, v.Protocol)
		b = appendString(b, v.Leader)
		b = binary.AppendVarint(b, v.StateTimestamp)
		b = binary.AppendUvarint(b, uint64(len(v.Members)))
		for _, mm := range v.Members {
			b = appendString(b, mm.MemberID)
			b = appendString(b, mm.InstanceID)
			b = appendString(b, mm.ClientID)
			b = appendString(b, mm.ClientHost)
			b = binary.AppendVarint(b, int64(mm.RebalanceTimeout))
			b = binary.AppendVarint(b, int64(mm.SessionTimeout))
			b = appendBytes(b, mm.Subscription)
			b = appendBytes(b, mm.Assignment)
		}
	case RecordOffsetCommit:
		v := r.Offset
		b = binary.AppendVarint(b, v.Offset)
		b = binary.AppendVarint(b, int64(v.LeaderEpoch))
		b = appendString(b, v.Metadata)
		b = binary.AppendVarint(b, v.CommitTimestamp)
		b = binary.AppendVarint(b, v.ExpireTimestamp)
	case RecordRebalance:
		b = appendRebalance(b, r.Rebalance)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendBytes distinguishes nil from empty: an empty assignment and a missing
// one mean different things to clients.
func appendBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(v))+1)
	return append(b, v...)
}

var errCorrupt = errors.New("group: corrupt record")

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errCorrupt
	}
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	// Only the shortest encoding is accepted, so a decoded record always
	// re-encodes to the same bytes.
	if n <= 0 || n != len(binary.AppendUvarint(nil, v)) {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 || n != len(binary.AppendVarint(nil, v)) {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) int32() int32 {
	v := r.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail()
		return 0
	}
	return int32(v)
}

func (r *reader) take(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string { return string(r.take(r.uvarint())) }

// bool reads a byte that must be 0 or 1.
func (r *reader) bool() bool {
	b := r.take(1)
	if r.err != nil {
		return false
	}
	if b[0] > 1 {
		r.fail()
		return false
	}
	return b[0] == 1
}

// count reads a list length, refusing one the rest of the input cannot
// hold at minSize bytes an element, before anything is allocated.
func (r *reader) count(minSize int) int {
	n := r.uvarint()
	if n > uint64(len(r.b)/minSize) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if n == 0 {
		return nil
	}
	return append([]byte{}, r.take(n-1)...)
}

// DecodeRecord decodes a key and value written by Record.Key and
// Record.Value. A nil value decodes to a tombstone. It never panics on
// corrupt input.
func DecodeRecord(key, value []byte) (Record, error) {
	var rec Record
	if len(key) < 2 || key[0] != keyVersion {
		return rec, errCorrupt
	}
	rec.Type = RecordType(key[1])
	kr := reader{b: key[2:]}
	rec.Group = kr.string()
	switch rec.Type {
	case RecordGroupMetadata:
	case RecordOffsetCommit:
		rec.Topic = kr.string()
		p := kr.take(4)
		if kr.err == nil {
			rec.Partition = int32(binary.BigEndian.Uint32(p))
		}
	case RecordRebalance:
		seq := kr.take(8)
		if kr.err == nil {
			rec.Seq = binary.BigEndian.Uint64(seq)
		}
	default:
		return Record{}, fmt.Errorf("group: unknown record type %d", key[1])
	}
	if kr.err != nil || len(kr.b) != 0 {
		return Record{}, errCorrupt
	}
	if value == nil {
		return rec, nil
	}
	if len(value) < 2 {
		return Record{}, errCorrupt
	}
	if v := binary.BigEndian.Uint16(value); v != valueVersion {
		return Record{}, fmt.Errorf("group: unknown record value version %d", v)
	}
	r := reader{b: value[2:]}
	switch rec.Type {
	case RecordGroupMetadata:
		v := &GroupMetadata{}
		v.ProtocolType = r.string()
		v.Generation = r.int32()
		v.Protocol = r.string()
		v.Leader = r.string()
		v.StateTimestamp = r.varint()
		n := r.uvarint()
		// Each member takes at least 8 bytes; refuse counts the input
		// cannot hold before allocating.
		if n > uint64(len(r.b))/8 {
			return Record{}, errCorrupt
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			var mm MemberMetadata
			mm.MemberID = r.string()
			mm.InstanceID = r.string()
			mm.ClientID = r.string()
			mm.ClientHost = r.string()
			mm.RebalanceTimeout = r.int32()
			mm.SessionTimeout = r.int32()
			mm.Subscription = r.bytes()
			mm.Assignment = r.bytes()
			v.Members = append(v.Members, mm)
		}
		rec.Metadata = v
	case RecordOffsetCommit:
		v := &OffsetCommit{}
		v.Offset = r.varint()
		v.LeaderEpoch = r.int32()
		v.Metadata = r.string()
		v.CommitTimestamp = r.varint()
		v.ExpireTimestamp = r.varint()
		rec.Offset = v
	case RecordRebalance:
		rec.Rebalance = readRebalance(&r, rec.Group, rec.Seq)
	}
	if r.err != nil {
		return Record{}, r.err
	}
	if len(r.b) != 0 {
		return Record{}, errCorrupt
	}
	return rec, nil
}

func unixMilli(t time.Time) int64 { return t.UnixMilli() }

// metadataRecord snapshots the group, with the given assignments (nil map:
// the members' current assignments).
func (m *Machine) metadataRecord(g *group, assignments map[string][]byte) Record {
	v := &GroupMetadata{
		ProtocolType:   g.protocolType,
		Generation:     g.generation,
		Protocol:       g.protocol,
		Leader:         g.leader,
		StateTimestamp: unixMilli(g.stateTime),
	}
	for _, mem := range g.sortedMembers() {
		a := mem.assignment
		if assignments != nil {
			a = assignments[mem.id]
		}
		v.Members = append(v.Members, MemberMetadata{
			MemberID:         mem.id,
			InstanceID:       mem.instanceID,
			ClientID:         mem.clientID,
			ClientHost:       mem.clientHost,
			RebalanceTimeout: int32(mem.rebalance / time.Millisecond),
			SessionTimeout:   int32(mem.session / time.Millisecond),
			Subscription:     mem.metadataFor(g.protocol),
			Assignment:       a,
		})
	}
	return Record{Type: RecordGroupMetadata, Group: g.id, Metadata: v}
}

// Replay discards the machine's state and rebuilds it from records, in
// store order or log order: later records for the same key win, tombstones
// delete. A group whose last metadata had members comes back Stable with the
// same generation, members and assignments; its members get fresh session
// deadlines from now. The returned Output holds those deadlines (and, like
// Kafka's onLoaded, the start of a rebalance for a group above the maximum
// size).
func (m *Machine) Replay(now time.Time, recs []Record) Output {
	m.groups = map[string]*group{}
	m.timers = map[TimerKey]time.Time{}
	m.begin(now)

	metas := map[string]*GroupMetadata{}
	offsets := map[string]map[topicPartition]*OffsetCommit{}
	histories := map[string]map[uint64]*inspect.Rebalance{}
	for _, r := range recs {
		switch r.Type {
		case RecordRebalance:
			h := histories[r.Group]
			if h == nil {
				h = map[uint64]*inspect.Rebalance{}
				histories[r.Group] = h
			}
			h[r.Seq] = r.Rebalance
		case RecordGroupMetadata:
			metas[r.Group] = r.Metadata
		case RecordOffsetCommit:
			o := offsets[r.Group]
			if o == nil {
				o = map[topicPartition]*OffsetCommit{}
				offsets[r.Group] = o
			}
			o[topicPartition{r.Topic, r.Partition}] = r.Offset
		}
	}
	for id, v := range metas {
		if v == nil {
			continue
		}
		g := newGroup(id, time.UnixMilli(v.StateTimestamp))
		g.generation = v.Generation
		g.protocolType = v.ProtocolType
		g.protocol = v.Protocol
		for _, mm := range v.Members {
			mem := &member{
				id:           mm.MemberID,
				instanceID:   mm.InstanceID,
				clientID:     mm.ClientID,
				clientHost:   mm.ClientHost,
				rebalance:    time.Duration(mm.RebalanceTimeout) * time.Millisecond,
				session:      time.Duration(mm.SessionTimeout) * time.Millisecond,
				protocolType: v.ProtocolType,
				protocols:    []protocol{{name: v.Protocol, metadata: mm.Subscription}},
				assignment:   mm.Assignment,
				received:     mm.Assignment,
				receivedGen:  v.Generation,
				lastSeen:     now,
			}
			g.add(mem)
		}
		g.protocolType = v.ProtocolType
		g.leader = v.Leader
		if _, ok := g.members[g.leader]; !ok {
			g.leader = ""
			if ms := g.sortedMembers(); len(ms) > 0 {
				g.leader = ms[0].id
			}
		}
		if len(g.members) > 0 {
			g.state, g.prevState = Stable, CompletingRebalance
		}
		g.computeSubscribedTopics()
		g.loadedAt = now
		m.groups[id] = g
	}
	for id, os := range offsets {
		for tp, o := range os {
			if o == nil {
				continue
			}
			g := m.groups[id]
			if g == nil {
				// Offsets without group metadata belong to a simple
				// group (manual assignment); Kafka recreates it.
				g = newGroup(id, now)
				m.groups[id] = g
			}
			g.offsets.set(tp, offsetValue{
				offset:      o.Offset,
				leaderEpoch: o.LeaderEpoch,
				metadata:    o.Metadata,
				commitTime:  o.CommitTimestamp,
				expireTime:  o.ExpireTimestamp,
			})
		}
	}
	for _, id := range m.Groups() {
		m.loadHistory(m.groups[id], histories[id])
	}
	for _, id := range m.Groups() {
		g := m.groups[id]
		if g.state != Stable {
			continue
		}
		for _, mem := range g.sortedMembers() {
			m.schedule(TimerKey{Group: id, Kind: TimerHeartbeat, Member: mem.id}, mem.session)
		}
		if len(g.members) > m.cfg.MaxGroupSize {
			m.prepareRebalance(g, reason{trigger: inspect.TriggerGroupOversized})
		}
	}
	return m.end()
}

// loadHistory gives a replayed group its stored rebalances, the newest
// HistorySize of them; older ones (the history was made shorter since they
// were written) are tombstoned.
func (m *Machine) loadHistory(g *group, h map[uint64]*inspect.Rebalance) {
	seqs := make([]uint64, 0, len(h))
	for seq, r := range h {
		if r != nil {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	if over := len(seqs) - m.cfg.HistorySize; over > 0 {
		for _, seq := range seqs[:over] {
			m.record(Record{Type: RecordRebalance, Group: g.id, Seq: seq})
		}
		seqs = seqs[over:]
	}
	for _, seq := range seqs {
		g.history = append(g.history, h[seq])
	}
	if n := len(seqs); n > 0 {
		g.nextSeq = seqs[n-1] + 1
	}
}

// appendRebalance encodes a rebalance record's value (its group and
// sequence number are in the key). Times are unix milliseconds.
func appendRebalance(b []byte, r *inspect.Rebalance) []byte {
	b = appendString(b, r.Protocol)
	b = binary.AppendVarint(b, int64(r.GenerationBefore))
	b = binary.AppendVarint(b, int64(r.GenerationAfter))
	b = binary.AppendVarint(b, r.StartedAt.UnixMilli())
	b = appendBool(b, r.EndedAt != nil)
	if r.EndedAt != nil {
		b = binary.AppendVarint(b, r.EndedAt.UnixMilli())
	}
	b = binary.AppendVarint(b, r.DurationMs)
	b = appendString(b, r.Trigger)
	b = appendBool(b, r.Member != nil)
	if mr := r.Member; mr != nil {
		b = appendString(b, mr.MemberID)
		b = appendString(b, mr.InstanceID)
		b = appendString(b, mr.ClientID)
		b = appendString(b, mr.ClientHost)
	}
	b = appendStrings(b, r.MembersIn)
	b = appendStrings(b, r.MembersOut)
	b = binary.AppendUvarint(b, uint64(len(r.WaitedFor)))
	for _, w := range r.WaitedFor {
		b = appendString(b, w.Member)
		b = binary.AppendVarint(b, w.WaitedMs)
		b = appendBool(b, w.Rejoined)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Moved)))
	for _, mv := range r.Moved {
		b = appendString(b, mv.Topic)
		b = binary.AppendVarint(b, int64(mv.Partition))
		b = appendString(b, mv.From)
		b = appendString(b, mv.To)
		b = binary.AppendVarint(b, mv.PauseMs)
		b = binary.AppendVarint(b, mv.AssignedAt.UnixMilli()-r.StartedAt.UnixMilli())
		b = binary.AppendVarint(b, mv.Committed)
		b = binary.AppendVarint(b, mv.CommitGap)
	}
	b = appendString(b, r.Outcome)
	b = appendBool(b, r.Storm)
	return appendString(b, r.StormCause)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

func (r *reader) strings() []string {
	ss := make([]string, r.count(1))
	for i := range ss {
		ss[i] = r.string()
	}
	return ss
}

func (r *reader) time() time.Time { return time.UnixMilli(r.varint()).UTC() }

// readRebalance decodes what appendRebalance wrote. Lists come back empty
// rather than nil, as the machine makes them.
func readRebalance(r *reader, group string, seq uint64) *inspect.Rebalance {
	v := &inspect.Rebalance{Group: group, Seq: seq}
	v.Protocol = r.string()
	v.GenerationBefore = r.int32()
	v.GenerationAfter = r.int32()
	v.StartedAt = r.time()
	if r.bool() {
		end := r.time()
		v.EndedAt = &end
	}
	v.DurationMs = r.varint()
	v.Trigger = r.string()
	if r.bool() {
		v.Member = &inspect.MemberRef{MemberID: r.string(), InstanceID: r.string(), ClientID: r.string(), ClientHost: r.string()}
	}
	v.MembersIn = r.strings()
	v.MembersOut = r.strings()
	// A wait takes at least 3 bytes, a move at least 8.
	v.WaitedFor = make([]inspect.Wait, r.count(3))
	for i := range v.WaitedFor {
		v.WaitedFor[i] = inspect.Wait{Member: r.string(), WaitedMs: r.varint(), Rejoined: r.bool()}
	}
	v.Moved = make([]inspect.Move, r.count(8))
	for i := range v.Moved {
		mv := &v.Moved[i]
		mv.Topic = r.string()
		mv.Partition = r.int32()
		mv.From = r.string()
		mv.To = r.string()
		mv.PauseMs = r.varint()
		// The release is the receipt less the pause, as the machine
		// measured it.
		assigned := v.StartedAt.UnixMilli() + r.varint()
		mv.AssignedAt = time.UnixMilli(assigned).UTC()
		mv.ReleasedAt = time.UnixMilli(assigned - mv.PauseMs).UTC()
		mv.Committed = r.varint()
		mv.CommitGap = r.varint()
	}
	v.Outcome = r.string()
	v.Storm = r.bool()
	v.StormCause = r.string()
	return v
}
