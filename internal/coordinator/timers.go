package coordinator

import (
	"container/heap"
	"time"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/group/core"
)

// timerEntry is one keyed deadline in a timerQueue.
type timerEntry struct {
	key group.TimerKey
	// at is the entry's place in the heap and due the machine's deadline.
	// at is never after due: a deadline that moves later (every
	// heartbeat) only updates due, and the entry is moved down the heap
	// when it reaches the top, so the common update costs no heap work.
	at  time.Time
	due time.Time
	i   int // index in the heap
}

// timerQueue mirrors a machine's deadlines as a min-heap ordered by (at,
// key) (heap.Interface), with an index by key. Ties are broken by key so
// that keys due together fire in the same order on every run.
type timerQueue struct {
	byKey map[group.TimerKey]*timerEntry
	heap  []*timerEntry
}

func newTimerQueue() *timerQueue {
	return &timerQueue{byKey: map[group.TimerKey]*timerEntry{}}
}

// set schedules key at due, replacing its deadline.
func (q *timerQueue) set(key group.TimerKey, due time.Time) {
	e := q.byKey[key]
	switch {
	case e == nil:
		e = &timerEntry{key: key, at: due, due: due}
		q.byKey[key] = e
		heap.Push(q, e)
	case due.Before(e.at):
		e.at, e.due = due, due
		heap.Fix(q, e.i)
	default:
		e.due = due
	}
}

// remove cancels key's deadline, if any.
func (q *timerQueue) remove(key group.TimerKey) {
	e := q.byKey[key]
	if e == nil {
		return
	}
	delete(q.byKey, key)
	heap.Remove(q, e.i)
}

// next returns when the queue must next be looked at: no later than the
// earliest deadline.
func (q *timerQueue) next() (time.Time, bool) {
	if len(q.heap) == 0 {
		return time.Time{}, false
	}
	return q.heap[0].at, true
}

// popDue removes and returns the earliest key due at now, in deadline
// order.
func (q *timerQueue) popDue(now time.Time) (group.TimerKey, bool) {
	for len(q.heap) > 0 {
		e := q.heap[0]
		if e.at.After(now) {
			break
		}
		if !e.at.Equal(e.due) {
			// Moved later since it was placed: put it where its
			// deadline belongs, which may still be due.
			e.at = e.due
			heap.Fix(q, 0)
			continue
		}
		q.remove(e.key)
		return e.key, true
	}
	return group.TimerKey{}, false
}

func (q *timerQueue) clear() {
	clear(q.byKey)
	clear(q.heap)
	q.heap = q.heap[:0]
}

func (q *timerQueue) Len() int { return len(q.heap) }

func (q *timerQueue) Less(i, j int) bool {
	a, b := q.heap[i], q.heap[j]
	if !a.at.Equal(b.at) {
		return a.at.Before(b.at)
	}
	return compareTimerKeys(a.key, b.key) < 0
}

func (q *timerQueue) Swap(i, j int) {
	q.heap[i], q.heap[j] = q.heap[j], q.heap[i]
	q.heap[i].i = i
	q.heap[j].i = j
}

func (q *timerQueue) Push(x any) {
	e := x.(*timerEntry)
	e.i = len(q.heap)
	q.heap = append(q.heap, e)
}

func (q *timerQueue) Pop() any {
	last := len(q.heap) - 1
	e := q.heap[last]
	q.heap[last] = nil
	q.heap = q.heap[:last]
	return e
}

func compareTimerKeys(a, b group.TimerKey) int { return core.CompareTimerKeys(a, b) }
