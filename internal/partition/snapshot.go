package partition

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A producer-state snapshot ("<offset>.snapshot", like Kafka's) holds the
// idempotent producers' state as it was with the log ending at offset, and
// a summary of every sealed segment below it. Open starts from the newest
// snapshot at or below the recovery point: it loads the producers, trusts
// the summarized segments whose files are unchanged, and reads batch
// headers only from there on. Snapshots are written when a segment rolls
// and on Close; the newest snapshotsKept are kept.

const (
	snapshotSuffix = ".snapshot"
	snapshotsKept  = 2
)

var snapshotMagic = [4]byte{'G', 'D', 'P', 'S'}

const (
	snapshotVersion = 1
	// magic, version, offset, producer count ... segment count ..., crc
	snapshotFixedLen    = 4 + 1 + 8 + 4 + 4 + 4
	snapshotProducerLen = 8 + 2 + 8 + 1
	snapshotBatchLen    = 4 + 4 + 8 + 8
	snapshotSegmentLen  = 9 * 8
)

// segSummary is what a snapshot records of a sealed segment: its stats,
// how many index entries it has, and its file's modification time, which
// changes if the file is rewritten (by the cleaner) or touched otherwise.
type segSummary struct {
	base    int64
	stats   segStats
	entries int64
	modTime int64
}

// producerSnapshot is a decoded snapshot file.
type producerSnapshot struct {
	offset    int64
	producers map[int64]*producerEntry
	segments  map[int64]segSummary
}

func snapshotName(dir string, offset int64) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", offset, snapshotSuffix))
}

func parseSnapshotName(name string) (int64, bool) {
	s, ok := strings.CutSuffix(name, snapshotSuffix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil && v >= 0
}

// encodeSnapshot lays a snapshot out as: magic "GDPS", version byte,
// offset, the producers sorted by id (id, epoch, last timestamp, batch
// count, then each batch's first and last sequence and offsets), the
// segment summaries sorted by base, and a CRC-32C of everything before it.
// Integers are big-endian.
func encodeSnapshot(offset int64, producers map[int64]*producerEntry, segs []segSummary) []byte {
	be := binary.BigEndian
	b := append([]byte(nil), snapshotMagic[:]...)
	b = append(b, snapshotVersion)
	b = be.AppendUint64(b, uint64(offset))
	ids := make([]int64, 0, len(producers))
	for id := range producers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b = be.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		e := producers[id]
		b = be.AppendUint64(b, uint64(id))
		b = be.AppendUint16(b, uint16(e.epoch))
		b = be.AppendUint64(b, uint64(e.lastTimestamp))
		b = append(b, byte(len(e.batches)))
		for _, pb := range e.batches {
			b = be.AppendUint32(b, uint32(pb.firstSeq))
			b = be.AppendUint32(b, uint32(pb.lastSeq))
			b = be.AppendUint64(b, uint64(pb.firstOffset))
			b = be.AppendUint64(b, uint64(pb.lastOffset))
		}
	}
	segs = slices.SortedFunc(slices.Values(segs), func(a, b segSummary) int { return cmp.Compare(a.base, b.base) })
	b = be.AppendUint32(b, uint32(len(segs)))
	for _, s := range segs {
		for _, v := range []int64{s.base, s.stats.size, s.stats.next, s.stats.maxTS, s.stats.maxTSOffset,
			s.stats.lastEntryPos, s.stats.firstTS, s.entries, s.modTime} {
			b = be.AppendUint64(b, uint64(v))
		}
	}
	return be.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeSnapshot parses a snapshot file; anything that is not exactly what
// encodeSnapshot writes, or that describes an impossible state, is an
// error.
func decodeSnapshot(b []byte) (producerSnapshot, error) {
	var ps producerSnapshot
	if len(b) < snapshotFixedLen {
		return ps, fmt.Errorf("%d bytes, want at least %d", len(b), snapshotFixedLen)
	}
	if [4]byte(b[:4]) != snapshotMagic {
		return ps, fmt.Errorf("bad magic %q", b[:4])
	}
	if b[4] != snapshotVersion {
		return ps, fmt.Errorf("unknown version %d", b[4])
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return ps, fmt.Errorf("crc %08x, stored %08x", got, sum)
	}
	d := decoder{b: body[5:]}
	ps.offset = d.i64()
	if ps.offset < 0 {
		return ps, fmt.Errorf("offset %d", ps.offset)
	}
	n := d.u32()
	if uint64(n)*snapshotProducerLen > uint64(len(d.b)) {
		return ps, fmt.Errorf("%d producers in %d bytes", n, len(d.b))
	}
	ps.producers = make(map[int64]*producerEntry, n)
	prev := int64(-1)
	for range n {
		id := d.i64()
		e := &producerEntry{epoch: int16(d.u16()), lastTimestamp: d.i64()}
		nb := int(d.u8())
		if d.err || id <= prev || nb > producerBatchesToRetain {
			return ps, fmt.Errorf("producer %d (after %d) with %d batches", id, prev, nb)
		}
		prev = id
		for range nb {
			pb := producerBatch{firstSeq: int32(d.u32()), lastSeq: int32(d.u32()), firstOffset: d.i64(), lastOffset: d.i64()}
			if pb.firstOffset < 0 || pb.lastOffset < pb.firstOffset || pb.lastOffset >= ps.offset {
				return ps, fmt.Errorf("producer %d: batch at offsets %d to %d", id, pb.firstOffset, pb.lastOffset)
			}
			e.batches = append(e.batches, pb)
		}
		ps.producers[id] = e
	}
	n = d.u32()
	if uint64(n)*snapshotSegmentLen != uint64(len(d.b)) {
		return ps, fmt.Errorf("%d segments in %d bytes", n, len(d.b))
	}
	ps.segments = make(map[int64]segSummary, n)
	prevEnd := int64(-1)
	for range n {
		s := segSummary{base: d.i64()}
		s.stats = segStats{size: d.i64(), next: d.i64(), maxTS: d.i64(), maxTSOffset: d.i64(), lastEntryPos: d.i64(), firstTS: d.i64()}
		s.entries, s.modTime = d.i64(), d.i64()
		if s.base < prevEnd || s.stats.next < s.base || s.stats.next > ps.offset || s.stats.size < 0 ||
			s.entries < 0 || s.stats.lastEntryPos < 0 || s.stats.lastEntryPos > s.stats.size {
			return ps, fmt.Errorf("segment %d: size %d, offsets to %d, %d index entries", s.base, s.stats.size, s.stats.next, s.entries)
		}
		prevEnd = s.stats.next
		ps.segments[s.base] = s
	}
	if d.err {
		return ps, errors.New("truncated")
	}
	return ps, nil
}

// decoder reads big-endian integers; past the end it reads zeros and sets
// err.
type decoder struct {
	b   []byte
	err bool
}

func (d *decoder) take(n int) []byte {
	if len(d.b) < n {
		d.err = true
		d.b = nil
		return make([]byte, n)
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() uint8   { return d.take(1)[0] }
func (d *decoder) u16() uint16 { return binary.BigEndian.Uint16(d.take(2)) }
func (d *decoder) u32() uint32 { return binary.BigEndian.Uint32(d.take(4)) }
func (d *decoder) i64() int64  { return int64(binary.BigEndian.Uint64(d.take(8))) }

// snapshotOffsets lists the offsets of dir's snapshot files, ascending.
func snapshotOffsets(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, e := range ents {
		if off, ok := parseSnapshotName(e.Name()); ok && e.Type().IsRegular() {
			out = append(out, off)
		}
	}
	slices.Sort(out)
	return out, nil
}

// loadSnapshot returns the newest snapshot in dir at or below limit that
// decodes; ok is false if there is none. A snapshot that does not decode
// is logged and passed over: it is derived data, and the log it describes
// is read instead.
func (l *Log) loadSnapshot(limit int64) (producerSnapshot, bool) {
	offs, err := snapshotOffsets(l.dir)
	if err != nil {
		l.log.Warn("listing producer snapshots", "err", err)
		return producerSnapshot{}, false
	}
	l.snapshots = offs
	for i := len(offs) - 1; i >= 0; i-- {
		if offs[i] > limit {
			continue
		}
		path := snapshotName(l.dir, offs[i])
		raw, err := os.ReadFile(path)
		if err == nil {
			var ps producerSnapshot
			if ps, err = decodeSnapshot(raw); err == nil && ps.offset == offs[i] {
				return ps, true
			}
			if err == nil {
				err = fmt.Errorf("it holds offset %d", ps.offset)
			}
		}
		l.log.Warn("passing over an unusable producer snapshot; the segments it described are read instead", "file", path, "err", err)
	}
	return producerSnapshot{}, false
}

// writeSnapshot records the producer state with the log ending at offset,
// and the sealed segments below it, then removes snapshots beyond the
// newest snapshotsKept. Caller holds wmu, so the producers are as of the
// log end, which must be offset.
func (l *Log) writeSnapshot(offset int64) error {
	var segs []segSummary
	l.mu.RLock()
	for _, s := range l.segs {
		if s.sealed != nil && s.sealed.stats.next <= offset {
			segs = append(segs, *s.sealed)
		}
	}
	l.mu.RUnlock()
	if err := WriteFileAtomic(snapshotName(l.dir, offset), encodeSnapshot(offset, l.producers, segs)); err != nil {
		return err
	}
	if i, found := slices.BinarySearch(l.snapshots, offset); !found {
		l.snapshots = slices.Insert(l.snapshots, i, offset)
	}
	for len(l.snapshots) > snapshotsKept {
		if err := os.Remove(snapshotName(l.dir, l.snapshots[0])); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		l.snapshots = l.snapshots[1:]
	}
	return nil
}
