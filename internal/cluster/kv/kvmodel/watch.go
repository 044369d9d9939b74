package kvmodel

import (
	"context"
	"fmt"
	"strings"

	"github.com/groupd/groupd/internal/cluster/kv"
)

// watcher is one open watch. Its events wait in queue until there is room
// in ch; the events of a revision are queued when the revision commits, so
// what a watch delivers, and in which order, depends only on the calls
// made to the model.
//
// All fields are guarded by the model's mutex. ch is closed exactly once,
// by whoever holds the mutex and sees closed still false while no pump is
// sending on it.
type watcher struct {
	id      uint64
	client  *Client
	prefix  string
	ctx     context.Context
	stopCtx func() bool // releases the context.AfterFunc

	ch        chan kv.WatchEvent
	queue     []kv.WatchEvent
	pumping   bool // a goroutine is carrying queue into ch
	ending    bool // the last event, with Err, is queued
	cancelled bool // ctx ended
	closed    bool // ch is closed
}

// Watch implements kv.KV. A watch does not fail because of the client's
// fault: like etcd's client, it waits for the connection to come back, so
// its events are held while the client is cut off.
func (c *Client) Watch(ctx context.Context, prefix string, fromRevision int64) <-chan kv.WatchEvent {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastWatch++
	w := &watcher{
		id:     m.lastWatch,
		client: c,
		prefix: prefix,
		ctx:    ctx,
		ch:     make(chan kv.WatchEvent, m.opts.WatchBuffer),
	}
	if ctx.Err() != nil {
		w.closed = true
		close(w.ch)
		return w.ch
	}
	if fromRevision <= 0 {
		fromRevision = m.rev + 1
	}
	if fromRevision < m.compacted {
		w.queue = []kv.WatchEvent{{Err: fmt.Errorf("%w: watch from revision %d, compacted at %d", kv.ErrCompacted, fromRevision, m.compacted)}}
		w.ending = true
	} else {
		for _, r := range m.log {
			if r.rev < fromRevision {
				continue
			}
			if ev, ok := w.filter(r); ok {
				w.queue = append(w.queue, ev)
			}
		}
	}
	m.watchers = append(m.watchers, w)
	w.stopCtx = context.AfterFunc(ctx, func() { m.cancelWatch(w) })
	m.flushLocked(w)
	return w.ch
}

// filter returns the part of revision r under the watcher's prefix.
func (w *watcher) filter(r revision) (kv.WatchEvent, bool) {
	var changes []kv.Change
	for _, c := range r.changes {
		if strings.HasPrefix(c.Value.Key, w.prefix) {
			c.Value = copyValue(c.Value)
			changes = append(changes, c)
		}
	}
	if len(changes) == 0 {
		return kv.WatchEvent{}, false
	}
	return kv.WatchEvent{Revision: r.rev, Changes: changes}, true
}

// nextQueuedRevision returns the revision of the first queued event that
// is not already being handed over by the pump.
func (w *watcher) nextQueuedRevision() (int64, bool) {
	q := w.queue
	if w.pumping && len(q) > 0 {
		q = q[1:]
	}
	if w.ending || len(q) == 0 {
		return 0, false
	}
	return q[0].Revision, true
}

func (w *watcher) held() bool {
	c := w.client
	return c.paused || c.fault == FailCalls || c.fault == HangCalls
}

func (m *Model) queueLocked(w *watcher, ev kv.WatchEvent) {
	if w.ending || w.closed {
		return
	}
	w.queue = append(w.queue, ev)
	m.flushLocked(w)
}

// breakLocked drops what the watcher has not handed over yet and ends it
// with err.
func (m *Model) breakLocked(w *watcher, err error) {
	if w.ending || w.closed {
		return
	}
	if w.pumping && len(w.queue) > 0 {
		w.queue = w.queue[:1] // the pump may be sending it right now
	} else {
		w.queue = nil
	}
	w.queue = append(w.queue, kv.WatchEvent{Err: err})
	w.ending = true
	m.flushLocked(w)
}

// flushLocked moves queued events into the channel as far as its buffer
// allows, without blocking; a pump goroutine carries the rest.
func (m *Model) flushLocked(w *watcher) {
	if w.pumping || w.closed || w.held() {
		return
	}
	for len(w.queue) > 0 {
		select {
		case w.ch <- w.queue[0]:
			m.handedLocked(w)
		default:
			w.pumping = true
			go m.pump(w)
			return
		}
	}
}

func (m *Model) flushClientLocked(c *Client) {
	for _, w := range m.watchers {
		if w.client == c {
			m.flushLocked(w)
		}
	}
}

// handedLocked takes the head of the queue off after it went into ch, and
// closes the watch if it was the last event.
func (m *Model) handedLocked(w *watcher) {
	ev := w.queue[0]
	w.queue[0] = kv.WatchEvent{}
	w.queue = w.queue[1:]
	if ev.Err != nil {
		m.closeLocked(w)
	}
}

func (m *Model) closeLocked(w *watcher) {
	if w.closed {
		return
	}
	w.closed = true
	close(w.ch)
	w.queue = nil
	if w.stopCtx != nil {
		w.stopCtx()
	}
	for i, o := range m.watchers {
		if o == w {
			m.watchers = append(m.watchers[:i], m.watchers[i+1:]...)
			break
		}
	}
}

func (m *Model) cancelWatch(w *watcher) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w.cancelled = true
	if !w.pumping {
		m.closeLocked(w)
	}
}

// pump carries queued events into a full channel, blocking on the reader.
// It only ferries what the model already decided; it stops when the queue
// is empty, delivery is held, or the watch ends.
func (m *Model) pump(w *watcher) {
	for {
		m.mu.Lock()
		if w.cancelled {
			w.pumping = false
			m.closeLocked(w)
			m.mu.Unlock()
			return
		}
		if len(w.queue) == 0 || w.held() || w.closed {
			w.pumping = false
			m.mu.Unlock()
			return
		}
		ev := w.queue[0]
		m.mu.Unlock()
		select {
		case w.ch <- ev:
			m.mu.Lock()
			m.handedLocked(w)
			if w.closed {
				w.pumping = false
				m.mu.Unlock()
				return
			}
			m.mu.Unlock()
		case <-w.ctx.Done():
			m.mu.Lock()
			w.cancelled = true
			m.mu.Unlock()
		}
	}
}
