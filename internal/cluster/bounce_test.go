package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/replica"
)

// A node's replicas never lead by a partition state written before the
// node registered under its current lease: such a leadership was given to
// an earlier process, whose log a restarted one may not have (a lost
// disk). Before the fix, a process restarted on an empty disk led at its
// predecessor's epoch from the listing, told consumers HW 0 and answered
// OffsetForLeaderEpoch from its empty log, so that followers truncated
// acknowledged records away. Nor does a leader whose lease is not live
// answer consumers or OffsetForLeaderEpoch.
func TestReplicasDoNotLeadByAStateOlderThanTheirRegistration(t *testing.T) {
	c := newTestCluster(t)
	node := c.start(1)
	tid := meta.ID{7}
	tp := view.TP{Topic: tid}
	c.createTopic("t", tid, [][]int32{{1, 2}})
	c.eventually("the partition's state", func(v *view.View) bool { _, ok := v.States[tp]; return ok })

	// Replicas that only apply what the test gives them.
	logs := &memLogs{logs: map[view.TP]*memLog{}}
	r := &Replicas{cfg: ReplicasConfig{Node: node, Logs: logs, MinInsync: 1}, node: node,
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), slots: map[view.TP]*slot{}, fetchers: map[int32]*fetcher{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	t.Cleanup(r.Close)

	deadline, registered := node.Registration()
	if registered == 0 {
		t.Fatal("a registered node without its registration's revision")
	}
	v := node.View()
	st := v.States[tp]
	withState := func(rev int64) *view.View {
		nv := *v
		nv.States = map[view.TP]view.State{tp: {PartitionState: st.PartitionState, Revision: rev}}
		return &nv
	}
	check := func(what string, wantRole replica.Role, wantErr error) {
		t.Helper()
		sl, ok := r.Replica(tp)
		if !ok {
			t.Fatalf("%s: no replica", what)
		}
		if got := sl.Role(); got != wantRole {
			t.Fatalf("%s: role %v, want %v", what, got, wantRole)
		}
		if _, err := sl.ClientHW(); !errors.Is(err, wantErr) && err != wantErr {
			t.Fatalf("%s: ClientHW: %v, want %v", what, err, wantErr)
		}
		if err := sl.CheckLeaderEpoch(st.LeaderEpoch); !errors.Is(err, wantErr) && err != wantErr {
			t.Fatalf("%s: CheckLeaderEpoch: %v, want %v", what, err, wantErr)
		}
	}

	// Without a registration, the listing's leadership is not taken.
	r.apply(withState(registered-1), time.Time{}, 0)
	check("no registration", replica.RoleNone, kerr.NotLeaderForPartition)
	// Registered after the state: still an earlier process's leadership;
	// nothing is recorded in the log's epoch cache.
	r.apply(withState(registered-1), deadline, registered)
	check("a state older than the registration", replica.RoleNone, kerr.NotLeaderForPartition)
	if _, ok := logs.get(tp).Latest(); ok {
		t.Fatal("a leader epoch was started by a process that does not lead")
	}
	// A state written after the registration (the controller elected
	// this process): it leads, and answers.
	r.apply(withState(registered+1), deadline, registered)
	check("a state newer than the registration", replica.RoleLeader, nil)
	// The same leader past its lease: no answers as leader.
	r.apply(withState(registered+1), c.clock.Now().Add(-time.Second), registered)
	check("a leader without a live lease", replica.RoleLeader, kerr.NotLeaderForPartition)
}

// A follower whose fetch offset is past the leader's log end (its HW
// above the LEO of a leader that lost its disk and, the last ISR member,
// was elected again) truncates to the leader's log end, fetches from
// there and rejoins the ISR. Before the fix it truncated to its HW,
// fetched out of range, asked OffsetForLeaderEpoch and truncated to its HW
// again, forever.
func TestFollowerPastTheLeadersLogEndRejoins(t *testing.T) {
	c := newTestCluster(t)
	net := &memNet{c: c, reps: map[int32]*Replicas{}, logs: map[int32]*memLogs{}, cut: map[int32]bool{}}
	tid := meta.ID{8}
	tp := view.TP{Topic: tid}
	// Node 1 lost its disk: it has epoch 1 from 0 and 5 records. Node 2
	// has 50 records of epoch 0, 40 of them below its HW.
	l1, l2 := newMemLog(), newMemLog()
	l1.assign(1, 0)
	l1.appendLeader(5)
	l2.assign(0, 0)
	l2.appendLeader(50)
	l2.hw = 40
	net.logs[1] = &memLogs{logs: map[view.TP]*memLog{tp: l1}}
	net.logs[2] = &memLogs{logs: map[view.TP]*memLog{tp: l2}}
	for id := int32(1); id <= 2; id++ {
		net.start(id)
	}
	c.eventually("two nodes and a controller", func(v *view.View) bool { return len(v.Nodes) == 2 && v.Controller != nil })
	// Node 1 leads epoch 1 alone, as the controller left it.
	kvc := c.model.Client("admin")
	keys := meta.NewKeys("/groupd/test/")
	tdata, _ := meta.Topic{Name: "t", ID: tid, Partitions: [][]int32{{1, 2}}}.Encode()
	sdata, _ := meta.PartitionState{Leader: 1, LeaderEpoch: 1, ISR: []int32{1}, PartitionEpoch: 3}.Encode()
	ctx := context.Background()
	if ok, _, err := kvc.Txn(ctx, nil, []kv.Op{kv.Put(keys.Topic("t"), tdata, 0), kv.Put(keys.Partition(tid, 0), sdata, 0)}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	deadline := time.Now().Add(hangGuard)
	for {
		v := c.nodes[1].View()
		if s := v.States[tp]; s.Leader == 1 && contains(s.ISR, 2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 2 never rejoined the ISR: %+v; its log: leo %d hw %d", v.States[tp], l2.LogEndOffset(), l2.HighWatermark())
		}
		c.advance(100 * time.Millisecond)
	}
	// It truncated to the leader's log end, 5, below its HW. (Its
	// records below 5 are of epoch 0, not the leader's: Kafka's fetcher
	// leaves that mismatch too; it comes only with acknowledged records
	// already lost.)
	if got, want := l2.LogEndOffset(), l1.LogEndOffset(); got != want {
		t.Fatalf("node 2's log ends at %d, the leader's at %d", got, want)
	}
}
