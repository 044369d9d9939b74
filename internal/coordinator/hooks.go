package coordinator

import "github.com/groupd/groupd/internal/group"

// Hooks let a deterministic simulation (internal/sim) pace the runtime and
// watch its state machines. Every field may be nil; without hooks the
// runtime pays a nil check where each would be called.
//
// The runtime's goroutines call them: a shard's loop, and its writer for
// Applied. Two of them run at once only if the caller lets two goroutines
// of the runtime run at once (see Busy).
type Hooks struct {
	// Busy accounts for the runtime's pending work: +1 when work appears
	// for one of its goroutines (a shard's loop is woken, a batch is handed
	// to a writer or back from it, a load retry falls due) and -1 when a
	// goroutine has done its work and waits. The sum is 0 exactly when
	// every goroutine of the runtime waits for something from outside it:
	// a request, the clock, or a store call that the store is holding. A
	// store that holds calls must count each out (-1) while it holds it
	// and back in (+1) before it lets it go. A shard's loop counts as one
	// from New until it exits.
	Busy func(delta int)
	// Stepping and Stepped are called before and after every step of a
	// shard's machine with an event.
	Stepping func(shard int, m *group.Machine, ev group.Event)
	Stepped  func(shard int, m *group.Machine, ev group.Event, out group.Output)
	// Applied is called once records are durable, before any reply that
	// waited for them is released.
	Applied func(shard int, recs []group.Record)
	// Loaded is called when a shard has tried to build a machine from
	// the store, at start (reload false) or after a failed write (reload
	// true): with the machine, or nil if the attempt failed.
	Loaded func(shard int, m *group.Machine, reload bool)
	// Idle is called when a shard's loop is about to wait. settled
	// reports whether the records of every event stepped so far are
	// durable, so that the machine is what a restart would rebuild, up to
	// state that no record carries.
	Idle func(shard int, m *group.Machine, settled bool)
}

func (s *shard) busy(delta int) {
	if f := s.hooks.Busy; f != nil {
		f(delta)
	}
}

// step steps the machine with ev at the clock's time.
func (s *shard) step(ev group.Event) group.Output {
	if f := s.hooks.Stepping; f != nil {
		f(s.id, s.m, ev)
	}
	out := s.m.Step(s.clock.Now(), ev)
	if f := s.hooks.Stepped; f != nil {
		f(s.id, s.m, ev, out)
	}
	return out
}

// stepRequest is step with a request, through Machine.StepRequest: the
// output's Replies and Timers are the machine's until the next request's
// step, so collect must be done with them by then (it copies what it
// keeps). The hooks, if any, see the request as an Event.
func (s *shard) stepRequest(r group.Request) group.Output {
	if f := s.hooks.Stepping; f != nil {
		f(s.id, s.m, r)
	}
	out := s.m.StepRequest(s.clock.Now(), r)
	if f := s.hooks.Stepped; f != nil {
		f(s.id, s.m, r, out)
	}
	return out
}

// idle tells the hooks the loop is about to wait.
func (s *shard) idle() {
	if f := s.hooks.Idle; f != nil {
		f(s.id, s.m, s.inflight == nil)
	}
	s.busy(-1)
}
