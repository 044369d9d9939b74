package coordinator

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/group"
)

// A panic while a shard steps its machine (an assertion of the machine, an
// assignor's check, a view's function) is contained the same way whichever
// goroutine stepped: the shard's loop or a submitter stepping inline. The
// machine may be half-mutated and ahead of its store, so it is dropped;
// the replies it still owes are failed with COORDINATOR_NOT_AVAILABLE,
// which clients retry; and the loop rebuilds the machine from the store,
// exactly as after a failed write (reload). A machine that panics again
// while it is rebuilt leaves its shard unavailable until a restart, while
// the other shards serve on: replaying the same records would panic the
// same way.

// stepPanic is a panic recovered while stepping a shard's machine, or
// while rebuilding it from the store.
type stepPanic struct {
	value any
	stack []byte
}

func (p *stepPanic) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// isStepPanic reports whether a load failed by panicking.
func isStepPanic(err error) bool {
	var p *stepPanic
	return errors.As(err, &p)
}

// contain handles a panic p raised while stepping ev, the event at the
// head of rest's predecessors: ev is the event being stepped and rest the
// events taken with it that were not stepped yet. It answers every reply
// the shard owes that is not parked in the machine (ev's own, rest's, and
// those held for the current batch, whose records are dropped), puts back
// what the loop must still see (a close), drops the machine and marks the
// shard broken, so that no step runs until the loop has rebuilt it
// (rebuild). The batch in flight, stepped before the panic, is left to
// land: its records are consistent with the machine as it was then.
func (s *shard) contain(p any, ev event, rest []event) {
	sp := &stepPanic{value: p, stack: debug.Stack()}
	attrs := append(eventAttrs(ev), "panic", fmt.Sprint(p), "stack", string(sp.stack),
		"unstepped", len(rest), "held_replies", len(s.cur.hold), "parked", len(s.waiting))
	s.log.Error("panic while stepping the group machine; failing its requests and rebuilding the shard from the store", attrs...)
	if o := s.cfg.Observer; o != nil {
		o.ShardPanic(s.id, false)
	}

	fail := func(cl *call) { cl.deliver(ErrorResponse(cl.req, kerr.CoordinatorNotAvailable.Code)) }
	// The event being stepped: a request not yet answered by its own
	// step, or a function that did not finish (runFunc reports it did
	// not run).
	switch ev.kind {
	case evRequest:
		if s.asking != nil {
			fail(s.asking)
			s.asking = nil
		}
	case evFunc:
		close(ev.done)
	}
	rearmRetention := ev.kind == evExpire
	var requeue []event
	for _, r := range rest {
		switch r.kind {
		case evRequest:
			fail(r.call)
		case evFunc:
			close(r.done)
		case evExpire:
			rearmRetention = true
		case evClose:
			requeue = append(requeue, r)
		}
		// Timers and topic changes need no answer: the rebuilt
		// machine re-arms its deadlines and reads the topics afresh.
	}
	for _, h := range s.cur.hold {
		if h.call != nil {
			fail(h.call)
		} else {
			close(h.done)
		}
	}
	s.cur.reset()
	if rearmRetention {
		s.armRetention()
	}
	if len(requeue) > 0 {
		s.mu.Lock()
		s.queue = append(requeue, s.queue...)
		s.mu.Unlock()
	}
	s.m = nil
	s.broken = true
	s.stopTimers()
	// The loop rebuilds the machine; on the inline path it is waiting
	// and must be told.
	s.signal()
}

// rebuild reloads a broken shard's machine from the store once the batch
// in flight has landed. It reports false if the shard must stop.
func (s *shard) rebuild() bool {
	for s.inflight != nil {
		s.busy(-1)
		if !s.landed(<-s.written) {
			return false
		}
	}
	if !s.broken {
		return true // a failed write rebuilt it already
	}
	return s.reload(nil)
}

// goDown leaves the shard unavailable after its machine panicked again
// while being rebuilt: requests for its groups are answered with
// COORDINATOR_NOT_AVAILABLE until the process restarts. It waits for the
// shard to be closed and reports false.
func (s *shard) goDown(err error) bool {
	attrs := []any{"err", err}
	var sp *stepPanic
	if errors.As(err, &sp) {
		attrs = append(attrs, "stack", string(sp.stack))
	}
	s.log.Error("the shard's machine panicked again while being rebuilt from the store; its groups are answered COORDINATOR_NOT_AVAILABLE until groupd restarts", attrs...)
	if o := s.cfg.Observer; o != nil {
		o.ShardPanic(s.id, true)
	}
	s.mu.Lock()
	s.down = true
	s.mu.Unlock()
	s.setLoaded(false)
	for {
		s.mu.Lock()
		evs, closed := s.queue, s.closed
		s.queue = nil
		s.mu.Unlock()
		for _, ev := range evs {
			switch ev.kind {
			case evRequest:
				ev.call.deliver(ErrorResponse(ev.call.req, kerr.CoordinatorNotAvailable.Code))
			case evFunc:
				close(ev.done)
			}
		}
		if closed {
			return false
		}
		s.busy(-1)
		<-s.wake
	}
}

// eventAttrs describes an event for the log: a request's API, groups and
// client, or the kind of anything else.
func eventAttrs(ev event) []any {
	switch ev.kind {
	case evRequest:
		req := ev.call.req
		return []any{"event", "request", "api", kmsg.NameForKey(req.Key()), "version", req.GetVersion(),
			"groups", requestGroups(req), "client", ev.call.clientID, "client_host", ev.call.clientHost}
	case evTimer:
		return []any{"event", "timer", "timer", slog.AnyValue(ev.key)}
	case evExpire:
		return []any{"event", "offset expiry"}
	case evTopics:
		return []any{"event", "topics changed"}
	case evFunc:
		return []any{"event", "view"}
	}
	return []any{"event", "close"}
}

// requestGroups lists the groups a group request names.
func requestGroups(req kmsg.Request) []string {
	if id, ok := GroupOf(req); ok {
		return []string{id}
	}
	switch r := req.(type) {
	case *kmsg.DescribeGroupsRequest:
		return r.Groups
	case *kmsg.DeleteGroupsRequest:
		return r.Groups
	case *kmsg.ConsumerGroupDescribeRequest:
		return r.Groups
	case *kmsg.OffsetFetchRequest:
		ids := make([]string, len(r.Groups))
		for i, g := range r.Groups {
			ids[i] = g.Group
		}
		return ids
	}
	return nil
}

// recoverLoad turns a panic while rebuilding a machine from the store into
// the load's error.
func recoverLoad(err *error) {
	if p := recover(); p != nil {
		*err = &stepPanic{value: p, stack: debug.Stack()}
	}
}

// unloadMachine answers the requests parked in the machine as Kafka does
// when a coordinator partition moves away. A machine that panics doing so
// leaves its parked requests to failWaiting.
func (s *shard) unloadMachine() {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic while unloading the group machine", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	// Unload acknowledges nothing, so its replies need no write.
	out := s.m.Step(s.clock.Now(), group.Unload{})
	for _, r := range out.Replies {
		if cl := s.waiting[r.ID]; cl != nil {
			delete(s.waiting, r.ID)
			cl.deliver(r.Msg)
		}
	}
}
