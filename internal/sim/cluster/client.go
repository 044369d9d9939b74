package cluster

import (
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/replica"
)

// client is a Kafka client: a producer, a consumer or a liveness probe.
// It learns who leads each partition from Metadata asked of any node
// (answered from that node's view, possibly stale), keeping per partition
// the answer with the highest leader epoch (KIP-320), and sends its
// requests to that leader.
type client struct {
	w    *world
	id   int32 // negative: clients are never cut off
	name string
	meta map[view.TP]leaderInfo

	// Consumers: the next offset to read and the highest HW told.
	pos   map[view.TP]int64
	maxHW map[view.TP]int64

	// Probes: the partition, and when it succeeded.
	probeTP view.TP
	probeOK bool
}

type leaderInfo struct {
	leader int32
	epoch  int32
}

func (w *world) newClient(id int32, name string) *client {
	c := &client{w: w, id: id, name: name, meta: map[view.TP]leaderInfo{}, pos: map[view.TP]int64{}, maxHW: map[view.TP]int64{}}
	w.clients = append(w.clients, c)
	return c
}

// request sends to node `to` (whatever process runs there when it
// arrives); handle answers through reply; with no answer by timeout,
// failed runs.
func (c *client) request(to int32, timeout time.Duration, handle func(q *proc, reply func(func())), failed func(error)) {
	w := c.w
	done := false
	stop := w.AfterFunc(timeout, func() {
		if done {
			return
		}
		done = true
		failed(errTimeout)
	})
	w.net.send(c.id, to, func() {
		q := w.nodes[to-1].proc
		if q == nil {
			return
		}
		q.run(func() {
			handle(q, func(deliver func()) {
				w.net.send(to, c.id, func() {
					if done {
						return
					}
					done = true
					stop()
					deliver()
				})
			})
		})
	})
}

// refresh asks a random node for the leaders of every partition.
func (c *client) refresh(then func()) {
	w := c.w
	to := int32(1 + w.intn(len(w.nodes)))
	c.request(to, time.Second, func(q *proc, reply func(func())) {
		v := q.view
		if v == nil {
			reply(func() {})
			return
		}
		got := map[view.TP]leaderInfo{}
		for _, tp := range w.tps {
			if st, ok := v.States[tp]; ok {
				got[tp] = leaderInfo{st.Leader, st.LeaderEpoch}
			}
		}
		reply(func() {
			for tp, li := range got {
				if old, ok := c.meta[tp]; !ok || li.epoch >= old.epoch {
					c.meta[tp] = li
				}
			}
			then()
		})
	}, func(error) { then() })
}

func (c *client) leader(tp view.TP) (leaderInfo, bool) {
	li, ok := c.meta[tp]
	return li, ok && li.leader > 0
}

// Producers.

func (c *client) produceLoop() {
	w := c.w
	c.w.after(w.between(w.p.produceGap/4, w.p.produceGap*2), func() {
		tp := pick(w, w.tps)
		n := 1 + w.intn(4)
		acksAll := w.chance(w.p.acksAllRatio)
		c.produce(tp, n, acksAll, 0, c.produceLoop)
	})
}

// produce sends one produce, retrying on errors and timeouts after a
// metadata refresh; each attempt carries new record ids.
func (c *client) produce(tp view.TP, n int, acksAll bool, attempt int, next func()) {
	w := c.w
	retry := func(why string) {
		w.count("run.produce-retry." + why)
		if attempt >= 6 {
			w.count("run.produce-given-up")
			next()
			return
		}
		w.after(w.between(50*time.Millisecond, 500*time.Millisecond), func() {
			c.refresh(func() { c.produce(tp, n, acksAll, attempt+1, next) })
		})
	}
	li, ok := c.leader(tp)
	if !ok {
		retry("no-leader-known")
		return
	}
	ids := make([]uint64, n)
	for i := range ids {
		w.nextRecord++
		ids[i] = w.nextRecord
	}
	w.count("run.produce-sent")
	var pp *pendingProduce
	c.request(li.leader, w.p.produceTimeout+time.Second, func(q *proc, reply func(func())) {
		q.handleProduce(tp, ids, acksAll, func(x *pendingProduce, err error) {
			reply(func() {
				pp = x
				c.produced(tp, pp, acksAll, err, retry, next)
			})
		})
	}, func(error) { retry("timeout") })
}

func (c *client) produced(tp view.TP, pp *pendingProduce, acksAll bool, err error, retry func(string), next func()) {
	w := c.w
	if err == nil {
		if acksAll {
			w.count("run.produce-acked.all")
		} else {
			w.count("run.produce-acked.one")
		}
		if c.probeTP == tp && !c.probeOK && c.name[0] == 'q' && acksAll {
			c.probeOK = true
			w.logf("probe %s: %s acks=all ok at %d", c.name, w.tpName(tp), pp.base)
		}
		next()
		return
	}
	var ke *kerr.Error
	why := "other"
	if errors.As(err, &ke) {
		why = ke.Message
	}
	retry(why)
}

// handleProduce is the leader's side of Produce: CheckAppend, the append
// at the leader's epoch, then the machine's Produce; the answer goes when
// the machine acknowledges.
func (q *proc) handleProduce(tp view.TP, ids []uint64, acksAll bool, answer func(*pendingProduce, error)) {
	w := q.w
	s := q.slots[tp]
	if s == nil {
		answer(nil, kerr.NotLeaderForPartition)
		return
	}
	if err := s.m.CheckAppend(w.now, acksAll); err != nil {
		answer(nil, err)
		return
	}
	base := s.log.leo()
	end := s.log.appendLeader(ids)
	epoch, _ := s.log.Latest()
	pp := &pendingProduce{base: base, end: end, epoch: epoch, ids: ids, acksAll: acksAll}
	pp.reply = func(err error) { answer(pp, err) }
	w.vlogf("node %d.%d: %s appended %d..%d at epoch %d acks-all=%v", q.n.id, q.inc, w.tpName(tp), base, end, epoch, acksAll)
	q.appendedTo(tp)
	s.nextID++
	id := s.nextID
	s.acks[id] = pp
	s.step(replica.Produce{ID: id, End: end, Deadline: w.now.Add(w.p.produceTimeout), LeaderOnly: !acksAll})
}

// Consumers.

func (c *client) consumeLoop(tp view.TP) {
	w := c.w
	w.after(w.between(30*time.Millisecond, 300*time.Millisecond), func() { c.poll(tp) })
}

type consumerFetch struct {
	err  error
	hw   int64
	recs []record
}

func (c *client) poll(tp view.TP) {
	w := c.w
	li, ok := c.leader(tp)
	if !ok {
		c.refresh(func() { c.consumeLoop(tp) })
		return
	}
	from := c.pos[tp]
	w.count("run.consumer-fetches")
	c.request(li.leader, time.Second, func(q *proc, reply func(func())) {
		r := q.handleConsumerFetch(tp, li.epoch, from)
		reply(func() { c.fetched(tp, li, from, r) })
	}, func(error) {
		c.refresh(func() { c.consumeLoop(tp) })
	})
}

func (c *client) fetched(tp view.TP, li leaderInfo, from int64, r consumerFetch) {
	w := c.w
	switch {
	case errors.Is(r.err, kerr.OffsetNotAvailable):
		w.count("run.consumer-offset-not-available")
		c.consumeLoop(tp)
		return
	case errors.Is(r.err, kerr.OffsetOutOfRange):
		w.count("run.consumer-offset-out-of-range")
		w.logf("consumer %s: %s offset %d out of range at node %d; reading from 0", c.name, w.tpName(tp), from, li.leader)
		c.pos[tp] = 0
		c.consumeLoop(tp)
		return
	case r.err != nil:
		w.count("run.consumer-fetch-error")
		c.refresh(func() { c.consumeLoop(tp) })
		return
	}
	w.chk.clientHW(c, tp, li, r.hw)
	w.chk.consumed(c, tp, li, from, r.recs)
	if c.pos[tp] == from {
		c.pos[tp] = from + int64(len(r.recs))
	}
	w.stats["run.records-consumed"] += int64(len(r.recs))
	if c.pos[tp] > 0 && w.chance(0.03) {
		c.pos[tp] = int64(w.intn(int(c.pos[tp])))
		w.count("run.consumer-seek-back")
	}
	c.consumeLoop(tp)
}

// handleConsumerFetch is a consumer's Fetch at the leader: the request's
// leader epoch checked, then records below the HW the machine shows
// clients (ClientHW); OFFSET_NOT_AVAILABLE is an empty answer.
func (q *proc) handleConsumerFetch(tp view.TP, epoch int32, from int64) consumerFetch {
	w := q.w
	s := q.slots[tp]
	if s == nil {
		return consumerFetch{err: kerr.NotLeaderForPartition}
	}
	if err := s.m.CheckLeaderEpoch(w.now, epoch); err != nil {
		return consumerFetch{err: err}
	}
	hw, err := s.m.ClientHW(w.now)
	if w.opts.Bugs.HWIsLEO && err == nil {
		hw = s.log.leo()
	}
	if w.opts.Bugs.SkipKIP207 && errors.Is(err, kerr.OffsetNotAvailable) {
		err = nil
	}
	if err != nil {
		return consumerFetch{err: err}
	}
	q.servesAsLeader("a consumer's Fetch", tp)
	if from > s.log.leo() {
		return consumerFetch{err: kerr.OffsetOutOfRange}
	}
	return consumerFetch{hw: hw, recs: s.log.read(from, hw, w.p.maxFetch)}
}

// Probes: once faults stop and the cluster had time to heal, one acks=all
// produce per partition, retried until it succeeds.

func (c *client) probe() {
	if c.probeOK {
		return
	}
	c.refresh(func() {
		c.produce(c.probeTP, 1, true, 0, func() {
			if !c.probeOK {
				c.w.after(300*time.Millisecond, c.probe)
			}
		})
	})
}
