package partition

import (
	"os"
	"sync"
)

// readHints remembers where the last few reads of a log ended, so that a
// consumer reading on from where its last fetch stopped (nearly every
// fetch) finds its first batch without scanning from an index entry.
// Several entries serve several consumers of one partition (consumer
// groups, replicas of a pipeline) without evicting each other at every
// fetch.
type readHints struct {
	mu   sync.Mutex
	hint [4]readHint
	next int // the slot the next new hint replaces
}

// readHint says that in the segment file f, the batch at byte pos is the
// first whose last offset is at or past offset: the batch before it ended
// just below offset. A segment the cleaner rewrites or retention deletes
// gets a new file, so a hint is only trusted for the very file it names;
// holding f also keeps the pointer from being reused for another file.
type readHint struct {
	f      *os.File
	offset int64
	pos    int64
}

// find returns the position of the first batch at or past offset in the
// segment file f, if a read ended there.
func (r *readHints) find(f *os.File, offset int64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.hint {
		if h.f == f && h.offset == offset {
			return h.pos, true
		}
	}
	return 0, false
}

// record notes that a read in f ended at pos, before the batch holding
// offset. It replaces the hint the same reader left (the one that ended
// where this read began), or else the oldest.
func (r *readHints) record(f *os.File, from, offset, pos int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, h := range r.hint {
		if h.f == f && h.offset == from {
			r.hint[i] = readHint{f, offset, pos}
			return
		}
	}
	r.hint[r.next] = readHint{f, offset, pos}
	r.next = (r.next + 1) % len(r.hint)
}

// scanBufs holds scanner windows for reads, which would otherwise
// allocate (and clear) one per fetched partition.
var scanBufs = sync.Pool{New: func() any { return new([scanWindow]byte) }}
