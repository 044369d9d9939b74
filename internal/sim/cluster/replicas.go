package cluster

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/replica"
)

// slot is one partition's replica on a process: replicas.go's slot.
type slot struct {
	p   *proc
	tp  view.TP
	log *diskLog
	m   *replica.Machine

	acks    map[replica.RequestID]*pendingProduce
	nextID  replica.RequestID
	timer   func() bool
	timerAt time.Time

	epoch int32 // the last epoch it started leading
	acted bool  // it has acted as leader of it
}

// acts: the first time a leader acknowledges a produce or answers a
// follower's fetch at an epoch, it must hold every acknowledged record of
// the epochs before (checker (1)).
func (s *slot) acts() {
	if !s.acted {
		s.acted = true
		s.p.w.chk.leaderActs(s.p, s, s.epoch)
	}
}

// pendingProduce is a produce appended by this node as leader, waiting
// for the machine's Ack.
type pendingProduce struct {
	base, end int64
	epoch     int32
	ids       []uint64
	acksAll   bool
	reply     func(err error)
	ackedAt   time.Time // when the leader acknowledged it
	node      int32     // which leader
}

func leaseFor(deadline time.Time) replica.Lease { return replica.Lease{Deadline: deadline} }

// applyReplicas is Replicas.apply: every partition this node is assigned
// gets its state from the view, then every replica the lease deadline.
func (p *proc) applyReplicas() {
	w := p.w
	v := p.view
	if v == nil {
		return
	}
	deadline := p.leaseDeadline()
	if w.opts.Bugs.LeaderIgnoresLease {
		deadline = w.now.Add(1000 * time.Hour)
	}
	if p.trustUntil.After(deadline) {
		deadline = p.trustUntil // Bugs.TrustLeaseAfterPause
	}
	me := p.n.id
	for _, t := range v.SortedTopics() {
		minInsync := 1 // ReplicasConfig.MinInsync's default
		if s, ok := t.Configs["min.insync.replicas"]; ok {
			if n, err := strconv.Atoi(s); err == nil && n > 0 {
				minInsync = n
			}
		}
		for i, replicas := range t.Partitions {
			tp := view.TP{Topic: t.ID, Partition: int32(i)}
			st, ok := v.States[tp]
			if !ok {
				continue
			}
			s := p.slots[tp]
			if s == nil {
				if !slices.Contains(replicas, me) {
					continue
				}
				s = p.open(tp)
			}
			s.step(replica.SetState{State: replica.Partition{Replicas: replicas, Leader: st.Leader, LeaderEpoch: st.LeaderEpoch,
				ISR: st.ISR, Revision: st.Revision, MinInsync: minInsync, Registrations: v.RegistrationsFor(me, p.registration(), replicas)}})
		}
	}
	for _, s := range p.sortedSlots() {
		s.step(replica.Lease{Deadline: deadline})
	}
}

func (p *proc) sortedSlots() []*slot {
	out := make([]*slot, 0, len(p.slots))
	for _, s := range p.slots {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *slot) int { return cmpTP(a.tp, b.tp) })
	return out
}

func cmpTP(a, b view.TP) int {
	if c := slices.Compare(a.Topic[:], b.Topic[:]); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// replicasTick is Replicas.follow's timer: the lease deadline moves with
// every keep-alive, which the view does not show.
func (p *proc) replicasTick() {
	p.at(max(p.w.p.session/20, 50*time.Millisecond), func() {
		p.applyReplicas()
		p.replicasTick()
	})
}

// checkpointTick writes the high watermarks to the disk every 5s
// (replica.high.watermark.checkpoint.interval.ms).
func (p *proc) checkpointTick() {
	p.at(5*time.Second, func() {
		for _, s := range p.sortedSlots() {
			s.log.ckpt = s.log.hw
		}
		p.checkpointTick()
	})
}

// open is Replicas.open.
func (p *proc) open(tp view.TP) *slot {
	w := p.w
	l := p.n.log(tp)
	s := &slot{p: p, tp: tp, log: l, acks: map[replica.RequestID]*pendingProduce{}}
	s.m = replica.New(replica.Config{Node: p.n.id, LagTimeMax: w.p.lagMax, LeaseMargin: w.p.session / 10, Epochs: l},
		replica.Local{LogStart: 0, LEO: l.leo(), HW: l.hw})
	p.slots[tp] = s
	return s
}

// step is slot.stepLocked: step the machine, perform its effects in
// order.
func (s *slot) step(ev replica.Event) *replica.FetchAnswer {
	p, w := s.p, s.p.w
	now := w.now
	var answer *replica.FetchAnswer
	pending := []replica.Event{ev}
	for len(pending) > 0 {
		ev := pending[0]
		pending = pending[1:]
		for _, e := range s.m.Step(now, ev) {
			switch e := e.(type) {
			case replica.StartEpoch:
				s.log.assign(e.Epoch, e.Offset)
				w.count("run.leader-epochs-started")
				w.logf("node %d.%d: %s leads epoch %d from %d (%s)", p.n.id, p.inc, w.tpName(s.tp), e.Epoch, e.Offset, s.log)
				s.epoch, s.acted = e.Epoch, false
			case replica.SetHW:
				s.log.hw = e.HW
				w.chk.hwSet(p.n, s.tp, s.log)
			case replica.Ack:
				if e.Err == nil {
					s.acts()
				}
				if pp, ok := s.acks[e.ID]; ok {
					delete(s.acks, e.ID)
					s.acked(pp, e.Err)
				}
			case replica.WriteISR:
				s.writeISR(e)
			case replica.FetchAnswer:
				if e.Err == nil {
					s.acts()
				}
				answer = &e
			case replica.AskEpoch:
				p.fetcher(e.Leader).ask(epochAsk{tp: s.tp, leaderEpoch: e.LeaderEpoch, epoch: e.Epoch})
			case replica.Truncate:
				before := s.log.leo()
				if w.opts.Bugs.FollowerSkipsTruncate {
					w.count("run.truncate-skipped-by-bug")
				} else {
					s.log.truncate(e.To)
				}
				w.count("run.truncations")
				if s.log.leo() < before {
					w.count("run.truncations-dropping-records")
					w.stats["run.records-truncated"] += before - s.log.leo()
					w.logf("node %d.%d: %s truncated to %d, %d records dropped", p.n.id, p.inc, w.tpName(s.tp), e.To, before-s.log.leo())
				}
				w.chk.truncated(p.n, s.tp, s.log)
				pending = append(pending, replica.Truncated{LEO: s.log.leo()})
			case replica.TruncateFully:
				// The simulator's logs all start at offset 0 (retention
				// and DeleteRecords are not simulated) and its leaders'
				// answers give no log start, so no machine has a reason
				// to ask this.
				panic(fmt.Sprintf("node %d.%d: %s asked to restart its log at %d, but no simulated leader moves its log start", p.n.id, p.inc, w.tpName(s.tp), e.Offset))
			case replica.Fetch:
				p.fetcher(e.Leader).want(fetchWant{tp: s.tp, leaderEpoch: e.LeaderEpoch, offset: e.Offset})
			}
		}
	}
	s.schedule(now)
	return answer
}

// schedule arms the timer for the machine's next deadline.
func (s *slot) schedule(now time.Time) {
	at, ok := s.m.NextDeadline()
	if !ok || (s.timer != nil && s.timerAt.Equal(at)) {
		return
	}
	if s.timer != nil {
		s.timer()
	}
	s.timerAt = at
	s.timer = s.p.w.AfterFunc(max(at.Sub(now), 0), func() { s.p.run(func() { s.step(replica.Tick{}) }) })
}

// acked answers a produce the machine acknowledged.
func (s *slot) acked(pp *pendingProduce, err error) {
	w := s.p.w
	if err == nil {
		w.chk.acked(s.p, s.tp, pp)
	}
	pp.reply(err)
}

// writeISR is slot.writeISR: a compare-and-swap of the partition's state
// at the revision the machine read, only while the view has this node
// leading at it; refused or unknown, the state read back decides.
func (s *slot) writeISR(e replica.WriteISR) {
	p, w := s.p, s.p.w
	key := w.keys.Partition(s.tp.Topic, s.tp.Partition)
	cur := p.view.States[s.tp]
	st := meta.PartitionState{Leader: cur.Leader, LeaderEpoch: e.LeaderEpoch, ISR: e.ISR,
		PartitionEpoch: cur.PartitionEpoch + 1, ControllerEpoch: cur.ControllerEpoch}
	failed := func(err error) {
		if err != nil {
			w.vlogf("node %d.%d: writing the ISR of %s: %v", p.n.id, p.inc, w.tpName(s.tp), err)
		}
		w.count("run.isr-write-failed")
		p.get(w.p.session, key, func(v kv.Value, found bool, gerr error) {
			current := s.machineState(cur)
			if gerr == nil && found {
				if ps, derr := meta.DecodePartitionState(key, v.Data); derr == nil {
					current = s.machineState(view.State{PartitionState: ps, Revision: v.ModRevision})
				}
			}
			s.step(replica.ISRWriteFailed{Current: current})
		})
	}
	registered := p.registration()
	if cur.Revision != e.ExpectRevision || cur.Leader != p.n.id || registered == 0 {
		failed(nil)
		return
	}
	data, err := st.Encode()
	if err != nil {
		w.fail("sim", err.Error())
		return
	}
	conds := append([]kv.Cond{kv.ModRevisionIs(key, e.ExpectRevision)}, p.view.RegistrationConds(w.keys, p.n.id, registered, p.n.id, e.ISR)...)
	p.txn(w.p.session, conds, []kv.Op{kv.Put(key, data, 0)}, func(ok bool, rev int64, err error) {
		if err == nil && ok {
			w.count("run.isr-written")
			w.logf("node %d.%d: %s ISR %v written at rev %d (epoch %d)", p.n.id, p.inc, w.tpName(s.tp), e.ISR, rev, e.LeaderEpoch)
			s.step(replica.ISRWritten{Revision: rev})
			return
		}
		failed(err)
	})
}

func (s *slot) machineState(st view.State) replica.Partition {
	v := s.p.view
	minInsync := 1
	if t, ok := v.TopicByID(s.tp.Topic); ok {
		if m, err := strconv.Atoi(t.Configs["min.insync.replicas"]); err == nil && m > 0 {
			minInsync = m
		}
	}
	replicas := v.Replicas(s.tp)
	return replica.Partition{Replicas: replicas, Leader: st.Leader, LeaderEpoch: st.LeaderEpoch, ISR: st.ISR,
		Revision: st.Revision, MinInsync: minInsync, Registrations: v.RegistrationsFor(s.p.n.id, s.p.registration(), replicas)}
}

// The follower's side: replicas.go's fetcher, one per leader node.

type fetchWant struct {
	tp          view.TP
	leaderEpoch int32
	offset      int64
}

type epochAsk struct {
	tp          view.TP
	leaderEpoch int32
	epoch       int32
}

type fetchResult struct {
	err  error
	hw   int64
	recs []record
}

type epochResult struct {
	err   error
	epoch int32
	end   int64
}

type fetcher struct {
	p      *proc
	leader int32
	wants  map[view.TP]fetchWant
	asks   map[view.TP]epochAsk
	busy   bool
	woken  bool
}

func (p *proc) fetcher(leader int32) *fetcher {
	f := p.fetchers[leader]
	if f == nil {
		f = &fetcher{p: p, leader: leader, wants: map[view.TP]fetchWant{}, asks: map[view.TP]epochAsk{}}
		p.fetchers[leader] = f
	}
	return f
}

func (f *fetcher) want(x fetchWant) { f.wants[x.tp] = x; f.signal() }
func (f *fetcher) ask(x epochAsk)   { f.asks[x.tp] = x; f.signal() }

func (f *fetcher) signal() {
	f.woken = true
	if !f.busy {
		f.busy = true
		f.p.at(f.p.w.schedDelay(), f.runOnce)
	}
}

// runOnce is one turn of fetcher.run: the questions, then the fetch.
func (f *fetcher) runOnce() {
	f.woken = false
	var wants []fetchWant
	for _, x := range f.wants {
		wants = append(wants, x)
	}
	slices.SortFunc(wants, func(a, b fetchWant) int { return cmpTP(a.tp, b.tp) })
	var asks []epochAsk
	for _, x := range f.asks {
		asks = append(asks, x)
	}
	slices.SortFunc(asks, func(a, b epochAsk) int { return cmpTP(a.tp, b.tp) })
	clear(f.wants)
	clear(f.asks)
	finish := func() {
		f.busy = false
		if f.woken {
			f.signal()
		}
	}
	fetch := func() {
		if len(wants) == 0 {
			finish()
			return
		}
		f.doFetch(wants, finish)
	}
	if len(asks) == 0 {
		fetch()
		return
	}
	f.doAsks(asks, fetch)
}

func (f *fetcher) doAsks(asks []epochAsk, then func()) {
	p, w := f.p, f.p.w
	w.count("run.offset-for-leader-epoch")
	deliver := func(res []epochResult, err error) {
		for i, q := range asks {
			s := p.slots[q.tp]
			if s == nil {
				continue
			}
			a := epochResult{err: err}
			if err == nil {
				a = res[i]
			} else {
				a.err = fmt.Errorf("asking node %d: %w", f.leader, err)
			}
			w.vlogf("node %d.%d: %s epoch answer from %d for %d (leader epoch %d): epoch %d end %d err %v", p.n.id, p.inc, w.tpName(q.tp), f.leader, q.epoch, q.leaderEpoch, a.epoch, a.end, a.err)
			s.step(replica.EpochAnswer{LeaderEpoch: q.leaderEpoch, Err: a.err, Epoch: a.epoch, End: a.end})
		}
		then()
	}
	p.rpc(f.leader, w.p.session, func(q *proc, reply func(func())) {
		res := q.serveEpochs(asks)
		reply(func() { deliver(res, nil) })
	}, func(err error) { deliver(nil, err) })
}

func (f *fetcher) doFetch(wants []fetchWant, then func()) {
	p, w := f.p, f.p.w
	w.count("run.follower-fetches")
	deliver := func(res []fetchResult, err error) {
		for i, x := range wants {
			s := p.slots[x.tp]
			if s == nil {
				continue
			}
			if err != nil {
				s.step(replica.FetchFailed{LeaderEpoch: x.leaderEpoch, Err: fmt.Errorf("fetching from node %d: %w", f.leader, err)})
				continue
			}
			r := res[i]
			if r.err != nil {
				if errors.Is(r.err, kerr.OffsetOutOfRange) {
					w.count("run.follower-fetch-out-of-range")
				}
				w.vlogf("node %d.%d: %s fetch from %d at %d (epoch %d): %v", p.n.id, p.inc, w.tpName(x.tp), f.leader, x.offset, x.leaderEpoch, r.err)
				s.step(replica.FetchFailed{LeaderEpoch: x.leaderEpoch, Err: r.err})
				continue
			}
			s.appendFetched(x, r)
		}
		then()
	}
	p.rpc(f.leader, w.p.fetchWait+w.p.session, func(q *proc, reply func(func())) {
		q.serveFollowerFetch(p.n.id, wants, reply, deliver)
	}, func(err error) { deliver(nil, err) })
}

// appendFetched is slot.appendFetched.
func (s *slot) appendFetched(x fetchWant, r fetchResult) {
	w := s.p.w
	if !s.m.AwaitsFetch(x.leaderEpoch, x.offset) {
		w.count("run.stale-fetch-dropped")
		return // a stale answer: the machine has moved on
	}
	leo := s.log.leo()
	if len(r.recs) > 0 {
		if leo != x.offset {
			s.step(replica.FetchFailed{LeaderEpoch: x.leaderEpoch, Err: kerr.OffsetOutOfRange})
			return
		}
		var err error
		if leo, err = s.log.appendReplicated(x.offset, r.recs); err != nil {
			s.step(replica.FetchFailed{LeaderEpoch: x.leaderEpoch, Err: err})
			return
		}
		w.stats["run.records-replicated"] += int64(len(r.recs))
	}
	s.step(replica.Fetched{LeaderEpoch: x.leaderEpoch, LEO: leo, HW: r.hw})
}

// rpc sends a request from p to node `to` over the network: handle runs
// in the receiving process and answers through reply; the answer runs in
// p. With no answer by timeout, failed runs instead. A node that is down
// refuses the connection at once; one that restarts meanwhile never
// answers.
func (p *proc) rpc(to int32, timeout time.Duration, handle func(q *proc, reply func(func())), failed func(error)) {
	w := p.w
	done := false
	stop := w.AfterFunc(timeout, func() {
		if done {
			return
		}
		done = true
		w.count("run.rpc-timeouts")
		p.run(func() { failed(errTimeout) })
	})
	target := w.nodes[to-1].proc
	if target == nil || target.dead {
		w.after(w.net.delay()*2, func() {
			if done {
				return
			}
			done = true
			stop()
			p.run(func() { failed(errRefused) })
		})
		return
	}
	w.net.send(p.n.id, to, func() {
		target.run(func() {
			handle(target, func(deliver func()) {
				w.net.send(to, p.n.id, func() {
					if done {
						return
					}
					done = true
					stop()
					p.run(deliver)
				})
			})
		})
	})
}

var (
	errTimeout = errors.New("request timed out")
	errRefused = errors.New("connection refused")
)

// The leader's side.

// live reports whether the process holds a lease live by the machines'
// rule (now < deadline - margin).
func (q *proc) live() bool {
	return q.w.now.Before(q.leaseDeadline().Add(-q.w.p.session / 10))
}

// serveEpochs answers OffsetForLeaderEpoch: the leader's epoch cache,
// after CheckLeaderEpoch.
func (q *proc) serveEpochs(asks []epochAsk) []epochResult {
	out := make([]epochResult, len(asks))
	for i, a := range asks {
		s := q.slots[a.tp]
		if s == nil {
			out[i] = epochResult{err: kerr.NotLeaderForPartition}
			continue
		}
		if err := s.m.CheckLeaderEpoch(q.w.now, a.leaderEpoch); err != nil {
			out[i] = epochResult{err: err}
			continue
		}
		e, end := s.log.leaderAnswer(a.epoch)
		q.servesAsLeader("OffsetForLeaderEpoch", a.tp)
		out[i] = epochResult{epoch: e, end: end}
	}
	return out
}

// servesAsLeader: a node answers what as the leader of tp, which it may
// do only under a live lease (replica.Machine's CheckLeaderEpoch and
// ClientHW). The harness checks it, unless a broken rule makes the
// machine believe in a lease the node does not have.
func (q *proc) servesAsLeader(what string, tp view.TP) {
	w := q.w
	if q.live() || w.opts.Bugs.LeaderIgnoresLease || w.opts.Bugs.TrustLeaseAfterPause {
		return
	}
	w.fail("sim", fmt.Sprintf("node %d.%d answered %s for %s as leader without a live lease", q.n.id, q.inc, what, w.tpName(tp)))
}

// parkedFetch is a follower fetch that found nothing to read, waiting at
// the leader for records or replica.fetch.wait.max.ms (Kafka's
// DelayedFetch).
type parkedFetch struct {
	from  int32
	wants []fetchWant
	done  bool
	fire  func()
}

// serveFollowerFetch answers a follower's Fetch: each partition's
// FollowerFetch step, then a read from the log up to its end. If nothing
// is read and nothing failed, the fetch waits for an append or the fetch
// wait, and is then answered afresh.
func (q *proc) serveFollowerFetch(from int32, wants []fetchWant, reply func(func()), deliver func([]fetchResult, error)) {
	w := q.w
	answer := func() ([]fetchResult, bool) {
		res := make([]fetchResult, len(wants))
		empty := true
		for i, x := range wants {
			s := q.slots[x.tp]
			if s == nil {
				res[i] = fetchResult{err: kerr.NotLeaderForPartition}
				empty = false
				continue
			}
			a := s.step(replica.FollowerFetch{Node: from, LeaderEpoch: x.leaderEpoch, Offset: x.offset})
			if a == nil {
				res[i] = fetchResult{err: kerr.NotLeaderForPartition}
				empty = false
				continue
			}
			if a.Err != nil {
				res[i] = fetchResult{err: a.Err}
				empty = false
				continue
			}
			recs := s.log.read(x.offset, s.log.leo(), w.p.maxFetch)
			if len(recs) > 0 {
				empty = false
			}
			res[i] = fetchResult{hw: a.HW, recs: recs}
		}
		return res, empty
	}
	res, empty := answer()
	if !empty {
		reply(func() { deliver(res, nil) })
		return
	}
	pf := &parkedFetch{from: from, wants: wants}
	pf.fire = func() {
		if pf.done {
			return
		}
		pf.done = true
		q.parkedFetch = slices.DeleteFunc(q.parkedFetch, func(x *parkedFetch) bool { return x == pf })
		res, _ := answer()
		reply(func() { deliver(res, nil) })
	}
	q.parkedFetch = append(q.parkedFetch, pf)
	q.at(w.p.fetchWait, pf.fire)
}

// appendedTo wakes the fetches waiting for records of tp.
func (q *proc) appendedTo(tp view.TP) {
	for _, pf := range slices.Clone(q.parkedFetch) {
		for _, x := range pf.wants {
			if x.tp == tp {
				q.at(0, pf.fire)
				break
			}
		}
	}
}
