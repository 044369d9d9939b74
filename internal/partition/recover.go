package partition

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/groupd/groupd/internal/batch"
)

// ErrDamaged is wrapped by the error of Open when the log does not hold
// what its recovery checkpoint says was made durable: a bad batch below the
// recovery point, a segment that does not continue the log, a missing
// segment, a log shorter than its recovery point, or an unreadable
// checkpoint. Open then changes nothing on disk, unless Options.QuarantineDir
// is set.
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
	moves   []int64
	changed bool // cp differs from the file
}

// recover opens the segment files, checks them against the recovery
// checkpoint and rebuilds indexes and producer state.
//
// Below the recovery point every record was fsynced, so batch headers are
// checked (sane, contiguous) and anything wrong is damage. From the
// recovery point on, batches are also CRC-checked; a bad batch there in
// the last segment is a torn write and the segment is cut before it.
// Segments before the last one were fsynced when the next one was created,
// so damage in them is never a torn write. Damage stops the open with a
// DamageError, changing nothing; with a quarantine directory the damaged
// segment is moved there instead, the missing offsets are recorded as a
// gap, and no offset that the moved data may have used is given out again.
func (l *Log) recover() error {
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
	l.cp, l.cpOnDisk = cp, haveCP
	r := &recovery{l: l, cp: cp, bases: bases, expected: cp.logStart, lost: -1}
	for i := range bases {
		if err := r.segment(i); err != nil {
			return err
		}
	}
	if err := r.finish(); err != nil {
		return err
	}
	l.cp = r.cp
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
	switch {
	case len(l.segs) == 0 && base > r.expected && !r.setAside:
		if err := r.damage(&DamageError{File: path, Offset: r.expected, Position: -1,
			Reason: fmt.Sprintf("the log starts at offset %d but its first segment at %d: segments are missing", r.expected, base)}); err != nil {
			return err
		}
		r.changed = true
	case len(l.segs) == 0:
		// Set-aside segments before it, or an older segment put back.
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
	res, err := scanSegment(s.f, base, fi.Size(), r.cp.recoveryPoint, int64(l.opts.IndexIntervalBytes), l.replayProducer)
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
	if len(l.segs) == 0 {
		r.cp.logStart = base
	}
	l.segs = append(l.segs, s)
	r.expected, r.setAside = s.stats.next, false
	return nil
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
	if err := os.MkdirAll(qdir, 0o755); err != nil {
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

// salvageScan is salvage without side effects but fn.
func salvageScan(r io.ReaderAt, pos, size, next, limit int64, fn func(batch.Header)) int64 {
	sc := newScanner(r, size)
	end := next
	for pos+batch.HeaderLen <= size {
		hb, err := sc.at(pos, batch.HeaderLen)
		if err != nil {
			return end
		}
		h, err := batch.ParseHeader(hb)
		if err == nil && h.Size() <= size-pos && h.BaseOffset >= end && h.LastOffset() < limit {
			if b, err := sc.at(pos, int(h.Size())); err == nil && batch.VerifyCRC(b) == nil {
				fn(h)
				end = h.LastOffset() + 1
				pos += h.Size()
				continue
			}
		}
		pos++
	}
	return end
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
		} else if base != next && !cp.hasGap(next, base) {
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
		res, err := scanSegment(f, base, fi.Size(), math.MaxInt64, DefaultIndexIntervalBytes, func(h batch.Header, _ int64) { note(h) })
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
