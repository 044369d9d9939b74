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

// pop removes and returns the least entry; ok is false when empty.
func (h *lazyHeap[E]) pop() (e E, ok bool) {
	if len(h.es) == 0 {
		return e, false
	}
	e = h.es[0]
	last := len(h.es) - 1
	h.es[0] = h.es[last]
	h.es = h.es[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= last {
			break
		}
		if c+1 < last && h.less(h.es[c+1], h.es[c]) {
			c++
		}
		if !h.less(h.es[c], h.es[i]) {
			break
		}
		h.es[i], h.es[c] = h.es[c], h.es[i]
		i = c
	}
	return e, true
}
