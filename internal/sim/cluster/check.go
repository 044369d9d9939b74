package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/kv/kvmodel"
	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/replica"
)

// The checkers, named as failures report them.
const (
	ckAckedLost    = "acked-lost"     // (1)
	ckAgree        = "replicas-agree" // (2)
	ckClientHW     = "client-hw"      // (3)
	ckConsumedLost = "consumed-lost"  // (4)
	ckAckEpoch     = "ack-epoch"      // (5)
	ckLiveness     = "liveness"       // (6)
	ckLeaseFence   = "lease-fence"    // an acknowledgement only under a lease etcd still has
)

// Checkers lists every checker's name.
var Checkers = []string{ckAckedLost, ckAgree, ckClientHW, ckConsumedLost, ckAckEpoch, ckLiveness, ckLeaseFence}

// checker holds what the invariants need: the truth of etcd (its own
// watch, never faulted), and per partition the acknowledged and consumed
// records, the committed prefix every replica must agree with, and which
// replicas are down.
//
// A replica is DOWN while any of these holds:
//
//   - its node's process is not running (crashed, not yet restarted) or
//     is paused;
//   - its node is cut off: a fault on its etcd connection, or a network
//     partition between it and any other node;
//   - it is not in the partition's ISR as etcd holds it;
//   - its disk was lost, from the loss until etcd's ISR takes it in again
//     (a leader added it back after it caught up). A lost disk whose node
//     never left the ISR (its restart went unnoticed) stays down.
//
// The partition is OVER its allowance while more than RF −
// min.insync.replicas of its replicas are down. Invariant (1) says an
// acks=all record is not lost while the partition stays within it. Disks
// are durable and elections clean, so crashes, pauses and cut-offs alone
// can never lose an acknowledged record: the simulator checks that too,
// and excuses a partition only from the moments it is over its allowance
// while a lost disk is among the replicas down. An acknowledged record
// acked before such a moment is no longer covered; the partition's
// replicas may disagree from then on, and what consumers read there may
// be lost ((2) and (4) are excused for it).
type checker struct {
	w         *world
	parts     map[view.TP]*pcheck
	order     []view.TP
	watch     <-chan kv.WatchEvent
	stopWatch context.CancelFunc
	etcd      *view.View
	nodeDown  []bool
}

type pcheck struct {
	tp       view.TP
	replicas []int32
	minISR   int
	k        int // RF - min.insync.replicas

	hasState      bool
	leader, epoch int32
	isr           []int32

	lostDisk    map[int32]time.Time
	over        bool      // over the allowance after the last event
	overLoss    bool      // ... with a lost disk down
	lastOverOK  time.Time // the last instant over the allowance with a lost disk down
	excused     bool
	excusedFrom time.Time

	acked     []*pendingProduce // acks=all, as the leader sent them
	ackEpochs map[int32]ackBy   // leader epoch -> who acknowledged at it

	committed []record         // the committed prefix, as the first replica whose HW passed each offset had it
	checkedTo map[int32]int64  // per replica: its HW, up to which it agrees with committed
	consumed  map[int64]uint64 // offset -> record id some consumer read there
	readBy    map[int64]string // offset -> who read it first
}

type ackBy struct {
	node    int32
	acksAll bool
}

func newChecker(w *world) *checker {
	return &checker{w: w, parts: map[view.TP]*pcheck{}, etcd: view.Empty()}
}

func (c *checker) on(name string) bool { return c.w.opts.Only == "" || c.w.opts.Only == name }

func (c *checker) addPartition(tp view.TP, replicas []int32, minISR int) {
	c.parts[tp] = &pcheck{tp: tp, replicas: replicas, minISR: minISR, k: len(replicas) - minISR,
		lostDisk: map[int32]time.Time{}, ackEpochs: map[int32]ackBy{}, checkedTo: map[int32]int64{},
		consumed: map[int64]uint64{}, readBy: map[int64]string{}}
	c.order = append(c.order, tp)
}

// start opens the checker's own watch of etcd, from the first revision.
func (c *checker) start() {
	ctx, cancel := context.WithCancel(bg)
	c.stopWatch = cancel
	c.watch = c.w.model.Client("checker").Watch(ctx, prefix, 1)
	c.drain()
}

// drain applies etcd's changes to the checker's truth, counting leader
// and ISR changes, and taking back into service the lost disks a leader
// added to the ISR again.
func (c *checker) drain() {
	w := c.w
	for target := w.model.Revision(); c.etcd.Revision < target; {
		ev := <-c.watch
		if ev.Err != nil {
			w.fail("sim", fmt.Sprintf("the checker's watch broke: %v", ev.Err))
			return
		}
		v, err := c.etcd.Apply(w.keys, ev)
		if err != nil {
			w.fail("sim", err.Error())
			return
		}
		c.etcd = v
		for _, tp := range c.order {
			pc := c.parts[tp]
			st, ok := v.States[tp]
			if !ok {
				continue
			}
			if !pc.hasState || st.LeaderEpoch != pc.epoch || st.Leader != pc.leader {
				if pc.hasState {
					w.count("run.leader-changes")
				}
			} else if !slices.Equal(st.ISR, pc.isr) {
				if len(st.ISR) < len(pc.isr) {
					w.count("run.isr-shrinks")
				} else {
					w.count("run.isr-expands")
				}
			}
			for _, r := range st.ISR {
				if !slices.Contains(pc.isr, r) && pc.hasState && !v.Alive(r) {
					w.count("run.isr-add-of-unregistered-node")
				}
				if at, lost := pc.lostDisk[r]; lost && !slices.Contains(pc.isr, r) && w.now.After(at) {
					delete(pc.lostDisk, r)
					w.logf("check: node %d, which lost its disk, is in %s's ISR again", r, w.tpName(tp))
				}
			}
			pc.hasState, pc.leader, pc.epoch, pc.isr = true, st.Leader, st.LeaderEpoch, slices.Clone(st.ISR)
		}
	}
}

// afterEvent runs the cheap checks that follow every event: which
// replicas are down.
func (c *checker) afterEvent() {
	w := c.w
	if len(c.nodeDown) == 0 {
		c.nodeDown = make([]bool, len(w.nodes)+1)
	}
	for _, n := range w.nodes {
		p := n.proc
		c.nodeDown[n.id] = p == nil || p.paused || n.netFault != kvmodel.Healthy
	}
	for pr := range w.net.cut {
		c.nodeDown[pr[0]], c.nodeDown[pr[1]] = true, true
	}
	for _, tp := range c.order {
		pc := c.parts[tp]
		if !pc.hasState {
			continue
		}
		down, lostDown := 0, false
		for _, r := range pc.replicas {
			_, lost := pc.lostDisk[r]
			if c.nodeDown[r] || lost || !slices.Contains(pc.isr, r) {
				down++
			}
			lostDown = lostDown || lost
		}
		over := down > pc.k
		overLoss := over && lostDown
		if pc.overLoss || overLoss {
			pc.lastOverOK = w.now
		}
		if overLoss && !pc.excused {
			pc.excused, pc.excusedFrom = true, w.now
			w.count("check.partitions-excused")
			w.logf("check: %s over its allowance (%d of %d down, RF-min.insync %d) with a lost disk: acknowledged records from before may be lost", w.tpName(tp), down, len(pc.replicas), pc.k)
		}
		if over && !pc.over {
			w.count("check.over-allowance")
		}
		pc.over, pc.overLoss = over, overLoss
	}
}

// covered reports whether an acknowledged record must survive.
func (pc *pcheck) covered(pp *pendingProduce) bool {
	return pp.ackedAt.After(pc.lastOverOK) || pc.lastOverOK.IsZero()
}

// acked: a leader acknowledges a produce. (5) Only one node acknowledges
// at a leader epoch, and none at an epoch below one another node has
// acknowledged acks=all produces at. The lease-fence: the node's lease
// is still alive in etcd.
func (c *checker) acked(p *proc, tp view.TP, pp *pendingProduce) {
	w := c.w
	pc := c.parts[tp]
	pp.ackedAt = w.now
	pp.node = p.n.id
	w.count("check.acks")
	if c.on(ckLeaseFence) {
		var id kv.LeaseID
		if len(p.leaseIDs) > 0 {
			id = p.leaseIDs[len(p.leaseIDs)-1]
		}
		exp, ok := w.model.LeaseExpiry(id)
		if !ok || !exp.After(w.now) {
			w.failOn(ckLeaseFence, []view.TP{tp}, fmt.Sprintf("node %d.%d acknowledged %s %d..%d at epoch %d, but etcd no longer has its lease %x (expiry %v, known %v)",
				p.n.id, p.inc, w.tpName(tp), pp.base, pp.end, pp.epoch, int64(id), w.since(exp), ok))
			return
		}
	}
	if c.on(ckAckEpoch) {
		if by, ok := pc.ackEpochs[pp.epoch]; ok && by.node != p.n.id {
			w.failOn(ckAckEpoch, []view.TP{tp}, fmt.Sprintf("%s: node %d acknowledged at leader epoch %d, at which node %d acknowledged already", w.tpName(tp), p.n.id, pp.epoch, by.node))
			return
		}
		for e, by := range pc.ackEpochs {
			if e > pp.epoch && by.node != p.n.id {
				if pp.acksAll && by.acksAll {
					w.failOn(ckAckEpoch, []view.TP{tp}, fmt.Sprintf("%s: node %d.%d acknowledged acks=all %d..%d at leader epoch %d after node %d acknowledged acks=all at epoch %d",
						w.tpName(tp), p.n.id, p.inc, pp.base, pp.end, pp.epoch, by.node, e))
					return
				}
				w.count("run.acks1-below-a-newer-epoch")
				break
			}
		}
	}
	if by, ok := pc.ackEpochs[pp.epoch]; !ok || (!by.acksAll && pp.acksAll) {
		pc.ackEpochs[pp.epoch] = ackBy{node: p.n.id, acksAll: pp.acksAll || ok && by.acksAll}
	}
	if pp.acksAll {
		pc.acked = append(pc.acked, pp)
	}
}

// hasAll reports whether l holds pp's records at their offsets.
func hasAll(l *diskLog, pp *pendingProduce) (bool, string) {
	for i, id := range pp.ids {
		off := pp.base + int64(i)
		if off >= l.leo() {
			return false, fmt.Sprintf("offset %d is past the log end %d", off, l.leo())
		}
		if r := l.recs[off]; r.id != id || r.epoch != pp.epoch {
			return false, fmt.Sprintf("offset %d holds record %d (epoch %d), not %d (epoch %d)", off, r.id, r.epoch, id, pp.epoch)
		}
	}
	return true, ""
}

// leaderActs: (1) a leader that first acknowledges or serves a fetch at
// an epoch has every covered record acknowledged before it.
func (c *checker) leaderActs(p *proc, s *slot, epoch int32) {
	w := c.w
	if !c.on(ckAckedLost) {
		return
	}
	pc := c.parts[s.tp]
	for _, pp := range pc.acked {
		// A leader of epoch e owes the records acknowledged before it:
		// at lower epochs.
		if !pc.covered(pp) || pp.epoch >= epoch {
			continue
		}
		if ok, why := hasAll(s.log, pp); !ok {
			w.failOn(ckAckedLost, []view.TP{s.tp}, fmt.Sprintf("%s: node %d.%d acts as leader of epoch %d without records %d..%d acknowledged acks=all by node %d at epoch %d at %s: %s",
				w.tpName(s.tp), p.n.id, p.inc, epoch, pp.base, pp.end, pp.node, pp.epoch, w.since(pp.ackedAt), why))
			return
		}
	}
}

// hwSet: (2) every replica agrees, below its HW, with the committed
// prefix.
func (c *checker) hwSet(n *node, tp view.TP, l *diskLog) {
	w := c.w
	pc := c.parts[tp]
	from := pc.checkedTo[n.id]
	for off := from; off < l.hw; off++ {
		r := l.recs[off]
		if off < int64(len(pc.committed)) {
			want := pc.committed[off]
			if r != want && c.on(ckAgree) {
				if pc.excused {
					w.count("check.agree-excused")
					continue
				}
				w.failOn(ckAgree, []view.TP{tp}, fmt.Sprintf("%s: node %d holds record %d (epoch %d) at offset %d below its HW %d; the committed record there is %d (epoch %d)",
					w.tpName(tp), n.id, r.id, r.epoch, off, l.hw, want.id, want.epoch))
				return
			}
			continue
		}
		pc.committed = append(pc.committed, r)
	}
	pc.checkedTo[n.id] = max(from, l.hw)
	w.count("check.hw-advances")
}

// truncated lowers what a replica is known to agree on.
func (c *checker) truncated(n *node, tp view.TP, l *diskLog) {
	pc := c.parts[tp]
	pc.checkedTo[n.id] = min(pc.checkedTo[n.id], l.hw)
}

// restarted: a process starts from the disk; what is below its
// checkpointed HW is checked again.
func (c *checker) restarted(n *node) {
	for tp, l := range n.disk {
		c.parts[tp].checkedTo[n.id] = 0
		c.hwSet(n, tp, l)
	}
}

func (c *checker) diskLost(n *node) {
	for _, tp := range c.order {
		pc := c.parts[tp]
		if slices.Contains(pc.replicas, n.id) {
			pc.lostDisk[n.id] = c.w.now
			pc.checkedTo[n.id] = 0
		}
	}
}

// clientHW: (3) the HW a client is told never goes back.
func (c *checker) clientHW(cl *client, tp view.TP, li leaderInfo, hw int64) {
	w := c.w
	w.count("check.client-hw")
	if old, ok := cl.maxHW[tp]; ok && hw < old && c.on(ckClientHW) {
		if c.parts[tp].excused {
			// Records were lost (a lost disk, with the partition over
			// its allowance): the HW comes down with them.
			w.count("check.client-hw-excused")
			cl.maxHW[tp] = hw
			return
		}
		w.failOn(ckClientHW, []view.TP{tp}, fmt.Sprintf("%s: client %s told HW %d by node %d (epoch %d), after HW %d", w.tpName(tp), cl.name, hw, li.leader, li.epoch, old))
		return
	}
	cl.maxHW[tp] = max(cl.maxHW[tp], hw)
}

// consumed: (4) a record a consumer read is never replaced: whoever
// reads its offset later reads it again.
func (c *checker) consumed(cl *client, tp view.TP, li leaderInfo, from int64, recs []record) {
	w := c.w
	pc := c.parts[tp]
	for i, r := range recs {
		off := from + int64(i)
		w.count("check.consumed")
		if id, ok := pc.consumed[off]; ok {
			if id != r.id && c.on(ckConsumedLost) {
				if pc.excused {
					w.count("check.consumed-excused")
					continue
				}
				w.failOn(ckConsumedLost, []view.TP{tp}, fmt.Sprintf("%s: %s read record %d at offset %d from node %d (epoch %d); %s had read record %d there",
					w.tpName(tp), cl.name, r.id, off, li.leader, li.epoch, pc.readBy[off], id))
				return
			}
			continue
		}
		pc.consumed[off] = r.id
		pc.readBy[off] = fmt.Sprintf("%s (from node %d at epoch %d, %s)", cl.name, li.leader, li.epoch, w.since(w.now))
	}
}

// final runs the checks at quiescence: (6) liveness, then (1), (2) and
// (4) over the logs as they are.
func (c *checker) final() {
	w := c.w
	if c.on(ckLiveness) {
		var bad []string
		var badTPs []view.TP
		for _, n := range w.nodes {
			if !c.etcd.Alive(n.id) {
				bad = append(bad, fmt.Sprintf("node %d is not registered", n.id))
			}
		}
		for _, tp := range c.order {
			pc := c.parts[tp]
			st, ok := c.etcd.States[tp]
			if ok && st.Leader == replica.NoLeader && !slices.ContainsFunc(st.ISR, func(r int32) bool { _, lost := pc.lostDisk[r]; return !lost }) {
				// Every in-sync copy was lost with a disk: the controller
				// elects none of them (meta.NodeInfo.EmptyDisk), and the
				// partition waits, as in Kafka, for an operator's unclean
				// election.
				w.count("check.liveness-excused-isr-disks-lost")
				continue
			}
			if !ok || st.Leader == replica.NoLeader {
				bad = append(bad, fmt.Sprintf("%s has no leader (%+v)", w.tpName(tp), st))
			}
			for _, cl := range w.clients {
				if cl.name[0] == 'q' && cl.probeTP == tp && !cl.probeOK {
					badTPs = append(badTPs, tp)
					bad = append(bad, fmt.Sprintf("%s: no acks=all produce succeeded in the %v after the probes started (leader %d epoch %d isr %v, min.insync %d)",
						w.tpName(tp), w.p.liveFor, st.Leader, st.LeaderEpoch, st.ISR, pc.minISR))
				}
			}
		}
		if len(bad) > 0 {
			w.failOn(ckLiveness, badTPs, strings.Join(bad, "; ")+"\n"+c.describe())
			return
		}
	}
	for _, tp := range c.order {
		pc := c.parts[tp]
		st := c.etcd.States[tp]
		var leaderLog *diskLog
		if st.Leader > 0 {
			if q := w.nodes[st.Leader-1].proc; q != nil {
				if s := q.slots[tp]; s != nil {
					leaderLog = s.log
				}
			}
		}
		if leaderLog != nil && c.on(ckAckedLost) {
			for _, pp := range pc.acked {
				if !pc.covered(pp) {
					w.count("check.acked-not-covered")
					continue
				}
				w.count("check.acked-final")
				if ok, why := hasAll(leaderLog, pp); !ok {
					w.failOn(ckAckedLost, []view.TP{tp}, fmt.Sprintf("%s: the leader %d (epoch %d) lacks records %d..%d acknowledged acks=all by node %d at epoch %d at %s: %s",
						w.tpName(tp), st.Leader, st.LeaderEpoch, pp.base, pp.end, pp.node, pp.epoch, w.since(pp.ackedAt), why))
					return
				}
			}
		}
		if leaderLog != nil && c.on(ckConsumedLost) && !pc.excused {
			for off, id := range pc.consumed {
				if off >= leaderLog.leo() || leaderLog.recs[off].id != id {
					w.failOn(ckConsumedLost, []view.TP{tp}, fmt.Sprintf("%s: record %d read at offset %d by %s is not in the leader %d's log (%s)",
						w.tpName(tp), id, off, pc.readBy[off], st.Leader, leaderLog))
					return
				}
			}
		}
		if c.on(ckAgree) && !pc.excused {
			for _, n := range w.nodes {
				l := n.disk[tp]
				if l == nil || n.proc == nil {
					continue
				}
				for off := int64(0); off < min(l.hw, int64(len(pc.committed))); off++ {
					if l.recs[off] != pc.committed[off] {
						w.failOn(ckAgree, []view.TP{tp}, fmt.Sprintf("%s: node %d holds record %v at offset %d below its HW %d; committed is %v",
							w.tpName(tp), n.id, l.recs[off], off, l.hw, pc.committed[off]))
						return
					}
				}
			}
		}
	}
	w.logf("final checks passed")
}

// describe prints the cluster for a failure.
func (c *checker) describe() string {
	w := c.w
	var b strings.Builder
	for _, tp := range c.order {
		st := c.etcd.States[tp]
		fmt.Fprintf(&b, "  %s: etcd leader %d epoch %d isr %v rev %d\n", w.tpName(tp), st.Leader, st.LeaderEpoch, st.ISR, st.Revision)
		for _, n := range w.nodes {
			l := n.disk[tp]
			if l == nil {
				continue
			}
			role := "down"
			if n.proc != nil {
				role = "no replica"
				if s := n.proc.slots[tp]; s != nil {
					role = fmt.Sprintf("%v hw %d", s.m.Role(), s.m.HW())
				}
			}
			fmt.Fprintf(&b, "    node %d: %s; log %s\n", n.id, role, l)
		}
	}
	return b.String()
}
