package partition

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/groupd/groupd/internal/batch"
)

// ErrDamaged is wrapped by the error of Open when the log does not hold
// what its recovery checkpoint says was made durable: a bad batch below the
// recovery point, or past it with intact batches behind it (not a torn
// write), a segment that does not continue the log, a missing segment, a
// log shorter than its recovery point, or an unreadable checkpoint. Open
// then changes nothing on disk, unless Options.QuarantineDir is set.
var ErrDamaged = errors.New("damaged partition log")

// DamageError says where a log is damaged. It wraps ErrDamaged.
type DamageError struct {
	// File is the damaged segment (or checkpoint) file.
	File string
	// Offset is the first offset affected, -1 if none applies.
	Offset int64
	// Position is the byte position in File, -1 if none applies.
	Position int64
	Reason   string
}

func (e *DamageError) Error() string {
	var b strings.Builder
	b.WriteString(ErrDamaged.Error())
	b.WriteString(": ")
	b.WriteString(e.File)
	if e.Offset >= 0 {
		fmt.Fprintf(&b, " at offset %d", e.Offset)
	}
	if e.Position >= 0 {
		fmt.Fprintf(&b, " (byte %d)", e.Position)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

func (e *DamageError) Unwrap() error { return ErrDamaged }

// segmentBases lists the base offsets of dir's segment files, ascending.
func segmentBases(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var bases []int64
	for _, e := range ents {
		if b, ok := parseSegmentName(e.Name()); ok && e.Type().IsRegular() {
			bases = append(bases, b)
		}
	}
	slices.Sort(bases)
	return bases, nil
}

// recovery is the state of one Open's recovery pass.
type recovery struct {
	l     *Log
	cp    checkpoint // as read; updated as damage is set aside
	bases []int64

	// expected is the offset the next accepted segment must start at.
	expected int64
	// setAside is set when a segment was quarantined since the last
	// accepted one, so the offsets up to the next one are a known gap.
	setAside bool
	// lost is one past the highest offset quarantined data of the last
	// file may have used: the next offset given out must not be below it.
	lost int64
	// moves are the bases of the segments to move to the quarantine.
	moves []int64
	// cut is the last segment when its tail was copied to the
	// quarantine, to be cut once the log continues past the tail's
	// offsets (see finish).
	cut     *tailCut
	changed bool // cp differs from the file
	// snap is the producer snapshot Open starts from, if any: its sealed
	// segments are trusted when their files are unchanged.
	snap     producerSnapshot
	haveSnap bool
}

// recover opens the segment files, checks them against the recovery
// checkpoint and rebuilds indexes and producer state.
//
// Below the recovery point every record was fsynced, so batch headers are
// checked (sane, contiguous) and anything wrong is damage. From the
// recovery point on, batches are also CRC-checked; a bad batch there in
// the last segment with nothing intact after it is a torn write and the
// segment is cut before it. The recovery point lags the fsyncs (it is
// checkpointed about once a minute), so a bad batch there with intact
// batches after it is damage to data that may have been acknowledged.
// Segments before the last one were fsynced when the next one was created,
// so damage in them is never a torn write. Damage stops the open with a
// DamageError, changing nothing; with a quarantine directory the damaged
// segment (or, for a damaged tail, a copy of the tail from the bad batch
// on, before the tail is cut) is put there instead, the missing offsets
// are recorded as a gap, and no offset that the set-aside data may have
// used is given out again.
func (l *Log) recover() error {
	if err := removeCleanerLeftovers(l); err != nil {
		return err
	}
	bases, err := segmentBases(l.dir)
	if err != nil {
		return err
	}
	cp, haveCP, err := readCheckpoint(l.dir)
	var bad *DamageError
	if errors.As(err, &bad) && l.opts.QuarantineDir != "" {
		// Set aside like a damaged segment; the log is then checked as
		// one without a checkpoint, its last segment CRC-checked whole.
		if err := quarantineFile(l.opts.QuarantineDir, bad.File); err != nil {
			return err
		}
		l.log.Error("moved an unreadable recovery checkpoint to the quarantine", "file", bad.File, "reason", bad.Reason)
		haveCP, err = false, nil
	}
	if err != nil {
		return err
	}
	if haveCP && cp.truncating {
		// A truncation was recorded and a stop came before it was
		// done: what lies past it goes first (finishTruncation does
		// the rest once the segments are read).
		if bases, err = l.prepareTruncation(cp, bases); err != nil {
			return err
		}
	}
	if !haveCP {
		if len(bases) == 0 {
			s, err := l.createSegment(0)
			if err != nil {
				return err
			}
			l.segs = []*segment{s}
			return syncDir(l.dir)
		}
		// A log written before checkpoints existed, or one that crashed
		// before its first roll: only the last segment may be torn.
		cp = checkpoint{logStart: bases[0], recoveryPoint: bases[len(bases)-1]}
	}
	if bases, err = l.finishDeletions(cp, bases); err != nil {
		return err
	}
	l.cp, l.cpOnDisk = cp, haveCP
	r := &recovery{l: l, cp: cp, bases: bases, expected: cp.logStart, lost: -1}
	if haveCP && len(bases) > 0 {
		r.snap, r.haveSnap = l.loadSnapshot(cp.recoveryPoint)
	}
	if r.haveSnap {
		l.producers = r.snap.producers
		l.snapshotAt = r.snap.offset
	}
	for i := range bases {
		if err := r.segment(i); err != nil {
			return err
		}
	}
	if err := r.finish(); err != nil {
		return err
	}
	l.cp = r.cp
	return l.dropStaleSnapshots()
}

// removeCleanerLeftovers removes the files of a clean that a crash cut
// short: the old segment is still in place.
func removeCleanerLeftovers(l *Log) error {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		seg, ok := strings.CutSuffix(name, cleanedSuffix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if _, isLog := parseSegmentName(seg); !isLog {
			if _, isIndex := parseSegmentName(strings.TrimSuffix(seg, indexSuffix) + logSuffix); !isIndex || !strings.HasSuffix(seg, indexSuffix) {
				continue
			}
		}
		l.log.Info("removing the rewrite of a segment that a stop interrupted", "file", name)
		if err := os.Remove(filepath.Join(l.dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// finishDeletions deletes the segments wholly below the checkpoint's log
// start: retention or DeleteRecords recorded the new start before deleting
// them, and a stop came in between. It returns the remaining bases.
func (l *Log) finishDeletions(cp checkpoint, bases []int64) ([]int64, error) {
	n := 0
	for n+1 < len(bases) && bases[n+1] <= cp.logStart {
		n++
	}
	for _, base := range bases[:n] {
		l.log.Info("deleting a segment below the recorded log start", "segment", base, "log_start", cp.logStart)
		for _, suf := range []string{logSuffix, indexSuffix} {
			if err := os.Remove(segmentName(l.dir, base, suf)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
	}
	if n > 0 {
		if err := syncDir(l.dir); err != nil {
			return nil, err
		}
	}
	return bases[n:], nil
}

// dropStaleSnapshots removes the producer snapshots past the log end,
// which describe appends the log does not hold.
func (l *Log) dropStaleSnapshots() error {
	end := l.segs[len(l.segs)-1].stats.next
	keep := l.snapshots[:0]
	for _, off := range l.snapshots {
		if off <= end {
			keep = append(keep, off)
			continue
		}
		l.log.Info("removing a producer snapshot past the log end", "offset", off, "log_end", end)
		if err := os.Remove(snapshotName(l.dir, off)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	l.snapshots = keep
	return nil
}

// damage reports d: an error without a quarantine, a log line with one.
func (r *recovery) damage(d *DamageError) error {
	if r.l.opts.QuarantineDir == "" {
		return d
	}
	r.l.log.Error("setting damaged log data aside", "file", d.File, "offset", d.Offset, "position", d.Position, "reason", d.Reason)
	return nil
}

func (r *recovery) segment(i int) error {
	l, base := r.l, r.bases[i]
	path := segmentName(l.dir, base, logSuffix)
	last := i == len(r.bases)-1
	// The cleaner removes records, and segments it emptied, so below
	// where it stopped offsets may be missing.
	cleaned := r.expected < r.cp.gapsBelow
	switch {
	case len(l.segs) == 0 && base > r.expected && !r.setAside && !cleaned:
		if err := r.damage(&DamageError{File: path, Offset: r.expected, Position: -1,
			Reason: fmt.Sprintf("the log starts at offset %d but its first segment at %d: segments are missing", r.expected, base)}); err != nil {
			return err
		}
		r.changed = true
	case len(l.segs) == 0:
		// Set-aside segments before it, or an older segment put back.
	case base > r.expected && cleaned:
	case base > r.expected && !r.setAside && !r.cp.hasGap(r.expected, base):
		if err := r.damage(&DamageError{File: path, Offset: r.expected, Position: -1,
			Reason: fmt.Sprintf("segment does not continue the log: offsets %d to %d are missing before it", r.expected, base-1)}); err != nil {
			return err
		}
		r.cp.addGap(r.expected, base)
		r.changed = true
	case base > r.expected && r.setAside:
		r.cp.addGap(r.expected, base)
		r.changed = true
	case base < r.expected:
		if err := r.damage(&DamageError{File: path, Offset: base, Position: -1,
			Reason: fmt.Sprintf("segment does not continue the log: it starts at offset %d, inside the previous segment, which ends at %d", base, r.expected)}); err != nil {
			return err
		}
		end, err := segmentEnd(path, base, last)
		if err != nil {
			return err
		}
		r.quarantine(base, last, end)
		return nil
	}

	s, err := l.openSegment(base)
	if err != nil {
		return err
	}
	fi, err := s.f.Stat()
	if err != nil {
		s.close()
		return err
	}
	if r.trust(s, fi) {
		r.accept(s)
		return nil
	}
	res, err := scanSegment(s.f, base, fi.Size(), r.cp.recoveryPoint, base < r.cp.gapsBelow, int64(l.opts.IndexIntervalBytes), l.replayProducer)
	if err != nil {
		s.close()
		return fmt.Errorf("scan segment %s: %w", path, err)
	}
	s.stats, s.entries = res.stats, res.entries
	if res.bad != "" {
		if !last || res.stats.next < r.cp.recoveryPoint {
			reason := fmt.Sprintf("%s; this is below the recovery point %d, so it is damage, not a torn write", res.bad, r.cp.recoveryPoint)
			if !last {
				reason = res.bad + "; a segment is fsynced whole before the next one starts, so this is damage, not a torn write"
			}
			if err := r.damage(&DamageError{File: path, Offset: res.stats.next, Position: res.stats.size, Reason: reason}); err != nil {
				s.close()
				return err
			}
			limit := int64(math.MaxInt64 / 2)
			if !last {
				limit = r.bases[i+1]
			}
			end := l.salvage(s.f, res.stats.size, fi.Size(), res.stats.next, limit)
			s.close()
			r.quarantine(base, last, max(end, res.stats.next, base+1))
			return nil
		}
		// Past the recovery point in the last segment: a torn write
		// only if nothing intact follows the bad batch.
		tail, err := r.checkTail(s, path, res, fi.Size())
		if err != nil {
			s.close()
			return err
		}
		if tail == nil {
			l.log.Warn("truncating torn segment tail", "segment", path,
				"reason", res.bad, "valid_bytes", res.stats.size, "dropped_bytes", fi.Size()-res.stats.size)
			if err := s.f.Truncate(res.stats.size); err != nil {
				s.close()
				return err
			}
			if err := s.f.Sync(); err != nil {
				s.close()
				return err
			}
		}
	}
	if !last && base < r.cp.recoveryPoint {
		if err := s.seal(); err != nil {
			l.log.Warn("reading a sealed segment's modification time", "segment", base, "err", err)
		}
	}
	r.accept(s)
	return nil
}

// tailCut is a last segment whose tail, from byte size on, was copied to
// the quarantine and is to be cut.
type tailCut struct {
	s    *segment
	size int64
}

// checkTail tells a torn write from damage when the last segment holds a
// bad batch past the recovery point, where res stopped. A torn write
// leaves nothing intact behind the bad batch: checkTail returns nil and
// the caller cuts the tail. If intact batches follow (see findIntact), it
// is damage to written data, perhaps acknowledged and fsynced since the
// last checkpoint: without a quarantine checkTail returns a DamageError;
// with one it copies the tail, from the bad batch to the end of the file,
// to the quarantine (fsynced) and leaves the cut to finish, which first
// starts a segment past every offset the tail's intact batches hold.
func (r *recovery) checkTail(s *segment, path string, res scanResult, fileSize int64) (*tailCut, error) {
	l := r.l
	rule := intactRule{min: res.stats.next, limit: math.MaxInt64, origin: res.stats.size}
	if s.base < r.cp.gapsBelow {
		rule.origin = -1 // the cleaner may have left offsets out
	}
	firstPos, records := int64(-1), int64(0)
	end, found, err := findIntact(s.f, res.stats.size, fileSize, rule, func(h batch.Header, pos int64) bool {
		if firstPos < 0 {
			firstPos = pos
		}
		records += int64(h.NumRecords)
		// Only kept if the open goes ahead, with the tail set aside: a
		// producer whose batches are in it then goes on in sequence.
		l.replayProducer(h, pos)
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("scan segment %s past a bad batch: %w", path, err)
	}
	if found == 0 {
		return nil, nil
	}
	d := &DamageError{File: path, Offset: res.stats.next, Position: res.stats.size,
		Reason: fmt.Sprintf("%s; %d intact batches (%d records, offsets up to %d) follow it from byte %d, so this is damage, not a torn write",
			res.bad, found, records, end-1, firstPos)}
	if l.opts.QuarantineDir == "" {
		return nil, d
	}
	qpath, err := copyTail(l.opts.QuarantineDir, s.f, path, res.stats.size, fileSize, res.stats.next)
	if err != nil {
		return nil, fmt.Errorf("copy the damaged tail of %s to the quarantine: %w", path, err)
	}
	l.log.Error("set a damaged segment tail aside in the quarantine", "segment", path, "offset", d.Offset, "position", d.Position,
		"bytes", fileSize-res.stats.size, "intact_batches", found, "intact_records", records, "end_offset", end,
		"quarantine_file", qpath, "reason", d.Reason)
	r.lost, r.changed = max(r.lost, end), true
	r.cut = &tailCut{s: s, size: res.stats.size}
	return r.cut, nil
}

// tailFileName names the copy of a segment's tail in the quarantine: the
// segment's file name, the byte position the tail starts at and the
// offset the log expected there.
func tailFileName(segFile string, pos, offset int64) string {
	return fmt.Sprintf("%s.tail-at-byte-%d-offset-%d", segFile, pos, offset)
}

// copyTail copies f (the segment file at path) from byte from to size into
// a new file in qdir, durably, and returns its path.
func copyTail(qdir string, f *os.File, path string, from, size, offset int64) (string, error) {
	if err := mkdirAllSynced(qdir); err != nil {
		return "", err
	}
	dst := freeName(filepath.Join(qdir, tailFileName(filepath.Base(path), from, offset)))
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	n, err := io.Copy(out, io.NewSectionReader(f, from, size-from))
	if err == nil && n != size-from {
		err = fmt.Errorf("copied %d of %d bytes", n, size-from)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(qdir)
	}
	return dst, err
}

// mkdirAllSynced creates dir and its missing parents and makes their
// entries durable.
func mkdirAllSynced(dir string) error {
	var created []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range created {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// accept adds s to the log being opened.
func (r *recovery) accept(s *segment) {
	l := r.l
	if len(l.segs) == 0 {
		r.cp.logStart = max(r.cp.logStart, s.base)
	}
	l.segs = append(l.segs, s)
	r.expected, r.setAside = max(s.stats.next, r.expected), false
}

// trust takes a sealed segment's stats and index from the producer
// snapshot instead of reading its batch headers, when the snapshot
// describes it and its file is as the snapshot saw it: below the recovery
// point (fsynced), the same size and modification time, an index file
// that agrees, and readable headers where the index starts and last
// points. It reports whether it did.
func (r *recovery) trust(s *segment, fi os.FileInfo) bool {
	l := r.l
	sum, ok := r.snap.segments[s.base]
	if !r.haveSnap || l.opts.FullStartCheck || !ok || sum.stats.next > r.cp.recoveryPoint ||
		sum.stats.size != fi.Size() || sum.modTime != fi.ModTime().UnixNano() || sum.entries == 0 {
		return false
	}
	raw, err := os.ReadFile(segmentName(l.dir, s.base, indexSuffix))
	if err != nil || int64(len(raw)) != sum.entries*indexEntrySize {
		return false
	}
	entries := decodeIndex(raw)
	prev := indexEntry{offset: -1, pos: -1}
	for i, e := range entries {
		if e.offset <= prev.offset || e.pos <= prev.pos || e.pos >= sum.stats.size || e.offset < s.base || e.offset >= sum.stats.next ||
			(i == 0 && e.pos != 0) {
			return false
		}
		prev = e
	}
	for _, e := range []indexEntry{entries[0], entries[len(entries)-1]} {
		var hb [batch.HeaderLen]byte
		if _, err := s.f.ReadAt(hb[:], e.pos); err != nil {
			return false
		}
		h, err := batch.ParseHeader(hb[:])
		if err != nil || h.BaseOffset != e.offset || e.pos+h.Size() > sum.stats.size {
			return false
		}
	}
	idx, err := os.OpenFile(segmentName(l.dir, s.base, indexSuffix), os.O_RDWR, 0o644)
	if err != nil {
		return false
	}
	s.idx, s.stats, s.entries, s.idxWritten, s.trusted = idx, sum.stats, entries, len(entries), true
	s.sealed = &sum
	return true
}

// quarantine marks the segment at base to be moved aside; end is one past
// the highest offset its data may have used.
func (r *recovery) quarantine(base int64, last bool, end int64) {
	r.moves = append(r.moves, base)
	r.setAside, r.changed = true, true
	if last {
		r.lost = end
	}
}

// finish makes sure the log ends at or past everything that may have been
// written, records the checkpoint and moves quarantined segments aside.
func (r *recovery) finish() error {
	l := r.l
	lastAccepted := len(l.segs) > 0 && l.segs[len(l.segs)-1].base == r.bases[len(r.bases)-1]
	if len(r.bases) == 0 || lastAccepted && r.expected < r.cp.recoveryPoint {
		file := l.dir
		if len(r.bases) > 0 {
			file = segmentName(l.dir, r.bases[len(r.bases)-1], logSuffix)
		}
		if err := r.damage(&DamageError{File: file, Offset: r.expected, Position: -1,
			Reason: fmt.Sprintf("the log ends at offset %d but its recovery point is %d: fsynced records are missing", r.expected, r.cp.recoveryPoint)}); err != nil {
			return err
		}
		r.changed = true
	}
	// Indexes are derived data, rewritten only once the open is known to
	// go ahead.
	for _, s := range l.segs {
		if s.trusted {
			continue
		}
		if err := l.reconcileIndex(s); err != nil {
			return err
		}
	}
	if !r.changed {
		return nil
	}
	// Nothing below need may be given out again.
	need := max(r.cp.recoveryPoint, r.lost, r.expected)
	if len(l.segs) == 0 || need > r.expected {
		s, err := l.createSegment(need)
		if err != nil {
			return err
		}
		if err := syncDir(l.dir); err != nil {
			s.close()
			return err
		}
		if len(l.segs) == 0 {
			r.cp.logStart = need
		} else {
			r.cp.addGap(r.expected, need)
		}
		l.segs = append(l.segs, s)
		l.log.Warn("new segment after set-aside data", "segment", s.base)
		r.cp.recoveryPoint = need
	}
	if c := r.cut; c != nil {
		// The tail is safe in the quarantine and the segment past its
		// offsets durable. A stop before the cut leaves damage in a
		// segment that is no longer the last (refused; with the
		// quarantine the segment is set aside), one after it a log that
		// does not continue (refused; with the quarantine the gap is
		// recorded): never a log that gives the tail's offsets out again.
		if err := c.s.f.Truncate(c.size); err != nil {
			return err
		}
		if err := c.s.f.Sync(); err != nil {
			return err
		}
	}
	r.cp.normalize()
	// The checkpoint goes first: after a crash before the moves the
	// damaged segments are found again, which is safe; the other order
	// would leave an unexplained hole.
	if err := writeCheckpoint(l.dir, r.cp); err != nil {
		return err
	}
	l.cpOnDisk = true
	if len(r.moves) == 0 {
		return nil
	}
	for _, base := range r.moves {
		for _, suf := range []string{logSuffix, indexSuffix} {
			src := segmentName(l.dir, base, suf)
			err := quarantineFile(l.opts.QuarantineDir, src)
			if errors.Is(err, os.ErrNotExist) && suf == indexSuffix {
				continue
			}
			if err != nil {
				return err
			}
			l.log.Error("moved damaged segment to the quarantine", "file", src, "quarantine", l.opts.QuarantineDir)
		}
	}
	return nil
}

// quarantineFile moves path into qdir (under a free name) durably.
func quarantineFile(qdir, path string) error {
	if err := mkdirAllSynced(qdir); err != nil {
		return err
	}
	if err := os.Rename(path, freeName(filepath.Join(qdir, filepath.Base(path)))); err != nil {
		return err
	}
	return errors.Join(syncDir(filepath.Dir(path)), syncDir(qdir))
}

// segmentEnd returns one past the highest offset a segment that is set
// aside unscanned may hold (only needed for the last one).
func segmentEnd(path string, base int64, last bool) (int64, error) {
	if !last {
		return base + 1, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return salvageScan(f, 0, fi.Size(), base, math.MaxInt64/2, func(batch.Header) {}), nil
}

// freeName returns path, or path with the first free ".N" suffix.
func freeName(path string) string {
	p := path
	for n := 1; ; n++ {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			return p
		}
		p = fmt.Sprintf("%s.%d", path, n)
	}
}

// salvage looks through a damaged segment from byte pos for batches that
// still carry a valid CRC, at or above offset next and ending below limit,
// replays their producer state and returns one past the highest offset
// found (or next). The batch CRC does not cover the base offset, so only
// offsets that keep rising are believed.
func (l *Log) salvage(r io.ReaderAt, pos, size, next, limit int64) int64 {
	found := 0
	end := salvageScan(r, pos, size, next, limit, func(h batch.Header) {
		l.replayProducer(h, 0)
		found++
	})
	l.log.Warn("salvaged batch headers past the damage", "batches", found, "end_offset", end)
	return end
}

// salvageScan is salvage without side effects but fn: it returns one past
// the highest offset of the intact batches from byte pos on (or next).
func salvageScan(r io.ReaderAt, pos, size, next, limit int64, fn func(batch.Header)) int64 {
	end, _, _ := findIntact(r, pos, size, intactRule{min: next, limit: limit, origin: -1}, func(h batch.Header, _ int64) bool {
		fn(h)
		return true
	})
	return end
}

// intactRule says which record batches past damage findIntact believes.
type intactRule struct {
	// min is the lowest base offset believed: the offset the log expected
	// where the damage starts. The batch CRC does not cover the base
	// offset, and an older batch carried in a record's value is intact
	// too, so offsets below it are not believed.
	min int64
	// limit is one past the highest offset believed.
	limit int64
	// origin, when not -1, is the byte position of the damage in bytes
	// whose offsets are contiguous (no cleaner gaps): each batch between
	// it and pos takes at least HeaderLen bytes and at most 2^31
	// offsets, so a batch at pos holds no offset beyond
	// min + ((pos-origin)/HeaderLen + 1) * 2^31.
	origin int64
}

// maxBase is the highest base offset believed for a batch at pos.
func (c intactRule) maxBase(pos int64) int64 {
	if c.origin < 0 || pos < c.origin {
		return math.MaxInt64
	}
	n := (pos-c.origin)/batch.HeaderLen + 1
	if n >= (math.MaxInt64-max(c.min, 0))>>31 {
		return math.MaxInt64
	}
	return c.min + n<<31
}

// findIntact looks through r, of size bytes, from byte pos on for record
// batches that are intact past damage: at every byte position in turn a
// header with magic 2, a length that fits in the file, counts that agree
// (batch.ParseHeader), a known codec and believable offsets (see
// intactRule), and a CRC-32C over attributes to end (batch.VerifyCRC)
// that checks. Random bytes pass all of that about once in 2^40 positions
// or fewer. Past a batch found the search resumes after it, so batches
// carried inside a found batch's records are not found. fn sees each
// batch and its position; false stops the search. findIntact returns one
// past the highest offset found (c.min if none), how many batches were
// found, and the first read error.
func findIntact(r io.ReaderAt, pos, size int64, c intactRule, fn func(batch.Header, int64) bool) (end int64, found int, err error) {
	sc := newScanner(r, size)
	end = c.min
	for pos >= 0 && pos+batch.HeaderLen <= size {
		hb, err := sc.at(pos, batch.HeaderLen)
		if err != nil {
			return end, found, err
		}
		if hb[16] != batch.MagicV2 {
			// Most positions fail here: skip to the next magic byte in
			// what the scanner's window holds (it holds hb).
			win := sc.buf[pos-sc.start+16 : sc.n]
			if i := bytes.IndexByte(win, batch.MagicV2); i >= 0 {
				pos += int64(i)
			} else {
				pos += int64(len(win))
			}
			continue
		}
		length := int64(int32(binary.BigEndian.Uint32(hb[8:])))
		base := int64(binary.BigEndian.Uint64(hb))
		if length > size-pos-batch.LogOverhead || base < c.min || base > c.maxBase(pos) {
			pos++
			continue
		}
		h, err := batch.ParseHeader(hb)
		if err != nil || !h.Codec().Valid() || h.LastOffset() < h.BaseOffset || h.LastOffset() >= c.limit {
			pos++
			continue
		}
		b, err := sc.at(pos, int(h.Size()))
		if err != nil {
			return end, found, err
		}
		if batch.VerifyCRC(b) != nil {
			pos++
			continue
		}
		end = max(end, h.LastOffset()+1)
		found++
		if !fn(h, pos) {
			return end, found, nil
		}
		pos += h.Size()
	}
	return end, found, nil
}

// Survey is what a partition directory holds, read without changing it.
type Survey struct {
	Segments int
	// StartOffset and EndOffset bound the offsets the segment files
	// hold (EndOffset is one past the last).
	StartOffset, EndOffset int64
	// RecoveryPoint is from the checkpoint, -1 without one.
	RecoveryPoint int64
	// MaxProducerID is the highest producer id in any batch header
	// (damaged segments included, as far as they can be read), -1 if none.
	MaxProducerID int64
	// Problems describe damage found; Open would refuse the log (or, with
	// a quarantine, set the damage aside).
	Problems []string
}

// SurveyDir reads the partition log in dir without changing anything: its
// segments, offsets, recovery point, highest producer id and any damage.
func SurveyDir(dir string) (Survey, error) {
	sv := Survey{RecoveryPoint: -1, MaxProducerID: -1}
	bases, err := segmentBases(dir)
	if err != nil {
		return sv, err
	}
	cp, haveCP, err := readCheckpoint(dir)
	if err != nil {
		sv.Problems = append(sv.Problems, err.Error())
	} else if haveCP {
		sv.RecoveryPoint = cp.recoveryPoint
	}
	sv.Segments = len(bases)
	note := func(h batch.Header) { sv.MaxProducerID = max(sv.MaxProducerID, h.ProducerID) }
	next := int64(-1)
	for i, base := range bases {
		path := segmentName(dir, base, logSuffix)
		if i == 0 {
			sv.StartOffset = base
		} else if base != next && !cp.hasGap(next, base) && !(next < cp.gapsBelow && base > next) {
			sv.Problems = append(sv.Problems, fmt.Sprintf("%s: starts at offset %d, previous segment ends at %d", path, base, next))
		}
		f, err := os.Open(path)
		if err != nil {
			return sv, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return sv, err
		}
		res, err := scanSegment(f, base, fi.Size(), math.MaxInt64, base < cp.gapsBelow, DefaultIndexIntervalBytes, func(h batch.Header, _ int64) { note(h) })
		if err == nil && res.bad != "" {
			sv.Problems = append(sv.Problems, fmt.Sprintf("%s at offset %d (byte %d): %s", path, res.stats.next, res.stats.size, res.bad))
			res.stats.next = salvageScan(f, res.stats.size, fi.Size(), res.stats.next, math.MaxInt64/2, note)
		}
		f.Close()
		if err != nil {
			return sv, err
		}
		next = res.stats.next
		sv.EndOffset = max(sv.EndOffset, next)
	}
	return sv, nil
}

// QuarantinedBatch is one intact record batch read back from a file set
// aside in the quarantine.
type QuarantinedBatch struct {
	// Position is the batch's byte position in the file.
	Position int64
	Header   batch.Header
	// Raw is the batch as it was stored: a Kafka v2 record batch, its
	// CRC checked.
	Raw []byte
	// Records are its records (Offset is the batch's base offset plus
	// the record's delta), nil if they did not decode.
	Records []batch.Record
	// Err says why the records did not decode.
	Err error
}

// ReadQuarantinedTail reads a file that a start set aside in the
// quarantine and returns every intact record batch in it, in file order.
// A damaged segment tail ("<segment>.log.tail-at-byte-<pos>-offset-<n>")
// starts with the damaged bytes, then holds the batches written after
// them; a moved segment ("<segment>.log") holds its batches around the
// damage. Intact batches are found as the start found them (findIntact):
// a batch whose header and CRC check at any byte position, with base
// offset at least the one the file name gives (n for a tail, the
// segment's base for a segment, 0 for another name). Records are decoded
// within batch.MaxDecompressedSize.
func ReadQuarantinedTail(path string) ([]QuarantinedBatch, error) {
	var out []QuarantinedBatch
	err := readQuarantined(path, func(q QuarantinedBatch) bool {
		out = append(out, q)
		return true
	})
	return out, err
}

// DumpQuarantinedTail writes the records of the intact batches of a file
// in the quarantine (see ReadQuarantinedTail) to w, one line per record:
// the offset, the key and the value, separated by tabs, with the key and
// the value as Go-quoted strings (strconv.Unquote gives the bytes back) or
// null. It returns how many records it wrote; batches whose records do not
// decode are named in the error, after every other record is written.
func DumpQuarantinedTail(w io.Writer, path string) (int, error) {
	bw := bufio.NewWriter(w)
	n := 0
	var errs []error
	quote := func(b []byte) string {
		if b == nil {
			return "null"
		}
		return strconv.Quote(string(b))
	}
	err := readQuarantined(path, func(q QuarantinedBatch) bool {
		if q.Err != nil {
			errs = append(errs, fmt.Errorf("batch at byte %d (offsets %d to %d): %w", q.Position, q.Header.BaseOffset, q.Header.LastOffset(), q.Err))
			return true
		}
		for _, r := range q.Records {
			fmt.Fprintf(bw, "%d\t%s\t%s\n", r.Offset, quote(r.Key), quote(r.Value))
			n++
		}
		return true
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return n, errors.Join(append([]error{err}, errs...)...)
}

// readQuarantined hands fn each intact batch of the quarantined file at
// path, with its records decoded, until fn returns false.
func readQuarantined(path string, fn func(QuarantinedBatch) bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	rule := quarantinedRule(filepath.Base(path))
	var readErr error
	_, _, err = findIntact(f, 0, fi.Size(), rule, func(h batch.Header, pos int64) bool {
		raw := make([]byte, h.Size())
		if _, readErr = f.ReadAt(raw, pos); readErr != nil {
			return false
		}
		q := QuarantinedBatch{Position: pos, Header: h, Raw: raw}
		q.Records, q.Err = batch.Records(raw)
		return fn(q)
	})
	return cmp.Or(err, readErr)
}

// quarantinedRule is the intactRule for a file in the quarantine, from
// its name (a trailing ".<n>" from freeName is allowed).
func quarantinedRule(name string) intactRule {
	rule := intactRule{limit: math.MaxInt64, origin: -1}
	if len(name) < 24 {
		return rule
	}
	base, ok := parseSegmentName(name[:24])
	if !ok {
		return rule
	}
	rule.min = base
	var pos, offset int64
	if n, _ := fmt.Sscanf(name[24:], ".tail-at-byte-%d-offset-%d", &pos, &offset); n == 2 && offset >= base {
		// The tail starts at the damage, in the last segment: offsets
		// are contiguous from there.
		rule.min, rule.origin = offset, 0
	}
	return rule
}
