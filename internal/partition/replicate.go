package partition

import (
	"errors"
	"fmt"

	"github.com/groupd/groupd/internal/batch"
)

// ErrUnexpectedAppendOffset is returned by AppendReplicated when the
// batches do not continue the log at its end (Kafka's
// UnexpectedAppendOffsetException).
var ErrUnexpectedAppendOffset = errors.New("batches do not continue the log")

// startEpochZero records leader epoch 0 at the log end, the epoch a log
// that no leader assigned one to stamps, before the first append writes a
// batch carrying it. Caller holds wmu.
func (l *Log) startEpochZero() error {
	err := l.editEpochs(func(c *epochCache) (bool, error) {
		if _, ok := c.latest(); ok {
			return false, nil
		}
		c.add(epochEntry{epoch: 0, start: l.leo.Load()})
		return true, nil
	})
	l.restamp()
	return err
}

// AppendReplicated appends record batches exactly as the leader stored
// them (concatenated, as a fetch returns them), for a follower: offsets,
// leader epochs and timestamps are kept, not assigned. Each batch must be
// well formed with a valid CRC and no larger than a segment
// (ErrRecordListTooLarge); the first must start at the log end offset
// (or, in an empty log, may hold it: the log restarts at its base) and
// each next one where the one before it ended (else
// ErrUnexpectedAppendOffset), except that on a compacted topic a batch
// may start past that, as the leader's cleaner leaves gaps (recorded in
// the checkpoint before the batches are written, as a clean records
// them). Either every batch is appended or, on a validation error, none.
//
// It updates the idempotent-producer state from the batch headers as a
// leader's append does, without checking sequences (the leader did), so
// that a follower that becomes leader detects duplicates and gaps. A
// batch whose leader epoch is newer than the cache's newest starts a new
// entry, written before the batch. Segments roll as for Append, and the
// sync policy applies as for Append. It publishes and returns the new log
// end offset; a replica's high watermark stays where it was (on a single
// node it follows the log end).
func (l *Log) AppendReplicated(batches []byte) (int64, error) {
	parts, err := batch.Split(batches)
	if err != nil {
		return l.leo.Load(), err
	}
	cfg := l.cfg.Load()
	hs := make([]batch.Header, len(parts))
	for i, b := range parts {
		h, err := batch.Check(b)
		if err == nil {
			err = batch.VerifyCRC(b)
		}
		if err == nil && h.Size() > cfg.SegmentBytes {
			err = errorf(ErrRecordListTooLarge, "the batch is %d bytes, larger than the topic's segment.bytes %d", h.Size(), cfg.SegmentBytes)
		}
		if err != nil {
			return l.leo.Load(), fmt.Errorf("batch %d at offset %d: %w", i, h.BaseOffset, err)
		}
		hs[i] = h
	}

	if leo := l.leo.Load(); leo == l.start.Load() && hs[0].BaseOffset < leo && hs[0].LastOffset() >= leo {
		// An empty log whose first batch starts below its start: a
		// follower that restarted its log at the leader's log start,
		// which DeleteRecords put inside a batch, fetched that batch.
		// Restart the log at the batch's base and take it whole, as
		// Kafka's Partition.appendRecordsToFollowerOrFutureReplica does
		// on an UnexpectedAppendOffsetException. (The next fetch answer
		// moves the log start back up to the leader's.)
		if err := l.TruncateFullyAndStartAt(hs[0].BaseOffset); err != nil {
			return l.leo.Load(), err
		}
	}

	l.wmu.Lock()
	defer l.wmu.Unlock()
	leo := l.leo.Load()
	if l.isClosed() {
		return leo, ErrClosed
	}
	if l.failed != nil {
		return leo, fmt.Errorf("%w: %v", ErrFailed, l.failed)
	}
	next, gapped := leo, false
	for i, h := range hs {
		if h.BaseOffset != next && !(cfg.Compact && h.BaseOffset > next) {
			return leo, errorf(ErrUnexpectedAppendOffset, "batch %d starts at offset %d, the log continues at %d", i, h.BaseOffset, next)
		}
		gapped = gapped || h.BaseOffset != next
		next = h.LastOffset() + 1
	}

	// What must be on disk before the batches: the epochs they start,
	// and the gaps they leave.
	err = l.editEpochs(func(c *epochCache) (bool, error) {
		changed := false
		for _, h := range hs {
			if last, ok := c.latest(); h.PartitionLeaderEpoch >= 0 && (!ok || h.PartitionLeaderEpoch > last.epoch) {
				c.add(epochEntry{epoch: h.PartitionLeaderEpoch, start: h.BaseOffset})
				changed = true
			}
		}
		return changed, nil
	})
	l.restamp()
	if err != nil {
		return leo, err
	}
	if gapped {
		l.cpMu.Lock()
		c := l.cp
		c.gapsBelow = max(c.gapsBelow, next)
		err = l.recordLocked(c)
		l.cpMu.Unlock()
		if err != nil {
			return leo, fmt.Errorf("recording the gaps of replicated batches: %w", err)
		}
	}

	// Batches go to the active segment while they fit, and roll it as
	// Append does. Each group's segment state is published as it is
	// written (readers stop at the log end, published last), and the
	// producer state follows it, as a roll snapshots it.
	now := l.nowMs()
	interval := int64(l.opts.IndexIntervalBytes)
	seg := l.active()
	pos := 0 // byte position in batches of hs[i]
	for i := 0; i < len(hs); {
		first := checked{h: hs[i], maxTS: hs[i].MaxTimestamp}
		if seg.stats.size > 0 && (seg.stats.size+hs[i].Size() > cfg.SegmentBytes || segmentAged(seg, cfg, []checked{first}, now)) {
			if seg, err = l.roll(); err != nil {
				return l.failAppend(i > 0, err)
			}
		}
		stats := seg.stats
		var newEntries []indexEntry
		j, end := i, pos
		for j < len(hs) && (j == i || stats.size+hs[j].Size() <= cfg.SegmentBytes) {
			if e, ok := stats.add(hs[j], stats.size, interval); ok {
				newEntries = append(newEntries, e)
			}
			end += int(hs[j].Size())
			j++
		}
		if _, err := seg.f.WriteAt(batches[pos:end], seg.stats.size); err != nil {
			if terr := seg.f.Truncate(seg.stats.size); terr != nil {
				l.failed = fmt.Errorf("write: %v; truncate: %v", err, terr)
			}
			return l.failAppend(i > 0, err)
		}
		if len(newEntries) > 0 {
			if _, err := seg.idx.WriteAt(encodeIndex(newEntries), int64(seg.idxWritten)*indexEntrySize); err != nil {
				l.log.Warn("index write failed", "segment", seg.base, "err", err)
			}
			seg.idxWritten += len(newEntries)
		}
		for _, h := range hs[i:j] {
			if h.ProducerID < 0 {
				continue
			}
			e := l.producers[h.ProducerID]
			if e == nil {
				e = &producerEntry{epoch: h.ProducerEpoch}
				l.producers[h.ProducerID] = e
			}
			e.add(h, h.BaseOffset)
		}
		l.mu.Lock()
		seg.sealed = nil
		seg.stats = stats
		seg.entries = append(seg.entries, newEntries...)
		l.mu.Unlock()
		i, pos = j, end
	}
	synced := l.opts.Sync == SyncAlways
	if !synced {
		l.dirty.Store(true)
	} else {
		if err := seg.f.Sync(); err != nil {
			l.failed = fmt.Errorf("fsync: %w", err)
			return leo, err
		}
	}

	l.mu.Lock()
	l.leo.Store(next)
	if !l.opts.Replicated {
		l.hw.Store(next)
	}
	if synced {
		l.advanceSynced(next)
	}
	l.wakeLocked()
	l.mu.Unlock()
	return next, nil
}

// failAppend ends an AppendReplicated that failed writing; if part of it
// is already in the segments (written), the log takes no more writes
// until it is reopened.
func (l *Log) failAppend(written bool, err error) (int64, error) {
	if written && l.failed == nil {
		l.failed = fmt.Errorf("replicated append failed part way: %w", err)
	}
	return l.leo.Load(), err
}
