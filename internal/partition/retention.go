package partition

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// retireDelay is how long the files of a deleted or rewritten segment stay
// open after they left the log, so that a read which took its segment list
// just before still reads them (their names are already gone). Kafka waits
// file.delete.delay.ms (a minute) for the same reason.
const retireDelay = time.Minute

// retiredFiles are the files of a segment that left the log.
type retiredFiles struct {
	files []*os.File
	at    time.Time
}

// retire keeps s's files open for retireDelay more.
func (l *Log) retire(s *segment) {
	r := retiredFiles{files: []*os.File{s.f}, at: time.Now()}
	if s.idx != nil {
		r.files = append(r.files, s.idx)
	}
	l.retiredMu.Lock()
	l.retired = append(l.retired, r)
	l.retiredMu.Unlock()
}

// closeRetired closes the retired files older than retireDelay, or all of
// them.
func (l *Log) closeRetired(all bool) {
	l.retiredMu.Lock()
	defer l.retiredMu.Unlock()
	keep := l.retired[:0]
	for _, r := range l.retired {
		if !all && time.Since(r.at) < retireDelay {
			keep = append(keep, r)
			continue
		}
		for _, f := range r.files {
			f.Close()
		}
	}
	clear(l.retired[len(keep):])
	l.retired = keep
}

// DeleteRecords moves the log start offset up to offset (Kafka's
// DeleteRecords; -1 is the high watermark), durably, and deletes the
// segments wholly below it. Offsets below the log start are then out of
// range. It returns the new log start; an offset above the high watermark
// is ErrOffsetOutOfRange.
func (l *Log) DeleteRecords(offset int64) (int64, error) {
	l.maintMu.Lock()
	defer l.maintMu.Unlock()
	if l.isClosed() {
		return 0, ErrClosed
	}
	hw := l.hw.Load()
	if offset == -1 {
		offset = hw
	}
	if offset < 0 || offset > hw {
		return 0, errorf(ErrOffsetOutOfRange, "offset %d not in [0, %d]", offset, hw)
	}
	if offset <= l.start.Load() {
		return l.start.Load(), nil
	}
	if err := l.setLogStart(offset); err != nil {
		return 0, err
	}
	views, err := l.snapshot()
	if err != nil {
		return offset, nil
	}
	n := 0
	for n+1 < len(views) && views[n+1].base <= offset {
		n++
	}
	l.dropSegments(n, "log start")
	return offset, nil
}

// setLogStart records a new log start offset in the checkpoint and only
// then publishes it: after a crash the start holds and the deletion of the
// segments below it is finished. The leader-epoch cache then drops the
// epochs wholly below it (Kafka's truncateFromStart; after a crash in
// between, Open does). Caller holds maintMu.
func (l *Log) setLogStart(offset int64) error {
	l.cpMu.Lock()
	c := l.cp
	c.logStart = offset
	c.normalize()
	if err := l.recordLocked(c); err != nil {
		l.cpMu.Unlock()
		return fmt.Errorf("recording log start offset %d: %w", offset, err)
	}
	l.start.Store(offset)
	l.cpMu.Unlock()
	if err := l.editEpochs(func(c *epochCache) (bool, error) { return c.truncateFromStart(offset), nil }); err != nil {
		l.log.Warn("cutting the leader-epoch cache at the log start; the next start does", "offset", offset, "err", err)
	}
	return nil
}

// dropSegments removes the first n segments (never the active one) from
// the log and deletes their files; the log start is already past them.
// Caller holds maintMu.
func (l *Log) dropSegments(n int, why string) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	n = min(n, len(l.segs)-1)
	gone := append([]*segment(nil), l.segs[:n]...)
	l.segs = append(l.segs[:0:0], l.segs[n:]...)
	l.mu.Unlock()
	l.maxMu.Lock()
	l.maxCache.batchOffset = -1
	l.maxMu.Unlock()
	for _, s := range gone {
		l.retire(s)
		for _, suf := range []string{logSuffix, indexSuffix} {
			if err := os.Remove(segmentName(l.dir, s.base, suf)); err != nil && !errors.Is(err, os.ErrNotExist) {
				l.log.Warn("deleting a segment file; the next start deletes it", "segment", s.base, "err", err)
			}
		}
		l.log.Info("deleted segment", "segment", s.base, "end_offset", s.stats.next, "bytes", s.stats.size, "reason", why)
	}
	l.closeRetired(false)
}

// RetentionResult is what a retention pass did.
type RetentionResult struct {
	Segments int   // segments deleted
	Bytes    int64 // their size
	// LogStart is the log start offset after the pass.
	LogStart int64
}

// EnforceRetention deletes the oldest segments whose newest record is
// older than retention.ms, then the oldest segments while the log is
// larger than retention.bytes by at least a segment, as Kafka's retention
// does, when the cleanup policy includes delete. If every segment is due,
// the active segment is rolled first so that the log keeps its end. The
// log start moves to the first remaining segment, durably, before any file
// is deleted.
func (l *Log) EnforceRetention() (RetentionResult, error) {
	l.maintMu.Lock()
	defer l.maintMu.Unlock()
	cfg := l.cfg.Load()
	res := RetentionResult{LogStart: l.start.Load()}
	if !cfg.Delete || (cfg.RetentionMs < 0 && cfg.RetentionBytes < 0) || l.isClosed() {
		return res, nil
	}
	now := l.nowMs()
	views, err := l.snapshot()
	if err != nil {
		return res, err
	}
	n := 0
	if cfg.RetentionMs >= 0 {
		for n < len(views) && views[n].stats.size > 0 && now-segmentTime(views[n]) > cfg.RetentionMs {
			n++
		}
	}
	if cfg.RetentionBytes >= 0 {
		var total int64
		for _, v := range views {
			total += v.stats.size
		}
		diff := total - cfg.RetentionBytes
		k := 0
		for k < len(views) && views[k].stats.size > 0 && diff-views[k].stats.size >= 0 {
			diff -= views[k].stats.size
			k++
		}
		n = max(n, k)
	}
	if l.opts.Replicated {
		// A replica deletes only what is committed: segments wholly
		// below the high watermark (Kafka's deletableSegments).
		hw := l.hw.Load()
		for n > 0 && views[n-1].stats.next > hw {
			n--
		}
	}
	if n == 0 {
		return res, nil
	}
	if n == len(views) {
		last := views[n-1]
		l.wmu.Lock()
		if act := l.active(); act.base != last.base || act.stats.next != last.stats.next {
			// Appended to since it was judged: it holds new records.
			n--
		} else if _, err := l.roll(); err != nil {
			l.wmu.Unlock()
			return res, err
		}
		l.wmu.Unlock()
		if views, err = l.snapshot(); err != nil {
			return res, err
		}
		if n == 0 {
			return res, nil
		}
	}
	for _, v := range views[:n] {
		res.Segments++
		res.Bytes += v.stats.size
	}
	if start := views[n].base; start > l.start.Load() {
		if err := l.setLogStart(start); err != nil {
			return RetentionResult{LogStart: l.start.Load()}, err
		}
	}
	l.dropSegments(n, "retention")
	res.LogStart = l.start.Load()
	return res, nil
}

// segmentTime is the time retention judges a segment by: its newest
// batch's timestamp, or the file's modification time when no batch has
// one.
func segmentTime(v segView) int64 {
	if v.stats.maxTSOffset >= 0 && v.stats.maxTS >= 0 {
		return v.stats.maxTS
	}
	if fi, err := v.f.Stat(); err == nil {
		return fi.ModTime().UnixMilli()
	}
	return 0
}

// Size is the bytes of every segment of the log.
func (l *Log) Size() int64 {
	views, err := l.snapshot()
	if err != nil {
		return 0
	}
	var n int64
	for _, v := range views {
		n += v.stats.size
	}
	return n
}

// Segments is the number of segment files of the log.
func (l *Log) Segments() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.segs)
}
