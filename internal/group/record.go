package group

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/group/core"
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

	// The records of consumer (KIP-848) groups, package consumer's, with
	// its numbers: a group's state split per member after Kafka's
	// design. Record.Consumer holds them.
	RecordConsumerGroupEpoch        = RecordType(consumer.RecordGroupEpoch)
	RecordConsumerMemberMetadata    = RecordType(consumer.RecordMemberMetadata)
	RecordConsumerTargetMember      = RecordType(consumer.RecordTargetMember)
	RecordConsumerTargetEpoch       = RecordType(consumer.RecordTargetEpoch)
	RecordConsumerCurrentAssignment = RecordType(consumer.RecordCurrentAssignment)
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
	if t.Consumer() {
		return "Consumer" + consumer.RecordType(t).String()
	}
	return fmt.Sprintf("RecordType(%d)", uint8(t))
}

// Consumer reports whether the type is a consumer group's.
func (t RecordType) Consumer() bool {
	return t >= RecordConsumerGroupEpoch && t <= RecordConsumerCurrentAssignment
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
	// Consumer is the record of a consumer-group type, with the same
	// Type and Group; it must be set for those types, and its own nil
	// value is the tombstone.
	Consumer *consumer.Record
}

// consumerRecord wraps a consumer machine's record.
func consumerRecord(r consumer.Record) Record {
	return Record{Type: RecordType(r.Type), Group: r.Group, Consumer: &r}
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
	if r.Type.Consumer() {
		return r.Consumer == nil || r.Consumer.Tombstone()
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
	if r.Type.Consumer() {
		// The same layout: version, type, group, then the member.
		return r.Consumer.AppendKey(b)
	}
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
	if r.Type.Consumer() {
		return r.Consumer.AppendValue(b)
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

var (
	appendString = core.AppendString
	appendBytes  = core.AppendBytes
	appendBool   = core.AppendBool
)

var errCorrupt = fmt.Errorf("group: %w", core.ErrCorrupt)

// reader reads record values; see core.Reader.
type reader struct{ core.Reader }

// DecodeRecord decodes a key and value written by Record.Key and
// Record.Value. A nil value decodes to a tombstone. It never panics on
// corrupt input.
func DecodeRecord(key, value []byte) (Record, error) {
	var rec Record
	if len(key) < 2 || key[0] != keyVersion {
		return rec, errCorrupt
	}
	rec.Type = RecordType(key[1])
	if rec.Type.Consumer() {
		cr, err := consumer.DecodeRecord(key, value)
		if err != nil {
			return Record{}, err
		}
		return consumerRecord(cr), nil
	}
	kr := reader{core.NewReader(key[2:])}
	rec.Group = kr.String()
	switch rec.Type {
	case RecordGroupMetadata:
	case RecordOffsetCommit:
		rec.Topic = kr.String()
		p := kr.Take(4)
		if kr.Err == nil {
			rec.Partition = int32(binary.BigEndian.Uint32(p))
		}
	case RecordRebalance:
		seq := kr.Take(8)
		if kr.Err == nil {
			rec.Seq = binary.BigEndian.Uint64(seq)
		}
	default:
		return Record{}, fmt.Errorf("group: unknown record type %d", key[1])
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
		return Record{}, fmt.Errorf("group: unknown record value version %d", v)
	}
	r := reader{core.NewReader(value[2:])}
	switch rec.Type {
	case RecordGroupMetadata:
		v := &GroupMetadata{}
		v.ProtocolType = r.String()
		v.Generation = r.Int32()
		v.Protocol = r.String()
		v.Leader = r.String()
		v.StateTimestamp = r.Varint()
		n := r.Uvarint()
		// Each member takes at least 8 bytes; refuse counts the input
		// cannot hold before allocating.
		if n > uint64(len(r.B))/8 {
			return Record{}, errCorrupt
		}
		for i := uint64(0); i < n && r.Err == nil; i++ {
			var mm MemberMetadata
			mm.MemberID = r.String()
			mm.InstanceID = r.String()
			mm.ClientID = r.String()
			mm.ClientHost = r.String()
			mm.RebalanceTimeout = r.Int32()
			mm.SessionTimeout = r.Int32()
			mm.Subscription = r.Bytes()
			mm.Assignment = r.Bytes()
			v.Members = append(v.Members, mm)
		}
		rec.Metadata = v
	case RecordOffsetCommit:
		v := &OffsetCommit{}
		v.Offset = r.Varint()
		v.LeaderEpoch = r.Int32()
		v.Metadata = r.String()
		v.CommitTimestamp = r.Varint()
		v.ExpireTimestamp = r.Varint()
		rec.Offset = v
	case RecordRebalance:
		rec.Rebalance = readRebalance(&r, rec.Group, rec.Seq)
	}
	if r.Err != nil || len(r.B) != 0 {
		return Record{}, errCorrupt
	}
	return rec, nil
}

func unixMilli(t time.Time) int64 { return t.UnixMilli() }

// metadataRecord snapshots the group with its members' assignments.
func (m *Machine) metadataRecord(g *group) Record {
	v := &GroupMetadata{
		ProtocolType:   g.protocolType,
		Generation:     g.generation,
		Protocol:       g.protocol,
		Leader:         g.leader,
		StateTimestamp: unixMilli(g.stateTime),
	}
	if ms := g.sortedMembers(); len(ms) > 0 {
		v.Members = make([]MemberMetadata, len(ms))
		for i, mem := range ms {
			v.Members[i] = MemberMetadata{
				MemberID:         mem.id,
				InstanceID:       mem.instanceID,
				ClientID:         mem.clientID,
				ClientHost:       mem.clientHost,
				RebalanceTimeout: int32(mem.rebalance / time.Millisecond),
				SessionTimeout:   int32(mem.session / time.Millisecond),
				Subscription:     mem.metadataFor(g.protocol),
				Assignment:       mem.assignment,
			}
		}
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
//
// Consumer groups come back with the same epochs, members and
// assignments (consumer.Machine.Replay); if the machine was given the
// topics (TopicsChanged) before, those whose subscribed topics changed
// while they were not loaded then get a new epoch, whose records are in
// the Output too. Records that contradict each other are an error, which
// leaves the machine without groups.
func (m *Machine) Replay(now time.Time, recs []Record) (Output, error) {
	m.groups = map[string]*group{}
	m.timers.Reset()
	m.begin(now)

	metas := map[string]*GroupMetadata{}
	offsets := map[string]map[topicPartition]*OffsetCommit{}
	histories := map[string]map[uint64]*inspect.Rebalance{}
	var consRecs []consumer.Record
	for _, r := range recs {
		if r.Type.Consumer() {
			if r.Consumer != nil {
				consRecs = append(consRecs, *r.Consumer)
			}
			continue
		}
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
	consOut, err := m.replayConsumer(now, consRecs, metas)
	if err != nil {
		m.groups = map[string]*group{}
		m.timers.Reset()
		m.cons.Step(now, consumer.Unload{})
		m.end()
		return Output{}, err
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
			continue
		}
		g.coverageUnchecked = true
		m.checkCoverage(g)
	}
	m.absorb(consOut)
	if m.topics != nil {
		m.stepConsumer(consumer.TopicsChanged{Topics: m.topics})
	}
	return m.end(), nil
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
	b = core.AppendStrings(b, r.MembersIn)
	b = core.AppendStrings(b, r.MembersOut)
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

// readRebalance decodes what appendRebalance wrote. Lists come back empty
// rather than nil, as the machine makes them.
func readRebalance(r *reader, group string, seq uint64) *inspect.Rebalance {
	v := &inspect.Rebalance{Group: group, Seq: seq}
	v.Protocol = r.String()
	v.GenerationBefore = r.Int32()
	v.GenerationAfter = r.Int32()
	v.StartedAt = r.Time()
	if r.Bool() {
		end := r.Time()
		v.EndedAt = &end
	}
	v.DurationMs = r.Varint()
	v.Trigger = r.String()
	if r.Bool() {
		v.Member = &inspect.MemberRef{MemberID: r.String(), InstanceID: r.String(), ClientID: r.String(), ClientHost: r.String()}
	}
	v.MembersIn = r.Strings()
	v.MembersOut = r.Strings()
	// A wait takes at least 3 bytes, a move at least 8.
	v.WaitedFor = make([]inspect.Wait, r.Count(3))
	for i := range v.WaitedFor {
		v.WaitedFor[i] = inspect.Wait{Member: r.String(), WaitedMs: r.Varint(), Rejoined: r.Bool()}
	}
	v.Moved = make([]inspect.Move, r.Count(8))
	for i := range v.Moved {
		mv := &v.Moved[i]
		mv.Topic = r.String()
		mv.Partition = r.Int32()
		mv.From = r.String()
		mv.To = r.String()
		mv.PauseMs = r.Varint()
		// The release is the receipt less the pause, as the machine
		// measured it.
		assigned := v.StartedAt.UnixMilli() + r.Varint()
		mv.AssignedAt = time.UnixMilli(assigned).UTC()
		mv.ReleasedAt = time.UnixMilli(assigned - mv.PauseMs).UTC()
		mv.Committed = r.Varint()
		mv.CommitGap = r.Varint()
	}
	v.Outcome = r.String()
	v.Storm = r.Bool()
	v.StormCause = r.String()
	return v
}
