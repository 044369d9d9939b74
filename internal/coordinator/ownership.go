package coordinator

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/inspect"
)

// Shard ownership, for a coordinator whose shards are served by whichever
// node leads them (Config.Owned): in a cluster, a shard is a partition of
// __consumer_offsets and this node serves it while it leads that
// partition, as Kafka's coordinator loads a partition when its broker
// becomes the leader and unloads it when another does.
//
// An unowned shard answers NOT_COORDINATOR, so clients look for the
// coordinator again; an owned one answers COORDINATOR_LOAD_IN_PROGRESS
// until it has loaded its records. Ownership is state, not an event: the
// loop compares it with the generation it loaded for whenever it wakes,
// so any sequence of Own and Disown calls ends with the shard loaded for
// the last Own, or unloaded.

// Own makes this node the coordinator of shard: it loads the shard's
// records (Config.Store's Load) and serves its groups. Owning a shard
// that is already owned starts a new generation: the shard unloads and
// loads again, as after a change of leader epoch, since the records may
// have changed under it. It does nothing without Config.Owned.
func (c *Coordinator) Own(shard int) {
	if !c.cfg.Owned || shard < 0 || shard >= len(c.shards) {
		return
	}
	s := c.shards[shard]
	s.mu.Lock()
	s.owned = true
	s.ownGen++
	s.loaded = false
	s.mu.Unlock()
	s.signal()
}

// Disown stops serving shard: the replies not yet released, and the
// requests parked or queued, are answered NOT_COORDINATOR, and the
// machine is dropped. A write in flight is waited for, not abandoned; if
// it fails, its replies are answered NOT_COORDINATOR too.
func (c *Coordinator) Disown(shard int) {
	if !c.cfg.Owned || shard < 0 || shard >= len(c.shards) {
		return
	}
	s := c.shards[shard]
	s.mu.Lock()
	s.owned = false
	s.loaded = false
	s.mu.Unlock()
	s.signal()
}

// Owned reports whether this node owns shard: always, without
// Config.Owned.
func (c *Coordinator) Owned(shard int) bool {
	if shard < 0 || shard >= len(c.shards) {
		return false
	}
	return c.shards[shard].isOwned()
}

func (s *shard) isOwned() bool {
	if !s.cfg.Owned {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owned
}

// lostOwnership reports whether the shard must unload: it was disowned,
// or owned again since it loaded. Only the loop calls it.
func (s *shard) lostOwnership() bool {
	if !s.cfg.Owned {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed && (!s.owned || s.ownGen != s.loadedGen)
}

// awaitOwner waits until the shard is owned, and reports false if it
// closed first. The events that queue meanwhile find no machine: they
// are answered (requests NOT_COORDINATOR) or dropped (timers of a machine
// already gone, topic changes the next load reads anyway).
func (s *shard) awaitOwner() bool {
	for {
		s.mu.Lock()
		closed, owned, gen := s.closed, !s.cfg.Owned || s.owned, s.ownGen
		if owned && !closed {
			s.loadedGen = gen
		}
		s.mu.Unlock()
		switch {
		case closed:
			return false
		case owned:
			return true
		}
		s.answerQueued()
		s.busy(-1)
		<-s.wake
	}
}

// moved notes the load that made this node the shard's coordinator, for
// the inspect views and the observer.
func (s *shard) moved(took time.Duration) {
	mv := &inspect.CoordinatorMove{From: -1, To: s.cfg.NodeID, At: s.clock.Now(), LoadMs: took.Milliseconds()}
	if lw, ok := s.store.(lastWriter); ok {
		if n, ok := lw.LastWriter(s.id); ok {
			mv.From = n
		}
	}
	s.move = mv
	s.log.Info("coordinating the shard's groups", "from_node", mv.From, "to_node", mv.To, "load", took)
	if o, ok := s.cfg.Observer.(LoadObserver); ok {
		o.ShardLoaded(s.id, *mv)
	}
}

// resign unloads the shard after it lost its ownership: it waits for the
// write in flight, answers everything not yet released NOT_COORDINATOR,
// drops the machine and its timers. The loop then waits for the next Own.
func (s *shard) resign() {
	for s.inflight != nil {
		s.busy(-1)
		b := <-s.written
		s.inflight = nil
		s.settle(b)
	}
	answerHeld(s.cur.hold, kerr.NotCoordinator.Code)
	s.cur.reset()
	if s.m != nil {
		s.unloadMachine()
	}
	s.failWaiting(kerr.NotCoordinator.Code)
	s.m, s.broken, s.move = nil, false, nil
	s.stopTimers()
	if s.retention != nil {
		s.retention()
		s.retention = nil
	}
	s.answerQueued()
	s.log.Info("shard unloaded: this node no longer coordinates its groups")
}

// settle takes back a batch from the writer after the shard lost its
// ownership: a batch written is already answered; a failed one is
// answered by failLanded.
func (s *shard) settle(b *batch) {
	if b.err != nil {
		s.failLanded(b)
		return
	}
	s.recycle(b)
}

// failLanded answers the replies of a batch whose write failed, and of
// every event stepped after it, NOT_COORDINATOR: the shard lost its
// ownership, so the records may never be durable here, and the clients
// look for the new coordinator, which has every record that was.
func (s *shard) failLanded(b *batch) {
	s.log.Warn("a write failed after the shard lost its ownership; its replies are answered NOT_COORDINATOR",
		"records", len(b.recs), "replies", len(b.hold), "err", b.err)
	answerHeld(b.hold, kerr.NotCoordinator.Code)
	answerHeld(s.cur.hold, kerr.NotCoordinator.Code)
	s.cur.reset()
	s.recycle(b)
}

// answerHeld answers held replies with an error code instead of their
// message, and releases the functions among them.
func answerHeld(hs []held, code int16) {
	for _, h := range hs {
		if h.call != nil {
			h.call.deliver(ErrorResponse(h.call.req, code))
		} else {
			close(h.done)
		}
	}
}

// answerQueued empties the queue of a shard without a machine: requests
// are answered NOT_COORDINATOR, functions released without running, and
// a close kept for the loop to see.
func (s *shard) answerQueued() {
	s.mu.Lock()
	evs := s.queue
	s.queue = nil
	for _, ev := range evs {
		if ev.kind == evClose {
			s.queue = append(s.queue, ev)
		}
	}
	s.mu.Unlock()
	for _, ev := range evs {
		switch ev.kind {
		case evRequest:
			ev.call.deliver(ErrorResponse(ev.call.req, kerr.NotCoordinator.Code))
		case evFunc:
			close(ev.done)
		}
	}
}
