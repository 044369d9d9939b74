package assign

// lazyHeap is a binary heap of entries ordered by less (the least on top).
// Entries are stored by value: container/heap would box each pushed entry
// into an interface, an allocation per push on the solver's hot path.
type lazyHeap[E any] struct {
	es   []E
	less func(a, b E) bool
}

func (h *lazyHeap[E]) len() int { return len(h.es) }

func (h *lazyHeap[E]) push(e E) {
	h.es = append(h.es, e)
	for i := len(h.es) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(h.es[i], h.es[parent]) {
			break
		}
		h.es[i], h.es[parent] = h.es[parent], h.es[i]
		i = parent
	}
}

// fill replaces the contents with es, ordered bottom-up in linear time.
// Pops come out in the same order as after pushing es one by one, since
// less is a strict order on distinct entries and equal entries are
// interchangeable.
func (h *lazyHeap[E]) fill(es []E) {
	h.es = es
	for i := len(es)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// pop removes and returns the least entry; ok is false when empty.
func (h *lazyHeap[E]) pop() (e E, ok bool) {
	if len(h.es) == 0 {
		return e, false
	}
	e = h.es[0]
	last := len(h.es) - 1
	h.es[0] = h.es[last]
	h.es = h.es[:last]
	h.down(0)
	return e, true
}

// down moves the entry at i down to its place.
func (h *lazyHeap[E]) down(i int) {
	n := len(h.es)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && h.less(h.es[c+1], h.es[c]) {
			c++
		}
		if !h.less(h.es[c], h.es[i]) {
			return
		}
		h.es[i], h.es[c] = h.es[c], h.es[i]
		i = c
	}
}
