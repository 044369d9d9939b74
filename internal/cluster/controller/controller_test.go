package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

var tA = TopicID{1}

func view(alive ...int32) View {
	v := View{Alive: map[int32]string{}, ShuttingDown: map[int32]bool{}, States: map[TP]PartitionState{}, Reassign: map[TP]Reassignment{},
		Elections: map[TP]Election{}}
	for _, n := range alive {
		v.Alive[n] = ""
	}
	v.Topics = []Topic{{ID: tA, Name: "a", Replicas: [][]int32{{1, 2, 3}}}}
	return v
}

func tp0() TP { return TP{Topic: tA, Partition: 0} }

func describe(ws []Write) string {
	var b strings.Builder
	for _, w := range ws {
		if w.DropElection {
			fmt.Fprintf(&b, "%s: drop election=%d expect=%d\n", w.Reason, w.ElectionRevision, w.ExpectRevision)
			continue
		}
		fmt.Fprintf(&b, "%s: leader=%d epoch=%d isr=%v pepoch=%d expect=%d", w.Reason, w.State.Leader, w.State.LeaderEpoch, w.State.ISR, w.State.PartitionEpoch, w.ExpectRevision)
		if w.Replicas != nil {
			fmt.Fprintf(&b, " replicas=%v finished=%v", w.Replicas, w.Finished)
		}
		if w.ReassignRevision != 0 {
			fmt.Fprintf(&b, " reassign=%d", w.ReassignRevision)
		}
		if w.ElectionRevision != 0 {
			fmt.Fprintf(&b, " election=%d", w.ElectionRevision)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(v *View)
		want  string
	}{
		{"a healthy partition changes nothing", func(v *View) {
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2, 3}, Revision: 10}
		}, ""},
		{"nodes registered before the state are not bounced", func(v *View) {
			v.Registered = map[int32]int64{1: 3, 2: 9, 3: 10}
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2, 3}, Revision: 10}
		}, ""},
		{"a bounced leader (registered after the state) is replaced as if it had gone, and leaves the ISR", func(v *View) {
			v.Registered = map[int32]int64{1: 12, 2: 3, 3: 3}
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 3, 2}, PartitionEpoch: 7, Revision: 10}
		}, "leader-bounced: leader=2 epoch=5 isr=[3 2] pepoch=8 expect=10\n"},
		{"a bounced leader with no one else eligible: offline at a new epoch, the ISR kept", func(v *View) {
			v.Registered = map[int32]int64{1: 12, 2: 3, 3: 11}
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 3}, Revision: 10}
		}, "leader-bounced: leader=-1 epoch=5 isr=[1 3] pepoch=1 expect=10\n"},
		{"then the bounced node, the first ISR member, leads again", func(v *View) {
			v.Registered = map[int32]int64{1: 12, 2: 3, 3: 11}
			v.States[tp0()] = PartitionState{Leader: NoLeader, LeaderEpoch: 5, ISR: []int32{1, 3}, Revision: 13}
		}, "first-leader: leader=1 epoch=6 isr=[1 3] pepoch=1 expect=13\n"},
		{"an offline partition elects its last ISR member even if it registered after the state", func(v *View) {
			v.Registered = map[int32]int64{1: 3, 2: 3, 3: 20}
			delete(v.Alive, 1)
			v.States[tp0()] = PartitionState{Leader: NoLeader, LeaderEpoch: 5, ISR: []int32{3}, Revision: 13}
		}, "first-leader: leader=3 epoch=6 isr=[3] pepoch=1 expect=13\n"},
		{"an offline partition does not elect an ISR member that came back on an empty disk, but the one that kept its log", func(v *View) {
			v.Registered = map[int32]int64{1: 21, 2: 3, 3: 20}
			v.EmptyDisk = map[int32]bool{3: true}
			v.States[tp0()] = PartitionState{Leader: NoLeader, LeaderEpoch: 5, ISR: []int32{3, 1}, Revision: 13}
		}, "first-leader: leader=1 epoch=6 isr=[3 1] pepoch=1 expect=13\n"},
		{"an offline partition whose only live ISR member came back on an empty disk stays offline", func(v *View) {
			v.Registered = map[int32]int64{2: 3, 3: 20}
			delete(v.Alive, 1)
			v.EmptyDisk = map[int32]bool{3: true}
			v.States[tp0()] = PartitionState{Leader: NoLeader, LeaderEpoch: 5, ISR: []int32{3, 1}, Revision: 13}
		}, ""},
		{"an empty disk from before the state (a new node taken into the ISR) is no obstacle", func(v *View) {
			v.Registered = map[int32]int64{2: 3, 3: 4}
			delete(v.Alive, 1)
			v.EmptyDisk = map[int32]bool{3: true}
			v.States[tp0()] = PartitionState{Leader: NoLeader, LeaderEpoch: 5, ISR: []int32{3, 1}, Revision: 13}
		}, "first-leader: leader=3 epoch=6 isr=[3] pepoch=1 expect=13\n"},
		{"a bounced leader on an empty disk takes its partition offline and leaves the ISR", func(v *View) {
			v.Registered = map[int32]int64{1: 12, 2: 3, 3: 3}
			delete(v.Alive, 3)
			v.EmptyDisk = map[int32]bool{1: true}
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 3}, Revision: 10}
		}, "leader-bounced: leader=-1 epoch=5 isr=[3] pepoch=1 expect=10\n"},
		{"a bounced leader on an empty disk, the only ISR member: kept, there is nothing safer", func(v *View) {
			v.Registered = map[int32]int64{1: 12, 2: 3, 3: 3}
			v.EmptyDisk = map[int32]bool{1: true}
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1}, Revision: 10}
		}, "leader-bounced: leader=-1 epoch=5 isr=[1] pepoch=1 expect=10\n"},
		{"a bounced follower leaves the ISR before anything else", func(v *View) {
			v.Registered = map[int32]int64{1: 3, 2: 11, 3: 3}
			v.AutoLeaderRebalance, v.RebalanceDue = true, true
			v.States[tp0()] = PartitionState{Leader: 3, LeaderEpoch: 4, ISR: []int32{3, 2, 1}, PartitionEpoch: 2, Revision: 10}
		}, "isr-bounced-replica: leader=3 epoch=4 isr=[3 1] pepoch=3 expect=10\n"},
		{"a dead leader: the first live ISR replica leads, the dead one leaves the ISR", func(v *View) {
			delete(v.Alive, 1)
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 3, 2}, PartitionEpoch: 7, Revision: 10}
		}, "leader-gone: leader=2 epoch=5 isr=[3 2] pepoch=8 expect=10\n"},
		{"a dead leader with a replica out of the ISR: not elected", func(v *View) {
			delete(v.Alive, 1)
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 3}, Revision: 10}
		}, "leader-gone: leader=3 epoch=5 isr=[3] pepoch=1 expect=10\n"},
		{"no live ISR replica: offline, the ISR kept, the epoch bumped", func(v *View) {
			delete(v.Alive, 1)
			delete(v.Alive, 3)
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 3}, Revision: 10}
		}, "offline: leader=-1 epoch=5 isr=[1 3] pepoch=1 expect=10\n"},
		{"offline stays offline until an ISR member is back", func(v *View) {
			delete(v.Alive, 1)
			delete(v.Alive, 3)
			v.States[tp0()] = PartitionState{Leader: NoLeader, LeaderEpoch: 5, ISR: []int32{1, 3}, Revision: 11}
		}, ""},
		{"an ISR member back leads an offline partition", func(v *View) {
			delete(v.Alive, 1)
			v.States[tp0()] = PartitionState{Leader: NoLeader, LeaderEpoch: 5, ISR: []int32{1, 3}, Revision: 11}
		}, "first-leader: leader=3 epoch=6 isr=[3] pepoch=1 expect=11\n"},
		{"unclean election takes a live replica out of the ISR", func(v *View) {
			v.Topics[0].UncleanLeaderElection = true
			delete(v.Alive, 1)
			delete(v.Alive, 3)
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 3}, Revision: 10}
		}, "unclean-election: leader=2 epoch=5 isr=[2] pepoch=1 expect=10\n"},
		{"a dead follower leaves the ISR, the leader and its epoch stay", func(v *View) {
			delete(v.Alive, 3)
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2, 3}, Revision: 10}
		}, "isr-dead-replica: leader=1 epoch=4 isr=[1 2] pepoch=1 expect=10\n"},
		{"a leader shutting down hands over to a live ISR replica", func(v *View) {
			v.ShuttingDown[1] = true
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2, 3}, Revision: 10}
		}, "controlled-shutdown: leader=2 epoch=5 isr=[1 2 3] pepoch=1 expect=10\n"},
		{"a leader shutting down alone in the ISR keeps leading", func(v *View) {
			v.ShuttingDown[1] = true
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1}, Revision: 10}
		}, ""},
		{"the preferred replica gets leadership back when a check is due", func(v *View) {
			v.AutoLeaderRebalance, v.RebalanceDue = true, true
			v.States[tp0()] = PartitionState{Leader: 2, LeaderEpoch: 5, ISR: []int32{2, 3, 1}, Revision: 12}
		}, "preferred-leader: leader=1 epoch=6 isr=[2 3 1] pepoch=1 expect=12\n"},
		{"not before the check is due, nor with rebalancing off", func(v *View) {
			v.AutoLeaderRebalance = true
			v.States[tp0()] = PartitionState{Leader: 2, LeaderEpoch: 5, ISR: []int32{2, 3, 1}, Revision: 12}
		}, ""},
		{"a preferred replica out of the ISR is not elected", func(v *View) {
			v.AutoLeaderRebalance, v.RebalanceDue = true, true
			v.States[tp0()] = PartitionState{Leader: 2, LeaderEpoch: 5, ISR: []int32{2, 3}, Revision: 12}
		}, ""},
		{"a reassignment first adds its target to the replicas", func(v *View) {
			v.Alive[4] = ""
			v.Reassign[tp0()] = Reassignment{Target: []int32{4, 2, 3}, Revision: 9}
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2, 3}, Revision: 10}
		}, "reassignment-add: leader=1 epoch=4 isr=[1 2 3] pepoch=1 expect=10 replicas=[4 2 3 1] finished=false reassign=9\n"},
		{"and waits until the target is in the ISR", func(v *View) {
			v.Alive[4] = ""
			v.Topics[0].Replicas = [][]int32{{4, 2, 3, 1}}
			v.Reassign[tp0()] = Reassignment{Target: []int32{4, 2, 3}}
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2, 3}, Revision: 11}
		}, ""},
		{"then finishes: the target, a leader from it, the others out of the ISR", func(v *View) {
			v.Alive[4] = ""
			v.Topics[0].Replicas = [][]int32{{4, 2, 3, 1}}
			v.Reassign[tp0()] = Reassignment{Target: []int32{4, 2, 3}, Revision: 9}
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2, 3, 4}, Revision: 12}
		}, "reassignment-done: leader=4 epoch=5 isr=[2 3 4] pepoch=1 expect=12 replicas=[4 2 3] finished=true reassign=9\n"},
		{"a revert gives the original replicas back at once, the added ones out of the ISR", func(v *View) {
			v.Alive[4] = ""
			delete(v.Alive, 3)
			v.Topics[0].Replicas = [][]int32{{4, 2, 1, 3}}
			v.Reassign[tp0()] = Reassignment{Target: []int32{1, 3, 2}, Revert: true, Revision: 11}
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2, 4}, Revision: 12}
		}, "reassignment-revert: leader=1 epoch=4 isr=[1 2] pepoch=1 expect=12 replicas=[1 3 2] finished=true reassign=11\n"},
		{"a revert moves leadership off an added replica to an original one in the ISR", func(v *View) {
			v.Alive[4] = ""
			v.Topics[0].Replicas = [][]int32{{4, 2, 1, 3}}
			v.Reassign[tp0()] = Reassignment{Target: []int32{1, 2, 3}, Revert: true, Revision: 11}
			v.States[tp0()] = PartitionState{Leader: 4, LeaderEpoch: 4, ISR: []int32{4, 2}, Revision: 12}
		}, "reassignment-revert: leader=2 epoch=5 isr=[2] pepoch=1 expect=12 replicas=[1 2 3] finished=true reassign=11\n"},
		{"a revert with only added replicas in the ISR waits", func(v *View) {
			v.Alive[4] = ""
			v.Topics[0].Replicas = [][]int32{{4, 1}}
			v.Reassign[tp0()] = Reassignment{Target: []int32{1}, Revert: true, Revision: 11}
			v.States[tp0()] = PartitionState{Leader: 4, LeaderEpoch: 4, ISR: []int32{4}, Revision: 12}
		}, ""},
		{"a preferred election asked for: the preferred replica leads at a new epoch, the request deleted", func(v *View) {
			v.Elections[tp0()] = Election{Type: ElectPreferred, Revision: 13}
			v.States[tp0()] = PartitionState{Leader: 2, LeaderEpoch: 5, ISR: []int32{2, 3, 1}, PartitionEpoch: 3, Revision: 12}
		}, "requested-preferred-leader: leader=1 epoch=6 isr=[2 3 1] pepoch=4 expect=12 election=13\n"},
		{"a preferred election when the preferred replica leads: dropped, nothing written", func(v *View) {
			v.Elections[tp0()] = Election{Type: ElectPreferred, Revision: 13}
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 5, ISR: []int32{2, 3, 1}, Revision: 12}
		}, "election-not-done: drop election=13 expect=12\n"},
		{"a preferred election with the preferred replica out of the ISR: dropped", func(v *View) {
			v.Elections[tp0()] = Election{Type: ElectPreferred, Revision: 13}
			v.States[tp0()] = PartitionState{Leader: 2, LeaderEpoch: 5, ISR: []int32{2, 3}, Revision: 12}
		}, "election-not-done: drop election=13 expect=12\n"},
		{"a preferred election with the preferred replica shutting down: dropped", func(v *View) {
			v.ShuttingDown[1] = true
			v.Elections[tp0()] = Election{Type: ElectPreferred, Revision: 13}
			v.States[tp0()] = PartitionState{Leader: 2, LeaderEpoch: 5, ISR: []int32{2, 3, 1}, Revision: 12}
		}, "election-not-done: drop election=13 expect=12\n"},
		{"a preferred election waits while another decision comes first", func(v *View) {
			delete(v.Alive, 3)
			v.Elections[tp0()] = Election{Type: ElectPreferred, Revision: 13}
			v.States[tp0()] = PartitionState{Leader: 2, LeaderEpoch: 5, ISR: []int32{2, 3, 1}, Revision: 12}
		}, "isr-dead-replica: leader=2 epoch=5 isr=[2 1] pepoch=1 expect=12\n"},
		{"a leader election that elects the preferred replica answers a preferred election", func(v *View) {
			delete(v.Alive, 2)
			v.Elections[tp0()] = Election{Type: ElectPreferred, Revision: 13}
			v.States[tp0()] = PartitionState{Leader: 2, LeaderEpoch: 5, ISR: []int32{2, 3, 1}, Revision: 12}
		}, "leader-gone: leader=1 epoch=6 isr=[3 1] pepoch=1 expect=12 election=13\n"},
		{"an unclean election of an offline partition takes the first live replica", func(v *View) {
			delete(v.Alive, 1)
			delete(v.Alive, 2)
			v.Elections[tp0()] = Election{Type: ElectUnclean, Revision: 13}
			v.States[tp0()] = PartitionState{Leader: NoLeader, LeaderEpoch: 5, ISR: []int32{1, 2}, PartitionEpoch: 2, Revision: 12}
		}, "unclean-election: leader=3 epoch=6 isr=[3] pepoch=3 expect=12 election=13\n"},
		{"an unclean election of a partition whose leader just died: a live ISR member first", func(v *View) {
			delete(v.Alive, 1)
			v.Elections[tp0()] = Election{Type: ElectUnclean, Revision: 13}
			v.States[tp0()] = PartitionState{Leader: 1, LeaderEpoch: 5, ISR: []int32{1, 3}, Revision: 12}
		}, "leader-gone: leader=3 epoch=6 isr=[3] pepoch=1 expect=12 election=13\n"},
		{"an unclean election of a partition with a live leader: dropped", func(v *View) {
			v.Elections[tp0()] = Election{Type: ElectUnclean, Revision: 13}
			v.States[tp0()] = PartitionState{Leader: 2, LeaderEpoch: 5, ISR: []int32{2}, Revision: 12}
		}, "election-not-done: drop election=13 expect=12\n"},
		{"an unclean election with no live replica: dropped", func(v *View) {
			v.Alive = map[int32]string{4: ""}
			v.Elections[tp0()] = Election{Type: ElectUnclean, Revision: 13}
			v.States[tp0()] = PartitionState{Leader: NoLeader, LeaderEpoch: 5, ISR: []int32{1}, Revision: 12}
		}, "election-not-done: drop election=13 expect=12\n"},
		{"without a request, an offline partition stays offline when unclean election is off", func(v *View) {
			delete(v.Alive, 1)
			delete(v.Alive, 2)
			v.States[tp0()] = PartitionState{Leader: NoLeader, LeaderEpoch: 5, ISR: []int32{1, 2}, Revision: 12}
		}, ""},
		{"a new partition: its first live replica leads, the live ones in sync", func(v *View) {
			delete(v.Alive, 1)
		}, "new-partition: leader=2 epoch=0 isr=[2 3] pepoch=0 expect=0\n"},
		{"a new partition with no replica alive waits", func(v *View) {
			v.Alive = map[int32]string{}
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := view(1, 2, 3)
			c.setup(&v)
			if got := describe(Decide(v)); got != c.want {
				t.Fatalf("got:\n%swant:\n%s", got, c.want)
			}
		})
	}
}

// Decisions come in a fixed order whatever the order of the view's topics,
// and deciding again on the state written decides nothing more: a
// controller that restarts between two decisions writes nothing twice.
func TestDecideIsDeterministicAndSettles(t *testing.T) {
	v := view(2, 3)
	v.Topics = append(v.Topics, Topic{ID: TopicID{2}, Name: "b", Replicas: [][]int32{{3, 1}, {1, 2}}})
	v.States[TP{tA, 0}] = PartitionState{Leader: 1, ISR: []int32{1, 2, 3}, Revision: 1}
	v.States[TP{TopicID{2}, 0}] = PartitionState{Leader: 3, ISR: []int32{3, 1}, Revision: 2}
	v.States[TP{TopicID{2}, 1}] = PartitionState{Leader: 1, ISR: []int32{1, 2}, Revision: 3}
	first := Decide(v)
	slices.Reverse(v.Topics)
	if a, b := describe(first), describe(Decide(v)); a != b {
		t.Fatalf("order depends on the view's order:\n%s\nvs\n%s", a, b)
	}
	for i, w := range first {
		st := w.State
		st.Revision = int64(100 + i)
		v.States[w.TP] = st
	}
	if again := Decide(v); len(again) != 0 {
		t.Fatalf("deciding on the written states decides again:\n%s", describe(again))
	}
}
