package group

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// validateOffsetCommit is Kafka's ClassicGroup.validateOffsetCommit.
func (g *group) validateOffsetCommit(memberID, instanceID string, generation int32) int16 {
	if g.state == Dead {
		return errCoordinatorNotAvailable
	}
	if generation < 0 && g.state == Empty {
		// Admin client or a consumer assigning partitions itself.
		return 0
	}
	if generation >= 0 || memberID != "" || instanceID != "" {
		if code := g.validateMember(memberID, instanceID); code != 0 {
			return code
		}
		if generation != g.generation {
			return errIllegalGeneration
		}
	} else if g.state != Empty {
		return errUnknownMemberID
	}
	if g.state == CompletingRebalance {
		// The member has the new generation but no assignment yet.
		// PreparingRebalance is fine: the generation has not moved, and
		// cooperative members keep committing through it.
		return errRebalanceInProgress
	}
	return 0
}

func (m *Machine) offsetCommit(r Request, req *kmsg.OffsetCommitRequest) {
	resp := kmsg.NewPtrOffsetCommitResponse()
	resp.Version = req.Version
	defer m.reply(r.ID, resp)

	generation, memberID, instanceID := req.Generation, req.MemberID, ""
	if req.Version < 1 {
		generation, memberID = -1, ""
	}
	if req.Version >= 7 && req.InstanceID != nil {
		instanceID = *req.InstanceID
	}
	var code int16
	g := m.groups[req.Group]
	switch {
	case req.Version >= 10:
		// Topic ids are not resolved here; the wire layer must not
		// advertise v10.
		code = errUnsupportedVersion
	case g == nil && generation < 0:
		// Kafka creates a "simple" group for commits outside group
		// management. It is persisted through its offsets.
		g = newGroup(req.Group, m.now)
		m.groups[req.Group] = g
	case g == nil && req.Version >= 9:
		code = errGroupIDNotFound
	case g == nil:
		code = errIllegalGeneration
	default:
		code = g.validateOffsetCommit(memberID, instanceID, generation)
	}
	if code == 0 && (g.state == Stable || g.state == PreparingRebalance) {
		// A commit keeps the committer's session alive, as Kafka's
		// commitOffset does: a member busy processing may send commits
		// while its heartbeats run late. Validation passed with a
		// member id here, so the member exists.
		if mem := g.members[memberID]; mem != nil {
			m.schedule(TimerKey{Group: g.id, Kind: TimerHeartbeat, Member: mem.id}, mem.session)
			mem.lastSeen = m.now
		}
	}
	// One allocation each for the response's partitions, the records and
	// their values, instead of one per partition: a commit's partitions
	// are the coordinator's busiest path.
	n := 0
	for _, t := range req.Topics {
		n += len(t.Partitions)
	}
	parts := make([]kmsg.OffsetCommitResponseTopicPartition, 0, n)
	var values []OffsetCommit
	if code == 0 {
		values = make([]OffsetCommit, 0, n)
		m.out.Records = slices.Grow(m.out.Records, n)
	}
	resp.Topics = make([]kmsg.OffsetCommitResponseTopic, 0, len(req.Topics))
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		rt.TopicID = t.TopicID
		rt.Partitions = parts[len(parts):len(parts):cap(parts)]
		var offsets *offsetPartitions
		if code == 0 {
			offsets = g.offsets.partitions(t.Topic)
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = code
			metadata := ""
			if p.Metadata != nil {
				metadata = *p.Metadata
			}
			if code == 0 && len(metadata) > m.cfg.OffsetMetadataMaxBytes {
				rp.ErrorCode = errOffsetMetadataTooLarge
			}
			if rp.ErrorCode == 0 {
				epoch := int32(-1)
				if req.Version >= 6 {
					epoch = p.LeaderEpoch
				}
				expire := int64(-1)
				if req.Version >= 2 && req.Version <= 4 && req.RetentionTimeMillis >= 0 {
					expire = unixMilli(m.now) + req.RetentionTimeMillis
				}
				v := offsetValue{
					offset:      p.Offset,
					leaderEpoch: epoch,
					metadata:    metadata,
					commitTime:  unixMilli(m.now),
					expireTime:  expire,
				}
				offsets.set(p.Partition, v)
				values = append(values, v.record())
				m.record(Record{Type: RecordOffsetCommit, Group: g.id, Topic: t.Topic, Partition: p.Partition, Offset: &values[len(values)-1]})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		parts = parts[:len(parts)+len(rt.Partitions)]
		resp.Topics = append(resp.Topics, rt)
	}
}

func offsetRecord(groupID, topic string, partition int32, v *offsetValue) Record {
	r := Record{Type: RecordOffsetCommit, Group: groupID, Topic: topic, Partition: partition}
	if v != nil {
		oc := v.record()
		r.Offset = &oc
	}
	return r
}

// record is the stored form of a committed offset.
func (v *offsetValue) record() OffsetCommit {
	return OffsetCommit{
		Offset:          v.offset,
		LeaderEpoch:     v.leaderEpoch,
		Metadata:        v.metadata,
		CommitTimestamp: v.commitTime,
		ExpireTimestamp: v.expireTime,
	}
}

type fetchedPartition struct {
	partition int32
	offset    int64
	epoch     int32
	metadata  string
}

type fetchedTopic struct {
	topic      string
	partitions []fetchedPartition
}

// fetchGroup returns the committed offsets asked for (all when topics is
// nil) and a group-level error code.
func (m *Machine) fetchGroup(groupID string, topics []kmsg.OffsetFetchRequestTopic) ([]fetchedTopic, int16) {
	g := m.groups[groupID]
	if g != nil && g.state == Dead {
		return nil, errGroupIDNotFound
	}
	lookup := func(tp topicPartition) fetchedPartition {
		if g != nil {
			if v, ok := g.offsets.get(tp); ok {
				return fetchedPartition{tp.partition, v.offset, v.leaderEpoch, v.metadata}
			}
		}
		return fetchedPartition{tp.partition, -1, -1, ""}
	}
	var out []fetchedTopic
	if topics == nil {
		if g == nil {
			return nil, 0
		}
		for _, tp := range g.offsets.sorted() {
			if len(out) == 0 || out[len(out)-1].topic != tp.topic {
				out = append(out, fetchedTopic{topic: tp.topic})
			}
			last := &out[len(out)-1]
			last.partitions = append(last.partitions, lookup(tp))
		}
		return out, 0
	}
	for _, t := range topics {
		ft := fetchedTopic{topic: t.Topic}
		for _, p := range t.Partitions {
			ft.partitions = append(ft.partitions, lookup(topicPartition{t.Topic, p}))
		}
		out = append(out, ft)
	}
	return out, 0
}

func (m *Machine) offsetFetch(r Request, req *kmsg.OffsetFetchRequest) {
	resp := kmsg.NewPtrOffsetFetchResponse()
	resp.Version = req.Version
	defer m.reply(r.ID, resp)
	if req.Version < 8 {
		topics := req.Topics
		if req.Version < 2 && topics == nil {
			topics = []kmsg.OffsetFetchRequestTopic{}
		}
		fts, code := m.fetchGroup(req.Group, topics)
		resp.ErrorCode = code
		for _, ft := range fts {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = ft.topic
			for _, fp := range ft.partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition = fp.partition
				rp.Offset = fp.offset
				rp.LeaderEpoch = fp.epoch
				rp.Metadata = strPtr(fp.metadata)
				if req.Version < 2 {
					// No top-level error before v2.
					rp.ErrorCode = code
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return
	}
	for _, rg := range req.Groups {
		var topics []kmsg.OffsetFetchRequestTopic
		if rg.Topics != nil {
			topics = []kmsg.OffsetFetchRequestTopic{}
			for _, t := range rg.Topics {
				topics = append(topics, kmsg.OffsetFetchRequestTopic{Topic: t.Topic, Partitions: t.Partitions})
			}
		}
		out := kmsg.NewOffsetFetchResponseGroup()
		out.Group = rg.Group
		if req.Version >= 10 {
			out.ErrorCode = errUnsupportedVersion
			resp.Groups = append(resp.Groups, out)
			continue
		}
		fts, code := m.fetchGroup(rg.Group, topics)
		out.ErrorCode = code
		for _, ft := range fts {
			rt := kmsg.NewOffsetFetchResponseGroupTopic()
			rt.Topic = ft.topic
			for _, fp := range ft.partitions {
				rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				rp.Partition = fp.partition
				rp.Offset = fp.offset
				rp.LeaderEpoch = fp.epoch
				rp.Metadata = strPtr(fp.metadata)
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
		resp.Groups = append(resp.Groups, out)
	}
}

// expireOffsets applies Kafka's offset expiration condition (KIP-211) to
// every group and deletes Empty groups left with no offsets.
func (m *Machine) expireOffsets() {
	now := unixMilli(m.now)
	retention := m.cfg.OffsetsRetention.Milliseconds()
	for _, id := range m.Groups() {
		g := m.groups[id]
		var base func(offsetValue) int64
		switch {
		case g.protocolType == "":
			// Simple group: by last commit.
			base = func(v offsetValue) int64 { return v.commitTime }
		case g.state == Empty:
			// Retention runs from when the group became empty.
			st := unixMilli(g.stateTime)
			base = func(offsetValue) int64 { return st }
		case g.state == Stable && g.protocolType == consumerProtocolType && g.subscribedKnown:
			// Only topics nobody subscribes to any more, by last commit.
			base = func(v offsetValue) int64 { return v.commitTime }
		}
		allExpired := true
		if base == nil {
			allExpired = g.offsets.empty()
		} else {
			for _, tp := range g.offsets.sorted() {
				v, _ := g.offsets.get(tp)
				expired := false
				if !g.isSubscribedToTopic(tp.topic) {
					if v.expireTime >= 0 {
						expired = now >= v.expireTime
					} else {
						expired = now-base(v) >= retention
					}
				}
				if !expired {
					allExpired = false
					continue
				}
				g.offsets.delete(tp)
				m.record(offsetRecord(g.id, tp.topic, tp.partition, nil))
			}
		}
		if allExpired && g.state == Empty {
			m.record(Record{Type: RecordGroupMetadata, Group: g.id})
			m.removeGroup(g)
		}
	}
}
