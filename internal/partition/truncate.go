package partition

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"

	"github.com/groupd/groupd/internal/batch"
)

// Truncation, as a follower does it (Kafka's UnifiedLog.truncateTo):
// every record at or past an offset goes, and with it the producer state
// and the leader epochs of those records.
//
// Crash safety. Recovery (recover.go) requires every record below the
// recovery point to be there and intact, and a log that ends below its
// recovery point is damage; past the recovery point it CRC-checks the
// last segment and cuts a torn tail. A truncation cuts records that may
// lie below the recovery point, so the recovery point must come down to
// the new end before any record goes. TruncateTo therefore first writes
// the recovery checkpoint (atomically) with the truncation recorded in it
// (truncating, truncateTo: the new log end; truncateFull when nothing
// stays) and the recovery point and the high watermark at or below the
// new end, and only then touches a file. That write is the commit point:
//
//   - A stop before it leaves the old log and the old checkpoint: Open
//     recovers the old state.
//   - A stop after it leaves a checkpoint that says to finish the
//     truncation, with a recovery point that the old records left over
//     past the new end do not have to reach. Open first deletes the
//     segments starting past the new end (for a full truncation, every
//     segment but an empty one at the new start) and the producer
//     snapshots past it, before it reads a segment (prepareTruncation,
//     as finishDeletions does for the log start); whatever is left of the
//     records past the new end then lies in the last segment, past the
//     recovery point, where intact records are accepted. Open then runs
//     the truncation again on what it recovered (the cut of the segment
//     holding the new end, producer state, leader epochs) and clears the
//     mark: Open recovers the truncated state, never a half-way one (a
//     prefix of the old log that is neither).
//
// The steps after the commit point are each safe to repeat. A segment is
// cut by writing its kept part beside it (".cleaned", which Open removes
// if a stop leaves it), fsynced, and renaming it over the old one, so it
// is either whole or cut, and readers holding the old file (a segment
// view) read on from it, as from the files of the deleted segments: both
// are retired, kept open a while. The directory is fsynced before the
// segments are published, the leader-epoch checkpoint is cut after the
// records (an entry ahead of the records is harmless, and Open drops
// those past the end), and the mark is cleared last. A failure after the
// commit point leaves the log refusing writes (ErrFailed) until it is
// reopened, which finishes the truncation.

// errStopped is what a TruncateTo that a test stopped (Log.stopAt)
// returns.
var errStopped = errors.New("stopped by a test")

// stop reports whether a test stops the truncation at step.
func (l *Log) stop(step string) bool { return l.stopAt != nil && l.stopAt(step) }

// truncation is what truncating the log does to its segments.
type truncation struct {
	// to is the new log end offset. full means no record stays: every
	// segment goes and the log restarts empty at to, its new log start.
	to   int64
	full bool
	// keep is the index of the last segment kept (when not full). If cut,
	// its bytes from cutPos on go, and stats and entries describe the
	// rest.
	keep    int
	cut     bool
	cutPos  int64
	stats   segStats
	entries []indexEntry
}

// planTruncation works out what truncating at offset, below the log end,
// does. The segment holding offset is cut at the start of the batch
// holding it, so the new end is below offset if a batch straddles it (or
// the cleaner removed the records just below it). Caller holds wmu and
// maintMu, so the segments do not change.
func (l *Log) planTruncation(offset int64) (truncation, error) {
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	l.cpMu.Lock()
	gapsBelow := l.cp.gapsBelow
	l.cpMu.Unlock()
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base >= offset }) - 1
	if i < 0 {
		return truncation{to: offset, full: true}, nil
	}
	s := segs[i]
	t := truncation{keep: i, to: s.stats.next}
	if offset < s.stats.next {
		v := s.view()
		pos, _, found, err := findBatch(v, offset)
		if err != nil {
			return t, err
		}
		if !found {
			return t, fmt.Errorf("segment %d ends at %d, but no batch holds offset %d", s.base, s.stats.next, offset)
		}
		res, err := scanSegment(v.f, v.base, pos, math.MaxInt64, v.base < gapsBelow, int64(l.opts.IndexIntervalBytes), nil)
		if err != nil {
			return t, readErr(err)
		}
		if res.bad != "" {
			return t, fmt.Errorf("segment %d before offset %d: %s", s.base, offset, res.bad)
		}
		t.cut, t.cutPos, t.stats, t.entries, t.to = true, pos, res.stats, res.entries, res.stats.next
		// A segment left empty goes, as the ones after it: the one
		// before it ends the log (as a start that finishes this
		// truncation after a crash would have it).
		if pos == 0 && i > 0 {
			t = truncation{keep: i - 1, to: segs[i-1].stats.next}
		}
	}
	if t.to < l.start.Load() {
		// Nothing at or past the log start stays.
		return truncation{to: t.to, full: true}, nil
	}
	return t, nil
}

// TruncateTo drops every record at or past offset, as a follower does
// before it fetches from a new leader (KIP-101/279), and returns once the
// truncation is durable. The segments starting at or past offset are
// deleted and the one holding offset is cut at the start of the batch
// holding it: the log end offset afterwards is that batch's base, below
// offset if the batch straddles it. If nothing at or past the log start
// would stay, the log restarts empty at that offset, its new log start
// (Kafka's truncateFullyAndStartAt). Producer state is rebuilt as of the
// new end (from the newest snapshot at or below it and the batch headers
// after it); the high watermark, the recovery point and the synced offset
// come down to the new end if above it; the leader-epoch cache loses the
// epochs starting at or past the new end. An offset at or past the log
// end removes no record, only the epochs starting at or past it.
//
// Readers holding data being cut read on from the old files; appends,
// retention and the cleaner wait. A failure after the truncation was
// recorded leaves the log refusing writes (ErrFailed) until it is
// reopened, which finishes the truncation; see the crash-safety notes at
// the top of truncate.go.
func (l *Log) TruncateTo(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("truncate to offset %d: negative", offset)
	}
	return l.truncateLocking(offset, false)
}

// TruncateFullyAndStartAt deletes every record and restarts the log empty
// at offset, which becomes its log start and end (Kafka's
// UnifiedLog.truncateFullyAndStartAt): what a follower does when the
// leader's log start has moved past its log end (retention or
// DeleteRecords at the leader while it was away), so that it fetches from
// there. The offset may lie below, inside or past the log. The
// leader-epoch cache is emptied, the producer state reset, and the high
// watermark, the recovery point and the synced offset become offset. It
// returns once the change is durable.
//
// Crash safety is TruncateTo's (see the top of truncate.go): the new log
// start and end are first recorded in the checkpoint as a full
// truncation, the commit point; a stop before it leaves the old log, a
// stop after it a checkpoint from which Open finishes the job (every
// segment goes but an empty one at offset). A failure after the commit
// point leaves the log refusing writes (ErrFailed) until it is reopened.
func (l *Log) TruncateFullyAndStartAt(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("truncate fully and start at offset %d: negative", offset)
	}
	return l.truncateLocking(offset, true)
}

// truncateLocking is truncateWith under every lock of the log: appends,
// syncs, retention and the cleaner wait for it.
func (l *Log) truncateLocking(offset int64, full bool) error {
	l.maintMu.Lock()
	defer l.maintMu.Unlock()
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.isClosed() {
		return ErrClosed
	}
	if l.failed != nil {
		return fmt.Errorf("%w: %v", ErrFailed, l.failed)
	}
	err := l.truncateWith(offset, full)
	l.closeRetired(false)
	return err
}

// truncate is TruncateTo with maintMu, syncMu and wmu held (or from Open,
// finishing a truncation a stop interrupted).
func (l *Log) truncate(offset int64) error { return l.truncateWith(offset, false) }

// truncateWith is truncate, or with full TruncateFullyAndStartAt: every
// segment goes, whatever offset is, and the log restarts empty there.
func (l *Log) truncateWith(offset int64, full bool) (err error) {
	defer func() {
		l.cpMu.Lock()
		marked := l.cp.truncating
		l.cpMu.Unlock()
		if err != nil && (marked || l.leo.Load() < l.segs[len(l.segs)-1].stats.next) {
			// The truncation is recorded (or the log end published
			// below the records): only a reopen finishes it.
			l.failed = fmt.Errorf("truncate to offset %d: %w", offset, err)
		}
	}()
	cutEpochsAt := offset
	if full || offset < l.leo.Load() {
		t := truncation{to: offset, full: true}
		if !full {
			if t, err = l.planTruncation(offset); err != nil {
				return fmt.Errorf("truncate to offset %d: %w", offset, err)
			}
		}
		cutEpochsAt = t.to
		if l.stop("planned") {
			return errStopped
		}
		if err := l.recordTruncation(t); err != nil {
			return err
		}
		if err := l.applyTruncation(t); err != nil {
			return err
		}
		l.log.Info("truncated the log", "offset", offset, "log_end", t.to, "emptied", t.full)
	}
	if l.stop("records cut") {
		return errStopped
	}
	// (A full truncation empties the cache: every epoch starts below
	// the new start, and the one covering it is moved to it and then
	// dropped from the end.)
	err = l.editEpochs(func(c *epochCache) (bool, error) {
		changed := c.truncateFromStart(l.start.Load())
		if c.truncateFromEnd(cutEpochsAt) {
			changed = true
		}
		return changed, nil
	})
	l.restamp()
	if err != nil {
		return err
	}
	if l.stop("epochs cut") {
		return errStopped
	}
	l.cpMu.Lock()
	defer l.cpMu.Unlock()
	if !l.cp.truncating {
		return nil
	}
	c := l.cp
	c.truncating, c.truncateTo, c.truncateFull = false, 0, false
	return l.recordLocked(c)
}

// recordTruncation publishes the new end (and, for a full truncation, the
// new start), lowering the high watermark and the synced offset to it, and
// records the truncation in the checkpoint: the commit point. Readers
// stop at the new end from here on.
func (l *Log) recordTruncation(t truncation) error {
	l.mu.Lock()
	l.leo.Store(t.to)
	l.hw.Store(min(l.hw.Load(), t.to))
	if t.full {
		// An empty log starting at t.to: its high watermark is its end
		// (Kafka's truncateFullyAndStartAt), which may be above the old
		// one when the log restarts past its old end.
		l.start.Store(t.to)
		l.hw.Store(t.to)
	}
	l.wakeLocked()
	l.mu.Unlock()
	if l.synced.Load() > t.to || t.full {
		// syncMu is held: no fsync moves it meanwhile. Nothing of an
		// emptied log remains to be synced.
		l.synced.Store(t.to)
	}
	l.cpMu.Lock()
	defer l.cpMu.Unlock()
	c := l.cp
	c.truncating, c.truncateTo, c.truncateFull = true, t.to, t.full
	if t.full {
		c.logStart = t.to
	}
	c.cleanedTo, c.gapsBelow = min(c.cleanedTo, t.to), min(c.gapsBelow, t.to)
	c.gaps = slices.DeleteFunc(slices.Clone(c.gaps), func(g offsetRange) bool { return g.to > t.to })
	c.normalize()
	return l.recordLocked(c)
}

// applyTruncation changes the files and the published segments as t says,
// then the producer state.
func (l *Log) applyTruncation(t truncation) error {
	l.mu.RLock()
	old := slices.Clone(l.segs)
	l.mu.RUnlock()
	if err := l.dropSnapshots(t.to, t.full); err != nil {
		return err
	}
	if l.stop("snapshots dropped") {
		return errStopped
	}
	var (
		segs []*segment
		gone []*segment // leave the log; their files are deleted
		swap []*segment // leave the log; their names now hold the new files
	)
	if t.full {
		s, replaced, err := l.emptySegmentAt(t.to, old)
		if err != nil {
			return err
		}
		segs = []*segment{s}
		for _, o := range old {
			if o == replaced {
				swap = append(swap, o)
			} else {
				gone = append(gone, o)
			}
		}
	} else {
		k := old[t.keep]
		gone = old[t.keep+1:]
		segs = slices.Clone(old[:t.keep+1])
		if t.cut {
			s, err := l.cutSegment(k, t)
			if err != nil {
				return err
			}
			segs[t.keep] = s
			swap = append(swap, k)
		}
	}
	if l.stop("segment cut") {
		return errStopped
	}
	// Newest first, so that whatever a failure leaves is a prefix of the
	// log.
	for i := len(gone) - 1; i >= 0; i-- {
		for _, suf := range []string{logSuffix, indexSuffix} {
			if err := os.Remove(segmentName(l.dir, gone[i].base, suf)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		if l.stop(fmt.Sprintf("segment %d deleted", gone[i].base)) {
			return errStopped
		}
	}
	if err := syncDir(l.dir); err != nil {
		return err
	}
	l.mu.Lock()
	if last := segs[len(segs)-1]; last.sealed != nil {
		// The segment that ends the log is appended to again.
		last.sealed = nil
	}
	l.segs = segs
	l.mu.Unlock()
	for _, s := range append(gone, swap...) {
		l.retire(s)
	}
	l.maxMu.Lock()
	l.maxCache.batchOffset = -1
	l.maxMu.Unlock()
	if t.full {
		l.producers = make(map[int64]*producerEntry)
		l.snapshotAt = t.to
		return nil
	}
	return l.rebuildProducers(t.to)
}

// dropSnapshots deletes the producer snapshots past end (all of them if
// all), which describe records that are going.
func (l *Log) dropSnapshots(end int64, all bool) error {
	offs, err := snapshotOffsets(l.dir)
	if err != nil {
		return err
	}
	keep := offs[:0]
	for _, off := range offs {
		if off <= end && !all {
			keep = append(keep, off)
			continue
		}
		if err := os.Remove(snapshotName(l.dir, off)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	l.snapshots = keep
	return nil
}

// cutSegment writes the first t.cutPos bytes of s, and their index, beside
// it, fsynced, renames them over it and returns the segment they make.
// The old files stay open for the readers that hold them.
func (l *Log) cutSegment(s *segment, t truncation) (*segment, error) {
	path := segmentName(l.dir, s.base, logSuffix)
	f, err := os.OpenFile(path+cleanedSuffix, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*segment, error) {
		f.Close()
		return nil, err
	}
	// A fresh handle at position 0, so the copy can stay in the kernel
	// (copy_file_range).
	src, err := os.Open(path)
	if err != nil {
		return fail(err)
	}
	n, err := f.ReadFrom(io.LimitReader(src, t.cutPos))
	src.Close()
	if err == nil && n != t.cutPos {
		err = fmt.Errorf("copied %d of %d bytes of segment %d", n, t.cutPos, s.base)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return fail(err)
	}
	idxPath := segmentName(l.dir, s.base, indexSuffix)
	idx, err := writeBeside(idxPath+cleanedSuffix, encodeIndex(t.entries))
	if err != nil {
		return fail(err)
	}
	if l.stop("segment copied") {
		idx.Close()
		return fail(errStopped)
	}
	if err := os.Rename(path+cleanedSuffix, path); err != nil {
		idx.Close()
		return fail(err)
	}
	if err := os.Rename(idxPath+cleanedSuffix, idxPath); err != nil {
		l.log.Warn("replacing a truncated segment's index; the next start rebuilds it", "segment", s.base, "err", err)
	}
	return &segment{base: s.base, f: f, idx: idx, stats: t.stats, entries: t.entries, idxWritten: len(t.entries), created: s.created}, nil
}

// emptySegmentAt makes an empty segment at base: over the segment of old
// starting there (returned as replaced), or as a new file.
func (l *Log) emptySegmentAt(base int64, old []*segment) (s, replaced *segment, err error) {
	for _, o := range old {
		if o.base != base {
			continue
		}
		path, idxPath := segmentName(l.dir, base, logSuffix), segmentName(l.dir, base, indexSuffix)
		f, err := writeBeside(path+cleanedSuffix, nil)
		if err != nil {
			return nil, nil, err
		}
		idx, err := writeBeside(idxPath+cleanedSuffix, nil)
		if err == nil {
			err = os.Rename(path+cleanedSuffix, path)
		}
		if err == nil {
			err = os.Rename(idxPath+cleanedSuffix, idxPath)
		}
		if err != nil {
			f.Close()
			if idx != nil {
				idx.Close()
			}
			return nil, nil, err
		}
		return &segment{base: base, f: f, idx: idx, stats: newSegStats(base), created: l.nowMs()}, o, nil
	}
	s, err = l.createSegment(base)
	return s, nil, err
}

// rebuildProducers makes the producer state that of the log ending at
// end, the way Open does: from the newest snapshot at or below it, then
// the batch headers from the snapshot's offset on. Caller holds wmu.
func (l *Log) rebuildProducers(end int64) error {
	l.producers, l.snapshotAt = make(map[int64]*producerEntry), 0
	if snap, ok := l.loadSnapshot(end); ok {
		l.producers, l.snapshotAt = snap.producers, snap.offset
	}
	views, err := l.snapshot()
	if err != nil {
		return err
	}
	for _, v := range views {
		if v.stats.next <= l.snapshotAt {
			continue
		}
		sc := newScanner(v.f, v.stats.size)
		for pos := lookup(v.entries, l.snapshotAt); pos+batch.HeaderLen <= v.stats.size; {
			hb, err := sc.at(pos, batch.HeaderLen)
			if err != nil {
				return readErr(err)
			}
			h, err := batch.ParseHeader(hb)
			if err != nil {
				return fmt.Errorf("segment %d position %d: %w", v.base, pos, err)
			}
			l.replayProducer(h, pos)
			pos += h.Size()
		}
	}
	return nil
}

// finishTruncation runs the truncation a stop interrupted, on Open, once
// prepareTruncation deleted what lay past it and the rest was recovered.
func (l *Log) finishTruncation() error {
	to := l.cp.truncateTo
	l.log.Info("finishing a truncation that a stop interrupted", "offset", to, "emptied", l.cp.truncateFull)
	if err := l.truncate(to); err != nil {
		return fmt.Errorf("finishing the truncation to offset %d: %w", to, err)
	}
	return nil
}

// prepareTruncation does, on Open before any segment is read, the file
// work of a truncation to cp.truncateTo that a stop interrupted: it
// deletes the segments starting past it (for a full truncation, every
// segment but one at the new start, which it empties or creates) and the
// producer snapshots past it (all, for a full one), as the checkpoint
// says. It returns the remaining bases.
func (l *Log) prepareTruncation(cp checkpoint, bases []int64) ([]int64, error) {
	to := cp.truncateTo
	if err := l.dropSnapshots(to, cp.truncateFull); err != nil {
		return nil, err
	}
	var keep []int64
	for i := len(bases) - 1; i >= 0; i-- {
		base := bases[i]
		if cp.truncateFull && base == to || !cp.truncateFull && base <= to {
			keep = append(keep, base)
			continue
		}
		l.log.Info("deleting a segment past an interrupted truncation", "segment", base, "offset", to)
		for _, suf := range []string{logSuffix, indexSuffix} {
			if err := os.Remove(segmentName(l.dir, base, suf)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
	}
	slices.Reverse(keep)
	if cp.truncateFull {
		f, err := os.OpenFile(segmentName(l.dir, to, logSuffix), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		err = f.Truncate(0)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Remove(segmentName(l.dir, to, indexSuffix))
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		keep = []int64{to}
	}
	return keep, syncDir(l.dir)
}
