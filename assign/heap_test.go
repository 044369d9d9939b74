package assign

import (
	"testing"

	"pgregory.net/rapid"
)

// TestPropHeapFillMatchesPushes: the solver builds its load heaps in one
// go; the pops, interleaved with later pushes, must come out exactly as
// after pushing the same entries one by one.
func TestPropHeapFillMatchesPushes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		load := rapid.SliceOfN(rapid.Int32Range(0, 5), 0, 40).Draw(t, "load")
		max := rapid.Bool().Draw(t, "max")
		pushed, filled := newLoadHeap(load, max), newLoadHeap(load, max)
		for m := range load {
			pushed.push(int32(m))
		}
		filled.pushAll(len(load))
		for step := 0; ; step++ {
			a, b := pushed.pop(), filled.pop()
			if a != b {
				t.Fatalf("pop %d: pushed heap gave %d, filled heap %d", step, a, b)
			}
			if a < 0 {
				return
			}
			// Change the popped member's load and push it back, as
			// the solver does; stale entries must be skipped alike.
			if step < 3*len(load) && rapid.Bool().Draw(t, "again") {
				load[a] += rapid.Int32Range(-1, 1).Draw(t, "delta")
				pushed.push(a)
				filled.push(a)
			}
		}
	})
}
