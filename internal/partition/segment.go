package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/groupd/groupd/internal/batch"
)

const (
	logSuffix   = ".log"
	indexSuffix = ".index"
	// indexEntrySize is the on-disk size of an indexEntry: three
	// big-endian int64s.
	indexEntrySize = 24
	// scanWindow is how much a scanner reads at once. Headers of
	// consecutive small batches then cost one pread per window instead of
	// one per batch.
	scanWindow = 64 << 10
)

func segmentName(dir string, base int64, suffix string) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", base, suffix))
}

// parseSegmentName returns the base offset of a "<20 digits>.log" name.
func parseSegmentName(name string) (int64, bool) {
	s, ok := strings.CutSuffix(name, logSuffix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// indexEntry is one sparse index entry: the batch with base offset offset
// starts at file position pos, and every batch before it in the segment has
// MaxTimestamp <= maxTSBefore. Because maxTSBefore never decreases along the
// index, a timestamp search can binary-search for where to start scanning,
// and the entry is final when written (unlike a per-chunk maximum).
type indexEntry struct {
	offset      int64
	pos         int64
	maxTSBefore int64
}

func appendIndexEntry(dst []byte, e indexEntry) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.offset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.pos))
	return binary.BigEndian.AppendUint64(dst, uint64(e.maxTSBefore))
}

func encodeIndex(entries []indexEntry) []byte {
	out := make([]byte, 0, len(entries)*indexEntrySize)
	for _, e := range entries {
		out = appendIndexEntry(out, e)
	}
	return out
}

// segStats is the published state of a segment. The writer computes a new
// value and stores it under Log.mu; readers copy it under the read lock.
type segStats struct {
	size int64 // bytes of complete, visible batches
	next int64 // offset after the last batch
	// maxTS is the largest batch MaxTimestamp and maxTSOffset the base
	// offset of the first batch carrying it (-1 if none).
	maxTS        int64
	maxTSOffset  int64
	lastEntryPos int64
}

func newSegStats(base int64) segStats {
	return segStats{next: base, maxTS: math.MinInt64, maxTSOffset: -1}
}

// add accounts for batch h written at pos, returning the index entry to add
// if one is due. Append and recovery both go through here, so a rebuilt
// index is byte-identical to the one written while appending.
func (st *segStats) add(h batch.Header, pos int64, interval int64) (indexEntry, bool) {
	var e indexEntry
	due := pos == 0 || pos-st.lastEntryPos >= interval
	if due {
		e = indexEntry{offset: h.BaseOffset, pos: pos, maxTSBefore: st.maxTS}
		st.lastEntryPos = pos
	}
	if h.MaxTimestamp > st.maxTS || st.maxTSOffset < 0 {
		st.maxTS = h.MaxTimestamp
		st.maxTSOffset = h.BaseOffset
	}
	st.size = pos + h.Size()
	st.next = h.LastOffset() + 1
	return e, due
}

// segment is one .log file and its sparse index.
type segment struct {
	base int64
	f    *os.File
	idx  *os.File

	// Guarded by Log.mu; the writer holds Log.wmu too when changing them.
	stats   segStats
	entries []indexEntry

	// Writer-only (Log.wmu): entries already written to idx.
	idxWritten int
}

// lookup returns the file position of the last index entry at or before
// offset, where a scan for offset should begin.
func lookup(entries []indexEntry, offset int64) int64 {
	lo, hi := 0, len(entries)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if entries[m].offset <= offset {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return 0
	}
	return entries[lo-1].pos
}

// scanner reads byte ranges of a segment through a window buffer.
type scanner struct {
	r     io.ReaderAt
	size  int64
	buf   []byte
	start int64
	n     int
}

func newScanner(r io.ReaderAt, size int64) *scanner {
	return &scanner{r: r, size: size}
}

// at returns n bytes at pos. The slice is valid until the next call. The
// caller must ensure pos+n <= size.
func (s *scanner) at(pos int64, n int) ([]byte, error) {
	if pos >= s.start && pos+int64(n) <= s.start+int64(s.n) {
		off := pos - s.start
		return s.buf[off : off+int64(n)], nil
	}
	if n > scanWindow {
		b := make([]byte, n)
		if _, err := s.r.ReadAt(b, pos); err != nil {
			return nil, err
		}
		return b, nil
	}
	if s.buf == nil {
		s.buf = make([]byte, scanWindow)
	}
	m := int(min(int64(scanWindow), s.size-pos))
	if _, err := s.r.ReadAt(s.buf[:m], pos); err != nil && !(errors.Is(err, io.EOF) && m >= n) {
		s.n = 0
		return nil, err
	}
	s.start, s.n = pos, m
	return s.buf[:n], nil
}

// scanResult is what scanning a segment file found.
type scanResult struct {
	stats   segStats
	entries []indexEntry
	// bad describes why the scan stopped before the end of the file; the
	// file holds valid batches only up to stats.size.
	bad string
}

// scanSegment walks the batches of a segment file of fileSize bytes whose
// first batch must have base offset base. Every batch must have a sane
// header, fit in the file and continue the offsets of the one before it;
// batches holding offsets at or above crcFrom (the part of the log past its
// recovery point, whose tail may be torn) are also read whole and
// CRC-checked. fn
// sees each valid batch header. An I/O error is returned as err; invalid
// content stops the scan with res.bad set, at byte res.stats.size where
// offset res.stats.next was expected.
func scanSegment(r io.ReaderAt, base, fileSize, crcFrom int64, interval int64, fn func(batch.Header, int64)) (res scanResult, err error) {
	res.stats = newSegStats(base)
	sc := newScanner(r, fileSize)
	for pos := int64(0); pos < fileSize; {
		if fileSize-pos < batch.HeaderLen {
			res.bad = fmt.Sprintf("partial batch header at position %d", pos)
			return res, nil
		}
		hb, err := sc.at(pos, batch.HeaderLen)
		if err != nil {
			return res, err
		}
		h, err := batch.ParseHeader(hb)
		if err != nil {
			res.bad = fmt.Sprintf("bad batch header at position %d: %v", pos, err)
			return res, nil
		}
		if h.Size() > fileSize-pos {
			res.bad = fmt.Sprintf("partial batch at position %d (%d of %d bytes)", pos, fileSize-pos, h.Size())
			return res, nil
		}
		if h.BaseOffset != res.stats.next || h.LastOffset() < h.BaseOffset {
			res.bad = fmt.Sprintf("batch at position %d has base offset %d, expected %d", pos, h.BaseOffset, res.stats.next)
			return res, nil
		}
		if h.LastOffset() >= crcFrom {
			b, err := sc.at(pos, int(h.Size()))
			if err != nil {
				return res, err
			}
			if err := batch.VerifyCRC(b); err != nil {
				res.bad = fmt.Sprintf("batch at position %d: %v", pos, err)
				return res, nil
			}
		}
		if e, ok := res.stats.add(h, pos, interval); ok {
			res.entries = append(res.entries, e)
		}
		if fn != nil {
			fn(h, pos)
		}
		pos += h.Size()
	}
	return res, nil
}
