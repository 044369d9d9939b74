package api

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/cluster"
	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/fetchsession"
	"github.com/groupd/groupd/internal/offsetstopic"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/replica"
	"github.com/groupd/groupd/internal/server"
)

// Cluster mode (docs/cluster.md): the topics, their partitions' leaders
// and ISRs are the cluster's, read from the node's view of etcd; the
// partitions this node holds are replica logs run by cluster.Replicas.
// The handlers of the data plane (Produce, Fetch, ListOffsets,
// OffsetForLeaderEpoch, Metadata, the topic admin APIs) take their
// cluster branch here; the group APIs stay the coordinator's, served by
// the node that coordinates the group.

// ClusterConfig is what a Handler needs of cluster mode.
type ClusterConfig struct {
	Node     *cluster.Node
	Replicas *cluster.Replicas
	// ClusterID is the cluster's id, which Metadata and DescribeCluster
	// give instead of the data directory's.
	ClusterID string
	// DefaultReplicationFactor is default.replication.factor: topics
	// created with -1, and auto-created ones, get it (at most the live
	// node count).
	DefaultReplicationFactor int
}

// clusterMode is a Handler's cluster side.
type clusterMode struct {
	ClusterConfig

	// Producer ids come from etcd in blocks (KIP-730); next..end is the
	// rest of this node's block.
	pidMu     sync.Mutex
	pidNext   int64
	pidEnd    int64
	pidLoaded bool

	// offsetsTopic is set once __consumer_offsets is known to exist.
	offsetsTopic atomic.Bool
}

// InCluster serves the node's share of a cluster instead of a single
// node's topics.
func InCluster(cfg ClusterConfig) Option {
	return func(h *Handler) {
		if cfg.DefaultReplicationFactor <= 0 {
			cfg.DefaultReplicationFactor = 1
		}
		h.cl = &clusterMode{ClusterConfig: cfg}
	}
}

// clusterID is the id of the cluster this node serves: the cluster's in
// cluster mode, the data directory's on a single node.
func (h *Handler) clusterID() string {
	if h.cl != nil {
		return h.cl.ClusterID
	}
	return h.b.ClusterID()
}

// topicNameOf is the name of the topic with id: the cluster's topic in
// cluster mode, the broker's on a single node.
func (h *Handler) topicNameOf(id [16]byte) (string, bool) {
	if h.cl != nil {
		t, ok := h.cl.Node.View().TopicByID(meta.ID(id))
		return t.Name, ok
	}
	t, ok := h.b.TopicByID(id)
	if !ok {
		return "", false
	}
	return t.Name, true
}

// topicIDOf is the id of the topic named name.
func (h *Handler) topicIDOf(name string) ([16]byte, bool) {
	if h.cl != nil {
		t, ok := h.cl.Node.View().Topic(name)
		return t.ID, ok
	}
	t, ok := h.b.Topic(name)
	if !ok {
		return [16]byte{}, false
	}
	return t.ID, true
}

// adminTimeout bounds how long an admin request waits for etcd and for
// the node's view to show its change, when the request gives no timeout.
const adminTimeout = 30 * time.Second

// topicOf resolves a client's topic, by id when byID.
func (c *clusterMode) topicOf(byID bool, name string, id [16]byte) (view.Topic, error) {
	v := c.Node.View()
	if byID {
		if t, ok := v.TopicByID(meta.ID(id)); ok {
			return t, nil
		}
		return view.Topic{}, kerr.UnknownTopicID
	}
	if t, ok := v.Topic(name); ok {
		return t, nil
	}
	return view.Topic{}, kerr.UnknownTopicOrPartition
}

// leaderOf resolves a partition a client reads or writes: this node's
// replica of it if it leads it at the client's leader epoch (-1: any),
// else the error to answer (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
// UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION).
func (c *clusterMode) leaderOf(t view.Topic, p int32, leaderEpoch int32) (*cluster.Slot, *partition.Log, error) {
	if p < 0 || int(p) >= len(t.Partitions) {
		return nil, nil, kerr.UnknownTopicOrPartition
	}
	s, ok := c.Replicas.Replica(view.TP{Topic: t.ID, Partition: p})
	if !ok {
		return nil, nil, kerr.NotLeaderForPartition
	}
	if err := s.CheckLeaderEpoch(leaderEpoch); err != nil {
		return nil, nil, err
	}
	if s.Role() != replica.RoleLeader {
		return nil, nil, kerr.NotLeaderForPartition
	}
	l, ok := s.Log().(*partition.Log)
	if !ok {
		return nil, nil, kerr.KafkaStorageError
	}
	return s, l, nil
}

// leaderInfo is who leads tp as the view shows it, for KIP-951's hints.
func (c *clusterMode) leaderInfo(id meta.ID, p int32) (leader, epoch int32, node meta.NodeInfo, ok bool) {
	v := c.Node.View()
	st, found := v.States[view.TP{Topic: id, Partition: p}]
	if !found || st.Leader == meta.NoLeader {
		return -1, -1, meta.NodeInfo{}, false
	}
	node, ok = v.Nodes[st.Leader]
	return st.Leader, st.LeaderEpoch, node, ok
}

// --- Produce ---

// pendingAck is one partition's append waiting for its acknowledgement:
// the ISR's, or only this leader's lease (acks=1).
type pendingAck struct {
	sp   *kmsg.ProduceResponseTopicPartition
	log  *partition.Log
	end  int64
	ack  <-chan error
	sync bool // --fsync always: fsynced before it is acknowledged
}

// replicatedProduce is a produce reply the server writes once every
// partition is acknowledged (server.Waiter).
type replicatedProduce struct {
	*kmsg.ProduceResponse
	acks    []pendingAck
	h       *Handler
	version int16
}

func (rp *replicatedProduce) Wait() error {
	var wg sync.WaitGroup
	for _, a := range rp.acks {
		wg.Go(func() {
			var err error
			if a.sync {
				if serr := a.log.SyncTo(a.end); serr != nil {
					rp.h.log.Error("fsync of produced records failed", "partition", a.sp.Partition, "err", serr)
					err = kerr.KafkaStorageError
				}
			}
			if aerr := <-a.ack; err == nil {
				err = aerr
			}
			if err != nil {
				a.sp.BaseOffset, a.sp.LogAppendTime = -1, -1
				rp.h.setProduceError(rp.version, "", a.sp, err)
			}
		})
	}
	wg.Wait()
	return nil
}

// clusterProduce appends to the partitions this node leads and answers
// once each is acknowledged: by the ISR for acks=all (refused below
// min.insync.replicas), by this leader's lease for acks=1.
func (h *Handler) clusterProduce(r *server.Request, req *kmsg.ProduceRequest) (kmsg.Response, error) {
	c := h.cl
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	acksOK := req.Acks == 0 || req.Acks == 1 || req.Acks == -1
	acksAll := req.Acks == -1
	deadline := c.Node.Clock().Now().Add(time.Duration(max(req.TimeoutMillis, 0)) * time.Millisecond)
	var (
		mu     sync.Mutex
		acks   []pendingAck
		wg     sync.WaitGroup
		hinted = map[int32]bool{} // leaders named in NodeEndpoints
	)
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for ti, rt := range req.Topics {
		st := &resp.Topics[ti]
		*st = kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		st.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		var topicErr error
		if req.Version < 13 {
			topicErr = broker.ValidateTopicName(rt.Topic)
		}
		t, err := c.topicOf(req.Version >= 13, rt.Topic, rt.TopicID)
		if topicErr == nil {
			topicErr = err
		}
		if topicErr == nil && t.Name == broker.OffsetsTopicName {
			topicErr = errInternalAppend
		}
		for pi, rp := range rt.Partitions {
			sp := &st.Partitions[pi]
			if err := startProduceAnswer(sp, rp, req, acksOK, topicErr); err != nil {
				h.setProduceError(req.Version, rt.Topic, sp, err)
				continue
			}
			slot, l, err := c.leaderOf(t, rp.Partition, -1)
			if err == nil {
				err = slot.CheckAppend(acksAll)
			}
			if err != nil {
				h.setProduceError(req.Version, rt.Topic, sp, err)
				if errors.Is(err, kerr.NotLeaderForPartition) && req.Version >= 10 {
					h.hintLeader(resp, sp, t.ID, rp.Partition, hinted)
				}
				continue
			}
			wg.Go(func() {
				end, err := h.appendProduced(l, rp, sp)
				if err != nil {
					h.setProduceError(req.Version, rt.Topic, sp, err)
					slot.Appended(l.LogEndOffset())
					return
				}
				if req.Acks == 0 {
					// Nobody waits: the machine only moves the HW.
					slot.Appended(end)
					return
				}
				ack := slot.Produced(end, acksAll, deadline)
				mu.Lock()
				acks = append(acks, pendingAck{sp: sp, log: l, end: end, ack: ack, sync: l.SyncsAppends()})
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if req.Acks == 0 {
		return nil, nil
	}
	if len(acks) > 0 {
		return &replicatedProduce{ProduceResponse: resp, acks: acks, h: h, version: req.Version}, nil
	}
	return resp, nil
}

// hintLeader fills KIP-951's CurrentLeader of a partition refused with
// NOT_LEADER_OR_FOLLOWER, and the leader's endpoint once per reply, so
// that the producer retries at the leader without a Metadata round trip.
func (h *Handler) hintLeader(resp *kmsg.ProduceResponse, sp *kmsg.ProduceResponseTopicPartition, id meta.ID, p int32, hinted map[int32]bool) {
	leader, epoch, node, ok := h.cl.leaderInfo(id, p)
	if !ok {
		return
	}
	sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = leader, epoch
	if hinted[leader] {
		return
	}
	hinted[leader] = true
	b := kmsg.NewProduceResponseBroker()
	b.NodeID, b.Host, b.Port, b.Rack = node.ID, node.Host, node.Port, rackOf(node)
	resp.Brokers = append(resp.Brokers, b)
}

// --- Fetch ---

// clusterConsumerLog resolves a consumer's fetch of one partition: the
// leader's log, read below its high watermark. While a new leader's high
// watermark is below where its epoch started (KIP-207) the partition is
// answered empty, but watched, so that the fetch wakes when it moves.
func (h *Handler) clusterConsumerLog(version int16, key fetchsession.Key, leaderEpoch int32) (l *partition.Log, readable bool, code int16) {
	t, err := h.cl.topicOf(version >= 13, key.Topic, key.TopicID)
	if err != nil {
		return nil, false, errCode(err)
	}
	slot, l, err := h.cl.leaderOf(t, key.Partition, leaderEpoch)
	if err != nil {
		return nil, false, errCode(err)
	}
	if _, err := slot.ClientHW(); err != nil {
		return l, false, 0
	}
	return l, true, 0
}

// clusterReplicaFetch answers a follower's fetch: records from each
// partition's log end as the follower knows it, up to this leader's log
// end, with the high watermark and log start the follower follows. The
// fetch tells the replica machine the follower's log end, which moves
// the high watermark and the ISR. It waits up to MaxWait for records when
// none of its partitions has any.
func (h *Handler) clusterReplicaFetch(r *server.Request, req *kmsg.FetchRequest) (kmsg.Response, error) {
	c := h.cl
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	follower := req.ReplicaID
	if req.Version >= 15 {
		follower = req.ReplicaState.ID
	}
	type target struct {
		sp       *kmsg.FetchResponseTopicPartition
		slot     *cluster.Slot
		log      *partition.Log
		epoch    int32
		offset   int64
		logStart int64 // the follower's
		max      int32
	}
	var targets []target
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		t, terr := c.topicOf(req.Version >= 13, rt.Topic, rt.TopicID)
		st.Partitions = make([]kmsg.FetchResponseTopicPartition, len(rt.Partitions))
		for i, rp := range rt.Partitions {
			sp := &st.Partitions[i]
			*sp = kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
			sp.PreferredReadReplica = -1
			sp.RecordBatches = []byte{}
			if terr != nil {
				sp.ErrorCode = errCode(terr)
				continue
			}
			slot, l, err := c.leaderOf(t, rp.Partition, rp.CurrentLeaderEpoch)
			if err != nil {
				sp.ErrorCode = errCode(err)
				continue
			}
			targets = append(targets, target{sp: sp, slot: slot, log: l, epoch: rp.CurrentLeaderEpoch, offset: rp.FetchOffset, logStart: rp.LogStartOffset, max: rp.PartitionMaxBytes})
		}
		resp.Topics = append(resp.Topics, st)
	}
	wait := min(time.Duration(req.MaxWaitMillis)*time.Millisecond, maxFetchWait)
	logs := make([]*partition.Log, len(targets))
	for i, t := range targets {
		logs[i] = t.log
	}
	var w *fetchWaiter
	for {
		remaining := min(max(req.MaxBytes, 0), h.fetchMaxBytes)
		total, failed := 0, false
		for _, t := range targets {
			sp := t.sp
			sp.ErrorCode, sp.RecordBatches = 0, []byte{}
			hw, err := t.slot.FollowerFetch(follower, t.epoch, t.offset, t.logStart)
			if err != nil {
				sp.ErrorCode, failed = errCode(err), true
				if errors.Is(err, kerr.OffsetOutOfRange) {
					// With our log start, so that a follower whose log
					// end it has passed restarts its log there (Kafka
					// answers -1 and its follower asks ListOffsets).
					sp.LogStartOffset = t.log.LogStartOffset()
				}
				continue
			}
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = hw, hw, t.log.LogStartOffset()
			limit := min(t.max, remaining)
			if limit <= 0 && total > 0 {
				continue
			}
			data, err := t.log.ReadReplica(t.offset, max(limit, 0))
			if err != nil {
				sp.ErrorCode, failed = fetchErrCode(err), true
				continue // (an offset out of range: the log start is set)
			}
			sp.RecordBatches = data
			total += len(data)
			remaining -= int32(len(data))
		}
		if total > 0 || req.MinBytes <= 0 || failed || wait <= 0 || len(targets) == 0 {
			return resp, nil
		}
		if w == nil {
			// About to wait: take the logs' channels and read again, so
			// that an append between the read and the wait is not missed.
			timer := time.NewTimer(wait)
			defer timer.Stop()
			w = new(fetchWaiter).start(r.Stopping, timer.C).watch(logs)
			continue
		}
		if !w.watch(logs).wait() {
			return resp, nil
		}
	}
}

// --- DeleteRecords ---

// clusterDeleteRecords moves the log start of the partitions this node
// leads, as Kafka's ReplicaManager.deleteRecords: only the leader takes
// it (NOT_LEADER_OR_FOLLOWER elsewhere, so the client goes to the
// leader; __consumer_offsets is refused as on a single node); offset -1
// is the high watermark, and an offset above the high watermark is
// OFFSET_OUT_OF_RANGE. The leader's log start moves durably and its
// machine hears of it (replica.LogStart); the followers move theirs as
// their next fetch's answer gives it (or, if it passed their log end,
// restart their logs there).
//
// The answer waits, as Kafka's DelayedDeleteRecords does, until the
// partition's low watermark reaches the new log start: the smallest log
// start over the leader and the followers on registered (live) nodes, as
// each follower's fetches report it (Fetch's LogStartOffset), counting
// out-of-ISR followers too, as Kafka does. So a success means every live
// replica has let the records go, and a consumer of any of them, after a
// leader change too, starts at or past the offset. A dead node does not
// hold it up (it follows when it comes back); a live follower that
// cannot follow in time (partitioned, or not fetching) makes the answer
// REQUEST_TIMED_OUT once the request's timeout has passed on the node's
// clock, with the leader's log start already moved, as in Kafka. The
// waits of the partitions run side by side.
func (h *Handler) clusterDeleteRecords(ctx context.Context, req *kmsg.DeleteRecordsRequest) (kmsg.Response, error) {
	c := h.cl
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	timeout := time.Duration(max(req.TimeoutMillis, 0)) * time.Millisecond
	var wg sync.WaitGroup
	resp.Topics = make([]kmsg.DeleteRecordsResponseTopic, len(req.Topics))
	for ti, rt := range req.Topics {
		st := &resp.Topics[ti]
		*st = kmsg.NewDeleteRecordsResponseTopic()
		st.Topic = rt.Topic
		t, terr := c.topicOf(false, rt.Topic, [16]byte{})
		if terr == nil && t.Name == broker.OffsetsTopicName {
			terr = kerr.InvalidTopicException
		}
		st.Partitions = make([]kmsg.DeleteRecordsResponseTopicPartition, len(rt.Partitions))
		for pi, rp := range rt.Partitions {
			sp := &st.Partitions[pi]
			*sp = kmsg.NewDeleteRecordsResponseTopicPartition()
			sp.Partition, sp.LowWatermark = rp.Partition, -1
			if terr != nil {
				sp.ErrorCode = errCode(terr)
				continue
			}
			slot, l, err := c.leaderOf(t, rp.Partition, -1)
			if err != nil {
				sp.ErrorCode = errCode(err)
				continue
			}
			start, err := l.DeleteRecords(rp.Offset)
			switch {
			case errors.Is(err, partition.ErrOffsetOutOfRange):
				sp.ErrorCode = kerr.OffsetOutOfRange.Code
				continue
			case errors.Is(err, partition.ErrClosed):
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
				continue
			case err != nil:
				h.log.Error("delete records", "topic", rt.Topic, "partition", rp.Partition, "err", err)
				sp.ErrorCode = kerr.KafkaStorageError.Code
				continue
			}
			slot.LogStartMoved()
			wg.Go(func() {
				low, err := slot.WaitLowWatermark(ctx, start, timeout)
				if err != nil {
					sp.ErrorCode = errCode(err)
					return
				}
				sp.LowWatermark = low
			})
		}
	}
	wg.Wait()
	return resp, nil
}

// --- OffsetForLeaderEpoch ---

// clusterOffsetForLeaderEpoch answers from the leader's epoch cache: the
// largest epoch at or below the one asked for and where it ends (KIP-101,
// KIP-279). Followers ask it after a leader change to know where to
// truncate; consumers to detect a log that was truncated under them.
func (h *Handler) clusterOffsetForLeaderEpoch(req *kmsg.OffsetForLeaderEpochRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		t, terr := h.cl.topicOf(false, rt.Topic, [16]byte{})
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.LeaderEpoch, sp.EndOffset = -1, -1
			err := terr
			var l *partition.Log
			if err == nil {
				_, l, err = h.cl.leaderOf(t, rp.Partition, rp.CurrentLeaderEpoch)
			}
			if err != nil {
				sp.ErrorCode = errCode(err)
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			sp.LeaderEpoch, sp.EndOffset = l.OffsetForLeaderEpoch(rp.LeaderEpoch)
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

// --- ListOffsets ---

// clusterListLog resolves a ListOffsets partition: the leader's log and
// its high watermark as clients may see it.
func (h *Handler) clusterListLog(topic string, p, leaderEpoch int32) (*partition.Log, int64, int16) {
	t, err := h.cl.topicOf(false, topic, [16]byte{})
	if err != nil {
		return nil, 0, errCode(err)
	}
	slot, l, err := h.cl.leaderOf(t, p, leaderEpoch)
	if err != nil {
		return nil, 0, errCode(err)
	}
	hw, err := slot.ClientHW()
	if err != nil {
		return nil, 0, errCode(err)
	}
	return l, hw, 0
}

// --- InitProducerID ---

// clusterProducerID hands out the next id of this node's block, taking a
// new block from etcd when it runs out.
func (h *Handler) clusterProducerID(ctx context.Context) (int64, error) {
	c := h.cl
	c.pidMu.Lock()
	defer c.pidMu.Unlock()
	if !c.pidLoaded || c.pidNext >= c.pidEnd {
		ctx, cancel := context.WithTimeout(ctx, adminTimeout)
		defer cancel()
		first, err := c.Node.NextProducerIDBlock(ctx)
		if err != nil {
			return -1, err
		}
		c.pidNext, c.pidEnd, c.pidLoaded = first, first+cluster.ProducerIDBlock, true
	}
	id := c.pidNext
	c.pidNext++
	return id, nil
}

// --- the group coordinator ---

// groupCoordinator is the node that coordinates a group: the leader of
// its partition of __consumer_offsets, as in Kafka, whose records hold
// the group. Without a live leader the answer is
// COORDINATOR_NOT_AVAILABLE, which clients retry.
func (c *clusterMode) groupCoordinator(groupID string) (meta.NodeInfo, error) {
	v := c.Node.View()
	t, ok := v.Topic(broker.OffsetsTopicName)
	if !ok || len(t.Partitions) == 0 {
		return meta.NodeInfo{}, detail(kerr.CoordinatorNotAvailable, "%s is being created", broker.OffsetsTopicName)
	}
	p := offsetstopic.PartitionFor(groupID, len(t.Partitions))
	st, ok := v.States[view.TP{Topic: t.ID, Partition: p}]
	if !ok || st.Leader == meta.NoLeader || !v.Alive(st.Leader) {
		return meta.NodeInfo{}, detail(kerr.CoordinatorNotAvailable, "partition %d of %s has no leader", p, broker.OffsetsTopicName)
	}
	n, ok := v.Nodes[st.Leader]
	if !ok {
		return meta.NodeInfo{}, detail(kerr.CoordinatorNotAvailable, "the leader of partition %d of %s is not registered", p, broker.OffsetsTopicName)
	}
	return n, nil
}

// --- __consumer_offsets ---

// offsetsTopicReplicas is offsets.topic.replication.factor, at most the
// live node count.
const offsetsTopicReplicas = 3

// ensureOffsetsTopic creates __consumer_offsets in the cluster, as Kafka
// does when a group coordinator is first looked for: its partitions hold
// the coordinator's records, and their leaders coordinate the groups. A
// failure is logged, and tried again on the next group request.
func (h *Handler) ensureClusterOffsetsTopic(ctx context.Context) {
	c := h.cl
	if c.offsetsTopic.Load() {
		return
	}
	if _, ok := c.Node.View().Topic(broker.OffsetsTopicName); ok {
		c.offsetsTopic.Store(true)
		return
	}
	rf := min(offsetsTopicReplicas, len(c.Node.View().Nodes))
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	_, err := c.Node.CreateTopic(ctx, broker.OffsetsTopicName, int(h.b.OffsetsTopicPartitions()), max(rf, 1), broker.OffsetsTopicConfigs())
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		h.log.Warn("creating the internal topic", "topic", broker.OffsetsTopicName, "err", err)
		return
	}
	c.offsetsTopic.Store(true)
}

// --- topics ---

// clusterCreateTopic creates one topic in etcd, placed by the cluster
// (cluster.Place), and waits until this node's view shows its leaders.
func (h *Handler) clusterCreateTopic(ctx context.Context, rt kmsg.CreateTopicsRequestTopic, validateOnly bool, timeout time.Duration, st *kmsg.CreateTopicsResponseTopic) error {
	c := h.cl
	if err := broker.ValidateTopicName(rt.Topic); err != nil {
		return err
	}
	if len(rt.ReplicaAssignment) > 0 {
		return detail(kerr.InvalidReplicaAssignment, "replica assignments are not taken yet: give a partition count and a replication factor")
	}
	n, rf := int(rt.NumPartitions), int(rt.ReplicationFactor)
	if n == -1 {
		n = int(h.b.DefaultPartitions())
	}
	if rf == -1 {
		rf = c.DefaultReplicationFactor
	}
	live := len(c.Node.View().Nodes)
	switch {
	case n <= 0:
		return detail(kerr.InvalidPartitions, "number of partitions must be larger than 0, or -1 for the default")
	case rf <= 0:
		return detail(kerr.InvalidReplicationFactor, "replication factor must be larger than 0, or -1 for the default")
	case rf > live:
		return detail(kerr.InvalidReplicationFactor, "replication factor: %d larger than available brokers: %d", rf, live)
	}
	if _, ok := c.Node.View().Topic(rt.Topic); ok {
		return detail(kerr.TopicAlreadyExists, "topic %q already exists", rt.Topic)
	}
	configs := requestedConfigs(rt)
	if err := h.answerTopicConfigs(configs, st); err != nil {
		return err
	}
	st.NumPartitions, st.ReplicationFactor = int32(n), int16(rf)
	if validateOnly {
		return nil
	}
	if timeout <= 0 {
		timeout = adminTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t, err := c.Node.CreateTopic(ctx, rt.Topic, n, rf, configs)
	if err != nil {
		return err
	}
	st.TopicID = t.ID
	if err := c.Node.WaitTopic(ctx, rt.Topic, n); err != nil {
		return fmt.Errorf("%w: the topic was created; its leaders were not elected within the request's timeout", kerr.RequestTimedOut)
	}
	return nil
}

// clusterAutoCreate creates a topic a Metadata request named, with the
// broker's defaults; one that another node created meanwhile is fine.
func (h *Handler) clusterAutoCreate(ctx context.Context, name string) (view.Topic, error) {
	c := h.cl
	if err := broker.ValidateTopicName(name); err != nil {
		return view.Topic{}, err
	}
	rf := min(c.DefaultReplicationFactor, len(c.Node.View().Nodes))
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	_, err := c.Node.CreateTopic(ctx, name, int(h.b.DefaultPartitions()), max(rf, 1), nil)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return view.Topic{}, err
	}
	// The client retries while leaders are elected (LEADER_NOT_AVAILABLE).
	waitCtx, cancelWait := context.WithTimeout(ctx, 2*time.Second)
	defer cancelWait()
	_ = c.Node.WaitTopic(waitCtx, name, int(h.b.DefaultPartitions()))
	if t, ok := c.Node.View().Topic(name); ok {
		return t, nil
	}
	return view.Topic{}, kerr.LeaderNotAvailable
}

// clusterDeleteTopic deletes a topic from etcd; each node drops its
// replicas of it.
func (h *Handler) clusterDeleteTopic(ctx context.Context, rt kmsg.DeleteTopicsRequestTopic, st *kmsg.DeleteTopicsResponseTopic, timeout time.Duration) error {
	v := h.cl.Node.View()
	var (
		t  view.Topic
		ok bool
	)
	if rt.Topic == nil || *rt.Topic == "" {
		if t, ok = v.TopicByID(meta.ID(rt.TopicID)); !ok {
			return kerr.UnknownTopicID
		}
	} else if t, ok = v.Topic(*rt.Topic); !ok {
		return kerr.UnknownTopicOrPartition
	}
	st.Topic, st.TopicID = strp(t.Name), t.ID
	if t.Name == broker.OffsetsTopicName {
		return detail(kerr.InvalidRequest, "%s is an internal topic", broker.OffsetsTopicName)
	}
	if timeout <= 0 {
		timeout = adminTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return h.cl.Node.DeleteTopic(ctx, t.Name)
}

// clusterCreatePartitions grows a topic in etcd; the controller writes
// the new partitions' first states.
func (h *Handler) clusterCreatePartitions(ctx context.Context, rt kmsg.CreatePartitionsRequestTopic, validateOnly bool, timeout time.Duration) error {
	t, ok := h.cl.Node.View().Topic(rt.Topic)
	switch {
	case !ok:
		return kerr.UnknownTopicOrPartition
	case t.Name == broker.OffsetsTopicName:
		return detail(kerr.InvalidRequest, "%s is an internal topic: its partition count is fixed", rt.Topic)
	case int(rt.Count) <= len(t.Partitions):
		return detail(kerr.InvalidPartitions, "topic currently has %d partitions, which is higher than or equal to the requested %d", len(t.Partitions), rt.Count)
	case len(rt.Assignment) > 0:
		return detail(kerr.InvalidReplicaAssignment, "replica assignments are not taken yet: give the partition count alone")
	case validateOnly:
		return nil
	}
	if timeout <= 0 {
		timeout = adminTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := h.cl.Node.CreatePartitions(ctx, rt.Topic, int(rt.Count)); err != nil {
		return err
	}
	if err := h.cl.Node.WaitTopic(ctx, rt.Topic, int(rt.Count)); err != nil {
		return fmt.Errorf("%w: the partitions were created; their leaders were not elected within the request's timeout", kerr.RequestTimedOut)
	}
	return nil
}

// --- Metadata ---

// clusterMetadata answers Metadata from the node's view: the live nodes,
// the controller, every topic with each partition's leader, replicas and
// ISR. Replicas of nodes that are not alive are listed as offline.
func (h *Handler) clusterMetadata(ctx context.Context, req *kmsg.MetadataRequest) (kmsg.Response, error) {
	c := h.cl
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	v := c.Node.View()
	for _, n := range v.SortedNodes() {
		br := kmsg.NewMetadataResponseBroker()
		br.NodeID, br.Host, br.Port, br.Rack = n.ID, n.Host, n.Port, rackOf(n)
		resp.Brokers = append(resp.Brokers, br)
	}
	resp.ClusterID = strp(c.ClusterID)
	resp.ControllerID = v.ControllerID()
	resp.AuthorizedOperations = authorizedOpsOmitted
	if req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0) {
		for _, t := range v.SortedTopics() {
			resp.Topics = append(resp.Topics, clusterMetadataTopic(v, t))
		}
		return resp, nil
	}
	autoCreate := h.b.AutoCreateTopics() && (req.Version < 4 || req.AllowAutoTopicCreation)
	for _, rt := range req.Topics {
		var (
			t   view.Topic
			ok  bool
			err error
		)
		if rt.Topic == nil {
			t, ok = v.TopicByID(meta.ID(rt.TopicID))
			err = kerr.UnknownTopicID
		} else {
			t, ok = v.Topic(*rt.Topic)
			err = kerr.UnknownTopicOrPartition
			if !ok && autoCreate {
				t, err = h.clusterAutoCreate(ctx, *rt.Topic)
				ok = err == nil
				v = c.Node.View()
			}
		}
		if !ok {
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic, mt.TopicID = rt.Topic, rt.TopicID
			mt.ErrorCode = errCode(err)
			mt.Partitions = []kmsg.MetadataResponseTopicPartition{}
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		resp.Topics = append(resp.Topics, clusterMetadataTopic(v, t))
	}
	return resp, nil
}

func clusterMetadataTopic(v *view.View, t view.Topic) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	mt.Topic = strp(t.Name)
	mt.TopicID = t.ID
	mt.IsInternal = t.Name == broker.OffsetsTopicName
	mt.AuthorizedOperations = authorizedOpsOmitted
	mt.Partitions = make([]kmsg.MetadataResponseTopicPartition, 0, len(t.Partitions))
	for p, replicas := range t.Partitions {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = int32(p)
		mp.Replicas = replicas
		mp.OfflineReplicas = []int32{}
		for _, r := range replicas {
			if !v.Alive(r) {
				mp.OfflineReplicas = append(mp.OfflineReplicas, r)
			}
		}
		st, ok := v.States[view.TP{Topic: t.ID, Partition: int32(p)}]
		switch {
		case !ok:
			mp.ErrorCode = kerr.LeaderNotAvailable.Code
			mp.Leader, mp.LeaderEpoch, mp.ISR = -1, -1, []int32{}
		default:
			mp.Leader, mp.LeaderEpoch, mp.ISR = st.Leader, st.LeaderEpoch, st.ISR
			if st.Leader == meta.NoLeader || !v.Alive(st.Leader) {
				mp.ErrorCode = kerr.LeaderNotAvailable.Code
				mp.Leader = -1
			}
		}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

// clusterDescribeCluster lists the live nodes and the controller.
func (c *clusterMode) describeCluster(resp *kmsg.DescribeClusterResponse) {
	v := c.Node.View()
	resp.ClusterID = c.ClusterID
	resp.ControllerID = v.ControllerID()
	for _, n := range v.SortedNodes() {
		b := kmsg.NewDescribeClusterResponseBroker()
		b.NodeID, b.Host, b.Port, b.Rack = n.ID, n.Host, n.Port, rackOf(n)
		resp.Brokers = append(resp.Brokers, b)
	}
}

// rackOf is a node's rack for the answers that name it: null if it has
// none.
func rackOf(n meta.NodeInfo) *string {
	if n.Rack == "" {
		return nil
	}
	return strp(n.Rack)
}
