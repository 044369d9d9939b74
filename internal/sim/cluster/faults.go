package cluster

import (
	"fmt"
	"slices"
	"time"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/kv/kvmodel"
	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
)

// params are the run's seeded settings.
type params struct {
	nodes          int
	session        time.Duration // --node-session-timeout (the lease TTL)
	lagMax         time.Duration // replica.lag.time.max
	autoRebalance  bool
	rebalanceEvery time.Duration
	fetchWait      time.Duration
	maxFetch       int
	produceTimeout time.Duration
	produceGap     time.Duration
	acksAllRatio   float64
	netSpike       float64
	etcdSpike      float64
	faultGap       time.Duration // mean time between faults
	faultsEnd      time.Duration // faults stop (and are healed) here
	settle         time.Duration // then this long before the probes
	liveFor        time.Duration // and the probes must succeed within this
	diskLoss       bool          // one crash loses its node's disk
}

type topicSpec struct {
	name     string
	id       meta.ID
	replicas [][]int32
	minISR   int
}

func (w *world) setup() {
	w.model = kvmodel.New(w, kvmodel.Options{WatchBuffer: 1024})
	w.net = newNetwork(w)
	p := &w.p
	p.nodes = 3 + w.intn(3)
	p.session = time.Duration(6+w.intn(7)) * time.Second
	p.lagMax = p.session + time.Second + w.between(0, 30*time.Second-p.session-time.Second)
	p.autoRebalance = w.chance(0.5)
	p.rebalanceEvery = w.between(10*time.Second, 60*time.Second)
	p.fetchWait = 500 * time.Millisecond
	p.maxFetch = 3 + w.intn(40)
	p.produceTimeout = w.between(3*time.Second, 10*time.Second)
	p.produceGap = w.between(20*time.Millisecond, 150*time.Millisecond)
	p.acksAllRatio = 0.6 + 0.4*w.rng.Float64()
	p.netSpike = 0.03 * w.rng.Float64()
	p.etcdSpike = 0.03 * w.rng.Float64()
	p.faultGap = w.between(2*time.Second, 10*time.Second)
	p.faultsEnd = w.between(40*time.Second, 80*time.Second)
	p.settle = p.session + 2*time.Second
	p.liveFor = p.session + 30*time.Second
	p.diskLoss = w.chance(0.3)

	for i := range p.nodes {
		w.nodes = append(w.nodes, &node{w: w, id: int32(i + 1), disk: map[view.TP]*diskLog{}})
	}
	w.chk = newChecker(w)

	// Topics, written to etcd as CreateTopics would; the controller
	// writes their partitions' first states.
	ntopics := 1 + w.intn(2)
	for t := range ntopics {
		rf := 2 + w.intn(min(3, p.nodes)-1)
		ts := topicSpec{name: fmt.Sprintf("t%d", t), minISR: 1 + w.intn(min(2, rf))}
		for i := range ts.id {
			ts.id[i] = byte(w.rng.Uint32())
		}
		ts.id[0] = byte(t + 1)
		parts := 1 + w.intn(4)
		for range parts {
			perm := w.rng.Perm(p.nodes)
			var rs []int32
			for _, x := range perm[:rf] {
				rs = append(rs, int32(x+1))
			}
			ts.replicas = append(ts.replicas, rs)
		}
		w.topics = append(w.topics, ts)
		for i := range ts.replicas {
			tp := view.TP{Topic: ts.id, Partition: int32(i)}
			w.tps = append(w.tps, tp)
			w.chk.addPartition(tp, ts.replicas[i], ts.minISR)
		}
		data, err := meta.Topic{Name: ts.name, ID: ts.id, Partitions: ts.replicas,
			Configs: map[string]string{"min.insync.replicas": fmt.Sprint(ts.minISR)}}.Encode()
		if err != nil {
			panic(err)
		}
		if _, _, err := w.model.Client("admin").Txn(bg, []kv.Cond{kv.Absent(w.keys.Topic(ts.name))},
			[]kv.Op{kv.Put(w.keys.Topic(ts.name), data, 0)}); err != nil {
			panic(err)
		}
	}
	w.chk.start()
	w.logf("seed %d: %d nodes, session %v, lag max %v, auto rebalance %v every %v, produce timeout %v, faults every ~%v until %v, disk loss %v",
		w.opts.Seed, p.nodes, p.session, p.lagMax, p.autoRebalance, p.rebalanceEvery, p.produceTimeout, p.faultGap, p.faultsEnd, p.diskLoss)
	for _, ts := range w.topics {
		w.logf("topic %s: replicas %v min.insync.replicas %d", ts.name, ts.replicas, ts.minISR)
	}

	for _, n := range w.nodes {
		w.after(w.between(0, 500*time.Millisecond), func() { w.startProc(n) })
	}
	w.after(2*time.Second, func() {
		for i := range 2 + w.intn(3) {
			c := w.newClient(int32(-1-i), fmt.Sprintf("p%d", i))
			c.produceLoop()
		}
		for i := range 1 + w.intn(2) {
			c := w.newClient(int32(-101-i), fmt.Sprintf("c%d", i))
			for _, tp := range w.tps {
				c.consumeLoop(tp)
			}
		}
	})
	w.after(3*time.Second, w.nextFault)
	w.after(p.faultsEnd, w.heal)
	w.after(p.faultsEnd+p.settle, func() {
		w.logf("probes start")
		for i, tp := range w.tps {
			c := w.newClient(int32(-201-i), fmt.Sprintf("q%d", i))
			c.probeTP = tp
			c.probe()
		}
	})
	w.after(p.faultsEnd+p.settle+p.liveFor, w.finish)
	w.after(p.faultsEnd+p.settle, w.probesDone)
}

// startProc starts a new process of n.
func (w *world) startProc(n *node) {
	if n.proc != nil {
		return
	}
	n.inc++
	if n.loseDisk {
		n.loseDisk = false
		n.disk = map[view.TP]*diskLog{}
		w.count("fault.disk-lost")
		w.logf("node %d: disk lost", n.id)
		w.chk.diskLost(n)
	}
	for _, l := range n.disk {
		l.restart()
	}
	w.chk.restarted(n)
	p := &proc{n: n, w: w, inc: n.inc, name: fmt.Sprintf("n%d.%d", n.id, n.inc),
		slots: map[view.TP]*slot{}, fetchers: map[int32]*fetcher{}}
	p.kv = w.model.Client(p.name)
	n.proc = p
	p.syncFault()
	w.logf("node %d.%d: starts", n.id, n.inc)
	p.start()
}

// The fault schedule: a fault every faultGap on average until faultsEnd.

func (w *world) nextFault() {
	if w.now.Sub(start) >= w.p.faultsEnd {
		return
	}
	w.after(w.between(w.p.faultGap/3, w.p.faultGap*2), func() {
		if w.now.Sub(start) >= w.p.faultsEnd {
			return
		}
		w.injectFault()
		w.nextFault()
	})
}

func (w *world) faultDuration(short bool) time.Duration {
	s := w.p.session
	if short {
		return w.between(200*time.Millisecond, s/2)
	}
	return w.between(s, 3*s)
}

func (w *world) injectFault() {
	n := pick(w, w.nodes)
	p := n.proc
	switch x := w.intn(100); {
	case x < 22: // crash
		if p == nil {
			return
		}
		if w.p.diskLoss && !w.diskLostOnce && w.chance(0.5) {
			w.diskLostOnce = true
			n.loseDisk = true
		}
		w.count("fault.crash")
		w.logf("FAULT node %d.%d crashes%s", n.id, p.inc, map[bool]string{true: " (its disk will be lost)"}[n.loseDisk])
		p.crash()
		n.proc = nil
		w.after(w.faultDuration(w.chance(0.3)), func() { w.startProc(n) })
	case x < 40: // pause
		if p == nil || p.paused {
			return
		}
		long := w.chance(0.7)
		d := w.faultDuration(!long)
		if long {
			d = w.between(w.p.session+time.Second, 3*w.p.session)
		}
		w.count("fault.pause")
		w.logf("FAULT node %d.%d paused for %v", n.id, p.inc, d)
		p.paused = true
		p.syncFault()
		w.after(d, func() { w.resume(p) })
	case x < 62: // etcd connection
		f := []kvmodel.Fault{kvmodel.FailCalls, kvmodel.HangCalls, kvmodel.DropReplies}[w.intn(3)]
		d := w.faultDuration(w.chance(0.4))
		w.count("fault.etcd-" + f.String())
		w.logf("FAULT node %d: etcd connection %s for %v", n.id, f, d)
		n.netFault = f
		n.netGen++
		gen := n.netGen
		if p != nil {
			p.syncFault()
		}
		w.after(d, func() {
			if n.netGen == gen {
				w.setNetFault(n, kvmodel.Healthy)
			}
		})
	case x < 84: // network partition
		var side []int32
		if w.chance(0.6) {
			side = []int32{n.id}
		} else {
			for _, m := range w.nodes {
				if w.chance(0.5) {
					side = append(side, m.id)
				}
			}
		}
		var pairs [][2]int32
		for _, a := range side {
			for _, m := range w.nodes {
				if !slices.Contains(side, m.id) {
					pairs = append(pairs, pair(a, m.id))
				}
			}
		}
		if len(pairs) == 0 {
			return
		}
		d := w.faultDuration(w.chance(0.4))
		w.count("fault.partition")
		w.logf("FAULT network partition %v | rest for %v", side, d)
		for _, pr := range pairs {
			w.cuts[pr]++
			w.net.cut[pr] = true
		}
		w.after(d, func() { w.uncut(pairs) })
	case x < 92: // a slow watch: the view lags
		if p == nil {
			return
		}
		d := w.faultDuration(true)
		w.count("fault.watch-delayed")
		w.logf("FAULT node %d.%d: watch held for %v", n.id, p.inc, d)
		w.model.PauseWatches(p.name)
		p.watchPaused = true
		w.after(d, func() {
			w.model.ResumeWatches(p.name)
			p.watchPaused = false
		})
	default: // a broken watch
		if p == nil {
			return
		}
		w.count("fault.watch-broken")
		w.logf("FAULT node %d.%d: watch broken", n.id, p.inc)
		w.model.BreakWatches(p.name)
	}
}

func (w *world) setNetFault(n *node, f kvmodel.Fault) {
	n.netFault = f
	if n.proc != nil {
		n.proc.syncFault()
	}
}

func (w *world) uncut(pairs [][2]int32) {
	for _, pr := range pairs {
		if w.cuts[pr] > 0 {
			w.cuts[pr]--
		}
		if w.cuts[pr] == 0 {
			delete(w.net.cut, pr)
		}
	}
}

// resume ends a pause: what arrived meanwhile is processed in order.
func (w *world) resume(p *proc) {
	if p.dead || !p.paused {
		return
	}
	p.paused = false
	p.syncFault()
	w.logf("node %d.%d resumes (%d held events)", p.n.id, p.inc, len(p.deferred))
	if w.opts.Bugs.TrustLeaseAfterPause {
		p.trustUntil = w.now.Add(w.p.session)
		for _, s := range p.sortedSlots() {
			s.step(leaseFor(p.trustUntil))
		}
	}
	held := p.deferred
	p.deferred = nil
	for _, fn := range held {
		w.after(0, func() { p.run(fn) })
	}
}

// heal ends every fault: crashed nodes restart, paused ones resume, etcd
// and the network are whole again.
func (w *world) heal() {
	w.logf("HEAL: faults stop")
	w.healed = true
	for k := range w.cuts {
		delete(w.cuts, k)
	}
	clear(w.net.cut)
	for _, n := range w.nodes {
		n.netGen++
		w.setNetFault(n, kvmodel.Healthy)
		if n.proc == nil {
			w.startProc(n)
			continue
		}
		w.model.ResumeWatches(n.proc.name)
		n.proc.watchPaused = false
		w.resume(n.proc)
	}
}

// probesDone ends the run early once every probe succeeded and the
// cluster had a few more seconds.
func (w *world) probesDone() {
	for _, c := range w.clients {
		if c.name[0] == 'q' && !c.probeOK {
			w.after(500*time.Millisecond, w.probesDone)
			return
		}
	}
	w.after(5*time.Second, w.finish)
}

// finish runs the checks at quiescence and ends the run.
func (w *world) finish() {
	if w.done {
		return
	}
	w.stats["run.etcd-revisions"] += w.model.Revision()
	w.chk.final()
	w.done = true
}

// shutdown stops what the model may have started.
func (w *world) shutdown() {
	for _, n := range w.nodes {
		if n.proc != nil && n.proc.stopWatch != nil {
			n.proc.stopWatch()
		}
	}
	if w.chk != nil && w.chk.stopWatch != nil {
		w.chk.stopWatch()
	}
}

// poll runs after every event: watch events into the processes, lost
// leases into their lease loops.
func (w *world) poll() {
	for _, n := range w.nodes {
		if p := n.proc; p != nil && !p.dead {
			p.drain()
			p.checkLease()
		}
	}
	w.chk.drain()
}

func (w *world) etcdDelay() time.Duration {
	if w.chance(w.p.etcdSpike) {
		return w.between(3*time.Millisecond, 80*time.Millisecond)
	}
	return w.between(200*time.Microsecond, 3*time.Millisecond)
}

func (w *world) watchDelay() time.Duration {
	if w.chance(w.p.etcdSpike) {
		return w.between(3*time.Millisecond, 80*time.Millisecond)
	}
	return w.between(100*time.Microsecond, 2*time.Millisecond)
}

// schedDelay is a goroutine's wake-up.
func (w *world) schedDelay() time.Duration {
	return w.between(10*time.Microsecond, 500*time.Microsecond)
}

func (w *world) tpName(tp view.TP) string {
	for _, t := range w.topics {
		if t.id == tp.Topic {
			return fmt.Sprintf("%s/%d", t.name, tp.Partition)
		}
	}
	return fmt.Sprintf("%x/%d", tp.Topic[:2], tp.Partition)
}
