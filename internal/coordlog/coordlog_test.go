package coordlog

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/coordinator"
	"github.com/groupd/groupd/internal/coordinator/clocktest"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/store"
)

// memPartition is a partition log in memory that one test node leads or
// not; acks come at once, or with ackErr.
type memPartition struct {
	mu      sync.Mutex
	batches [][]byte
	leo     int64
	leading bool
	ackErr  error
	appends int
}

func (p *memPartition) Append(bs [][]byte, deadline time.Time) (<-chan error, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.leading {
		return nil, kerr.NotLeaderForPartition
	}
	p.appends++
	for _, b := range bs {
		b = append([]byte(nil), b...)
		h, err := batch.ParseHeader(b)
		if err != nil {
			return nil, err
		}
		batch.SetBaseOffset(b, p.leo)
		p.leo += int64(h.LastOffsetDelta) + 1
		p.batches = append(p.batches, b)
	}
	ch := make(chan error, 1)
	ch <- p.ackErr
	return ch, nil
}

func (p *memPartition) Leading() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.leading {
		return kerr.NotLeaderForPartition
	}
	return nil
}

func (p *memPartition) LogStart() int64 { return 0 }

func (p *memPartition) LogEnd() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leo
}

// Read returns one batch at a time, to exercise Load's paging.
func (p *memPartition) Read(offset int64, maxBytes int32) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.batches {
		h, _ := batch.ParseHeader(b)
		if h.LastOffset() >= offset {
			return b, nil
		}
	}
	return nil, errors.New("offset out of range")
}

func (p *memPartition) setLeading(v bool) {
	p.mu.Lock()
	p.leading = v
	p.mu.Unlock()
}

// records is every record of the partition, in order.
func (p *memPartition) records(t *testing.T) []batch.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []batch.Record
	for _, b := range p.batches {
		rs, err := batch.Records(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rs...)
	}
	return out
}

const partitions = 4

func newStore(parts []*memPartition) *Store { return newNodeStore(parts, 1) }

func newNodeStore(parts []*memPartition, node int32) *Store {
	return New(Config{Partitions: partitions, NodeID: node, Logger: slog.New(slog.DiscardHandler),
		Partition: func(p int32) (Partition, error) { return parts[p], nil }})
}

func newParts() []*memPartition {
	parts := make([]*memPartition, partitions)
	for i := range parts {
		parts[i] = &memPartition{}
	}
	return parts
}

// node is a coordinator over a Store, owning the shards it is told to.
type node struct {
	t     *testing.T
	clock *clocktest.Clock
	c     *coordinator.Coordinator
}

func newNode(t *testing.T, st *Store) *node {
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := coordinator.New(coordinator.Config{Store: st, Shards: partitions, ShardOf: ShardOf, Owned: true, Clock: clk, NodeID: st.cfg.NodeID,
		Group: group.Config{InitialRebalanceDelay: -1}, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { c.Close() })
	return &node{t: t, clock: clk, c: c}
}

func (n *node) do(req kmsg.Request) kmsg.Response {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := n.c.Handle(ctx, "client", "/127.0.0.1", req)
	if err != nil {
		n.t.Fatal(err)
	}
	return resp
}

// until retries req while the shard loads.
func (n *node) until(req func() kmsg.Request, code func(kmsg.Response) int16) kmsg.Response {
	n.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := n.do(req())
		if code(resp) != kerr.CoordinatorLoadInProgress.Code || time.Now().After(deadline) {
			return resp
		}
		time.Sleep(time.Millisecond)
	}
}

func commit(groupID, member string, gen int32, offset int64) kmsg.Request {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Version = 8
	r.Group, r.MemberID, r.Generation = groupID, member, gen
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = "orders"
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Partition, p.Offset = 3, offset
	t.Partitions = append(t.Partitions, p)
	r.Topics = append(r.Topics, t)
	return r
}

func commitErr(r kmsg.Response) int16 {
	return r.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
}

func joinGroup(n *node, groupID string) (string, int32) {
	n.t.Helper()
	req := func(member string) kmsg.Request {
		j := kmsg.NewPtrJoinGroupRequest()
		j.Version = 5
		j.Group, j.MemberID, j.ProtocolType = groupID, member, "consumer"
		j.SessionTimeoutMillis, j.RebalanceTimeoutMillis = 10000, 30000
		j.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1}}}
		return j
	}
	first := n.until(func() kmsg.Request { return req("") }, func(r kmsg.Response) int16 { return r.(*kmsg.JoinGroupResponse).ErrorCode }).(*kmsg.JoinGroupResponse)
	if first.ErrorCode != kerr.MemberIDRequired.Code {
		n.t.Fatalf("first join: %v", kerr.ErrorForCode(first.ErrorCode))
	}
	join := n.do(req(first.MemberID)).(*kmsg.JoinGroupResponse)
	if join.ErrorCode != 0 {
		n.t.Fatalf("join: %v", kerr.ErrorForCode(join.ErrorCode))
	}
	s := kmsg.NewPtrSyncGroupRequest()
	s.Version = 3
	s.Group, s.MemberID, s.Generation = groupID, join.MemberID, join.Generation
	s.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: join.MemberID, MemberAssignment: []byte("a")}}
	if sr := n.do(s).(*kmsg.SyncGroupResponse); sr.ErrorCode != 0 {
		n.t.Fatalf("sync: %v", kerr.ErrorForCode(sr.ErrorCode))
	}
	return join.MemberID, join.Generation
}

func heartbeat(n *node, groupID, member string, gen int32) int16 {
	h := kmsg.NewPtrHeartbeatRequest()
	h.Version = 3
	h.Group, h.MemberID, h.Generation = groupID, member, gen
	return n.until(func() kmsg.Request { return h }, func(r kmsg.Response) int16 { return r.(*kmsg.HeartbeatResponse).ErrorCode }).(*kmsg.HeartbeatResponse).ErrorCode
}

// TestFailoverThroughThePartition moves a shard from one node to another
// through its partition's records alone: the group is Stable at the same
// generation and its commit is there.
func TestFailoverThroughThePartition(t *testing.T) {
	parts := newParts()
	const g = "payments"
	shard := ShardOf(g, partitions)
	a, b := newNode(t, newNodeStore(parts, 1)), newNode(t, newNodeStore(parts, 2))

	parts[shard].setLeading(true)
	a.c.Own(shard)
	member, gen := joinGroup(a, g)
	if c := commitErr(a.do(commit(g, member, gen, 42))); c != 0 {
		t.Fatalf("commit: %v", kerr.ErrorForCode(c))
	}

	// The partition's leadership moves to b's node.
	a.c.Disown(shard)
	b.c.Own(shard)
	if c := heartbeat(b, g, member, gen); c != 0 {
		t.Fatalf("heartbeat at the new coordinator: %v", kerr.ErrorForCode(c))
	}
	f := kmsg.NewPtrOffsetFetchRequest()
	f.Version = 7
	f.Group = g
	f.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "orders", Partitions: []int32{3}}}
	if got := b.do(f).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset; got != 42 {
		t.Fatalf("offset at the new coordinator = %d, want 42", got)
	}
	d := kmsg.NewPtrDescribeGroupsRequest()
	d.Groups = []string{g}
	if dg := b.do(d).(*kmsg.DescribeGroupsResponse).Groups[0]; dg.State != "Stable" || len(dg.Members) != 1 {
		t.Fatalf("at the new coordinator: %s with %d members", dg.State, len(dg.Members))
	}
	// b names where the group came from.
	sg, ok, err := b.c.Group(t.Context(), g)
	if err != nil || !ok || sg.CoordinatorMove == nil {
		t.Fatalf("group at the new coordinator: %v %v %+v", ok, err, sg.CoordinatorMove)
	}
	if mv := sg.CoordinatorMove; mv.From != 1 || mv.To != 2 {
		t.Fatalf("coordinator move %+v, want from node 1 to node 2", *mv)
	}
	for i, p := range parts {
		if i != shard && p.LogEnd() != 0 {
			t.Fatalf("partition %d has records of another shard's group", i)
		}
	}
}

// TestCommitsReadWithKafkasSchemas decodes the partition's commit records
// with kmsg's OffsetCommitKey and OffsetCommitValue, as a tool reading
// __consumer_offsets does.
func TestCommitsReadWithKafkasSchemas(t *testing.T) {
	parts := newParts()
	st := newStore(parts)
	const g = "readers"
	shard := ShardOf(g, partitions)
	parts[shard].setLeading(true)
	n := newNode(t, st)
	n.c.Own(shard)
	if c := commitErr(n.until(func() kmsg.Request { return commit(g, "", -1, 7) }, commitErr)); c != 0 {
		t.Fatalf("commit: %v", kerr.ErrorForCode(c))
	}
	found := false
	for _, r := range parts[shard].records(t) {
		if binary.BigEndian.Uint16(r.Key) != 1 {
			continue
		}
		k := kmsg.NewOffsetCommitKey()
		if err := k.ReadFrom(r.Key); err != nil {
			t.Fatal(err)
		}
		v := kmsg.NewOffsetCommitValue()
		if err := v.ReadFrom(r.Value); err != nil {
			t.Fatal(err)
		}
		if k.Group != g || k.Topic != "orders" || k.Partition != 3 || v.Offset != 7 {
			t.Fatalf("commit record: key %+v value %+v", k, v)
		}
		found = true
	}
	if !found {
		t.Fatal("no OffsetCommitKey record in the partition")
	}
}

func TestApplyNeedsTheISR(t *testing.T) {
	parts := newParts()
	st := newStore(parts)
	rec := group.Record{Type: group.RecordOffsetCommit, Group: "g", Topic: "t", Partition: 0,
		Offset: &group.OffsetCommit{Offset: 1, LeaderEpoch: -1}}
	shard := ShardOf("g", partitions)
	if err := st.Apply([]group.Record{rec}); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("Apply on a partition not led = %v", err)
	}
	parts[shard].setLeading(true)
	parts[shard].ackErr = kerr.NotEnoughReplicas
	if err := st.Apply([]group.Record{rec}); !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("Apply without the ISR's ack = %v", err)
	}
	other := rec
	for i := 0; ShardOf(other.Group, partitions) == shard; i++ {
		other.Group = strings.Repeat("x", i+1)
	}
	if err := st.Apply([]group.Record{rec, other}); err == nil {
		t.Fatal("Apply of two shards' records succeeded")
	}
}

func TestLoadOnlyAsLeader(t *testing.T) {
	parts := newParts()
	st := newStore(parts)
	if err := st.Load(1, func(group.Record) error { return nil }); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Load of a partition not led = %v", err)
	}
}

func TestLoadSkipsUnknownTypesAndStopsOnCorruption(t *testing.T) {
	parts := newParts()
	st := newStore(parts)
	shard := ShardOf("g", partitions)
	p := parts[shard]
	p.setLeading(true)
	rec := group.Record{Type: group.RecordOffsetCommit, Group: "g", Topic: "t", Partition: 0,
		Offset: &group.OffsetCommit{Offset: 1, LeaderEpoch: -1}}
	if err := st.Apply([]group.Record{rec}); err != nil {
		t.Fatal(err)
	}
	raw := func(key, value []byte) []byte {
		b, err := batch.Encode(batch.Header{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
			[]batch.Record{{Key: key, Value: value}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Kafka's ConsumerGroupMetadataKey (version 3): not groupd's.
	if _, err := p.Append([][]byte{raw([]byte{0, 3, 0, 1, 'g'}, []byte{0, 0})}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	var got []group.Record
	if err := st.Load(shard, func(r group.Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatalf("Load with a record of a type Kafka has and groupd does not = %v", err)
	}
	if len(got) != 1 || got[0].Offset == nil || got[0].Offset.Offset != 1 {
		t.Fatalf("loaded %+v, want the one commit", got)
	}
	// An offset commit whose value does not decode.
	if _, err := p.Append([][]byte{raw([]byte{0, 1, 0, 1, 'g', 0, 1, 't', 0, 0, 0, 0}, []byte{0, 3, 1})}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	var ue *store.UndecodableError
	if err := st.Load(shard, func(group.Record) error { return nil }); !errors.As(err, &ue) {
		t.Fatalf("Load past a corrupt commit = %v, want an UndecodableError", err)
	}
}

func TestLargeApplySpansBatches(t *testing.T) {
	parts := newParts()
	st := New(Config{Partitions: partitions, MaxBatchBytes: 512, Logger: slog.New(slog.DiscardHandler),
		Partition: func(p int32) (Partition, error) { return parts[p], nil }})
	shard := ShardOf("g", partitions)
	parts[shard].setLeading(true)
	var recs []group.Record
	for i := range 40 {
		recs = append(recs, group.Record{Type: group.RecordOffsetCommit, Group: "g", Topic: "t", Partition: int32(i),
			Offset: &group.OffsetCommit{Offset: int64(i), LeaderEpoch: -1}})
	}
	if err := st.Apply(recs); err != nil {
		t.Fatal(err)
	}
	if n := len(parts[shard].batches); n < 2 || parts[shard].appends != 1 {
		t.Fatalf("%d batches in %d appends, want several in one", n, parts[shard].appends)
	}
	var got int
	if err := st.Load(shard, func(group.Record) error { got++; return nil }); err != nil || got != 40 {
		t.Fatalf("loaded %d records (%v), want 40", got, err)
	}
}
