package lab

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// recorder collects a run's Recording as the clients report it, from any
// goroutine, and keeps the live ownership that tells the run when the group
// has settled.
type recorder struct {
	start time.Time

	mu       sync.Mutex
	rec      Recording
	owners   map[TP]map[owner]bool
	dead     map[owner]bool
	acked    map[tpOffset]bool
	polled   map[tpOffset]bool
	pending  int // acked and not yet polled
	consumed int
	// lastChange is when ownership last changed.
	lastChange time.Duration
}

func newRecorder() *recorder {
	return &recorder{
		start:  time.Now(),
		owners: map[TP]map[owner]bool{},
		dead:   map[owner]bool{},
		acked:  map[tpOffset]bool{},
		polled: map[tpOffset]bool{},
	}
}

func (r *recorder) now() time.Duration { return time.Since(r.start) }

// at converts a wall-clock time to the recording's clock.
func (r *recorder) at(t time.Time) time.Duration { return t.Sub(r.start) }

func (r *recorder) event(member string, inc int, kind EventKind, gen int32, parts []TP) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := owner{member, inc}
	if r.dead[o] {
		return
	}
	now := r.now()
	r.rec.Events = append(r.rec.Events, OwnerEvent{At: now, Member: member, Incarnation: inc, Kind: kind, Generation: gen, Partitions: parts})
	switch kind {
	case Assigned:
		for _, tp := range parts {
			if r.owners[tp] == nil {
				r.owners[tp] = map[owner]bool{}
			}
			r.owners[tp][o] = true
		}
	case Revoked, Lost:
		for _, tp := range parts {
			delete(r.owners[tp], o)
		}
	case Crashed, Closed:
		r.dead[o] = true
		for _, hs := range r.owners {
			delete(hs, o)
		}
	}
	r.lastChange = now
}

func (r *recorder) consumedRecord(c Consumption) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rec.Consumed = append(r.rec.Consumed, c)
	r.consumed++
	k := tpOffset{c.TP, c.Offset}
	if !r.polled[k] {
		r.polled[k] = true
		if r.acked[k] {
			r.pending--
		}
	}
}

func (r *recorder) producedRecord(p Production) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rec.Produced = append(r.rec.Produced, p)
	k := tpOffset{p.TP, p.Offset}
	r.acked[k] = true
	if !r.polled[k] {
		r.pending++
	}
}

func (r *recorder) action(what, member string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rec.Actions = append(r.rec.Actions, Action{At: r.now(), What: what, Member: member})
}

// counts are the progress display's numbers.
func (r *recorder) counts() (produced, consumed, pending int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.rec.Produced), r.consumed, r.pending
}

// settled says whether every partition in want is owned by exactly one of
// the live incarnations, as many of them own something as can, and
// ownership has not changed for quiet. It returns why not, and when
// ownership last changed.
func (r *recorder) settled(want []TP, live []owner, quiet time.Duration) (bool, string, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := map[owner]int{}
	for _, tp := range want {
		hs := r.owners[tp]
		if len(hs) == 0 {
			return false, fmt.Sprintf("%s has no owner", tp), r.lastChange
		}
		if len(hs) > 1 {
			return false, fmt.Sprintf("%s has %d owners", tp, len(hs)), r.lastChange
		}
		for o := range hs {
			if !slices.Contains(live, o) {
				return false, fmt.Sprintf("%s is owned by %s#%d, which is not live", tp, o.member, o.incarnation), r.lastChange
			}
			held[o]++
		}
	}
	if n := min(len(live), len(want)); len(held) < n {
		return false, fmt.Sprintf("%d of %d live members own partitions, want %d", len(held), len(live), n), r.lastChange
	}
	if r.now()-r.lastChange < quiet {
		return false, "ownership changed moments ago", r.lastChange
	}
	return true, "", r.lastChange
}

// drained says whether every acknowledged record has been polled.
func (r *recorder) drained() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending == 0
}

// recording returns a copy of what was recorded so far.
func (r *recorder) recording() *Recording {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.rec
	rec.Events = slices.Clone(r.rec.Events)
	rec.Consumed = slices.Clone(r.rec.Consumed)
	rec.Produced = slices.Clone(r.rec.Produced)
	rec.Actions = slices.Clone(r.rec.Actions)
	return &rec
}
