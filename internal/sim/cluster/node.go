package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/groupd/groupd/internal/cluster/controller"
	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/kv/kvmodel"
	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
)

// node is one groupd node: its id and its disk, which outlive its
// processes.
type node struct {
	w    *world
	id   int32
	disk map[view.TP]*diskLog
	proc *proc // the running process; nil while it is down
	inc  int   // processes started so far
	// netFault is the fault the schedule put on its etcd connection.
	netFault kvmodel.Fault
	// loseDisk: the next restart finds the disk empty.
	loseDisk bool
	netGen   int
}

func (n *node) log(tp view.TP) *diskLog {
	l := n.disk[tp]
	if l == nil {
		l = &diskLog{}
		n.disk[tp] = l
	}
	return l
}

// proc is one process of a node (one incarnation), from its start to its
// crash: everything in it is lost with it. It mirrors
// internal/cluster.Node (node.go), its controller loop (controlling.go)
// and its Replicas (replicas.go), with each goroutine of theirs turned
// into a chain of events.
type proc struct {
	n    *node
	w    *world
	inc  int
	name string // its etcd client's name in the model
	kv   *kvmodel.Client

	dead, paused bool
	deferred     []func() // what arrived while paused, in order
	fault        kvmodel.Fault
	parked       []*etcdCall // calls hanging under HangCalls

	watch       <-chan kv.WatchEvent
	stopWatch   context.CancelFunc
	watchGen    int
	watchLast   time.Time
	watchRev    int64 // the last revision read from the watch
	watchPaused bool  // PauseWatches is in force

	view          *view.View
	lease         kv.Lease // nil when it holds none
	registered    int64    // the revision it registered at under lease
	leaseSeen     bool     // its loss has been handled
	leaseIDs      []kv.LeaseID
	registrations int
	trustUntil    time.Time // Bugs.TrustLeaseAfterPause

	ctl ctlState

	slots        map[view.TP]*slot
	fetchers     map[int32]*fetcher
	applyPending bool
	parkedFetch  []*parkedFetch
}

// ctlState is controllerLoop's local state.
type ctlState struct {
	mine          int64
	epoch         int32
	due           bool
	ticking       bool
	busy, pending bool
}

// run performs fn in the process now: dropped if it died, held until it
// resumes if it is paused.
func (p *proc) run(fn func()) {
	if p.dead {
		return
	}
	if p.paused {
		p.deferred = append(p.deferred, fn)
		return
	}
	fn()
}

// at runs fn in the process after d.
func (p *proc) at(d time.Duration, fn func()) { p.w.after(d, func() { p.run(fn) }) }

// syncFault sets the client's fault in the model from the schedule's and
// the process's state: a dead or paused process sends nothing, so its
// keep-alives go unanswered and its watch holds its events.
func (p *proc) syncFault() {
	f := p.n.netFault
	if p.dead || p.paused {
		f = kvmodel.FailCalls
	}
	if f == p.fault {
		return
	}
	p.fault = f
	p.w.model.SetFault(p.name, f)
	parked := p.parked
	p.parked = nil
	for _, c := range parked {
		if c.done {
			continue
		}
		c.done = true
		if c.stop != nil {
			c.stop()
		}
		failed := c.failed
		p.w.after(0, func() { p.run(func() { failed(errCutOff) }) })
	}
}

var errCutOff = fmt.Errorf("%w: the call was cut off", kv.ErrUnavailable)

// etcdCall is one call to etcd in flight.
type etcdCall struct {
	done   bool
	failed func(error)
	stop   func() bool
}

// etcd makes one call: it reaches etcd after a delay, where apply calls
// the model's client (under its fault then) and returns what to do with
// the answer, which comes back after another delay. Under HangCalls the
// call waits, unapplied, until the fault changes or timeout (0: none)
// passes, and fails.
func (p *proc) etcd(timeout time.Duration, apply func() func(), failed func(error)) {
	w := p.w
	c := &etcdCall{failed: failed}
	if timeout > 0 {
		c.stop = w.AfterFunc(timeout, func() {
			if c.done {
				return
			}
			c.done = true
			p.run(func() { failed(context.DeadlineExceeded) })
		})
	}
	w.after(w.etcdDelay(), func() {
		if c.done {
			return
		}
		if p.fault == kvmodel.HangCalls {
			p.parked = append(p.parked, c)
			return
		}
		deliver := apply()
		w.after(w.etcdDelay(), func() {
			if c.done {
				return
			}
			c.done = true
			if c.stop != nil {
				c.stop()
			}
			p.run(deliver)
		})
	})
}

var bg = context.Background()

func (p *proc) list(cb func([]kv.Value, int64, error)) {
	p.etcd(0, func() func() {
		vs, rev, err := p.kv.List(bg, prefix)
		return func() { cb(vs, rev, err) }
	}, func(err error) { cb(nil, 0, err) })
}

func (p *proc) txn(timeout time.Duration, conds []kv.Cond, ops []kv.Op, cb func(bool, int64, error)) {
	p.etcd(timeout, func() func() {
		ok, rev, err := p.kv.Txn(bg, conds, ops)
		return func() { cb(ok, rev, err) }
	}, func(err error) { cb(false, 0, err) })
}

func (p *proc) get(timeout time.Duration, key string, cb func(kv.Value, bool, error)) {
	p.etcd(timeout, func() func() {
		v, found, err := p.kv.Get(bg, key)
		return func() { cb(v, found, err) }
	}, func(err error) { cb(kv.Value{}, false, err) })
}

func (p *proc) grant(ttl time.Duration, cb func(kv.Lease, error)) {
	p.etcd(0, func() func() {
		l, err := p.kv.Grant(bg, ttl)
		return func() { cb(l, err) }
	}, func(err error) { cb(nil, err) })
}

func (p *proc) revoke(l kv.Lease, cb func()) {
	p.etcd(0, func() func() {
		l.Revoke(bg)
		return cb
	}, func(error) { cb() })
}

// start is cluster.Start: read the cluster, follow it, register; the
// replicas follow the view from the start (cluster.NewReplicas).
func (p *proc) start() {
	p.list(func(vs []kv.Value, rev int64, err error) {
		if err != nil {
			p.at(time.Second, p.start) // the process fails to start; it is started again
			return
		}
		v, err := view.FromListing(p.w.keys, vs, rev)
		if err != nil {
			p.w.fail("sim", fmt.Sprintf("node %d: listing: %v", p.n.id, err))
			return
		}
		p.view = v
		p.openWatch(rev + 1)
		p.register()
		p.replicasTick()
		p.checkpointTick()
		p.ctlWake()
	})
}

func (p *proc) openWatch(from int64) {
	ctx, cancel := context.WithCancel(bg)
	p.stopWatch = cancel
	p.watchGen++
	p.watchRev = from - 1
	p.watch = p.kv.Watch(ctx, prefix, from)
}

// drain moves the watch's events into the process, in order, each after
// a delay: a view lags etcd, never reorders it. A watch on the whole
// prefix sees every revision, so unless the model holds its delivery
// (the client cut off or paused, or its watches paused) the drain reads
// up to the current revision, waiting for the model's pump goroutine if
// the channel overflowed: what is read never depends on goroutine timing.
func (p *proc) drain() {
	if p.watch == nil || p.fault == kvmodel.FailCalls || p.fault == kvmodel.HangCalls || p.watchPaused {
		return
	}
	w := p.w
	target := w.model.Revision()
	for p.watchRev < target {
		ev, ok := <-p.watch
		if !ok {
			p.watch = nil
			return
		}
		at := w.now.Add(w.watchDelay())
		if at.Before(p.watchLast) {
			at = p.watchLast
		}
		p.watchLast = at
		gen := p.watchGen
		w.schedule(at, func() {
			p.run(func() {
				if gen == p.watchGen {
					p.onWatch(ev)
				}
			})
		})
		if ev.Err != nil {
			p.watch = nil
			return
		}
		p.watchRev = ev.Revision
	}
}

// onWatch is watchLoop's body.
func (p *proc) onWatch(ev kv.WatchEvent) {
	if ev.Err != nil {
		p.w.logf("node %d: watch broke (%v); listing again", p.n.id, ev.Err)
		p.stopWatch()
		p.watchGen++
		p.watch = nil
		p.relist()
		return
	}
	v, err := p.view.Apply(p.w.keys, ev)
	if err != nil {
		p.w.fail("sim", fmt.Sprintf("node %d: %v", p.n.id, err))
		return
	}
	p.view = v
	p.notify()
}

func (p *proc) relist() {
	p.list(func(vs []kv.Value, rev int64, err error) {
		if err != nil {
			p.at(time.Second, p.relist)
			return
		}
		v, err := view.FromListing(p.w.keys, vs, rev)
		if err != nil {
			p.w.fail("sim", fmt.Sprintf("node %d: listing: %v", p.n.id, err))
			return
		}
		p.view = v
		p.notify()
		p.openWatch(rev + 1)
	})
}

// notify is Node.notify: the replicas and the controller loop look at
// the new view or lease.
func (p *proc) notify() {
	if !p.applyPending {
		p.applyPending = true
		p.at(0, func() {
			p.applyPending = false
			p.applyReplicas()
		})
	}
	p.ctlWake()
}

// register is Node.register: a lease, then nodes/<id> under it if absent;
// an earlier incarnation's key is waited out.
func (p *proc) register() {
	w := p.w
	var inc meta.ID
	for i := range inc {
		inc[i] = byte(w.rng.Uint32())
	}
	inc[0] |= 1
	info := meta.NodeInfo{ID: p.n.id, Host: "sim", Port: 9000 + p.n.id, Incarnation: inc, EmptyDisk: len(p.n.disk) == 0}
	data, err := info.Encode()
	if err != nil {
		w.fail("sim", err.Error())
		return
	}
	key := w.keys.Node(p.n.id)
	var try func()
	try = func() {
		p.grant(w.p.session, func(l kv.Lease, err error) {
			if err != nil {
				p.at(time.Second, try)
				return
			}
			p.txn(0, []kv.Cond{kv.Absent(key)}, []kv.Op{kv.Put(key, data, l.ID())}, func(ok bool, rev int64, err error) {
				if err == nil && ok {
					p.lease, p.leaseSeen, p.registered = l, false, rev
					p.leaseIDs = append(p.leaseIDs, l.ID())
					p.registrations++
					w.count("run.registrations")
					w.logf("node %d.%d: registered at rev %d, lease %x ttl %v deadline %s", p.n.id, p.inc, rev, int64(l.ID()), l.TTL(), w.since(l.Deadline()))
					p.notify()
					return
				}
				p.revoke(l, func() { p.at(500*time.Millisecond, try) })
			})
		})
	}
	try()
}

// checkLease is leaseLoop: a lost lease ends every role; register again.
func (p *proc) checkLease() {
	if p.lease == nil || p.leaseSeen {
		return
	}
	select {
	case <-p.lease.Done():
	default:
		return
	}
	p.leaseSeen = true
	p.run(func() {
		l := p.lease
		if l == nil {
			return
		}
		p.lease = nil
		p.w.count("run.lease-lost")
		p.w.logf("node %d.%d: lease %x lost: %v", p.n.id, p.inc, int64(l.ID()), l.Err())
		p.notify()
		if !p.w.opts.Bugs.NoReregister {
			p.register()
		}
	})
}

func (p *proc) leaseDeadline() time.Time {
	if p.lease == nil {
		return time.Time{}
	}
	return p.lease.Deadline()
}

// registration is Node.Registration's revision: 0 without a lease.
func (p *proc) registration() int64 {
	if p.lease == nil {
		return 0
	}
	return p.registered
}

func (p *proc) leaseID() kv.LeaseID {
	if p.lease == nil {
		return 0
	}
	return p.lease.ID()
}

// ctlWake hands the controller loop a token (its Subscribe channel holds
// one).
func (p *proc) ctlWake() {
	c := &p.ctl
	if c.busy {
		c.pending = true
		return
	}
	c.busy = true
	p.at(p.w.schedDelay(), p.ctlRun)
}

func (p *proc) ctlDone() {
	c := &p.ctl
	c.busy = false
	if c.pending {
		c.pending = false
		p.ctlWake()
	}
}

// ctlRun is one turn of controllerLoop (controlling.go).
func (p *proc) ctlRun() {
	v, lease, c := p.view, p.leaseID(), &p.ctl
	switch {
	case v == nil:
		p.ctlDone()
	case lease == 0:
		c.mine = 0
		p.ctlDone()
	case v.Controller == nil && c.mine != 0 && v.Revision < c.mine:
		p.ctlDone()
	case v.Controller == nil:
		p.campaign(v, lease)
	case c.mine == 0 && ownController(v, p.n.id, p.registration()):
		// A campaign that won although its answer was lost.
		c.mine, c.epoch = v.Controller.CreateRevision, v.Controller.Epoch
		w := p.w
		w.count("run.controller-adopted")
		w.logf("node %d.%d: the controller key of epoch %d at rev %d is its own", p.n.id, p.inc, c.epoch, c.mine)
		if w.p.autoRebalance && !c.ticking {
			c.ticking = true
			p.rebalanceTick()
		}
		p.ctlDone()
		p.ctlWake()
	case v.Controller.NodeID != p.n.id || v.Controller.CreateRevision != c.mine:
		if c.mine != 0 {
			p.w.logf("node %d.%d: no longer the controller (now %d)", p.n.id, p.inc, v.Controller.NodeID)
		}
		c.mine = 0
		p.ctlDone()
	default:
		p.decide(v, c.mine, c.epoch, c.due, func(taken bool) {
			if taken {
				c.due = false
			}
			p.ctlDone()
		})
	}
}

// ownController is internal/cluster's ownController (controlling.go).
func ownController(v *view.View, me int32, registered int64) bool {
	return v.Controller != nil && v.Controller.NodeID == me && registered != 0 && v.Controller.CreateRevision > registered
}

func (p *proc) rebalanceTick() {
	p.at(p.w.p.rebalanceEvery, func() {
		p.ctl.due = true
		p.rebalanceTick()
		p.ctlWake()
	})
}

// campaign is Node.campaign.
func (p *proc) campaign(v *view.View, lease kv.LeaseID) {
	w, c := p.w, &p.ctl
	epoch := v.ControllerEpoch + 1
	cdata, _ := meta.Controller{NodeID: p.n.id, Epoch: epoch}.Encode()
	edata, _ := meta.ControllerEpoch{Epoch: epoch}.Encode()
	p.txn(w.p.session,
		[]kv.Cond{kv.Absent(w.keys.Controller()), kv.ModRevisionIs(w.keys.ControllerEpoch(), v.ControllerEpochRevision)},
		[]kv.Op{kv.Put(w.keys.Controller(), cdata, lease), kv.Put(w.keys.ControllerEpoch(), edata, 0)},
		func(ok bool, rev int64, err error) {
			if err != nil || !ok {
				c.mine, c.epoch = 0, 0
			} else {
				c.mine, c.epoch = rev, epoch
				w.count("run.controller-elected")
				w.logf("node %d.%d: elected controller, epoch %d at rev %d", p.n.id, p.inc, epoch, rev)
				if w.p.autoRebalance && !c.ticking {
					c.ticking = true
					p.rebalanceTick()
				}
			}
			p.ctlDone()
		})
}

// decide is Node.decide: each decision by compare-and-swap on the
// controller key's create revision and the partition's mod revision, one
// after the other; an error stops the turn.
func (p *proc) decide(v *view.View, mine int64, epoch int32, due bool, done func(bool)) {
	w := p.w
	cv := v.ControllerView(w.p.autoRebalance, due)
	if w.opts.Bugs.ElectEmptyDisk {
		clear(cv.EmptyDisk)
	}
	writes := controller.Decide(cv)
	if w.opts.Bugs.UncleanElection {
		writes = uncleanWrites(cv, writes)
	}
	if w.opts.Bugs.ReuseLeaderEpoch {
		for i, wr := range writes {
			if old, ok := cv.States[wr.TP]; ok && wr.State.Leader != old.Leader && wr.State.Leader != controller.NoLeader {
				writes[i].State.LeaderEpoch = old.LeaderEpoch
			}
		}
	}
	var next func(i int)
	next = func(i int) {
		if i == len(writes) {
			done(true)
			return
		}
		wr := writes[i]
		tp := view.TP{Topic: meta.ID(wr.TP.Topic), Partition: wr.TP.Partition}
		st := meta.PartitionState{Leader: wr.State.Leader, LeaderEpoch: wr.State.LeaderEpoch, ISR: wr.State.ISR,
			PartitionEpoch: wr.State.PartitionEpoch, ControllerEpoch: epoch}
		t, ok := v.TopicByID(tp.Topic)
		if !ok {
			next(i + 1)
			return
		}
		key := w.keys.Partition(tp.Topic, tp.Partition)
		conds := []kv.Cond{kv.CreateRevisionIs(w.keys.Controller(), mine), kv.ModRevisionIs(key, wr.ExpectRevision),
			kv.ModRevisionIs(w.keys.Topic(t.Name), t.Revision)}
		var ops []kv.Op
		if wr.ElectionRevision != 0 {
			ekey := w.keys.Election(tp.Topic, tp.Partition)
			conds = append(conds, kv.ModRevisionIs(ekey, wr.ElectionRevision))
			ops = append(ops, kv.Delete(ekey))
		}
		if !wr.DropElection {
			data, err := st.Encode()
			if err != nil {
				w.fail("sim", fmt.Sprintf("a controller decision does not encode: %v (%s)", err, wr.Reason))
				return
			}
			conds = append(conds, v.RegistrationConds(w.keys, -1, 0, st.Leader, st.ISR)...)
			ops = append(ops, kv.Put(key, data, 0))
		}
		if wr.Replicas != nil || wr.ReassignRevision != 0 {
			w.fail("sim", "a reassignment decision, which the simulation never asks for")
			return
		}
		p.txn(w.p.session, conds, ops, func(ok bool, rev int64, err error) {
			switch {
			case err != nil:
				w.logf("node %d.%d: controller decision %s on %s failed: %v", p.n.id, p.inc, wr.Reason, w.tpName(tp), err)
				done(false)
				return
			case ok:
				w.count("run.controller-decision." + wr.Reason)
				w.logf("node %d.%d: controller decision %s: %s leader %d epoch %d isr %v at rev %d", p.n.id, p.inc, wr.Reason, w.tpName(tp), st.Leader, st.LeaderEpoch, st.ISR, rev)
			default:
				w.count("run.controller-decision-refused")
			}
			next(i + 1)
		})
	}
	next(0)
}

// uncleanWrites is Bugs.UncleanElection: an election prefers an alive
// replica outside the ISR.
func uncleanWrites(cv controller.View, writes []controller.Write) []controller.Write {
	for i, wr := range writes {
		switch wr.Reason {
		case controller.ReasonLeaderGone, controller.ReasonOffline:
		default:
			continue
		}
		st := cv.States[wr.TP]
		for _, t := range cv.Topics {
			if t.ID != wr.TP.Topic {
				continue
			}
			for _, r := range t.Replicas[wr.TP.Partition] {
				if _, ok := cv.Alive[r]; ok && !slices.Contains(st.ISR, r) {
					writes[i].State.Leader = r
					writes[i].State.ISR = []int32{r}
					writes[i].Reason = "unclean-by-bug"
					break
				}
			}
		}
	}
	return writes
}

// crash ends the process: memory gone, disk kept.
func (p *proc) crash() {
	p.dead = true
	p.deferred = nil
	p.syncFault()
	if p.stopWatch != nil {
		p.stopWatch()
	}
	p.watch = nil
}

var errNoAnswer = errors.New("no answer")
