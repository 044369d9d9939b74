package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
)

// memLog is a replica's log in memory. A "batch" is 16 bytes: its base
// offset, its record count and its leader epoch; the test appends records
// one batch at a time and checks them by offset and epoch.
type memLog struct {
	mu      sync.Mutex
	batches [][3]int64 // base, count, epoch
	leo, hw int64
	epochs  [][2]int64 // epoch, start offset
	changed chan struct{}
}

func newMemLog() *memLog { return &memLog{changed: make(chan struct{})} }

func (l *memLog) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *memLog) wait() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

func (l *memLog) LogStartOffset() int64 { return 0 }
func (l *memLog) LogEndOffset() int64   { l.mu.Lock(); defer l.mu.Unlock(); return l.leo }
func (l *memLog) HighWatermark() int64  { l.mu.Lock(); defer l.mu.Unlock(); return l.hw }

func (l *memLog) SetHighWatermark(hw int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hw = hw
	l.notify()
}

func (l *memLog) Latest() (int32, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.epochs) == 0 {
		return 0, false
	}
	return int32(l.epochs[len(l.epochs)-1][0]), true
}

func (l *memLog) EndOffsetFor(epoch int32) (int32, int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.epochs) - 1; i >= 0; i-- {
		if int32(l.epochs[i][0]) <= epoch {
			end := l.leo
			if i+1 < len(l.epochs) {
				end = l.epochs[i+1][1]
			}
			return int32(l.epochs[i][0]), end, true
		}
	}
	return 0, 0, false
}

func (l *memLog) AssignEpoch(epoch int32, offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.assign(int64(epoch), offset)
	return nil
}

func (l *memLog) assign(epoch, offset int64) {
	if n := len(l.epochs); n > 0 && l.epochs[n-1][0] >= epoch {
		return
	}
	l.epochs = append(l.epochs, [2]int64{epoch, offset})
}

func (l *memLog) TruncateTo(offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.batches) > 0 && l.batches[len(l.batches)-1][0] >= offset {
		l.batches = l.batches[:len(l.batches)-1]
	}
	l.leo = min(l.leo, offset)
	l.hw = min(l.hw, offset)
	for len(l.epochs) > 0 && l.epochs[len(l.epochs)-1][1] >= offset {
		l.epochs = l.epochs[:len(l.epochs)-1]
	}
	l.notify()
	return nil
}

func (l *memLog) DeleteRecords(offset int64) (int64, error) { return 0, nil }

func (l *memLog) TruncateFullyAndStartAt(offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if offset != 0 {
		return fmt.Errorf("memLog starts at 0, not %d", offset)
	}
	l.batches, l.leo, l.hw, l.epochs = nil, 0, 0, nil
	l.notify()
	return nil
}

func (l *memLog) AppendReplicated(b []byte) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ; len(b) >= 24; b = b[24:] {
		base, n, epoch := int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[8:])), int64(binary.BigEndian.Uint64(b[16:]))
		if base != l.leo {
			return l.leo, fmt.Errorf("batch at %d appended at %d", base, l.leo)
		}
		l.batches = append(l.batches, [3]int64{base, n, epoch})
		l.assign(epoch, base)
		l.leo += n
	}
	l.notify()
	return l.leo, nil
}

// appendLeader appends n records as leader at the latest epoch.
func (l *memLog) appendLeader(n int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	epoch := int64(0)
	if len(l.epochs) > 0 {
		epoch = l.epochs[len(l.epochs)-1][0]
	}
	l.batches = append(l.batches, [3]int64{l.leo, n, epoch})
	l.leo += n
	l.notify()
	return l.leo
}

// read encodes the batches from offset (which must start one).
func (l *memLog) read(offset int64) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []byte
	found := offset == l.leo
	for _, b := range l.batches {
		if b[0] == offset {
			found = true
		}
		if found && b[0] >= offset {
			out = binary.BigEndian.AppendUint64(out, uint64(b[0]))
			out = binary.BigEndian.AppendUint64(out, uint64(b[1]))
			out = binary.BigEndian.AppendUint64(out, uint64(b[2]))
		}
	}
	if !found {
		return nil, kerr.OffsetOutOfRange
	}
	return out, nil
}

// epochOf is the epoch of the batch holding offset, -1 if none.
func (l *memLog) epochOf(offset int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.batches {
		if offset >= b[0] && offset < b[0]+b[1] {
			return b[2]
		}
	}
	return -1
}

type memLogs struct {
	mu   sync.Mutex
	logs map[view.TP]*memLog
	// dropGate, if set, holds every Drop until it is closed.
	dropGate chan struct{}
}

func (m *memLogs) Replica(t meta.Topic, p int32) (ReplicaLog, error) {
	return m.get(view.TP{Topic: t.ID, Partition: p}), nil
}

func (m *memLogs) Drop(topic meta.ID, p int32) error {
	if m.dropGate != nil {
		<-m.dropGate
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.logs, view.TP{Topic: topic, Partition: p})
	return nil
}

// has reports whether the log of tp exists.
func (m *memLogs) has(tp view.TP) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.logs[tp] != nil
}

func (m *memLogs) get(tp view.TP) *memLog {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.logs[tp] == nil {
		m.logs[tp] = newMemLog()
	}
	return m.logs[tp]
}

// memNet routes followers' requests to the leaders' replicas, and can cut
// a node off.
type memNet struct {
	c    *testCluster
	mu   sync.Mutex
	reps map[int32]*Replicas
	logs map[int32]*memLogs
	cut  map[int32]bool
}

type memTransport struct {
	net  *memNet
	from int32
}

var errCut = errors.New("network cut")

func (t memTransport) peer(leader int32) (*Replicas, *memLogs, error) {
	t.net.mu.Lock()
	defer t.net.mu.Unlock()
	if t.net.cut[t.from] || t.net.cut[leader] {
		return nil, nil, errCut
	}
	return t.net.reps[leader], t.net.logs[leader], nil
}

func (t memTransport) Fetch(ctx context.Context, leader int32, wants []FetchWant) ([]FetchResult, error) {
	reps, logs, err := t.peer(leader)
	if err != nil {
		return nil, err
	}
	var out []FetchResult
	var waits []<-chan struct{}
	for _, w := range wants {
		s, ok := reps.Replica(w.TP)
		if !ok {
			out = append(out, FetchResult{TP: w.TP, Err: kerr.NotLeaderForPartition})
			continue
		}
		l := logs.get(w.TP)
		waits = append(waits, l.wait())
		hw, err := s.FollowerFetch(t.from, w.LeaderEpoch, w.Offset, w.LogStart)
		if err != nil {
			out = append(out, FetchResult{TP: w.TP, Err: err})
			continue
		}
		b, err := l.read(w.Offset)
		out = append(out, FetchResult{TP: w.TP, Err: err, HW: hw, Batches: b})
	}
	empty := true
	for _, r := range out {
		if r.Err != nil || len(r.Batches) > 0 {
			empty = false
		}
	}
	if empty && len(waits) > 0 {
		// A long poll: until a log changes, or the fetch wait passes
		// on the virtual clock.
		timeout := make(chan struct{})
		stop := t.net.c.clock.AfterFunc(500*time.Millisecond, func() { close(timeout) })
		defer stop()
		select {
		case <-waits[0]:
		case <-timeout:
		case <-ctx.Done():
		}
		if _, _, err := t.peer(leader); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (t memTransport) EpochEnd(ctx context.Context, leader int32, asks []EpochAsk) ([]EpochAnswer, error) {
	reps, logs, err := t.peer(leader)
	if err != nil {
		return nil, err
	}
	var out []EpochAnswer
	for _, a := range asks {
		s, ok := reps.Replica(a.TP)
		if !ok {
			out = append(out, EpochAnswer{TP: a.TP, Err: kerr.NotLeaderForPartition})
			continue
		}
		if err := s.CheckLeaderEpoch(a.LeaderEpoch); err != nil {
			out = append(out, EpochAnswer{TP: a.TP, Err: err})
			continue
		}
		e, end, ok := logs.get(a.TP).EndOffsetFor(a.Epoch)
		if !ok {
			e, end = -1, -1
		}
		out = append(out, EpochAnswer{TP: a.TP, Epoch: e, End: end})
	}
	return out, nil
}

func (n *memNet) start(id int32) {
	node := n.c.start(id)
	n.mu.Lock()
	logs := n.logs[id] // preset by the test, or new
	n.mu.Unlock()
	if logs == nil {
		logs = &memLogs{logs: map[view.TP]*memLog{}}
	}
	r := NewReplicas(ReplicasConfig{Node: node, Logs: logs, Transport: memTransport{net: n, from: id},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MinInsync: 2})
	n.c.t.Cleanup(r.Close)
	n.mu.Lock()
	n.reps[id], n.logs[id] = r, logs
	n.mu.Unlock()
}

func (n *memNet) setCut(id int32, cut bool) {
	n.mu.Lock()
	n.cut[id] = cut
	n.mu.Unlock()
	n.c.setCut(id, cut)
}

// A produce with acks=all on a three-replica partition is acknowledged
// once the followers have fetched it; when the leader is cut off from
// etcd and its peers, the controller elects an ISR follower, the old
// leader acknowledges nothing more, and every acknowledged record is on
// the new leader at the epoch it was written in, while the new leader
// takes more.
func TestReplicationAcksAllAndFailover(t *testing.T) {
	c := newTestCluster(t)
	net := &memNet{c: c, reps: map[int32]*Replicas{}, logs: map[int32]*memLogs{}, cut: map[int32]bool{}}
	for id := int32(1); id <= 3; id++ {
		net.start(id)
	}
	c.awaitThree()
	tid := meta.ID{5}
	tp := view.TP{Topic: tid}
	c.createTopic("orders", tid, [][]int32{{1, 2, 3}})

	waitRole := func(node int32, what string) *Slot {
		t.Helper()
		deadline := time.Now().Add(hangGuard)
		for {
			if s, ok := net.reps[node].Replica(tp); ok && s.Role().String() == what {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d never became %s", node, what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	leader := waitRole(1, "leader")
	waitRole(2, "follower")
	waitRole(3, "follower")
	produce := func(s *Slot, l *memLog) (int64, <-chan error) {
		if err := s.CheckAppend(true); err != nil {
			t.Fatalf("CheckAppend: %v", err)
		}
		end := l.appendLeader(10)
		return end, s.Produced(end, true, c.clock.Now().Add(30*time.Second))
	}
	waitAck := func(ch <-chan error) error {
		t.Helper()
		deadline := time.Now().Add(hangGuard)
		for {
			select {
			case err := <-ch:
				return err
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("no acknowledgement (hang guard)")
			}
			c.advance(100 * time.Millisecond)
		}
	}
	l1 := net.logs[1].get(tp)
	var acked int64
	for range 5 {
		end, ch := produce(leader, l1)
		if err := waitAck(ch); err != nil {
			t.Fatalf("acks=all produce: %v", err)
		}
		acked = end
	}
	for _, id := range []int32{2, 3} {
		if got := net.logs[id].get(tp).LogEndOffset(); got < acked {
			t.Fatalf("node %d holds %d records, %d were acknowledged", id, got, acked)
		}
	}

	// The leader is cut off from everything; a produce it takes now is
	// never acknowledged.
	net.setCut(1, true)
	_, lost := produce(leader, l1)
	c.advance(12 * time.Second)
	// (A healthy node whose keep-alive goroutine falls behind the virtual
	// clock may lose its lease too and cost another election: any epoch
	// past 0 will do.)
	c.eventually("a new leader", func(v *view.View) bool {
		s := v.States[tp]
		return s.Leader != 1 && s.Leader != meta.NoLeader && s.LeaderEpoch >= 1
	})
	select {
	case err := <-lost:
		if err == nil {
			t.Fatal("the leader cut off acknowledged a produce")
		}
	default:
	}
	st := c.nodes[2].View().States[tp]
	if st.Leader == 2 {
		st = c.nodes[3].View().States[tp]
	}
	newLeader := st.Leader
	s := waitRole(newLeader, "leader")
	ln := net.logs[newLeader].get(tp)
	for off := int64(0); off < acked; off++ {
		if e := ln.epochOf(off); e != 0 {
			t.Fatalf("acknowledged offset %d on the new leader: epoch %d, want 0", off, e)
		}
	}
	// The new leader takes acks=all produces with the remaining follower.
	end, ch := produce(s, ln)
	if err := waitAck(ch); err != nil {
		t.Fatalf("acks=all produce on the new leader: %v", err)
	}
	if e := ln.epochOf(end - 1); e < 1 {
		t.Fatalf("a record written by the new leader has epoch %d, want its own", e)
	}
}

// A deleted topic's replicas stop and their logs go, on every node; before
// they did, its leader went on proposing ISR changes that etcd refused.
func TestReplicasOfADeletedTopicAreDropped(t *testing.T) {
	c := newTestCluster(t)
	net := &memNet{c: c, reps: map[int32]*Replicas{}, logs: map[int32]*memLogs{}, cut: map[int32]bool{}}
	for id := int32(1); id <= 3; id++ {
		net.start(id)
	}
	c.awaitThree()
	tid := meta.ID{6}
	tp := view.TP{Topic: tid}
	c.createTopic("doomed", tid, [][]int32{{1, 2, 3}})
	held := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(hangGuard)
		for {
			all := true
			for id := int32(1); id <= 3; id++ {
				_, ok := net.reps[id].Replica(tp)
				all = all && ok == want && net.logs[id].has(tp) == want
			}
			if all {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("replicas held: want %v on every node (hang guard)", want)
			}
			c.advance(100 * time.Millisecond)
		}
	}
	held(true)
	if err := c.nodes[2].DeleteTopic(context.Background(), "doomed"); err != nil {
		t.Fatal(err)
	}
	held(false)
}

// Deleting the logs of dropped replicas takes its time (seconds for a
// thousand partitions); the leaderships the node keeps must not lapse
// meanwhile, as they did when the deletions held up the loop that renews
// the replicas' leases.
func TestDroppingLogsDoesNotLapseLeaderships(t *testing.T) {
	c := newTestCluster(t)
	net := &memNet{c: c, reps: map[int32]*Replicas{}, logs: map[int32]*memLogs{}, cut: map[int32]bool{}}
	gate := make(chan struct{})
	net.logs[1] = &memLogs{logs: map[view.TP]*memLog{}, dropGate: gate}
	for id := int32(1); id <= 3; id++ {
		net.start(id)
	}
	c.awaitThree()
	kept, doomed := view.TP{Topic: meta.ID{7}}, view.TP{Topic: meta.ID{8}}
	c.createTopic("kept", kept.Topic, [][]int32{{1, 2, 3}})
	c.createTopic("doomed", doomed.Topic, [][]int32{{1, 2, 3}})
	leads := func() error {
		s, ok := net.reps[1].Replica(kept)
		if !ok {
			return errors.New("no replica")
		}
		return s.CheckAppend(true)
	}
	deadline := time.Now().Add(hangGuard)
	for leads() != nil || !net.logs[1].has(doomed) {
		if time.Now().After(deadline) {
			t.Fatalf("node 1 does not lead the kept topic: %v (hang guard)", leads())
		}
		c.advance(100 * time.Millisecond)
	}
	if err := c.nodes[2].DeleteTopic(context.Background(), "doomed"); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := net.reps[1].Replica(doomed); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the doomed replica was not dropped (hang guard)")
		}
		c.advance(100 * time.Millisecond)
	}
	// Its log's deletion is held; three session timeouts pass.
	for range 3 * 90 {
		c.advance(100 * time.Millisecond)
	}
	if err := leads(); err != nil {
		t.Fatalf("node 1's leadership lapsed while a log was being deleted: %v", err)
	}
	if !net.logs[1].has(doomed) {
		t.Fatal("the held deletion happened")
	}
	close(gate)
	for net.logs[1].has(doomed) {
		if time.Now().After(deadline) {
			t.Fatal("the log was never deleted (hang guard)")
		}
		time.Sleep(time.Millisecond)
	}
}

// MaxLag is, on the leader, how far its slowest follower is behind: 0
// once both have fetched everything, the records a follower cut off from
// the leader has not fetched, and nothing on a node that leads nothing.
func TestReplicasMaxLag(t *testing.T) {
	c := newTestCluster(t)
	net := &memNet{c: c, reps: map[int32]*Replicas{}, logs: map[int32]*memLogs{}, cut: map[int32]bool{}}
	for id := int32(1); id <= 3; id++ {
		net.start(id)
	}
	c.awaitThree()
	tp := view.TP{Topic: meta.ID{6}}
	c.createTopic("lagging", tp.Topic, [][]int32{{1, 2, 3}})
	lag := func(node int32, want int64) {
		t.Helper()
		deadline := time.Now().Add(hangGuard)
		for {
			got := net.reps[node].MaxLag()
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: max lag %d, want %d", node, got, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	var leader *Slot
	for deadline := time.Now().Add(hangGuard); leader == nil; time.Sleep(time.Millisecond) {
		if s, ok := net.reps[1].Replica(tp); ok && s.Role().String() == "leader" {
			leader = s
		}
		if time.Now().After(deadline) {
			t.Fatal("node 1 never led the partition")
		}
	}
	l1 := net.logs[1].get(tp)
	produce := func(n int64) {
		t.Helper()
		if err := leader.CheckAppend(false); err != nil {
			t.Fatalf("CheckAppend: %v", err)
		}
		leader.Produced(l1.appendLeader(n), false, c.clock.Now().Add(30*time.Second))
	}
	// Both followers fetch everything: no lag.
	produce(10)
	waitLEO := func(node int32, want int64) {
		t.Helper()
		deadline := time.Now().Add(hangGuard)
		for net.logs[node].get(tp).LogEndOffset() != want {
			if time.Now().After(deadline) {
				t.Fatalf("node %d's LEO %d, want %d", node, net.logs[node].get(tp).LogEndOffset(), want)
			}
			c.advance(10 * time.Millisecond)
		}
	}
	waitLEO(2, 10)
	waitLEO(3, 10)
	lag(1, 0)
	// Node 3 is cut off; node 2 goes on fetching.
	net.setCut(3, true)
	produce(7)
	waitLEO(2, 17)
	lag(1, 7)
	// Followers lead nothing.
	lag(2, 0)
	lag(3, 0)
}
