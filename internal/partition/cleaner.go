package partition

import (
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/groupd/groupd/internal/batch"
)

// Compaction, as Kafka's log cleaner does it: for a log whose cleanup
// policy includes compact, Clean keeps the last record of every key and
// drops the records an update of the same key superseded, preserving the
// offsets of what it keeps. It rewrites only sealed segments, and only
// from where the last clean stopped (the cleaned-to offset, in the
// recovery checkpoint) up to the first segment holding records younger
// than min.compaction.lag.ms. A tombstone (a record with a key and no
// value) is kept through its first clean, which stamps its batch with a
// delete horizon delete.retention.ms away (KIP-534), and removed by the
// first clean after that. Each rewritten segment is written beside the old
// one, fsynced and renamed over it, so a crash mid-clean leaves every
// segment either as it was or cleaned; the leftovers of an unfinished
// rewrite (".cleaned" files) are removed on the next Open.

// cleanedSuffix marks a segment (or index) being rewritten by the cleaner.
const cleanedSuffix = ".cleaned"

// keyDigest identifies a key in the cleaner's map: an MD5 of its bytes, as
// Kafka's SkimpyOffsetMap uses. 128 bits make a collision, which would
// drop the older key's latest record, as unlikely as a disk error.
type keyDigest [md5.Size]byte

// KeyMap is the cleaner's map from key digest to the offset of the key's
// latest record, in memory fixed when it is made (Kafka's
// log.cleaner.dedupe.buffer.size): an open-addressing table of 24-byte
// slots, filled to at most nine tenths. A clean whose dirty part holds
// more keys than fit cleans up to where the map filled and leaves the rest
// to the next clean. One KeyMap serves every log of a cleaner, one clean
// at a time.
type KeyMap struct {
	memory int
	slots  []byte
	cap    int
	used   int
	limit  int
}

const keySlotLen = md5.Size + 8

// NewKeyMap returns a map using about memory bytes, allocated on first
// use.
func NewKeyMap(memory int) *KeyMap {
	n := max(memory/keySlotLen, 16)
	return &KeyMap{memory: memory, cap: n, limit: n * 9 / 10}
}

func (m *KeyMap) reset() {
	if m.slots == nil {
		m.slots = make([]byte, m.cap*keySlotLen)
	} else {
		clear(m.slots)
	}
	m.used = 0
}

// slot finds d's slot, or the empty slot where it would go.
func (m *KeyMap) slot(d *keyDigest) []byte {
	i := int(binary.LittleEndian.Uint64(d[:8]) % uint64(m.cap))
	for {
		s := m.slots[i*keySlotLen : (i+1)*keySlotLen]
		if binary.BigEndian.Uint64(s[md5.Size:]) == 0 || [md5.Size]byte(s[:md5.Size]) == *d {
			return s
		}
		if i++; i == m.cap {
			i = 0
		}
	}
}

// put records offset as d's latest; false when the map is full and d not
// in it.
func (m *KeyMap) put(d *keyDigest, offset int64) bool {
	s := m.slot(d)
	if binary.BigEndian.Uint64(s[md5.Size:]) == 0 {
		if m.used >= m.limit {
			return false
		}
		m.used++
		copy(s, d[:])
	}
	// Stored plus one, so that zero marks an empty slot.
	binary.BigEndian.PutUint64(s[md5.Size:], uint64(offset)+1)
	return true
}

func (m *KeyMap) get(d *keyDigest) (int64, bool) {
	s := m.slot(d)
	v := binary.BigEndian.Uint64(s[md5.Size:])
	return int64(v) - 1, v != 0
}

// CleanResult is what a clean did.
type CleanResult struct {
	// Segments is how many segments were rewritten or removed.
	Segments int
	// BytesBefore and BytesAfter are the size of those segments.
	BytesBefore, BytesAfter int64
	// Records is how many records were removed.
	Records int64
	// CleanedTo is where the clean stopped; the next one starts there.
	CleanedTo int64
}

// cleanPlan is the part of the log a clean would work on.
type cleanPlan struct {
	views      []segView
	start      int64
	firstDirty int64
	// limit is the first offset the cleaner may not touch: the active
	// segment, or the first segment with records within the minimum
	// compaction lag.
	limit       int64
	dirty       int64 // bytes of the segments in [firstDirty, limit)
	clean       int64 // bytes of the segments below firstDirty
	due         bool
	now         int64
	cfg         *Config
	tombstoneIn bool // a kept tombstone's horizon has passed
}

func (l *Log) plan() (cleanPlan, error) {
	p := cleanPlan{cfg: l.cfg.Load(), now: l.nowMs()}
	if !p.cfg.Compact {
		return p, nil
	}
	views, err := l.snapshot()
	if err != nil {
		return p, err
	}
	p.views = views
	p.start = l.start.Load()
	l.cpMu.Lock()
	p.firstDirty = max(l.cp.cleanedTo, p.start)
	l.cpMu.Unlock()
	sealed := views[:len(views)-1]
	p.limit = views[len(views)-1].base
	var oldestDirty int64 = math.MaxInt64
	for _, v := range sealed {
		if v.stats.next <= p.firstDirty {
			p.clean += v.stats.size
			continue
		}
		if l.opts.Replicated && v.stats.next > l.hw.Load() {
			// A replica cleans only what is committed: a truncation
			// may still take the rest.
			p.limit = v.base
			break
		}
		if p.cfg.MinCompactionLagMs > 0 && v.stats.maxTSOffset >= 0 && v.stats.maxTS > p.now-p.cfg.MinCompactionLagMs {
			p.limit = v.base
			break
		}
		p.dirty += v.stats.size
		if v.stats.firstTS >= 0 {
			oldestDirty = min(oldestDirty, v.stats.firstTS)
		}
	}
	p.tombstoneIn = p.now >= l.tombstoneDue.Load()
	ratio := 0.0
	if p.dirty > 0 {
		ratio = float64(p.dirty) / float64(p.dirty+p.clean)
	}
	lagged := oldestDirty != math.MaxInt64 && p.now-oldestDirty > p.cfg.MaxCompactionLagMs
	p.due = p.dirty > 0 && (ratio >= p.cfg.MinCleanableDirtyRatio || lagged) || p.tombstoneIn
	return p, nil
}

// Cleanable reports whether Clean would rewrite the log now (its policy
// includes compact, and its uncleaned share reached
// min.cleanable.dirty.ratio, or it waited max.compaction.lag.ms, or a
// kept tombstone is past its delete horizon), and that uncleaned share.
func (l *Log) Cleanable() (dirtyRatio float64, due bool) {
	p, err := l.plan()
	if err != nil || p.dirty == 0 {
		return 0, err == nil && p.due
	}
	return float64(p.dirty) / float64(p.dirty+p.clean), p.due
}

// Clean compacts the log if Cleanable says so, with km as its key map.
func (l *Log) Clean(km *KeyMap) (CleanResult, error) {
	l.maintMu.Lock()
	defer l.maintMu.Unlock()
	if l.isClosed() {
		return CleanResult{}, ErrClosed
	}
	p, err := l.plan()
	if err != nil || !p.due {
		return CleanResult{CleanedTo: p.firstDirty}, err
	}
	mapEnd, err := l.buildKeyMap(p, km)
	if err != nil {
		return CleanResult{}, err
	}
	// Gaps are allowed below mapEnd before any segment has them, so a
	// stop mid-clean leaves a log the next open accepts.
	if err := l.recordCleaner(func(c *checkpoint) { c.gapsBelow = max(c.gapsBelow, mapEnd) }); err != nil {
		return CleanResult{}, err
	}
	res := CleanResult{CleanedTo: mapEnd}
	nextDue := int64(math.MaxInt64)
	for _, v := range p.views[:len(p.views)-1] {
		if v.base >= mapEnd {
			break
		}
		if l.closing.Load() {
			return res, ErrClosed
		}
		r, err := l.cleanSegment(v, p, mapEnd, km, v.base == p.views[0].base, &nextDue)
		if err != nil {
			return res, fmt.Errorf("cleaning segment %d: %w", v.base, err)
		}
		if r.Segments > 0 {
			res.Segments += r.Segments
			res.BytesBefore += r.BytesBefore
			res.BytesAfter += r.BytesAfter
			res.Records += r.Records
		}
	}
	l.tombstoneDue.Store(nextDue)
	l.maxMu.Lock()
	l.maxCache.batchOffset = -1
	l.maxMu.Unlock()
	if err := l.recordCleaner(func(c *checkpoint) { c.cleanedTo = mapEnd }); err != nil {
		return res, err
	}
	l.closeRetired(false)
	if res.Segments > 0 {
		l.log.Info("cleaned log", "segments", res.Segments, "bytes_before", res.BytesBefore, "bytes_after", res.BytesAfter,
			"records_removed", res.Records, "cleaned_to", mapEnd)
	}
	return res, nil
}

// recordCleaner changes the cleaner's offsets in the checkpoint, durably.
func (l *Log) recordCleaner(edit func(*checkpoint)) error {
	l.cpMu.Lock()
	defer l.cpMu.Unlock()
	c := l.cp
	edit(&c)
	if err := l.recordLocked(c); err != nil {
		return fmt.Errorf("recording the cleaner's progress: %w", err)
	}
	return nil
}

// eachBatch calls fn with every whole batch of segment v, in order, until
// fn returns false. The bytes are valid only during the call.
func eachBatch(v segView, fn func(h batch.Header, b []byte) (bool, error)) error {
	sc := newScanner(v.f, v.stats.size)
	for pos := int64(0); pos+batch.HeaderLen <= v.stats.size; {
		hb, err := sc.at(pos, batch.HeaderLen)
		if err != nil {
			return readErr(err)
		}
		h, err := batch.ParseHeader(hb)
		if err != nil {
			return fmt.Errorf("position %d: %w", pos, err)
		}
		if h.Size() > v.stats.size-pos {
			return fmt.Errorf("position %d: batch of %d bytes past the segment's end", pos, h.Size())
		}
		b, err := sc.at(pos, int(h.Size()))
		if err != nil {
			return readErr(err)
		}
		more, err := fn(h, b)
		if err != nil || !more {
			return err
		}
		pos += h.Size()
	}
	return nil
}

// buildKeyMap records the latest offset of every key in [firstDirty,
// limit), and returns where it stopped: limit, or the offset of the first
// record whose key no longer fit.
func (l *Log) buildKeyMap(p cleanPlan, km *KeyMap) (int64, error) {
	km.reset()
	end := p.firstDirty
	full := false
	for _, v := range p.views[:len(p.views)-1] {
		if v.base >= p.limit || full {
			break
		}
		if v.stats.next <= p.firstDirty {
			continue
		}
		err := eachBatch(v, func(h batch.Header, b []byte) (bool, error) {
			if l.closing.Load() {
				return false, ErrClosed
			}
			if h.LastOffset() < p.firstDirty || batch.IsControl(h.Attributes) {
				return true, nil
			}
			recs, err := batch.Records(b)
			if err != nil {
				return false, fmt.Errorf("offset %d: %w", h.BaseOffset, err)
			}
			for _, r := range recs {
				if r.Offset < p.firstDirty || r.Key == nil {
					continue
				}
				d := keyDigest(md5.Sum(r.Key))
				if !km.put(&d, r.Offset) {
					end, full = r.Offset, true
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			return 0, err
		}
	}
	if !full {
		end = max(p.limit, p.firstDirty)
	}
	return end, nil
}

// cleanSegment rewrites segment v without the records the key map shows
// superseded (below mapEnd) and the tombstones past their delete horizon,
// stamping a horizon on the batches of tombstones seen for the first time.
// An unchanged segment is left alone; one left empty is removed, except
// the first, which is kept empty so the log start stays where it was. It
// lowers *nextDue to the earliest horizon of the tombstones it kept.
func (l *Log) cleanSegment(v segView, p cleanPlan, mapEnd int64, km *KeyMap, first bool, nextDue *int64) (CleanResult, error) {
	var (
		out     []byte
		stats   = newSegStats(v.base)
		entries []indexEntry
		changed bool
		removed int64
	)
	interval := int64(l.opts.IndexIntervalBytes)
	keep := func(h batch.Header, b []byte) {
		if e, ok := stats.add(h, int64(len(out)), interval); ok {
			entries = append(entries, e)
		}
		out = append(out, b...)
	}
	err := eachBatch(v, func(h batch.Header, b []byte) (bool, error) {
		if l.closing.Load() {
			return false, ErrClosed
		}
		if h.LastOffset() < p.start {
			changed = true
			removed += int64(h.NumRecords)
			return true, nil
		}
		if batch.IsControl(h.Attributes) {
			keep(h, b)
			return true, nil
		}
		recs, err := batch.Records(b)
		if err != nil {
			return false, fmt.Errorf("offset %d: %w", h.BaseOffset, err)
		}
		horizon := batch.HasDeleteHorizon(h.Attributes)
		kept := recs[:0:0]
		tombstone := false
		for _, r := range recs {
			if r.Offset < mapEnd && r.Key != nil {
				d := keyDigest(md5.Sum(r.Key))
				if latest, ok := km.get(&d); ok && latest > r.Offset {
					continue
				}
			}
			if r.Key != nil && r.Value == nil && r.Offset < mapEnd {
				if horizon && h.FirstTimestamp <= p.now {
					continue
				}
				tombstone = true
			}
			kept = append(kept, r)
		}
		removed += int64(len(recs) - len(kept))
		if len(kept) == len(recs) && (!tombstone || horizon) {
			if tombstone {
				*nextDue = min(*nextDue, h.FirstTimestamp)
			}
			keep(h, b)
			return true, nil
		}
		changed = true
		if len(kept) == 0 {
			return true, nil
		}
		nh := h
		if tombstone && !horizon {
			nh.Attributes |= batch.AttrDeleteHorizon
			nh.FirstTimestamp = p.now + p.cfg.DeleteRetentionMs
		}
		if tombstone {
			*nextDue = min(*nextDue, nh.FirstTimestamp)
		}
		if !batch.IsLogAppendTime(h.Attributes) {
			nh.MaxTimestamp = batch.NoTimestamp
			for _, r := range kept {
				nh.MaxTimestamp = max(nh.MaxTimestamp, r.Timestamp)
			}
		}
		nb, err := batch.Encode(nh, kept)
		if err != nil {
			return false, err
		}
		// The batch keeps the leader epoch it was written in (outside
		// the CRC), as Kafka's cleaner does: the leader-epoch cache and
		// the followers copying it go by it.
		batch.SetPartitionLeaderEpoch(nb, h.PartitionLeaderEpoch)
		nh.Length = int32(len(nb) - batch.LogOverhead)
		nh.NumRecords = int32(len(kept))
		keep(nh, nb)
		return true, nil
	})
	if err != nil || !changed {
		return CleanResult{}, err
	}
	res := CleanResult{Segments: 1, BytesBefore: v.stats.size, BytesAfter: int64(len(out)), Records: removed}
	if len(out) == 0 && !first {
		return res, l.removeCleanedSegment(v)
	}
	stats.next = v.stats.next
	return res, l.replaceSegment(v, out, stats, entries)
}

// replaceSegment makes data the content of segment v: written beside it,
// fsynced, renamed over it, then swapped in for readers; the old files are
// retired. The index follows the same way; it is derived data, so a crash
// between the two renames only costs a rebuild.
func (l *Log) replaceSegment(v segView, data []byte, stats segStats, entries []indexEntry) error {
	path := segmentName(l.dir, v.base, logSuffix)
	f, err := writeBeside(path+cleanedSuffix, data)
	if err != nil {
		return err
	}
	idxPath := segmentName(l.dir, v.base, indexSuffix)
	idx, err := writeBeside(idxPath+cleanedSuffix, encodeIndex(entries))
	if err != nil {
		f.Close()
		return err
	}
	if err := os.Rename(path+cleanedSuffix, path); err != nil {
		f.Close()
		idx.Close()
		return err
	}
	if err := os.Rename(idxPath+cleanedSuffix, idxPath); err != nil {
		l.log.Warn("replacing a cleaned segment's index; the next start rebuilds it", "segment", v.base, "err", err)
	}
	if err := syncDir(l.dir); err != nil {
		f.Close()
		idx.Close()
		return err
	}
	s := &segment{base: v.base, f: f, idx: idx, stats: stats, entries: entries, idxWritten: len(entries), created: l.nowMs()}
	if err := s.seal(); err != nil {
		l.log.Warn("reading a cleaned segment's modification time", "segment", v.base, "err", err)
	}
	l.swapSegment(v.base, s)
	return nil
}

// writeBeside creates path with data, fsynced, and returns it open.
func writeBeside(path string, data []byte) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// removeCleanedSegment deletes a segment the cleaner emptied.
func (l *Log) removeCleanedSegment(v segView) error {
	for _, suf := range []string{logSuffix, indexSuffix} {
		if err := os.Remove(segmentName(l.dir, v.base, suf)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := syncDir(l.dir); err != nil {
		return err
	}
	l.swapSegment(v.base, nil)
	return nil
}

// swapSegment replaces the segment at base with s (nil removes it) and
// retires the old one's files.
func (l *Log) swapSegment(base int64, s *segment) {
	l.mu.Lock()
	var old *segment
	for i, cur := range l.segs {
		if cur.base != base {
			continue
		}
		old = cur
		if s != nil {
			l.segs[i] = s
		} else {
			l.segs = append(l.segs[:i:i], l.segs[i+1:]...)
		}
		break
	}
	l.mu.Unlock()
	if old != nil {
		l.retire(old)
	}
}
