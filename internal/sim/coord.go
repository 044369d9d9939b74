package sim

import (
	"errors"
	"fmt"
	"sort"
	"time"

	coord "github.com/groupd/groupd/internal/coordinator"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/store"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// conn is one client's TCP connection to one coordinator incarnation.
// Requests and responses each keep their order on it (the arrival time of a
// message is never before that of the previous one), while different
// connections are delayed independently, which reorders traffic across
// clients.
type conn struct {
	p                 *process
	inc               int
	dead              bool
	lastReq, lastResp time.Time
}

// delay draws a one-way latency; some messages are slow, which reorders
// them relative to other connections.
func (w *world) delay() time.Duration {
	d := w.between(w.p.netMin, w.p.netMax)
	if w.chance(w.p.slowP) {
		w.count("fault.slow-message")
		d += w.between(0, w.p.slowMax)
	}
	return d
}

// backend is the coordinator under simulation: the model of the runtime
// below (coordinator), or the real runtime (runtimeCoord, runtime.go).
type backend interface {
	start()
	restart()
	isUp() bool
	// incarnation counts crashes; a connection belongs to one.
	incarnation() int
	// receive delivers a request that arrived on cn.
	receive(cn *conn, o *outReq)
	crashFault()
	// failNextWrite arms a failure of the next store write: mode 1 fails
	// it before anything is written, mode 2 after.
	failNextWrite(mode int)
	// stopFaults disarms every armed fault.
	stopFaults()
	// topicsChanged tells the coordinator the broker's topics changed
	// (world.brokerTopics), as the broker does when a topic is created
	// or grows.
	topicsChanged()
	// machine returns the state machine that owns a group (nil if its
	// shard has none).
	machine(groupID string) *group.Machine
	// close releases what the backend holds at the end of a run.
	close()
}

// sendRequest puts o on p's connection, opening one if needed. A
// coordinator that is down refuses the connection.
func (w *world) sendRequest(p *process, o *outReq) {
	c := w.coord
	w.logf("%s -> %s %s", p.name, o.kind, describeRequest(o.req))
	if !c.isUp() {
		w.after(w.delay(), func() {
			p.do(func() {
				w.count("run.connection-refused")
				p.netError(o)
			})
		})
		return
	}
	if p.conn == nil || p.conn.dead || p.conn.inc != c.incarnation() {
		p.conn = &conn{p: p, inc: c.incarnation()}
	}
	cn := p.conn
	o.conn = cn
	at := w.now.Add(w.delay())
	if at.Before(cn.lastReq) {
		at = cn.lastReq
	}
	cn.lastReq = at
	w.at(at, func() { c.receive(cn, o) })
}

// held is a reply waiting for its batch to be durable.
type held struct {
	pend *pending
	msg  kmsg.Response
}

// pending is a request the machine has not answered yet.
type pending struct {
	conn *conn
	o    *outReq
}

// coordinator models internal/coordinator's shard loop over one machine and
// one store, single-threaded on virtual time.
type coordinator struct {
	w     *world
	up    bool
	inc   int // incarnation: bumped by every crash
	epoch int // bumped by every crash and reload; stale timers and flushes check it
	st    *store.Memory
	m     *group.Machine
	cfg   group.Config

	timers  map[group.TimerKey]time.Time
	waiting map[group.RequestID]*pending
	nextID  group.RequestID

	recs           []group.Record
	hold           []held
	flushScheduled bool

	// Armed faults.
	failNext     int // 1: fail before writing; 2: fail after writing
	crashAtFlush int // 1: crash before Apply; 2: after Apply, before replies
}

// errInjected is the store error the simulator injects.
var errInjected = errors.New("sim: injected store write failure")

func newCoordinator(w *world) *coordinator {
	return &coordinator{
		w:       w,
		st:      store.NewMemoryShards(1),
		timers:  map[group.TimerKey]time.Time{},
		waiting: map[group.RequestID]*pending{},
	}
}

var _ backend = (*coordinator)(nil)

func (c *coordinator) isUp() bool                    { return c.up }
func (c *coordinator) incarnation() int              { return c.inc }
func (c *coordinator) failNextWrite(mode int)        { c.failNext = mode }
func (c *coordinator) machine(string) *group.Machine { return c.m }
func (c *coordinator) close()                        {}
func (c *coordinator) stopFaults()                   { c.failNext, c.crashAtFlush = 0, 0 }

// memberIDs numbers member ids per incarnation so they never repeat across
// restarts and stay readable in traces.
func memberIDs(inc int) func(string) string {
	n := 0
	return func(prefix string) string {
		n++
		return fmt.Sprintf("%s-%d.%d", prefix, inc, n)
	}
}

func (c *coordinator) start() {
	c.cfg = group.Config{
		InitialRebalanceDelay: c.w.p.initialDelay,
		NewMemberID:           memberIDs(c.inc),
	}
	if c.w.opts.Mix != MixClassic {
		c.cfg.Consumer = c.w.consumerConfig(c.inc)
	}
	c.up = true
	c.load("start")
}

// load builds a fresh machine from the store, like shard.load.
func (c *coordinator) load(why string) {
	c.m = group.New(c.cfg)
	if c.w.opts.Mix != MixClassic {
		// The topics first, as the shard loads them.
		c.m.Step(c.w.now, group.TopicsChanged{Topics: c.w.brokerTopics()})
	}
	var recs []group.Record
	if err := c.st.Load(0, func(r group.Record) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		c.w.fail("store", "load: "+err.Error())
		return
	}
	out, err := c.m.Replay(c.w.now, recs)
	if err != nil {
		c.w.fail("store", "replay: "+err.Error())
		return
	}
	if len(out.Records) > 0 {
		if err := c.st.Apply(out.Records); err != nil {
			c.w.fail("store", "apply after replay: "+err.Error())
			return
		}
		c.w.chk.onDurable(out.Records)
		c.w.chk.onSettled()
	}
	c.applyTimers(out.Timers)
	c.w.logf("coordinator %s: replayed %d records into %d groups", why, len(recs), len(c.m.Groups()))
	c.w.chk.onLoad(why, c.w.chk.ids)
}

// receive steps the machine with a request that arrived on cn.
func (c *coordinator) receive(cn *conn, o *outReq) {
	if !c.up || cn.dead || cn.inc != c.inc {
		return // the connection died with a previous incarnation
	}
	c.nextID++
	id := c.nextID
	c.waiting[id] = &pending{conn: cn, o: o}
	c.step(group.Request{ID: id, ClientID: cn.p.clientID, ClientHost: cn.p.name, Msg: o.req}, cn.p)
}

// step applies one event and collects its effects into the open batch.
func (c *coordinator) step(ev group.Event, from *process) {
	w := c.w
	pre := w.chk.before(ev, from)
	out := c.m.Step(w.now, ev)
	w.chk.after(ev, from, pre, out)
	c.applyTimers(out.Timers)
	c.recs = append(c.recs, out.Records...)
	for _, r := range out.Replies {
		pd := c.waiting[r.ID]
		if pd == nil {
			w.fail("reply", fmt.Sprintf("machine replied to unknown request %d", r.ID))
			return
		}
		delete(c.waiting, r.ID)
		msg := r.Msg
		if w.opts.Bugs.ServeStaleSync {
			msg = w.chk.staleSync(pd, msg)
		}
		if w.opts.Bugs.ReplyBeforeApply || w.opts.Bugs.ConsumerReplyBeforeApply && isConsumerHeartbeat(msg) {
			w.release(pd, msg)
			continue
		}
		c.hold = append(c.hold, held{pd, msg})
	}
	if !w.p.groupCommit {
		c.flush()
		return
	}
	if !c.flushScheduled && (len(c.recs) > 0 || len(c.hold) > 0) {
		// Group commit: later events join this batch until it is
		// written.
		c.flushScheduled = true
		epoch := c.epoch
		w.after(w.between(0, w.p.flushMax), func() {
			if c.up && c.epoch == epoch {
				c.flush()
			}
		})
	}
}

// flush makes the batch durable and then releases its replies.
func (c *coordinator) flush() {
	w := c.w
	c.flushScheduled = false
	recs, hold := c.recs, c.hold
	c.recs, c.hold = nil, nil
	if len(recs) > 0 {
		if c.crashAtFlush == 1 {
			c.crashAtFlush = 0
			w.count("fault.coordinator-crash-before-durable")
			c.crash("before the batch was durable")
			return
		}
		mode := c.failNext
		c.failNext = 0
		if mode == 0 && w.chance(w.p.storeFailP) {
			mode = 1 + w.intn(2)
		}
		switch mode {
		case 1:
			w.count("fault.store-fail-before-write")
			c.st.FailNext(errInjected)
		case 2:
			w.count("fault.store-fail-after-write")
			c.st.FailNextAfterWrite(errInjected)
		}
		err := c.st.Apply(w.storeFilter(recs))
		if err == nil || mode == 2 {
			w.chk.onDurable(recs)
			w.chk.onSettled()
		}
		if err != nil {
			w.logf("coordinator: store write of %d records failed: %v", len(recs), err)
			if w.opts.Bugs.AckFailedWrite {
				for _, h := range hold {
					w.release(h.pend, h.msg)
				}
				return
			}
			c.reload(hold)
			return
		}
		if c.crashAtFlush == 2 {
			c.crashAtFlush = 0
			w.count("fault.coordinator-crash-after-durable")
			c.crash("after the batch was durable, before its replies")
			return
		}
	} else {
		w.chk.onSettled()
	}
	for _, h := range hold {
		w.release(h.pend, h.msg)
	}
}

// release sends a reply back on its connection, unless the network loses it.
func (w *world) release(pd *pending, msg kmsg.Response) {
	cn := pd.conn
	if cn.dead {
		return
	}
	w.logf("%s <- %s %s", cn.p.name, pd.o.kind, describeResponse(msg))
	if w.chance(w.p.lossP) {
		w.count("fault.lost-response")
		w.logf("%s: response to %s lost", cn.p.name, pd.o.kind)
		return
	}
	at := w.now.Add(w.delay())
	if at.Before(cn.lastResp) {
		at = cn.lastResp
	}
	cn.lastResp = at
	seq := pd.o.seq
	w.at(at, func() { cn.p.receive(cn, seq, msg) })
}

// reload is shard.reload: the machine may be ahead of the store, so drop
// it, rebuild from the store, and fail the held replies and every request
// parked in the old machine with COORDINATOR_NOT_AVAILABLE.
func (c *coordinator) reload(hold []held) {
	w := c.w
	w.count("run.coordinator-reload")
	c.epoch++
	c.timers = map[group.TimerKey]time.Time{}
	c.load("reload after failed write")
	if w.failure != nil {
		return
	}
	for _, h := range hold {
		w.release(h.pend, coord.ErrorResponse(h.pend.o.req, kerr.CoordinatorNotAvailable.Code))
	}
	ids := make([]group.RequestID, 0, len(c.waiting))
	for id := range c.waiting {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		pd := c.waiting[id]
		delete(c.waiting, id)
		w.release(pd, coord.ErrorResponse(pd.o.req, kerr.CoordinatorNotAvailable.Code))
	}
}

// applyTimers mirrors the machine's deadlines as events. A firing is
// delivered only if the deadline is still the current one for its key,
// like the runtime stopping a replaced callback.
func (c *coordinator) applyTimers(us []group.TimerUpdate) {
	for _, u := range us {
		if u.Cancel {
			delete(c.timers, u.Key)
			continue
		}
		c.timers[u.Key] = u.Deadline
		key, d, epoch := u.Key, u.Deadline, c.epoch
		c.w.at(d, func() {
			if !c.up || c.epoch != epoch || !c.timers[key].Equal(d) {
				return
			}
			delete(c.timers, key)
			if c.w.opts.Bugs.LoseSessionTimers && (key.Kind == group.TimerHeartbeat || key.Kind == consumer.TimerSession) {
				return
			}
			c.w.logf("coordinator: timer %s", key)
			c.step(group.Timer{Key: key}, nil)
		})
	}
}

// crashFault crashes the coordinator now or arms a crash at the next write,
// before or after it is durable.
func (c *coordinator) crashFault() {
	w := c.w
	if !c.up {
		return
	}
	switch {
	case len(c.recs) > 0:
		w.count("fault.coordinator-crash-before-durable")
		c.crash("with an open batch")
	case w.chance(0.5):
		c.crashAtFlush = 1 + w.intn(2)
		w.logf("coordinator: crash armed for the next write (mode %d)", c.crashAtFlush)
	default:
		w.count("fault.coordinator-crash-idle")
		c.crash("between batches")
	}
}

// crash is kill -9: the store keeps what Apply made durable; the machine,
// its timers, the open batch and every request in flight are lost. Clients
// see their connection reset (or, if the host vanished, time out).
func (c *coordinator) crash(why string) {
	w := c.w
	w.logf("coordinator: CRASH %s", why)
	c.up = false
	c.epoch++
	old := c.inc
	c.inc++
	c.st = c.st.Crash()
	c.m = nil
	c.timers = map[group.TimerKey]time.Time{}
	c.waiting = map[group.RequestID]*pending{}
	c.recs, c.hold = nil, nil
	c.flushScheduled = false
	c.crashAtFlush = 0
	w.chk.onCrash()
	w.dropConnections(old)
	inc := c.inc
	w.after(w.between(0, 5*time.Second), func() {
		if !c.up && c.inc == inc {
			c.restart()
		}
	})
}

// dropConnections kills the connections of a crashed incarnation. Their
// clients see them reset or, if the host vanished, time out.
func (w *world) dropConnections(inc int) {
	reset := w.chance(0.7)
	for _, p := range w.procs {
		if p.conn == nil || p.conn.inc != inc {
			continue
		}
		p.conn.dead = true
		if o := p.out; o != nil && o.conn == p.conn && reset {
			w.after(w.delay(), func() { p.do(func() { p.netError(o) }) })
		}
	}
}

func isConsumerHeartbeat(msg kmsg.Response) bool {
	_, ok := msg.(*kmsg.ConsumerGroupHeartbeatResponse)
	return ok
}

// topicsChanged steps the machine with the broker's new topics.
func (c *coordinator) topicsChanged() {
	if c.up {
		c.step(group.TopicsChanged{Topics: c.w.brokerTopics()}, nil)
	}
}

// filter applies the Drop* bugs to a store write.
func (b Bugs) filter(recs []group.Record) []group.Record {
	if !b.DropOffsetRecords && !b.DropGroupRecords && !b.DropConsumerRecords {
		return recs
	}
	var apply []group.Record
	for _, r := range recs {
		if b.DropOffsetRecords && r.Type == group.RecordOffsetCommit ||
			b.DropGroupRecords && r.Type == group.RecordGroupMetadata ||
			b.DropConsumerRecords && r.Type.Consumer() {
			continue
		}
		apply = append(apply, r)
	}
	return apply
}

func (c *coordinator) restart() {
	c.w.count("run.coordinator-restart")
	c.cfg.NewMemberID = memberIDs(c.inc)
	if c.w.opts.Mix != MixClassic {
		c.cfg.Consumer = c.w.consumerConfig(c.inc)
	}
	c.up = true
	c.load("restart")
}

// describe reads a group through its machine without touching its state.
func (w *world) describe(id string) kmsg.DescribeGroupsResponseGroup {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Version = 5
	req.Groups = []string{id}
	resp := w.read(id, req).(*kmsg.DescribeGroupsResponse)
	return resp.Groups[0]
}

// offsets reads every committed offset of a group through its machine.
func (w *world) offsets(id string) map[tp]int64 {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 7
	req.Group = id
	resp := w.read(id, req).(*kmsg.OffsetFetchResponse)
	out := map[tp]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out[tp{t.Topic, p.Partition}] = p.Offset
		}
	}
	return out
}

// read steps the machine of a group with a read-only request and returns
// its reply. Reads produce no records and no deadlines; anything else is a
// bug worth failing on. Their ids are far above the runtime's own.
func (w *world) read(groupID string, req kmsg.Request) kmsg.Response {
	w.readID++
	out := w.coord.machine(groupID).Step(w.now, group.Request{ID: 1<<62 + w.readID, ClientID: "sim-checker", Msg: req})
	if len(out.Records) > 0 || len(out.Timers) > 0 || len(out.Replies) != 1 {
		w.fail("read", fmt.Sprintf("read-only %T produced %d records, %d timers, %d replies", req, len(out.Records), len(out.Timers), len(out.Replies)))
	}
	return out.Replies[0].Msg
}
