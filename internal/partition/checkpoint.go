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
)

// checkpointName is the per-partition file that says how much of the log
// is known to be durable, like Kafka's recovery-point-offset-checkpoint
// and log-start-offset-checkpoint files (kept per log directory there,
// per partition here so a partition directory describes itself).
const checkpointName = "recovery-checkpoint"

// checkpoint is what a partition knows about its own durability.
//
// Every record below recoveryPoint was fsynced, so on open everything
// below it must be there and well formed; only batches from the recovery
// point on are checked with their CRC and may be cut as a torn write.
// logStart is the first offset the log serves (retention and
// DeleteRecords move it; segments wholly below it are deleted, and a start
// after a crash finishes such a deletion); gaps are offset ranges whose
// segments an operator chose to move aside, so their absence is known and
// not damage. cleanedTo is where the last clean of the compacting cleaner
// stopped, so the next one starts there; below gapsBelow batches and
// segments may leave offsets out, as the cleaner removed them (a clean
// records it before it rewrites anything, and cleanedTo after).
//
// A replica's log (Options.Replicated) also keeps its high watermark here
// (hasHW), written whenever the checkpoint is, like Kafka's
// replication-offset-checkpoint: never above what SetHighWatermark was
// given, so after a crash it can only be lower than it was. With
// truncating set, a TruncateTo is in progress (see truncate.go): every
// record at or past truncateTo is to go, and Open finishes the job;
// truncateFull says the truncation empties the log, which restarts at
// truncateTo (equal to logStart then). The zero value has neither.
type checkpoint struct {
	logStart      int64
	recoveryPoint int64
	cleanedTo     int64
	gapsBelow     int64
	gaps          []offsetRange
	hw            int64
	hasHW         bool
	truncating    bool
	truncateTo    int64
	truncateFull  bool
}

// offsetRange is the half-open offset range [from, to).
type offsetRange struct{ from, to int64 }

var checkpointMagic = [4]byte{'G', 'D', 'R', 'C'}

const (
	// Version 2 added the cleaner's offsets, version 3 the high
	// watermark and a truncation in progress. A checkpoint without
	// either is still written as version 2, so that a single node's
	// files stay what earlier groupd wrote; versions 1 and 2 are read.
	checkpointVersion = 3
	// magic, version, log start, recovery point, gap count, ..., crc
	checkpointV1FixedLen = 4 + 1 + 8 + 8 + 4 + 4
	// and the cleaned-to and gaps-below offsets after the recovery point
	checkpointV2FixedLen = checkpointV1FixedLen + 16
	// and the high watermark, the truncation offset and its full flag
	checkpointFixedLen = checkpointV2FixedLen + 8 + 8 + 1
	checkpointGapLen   = 16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (c checkpoint) equal(o checkpoint) bool {
	return c.logStart == o.logStart && c.recoveryPoint == o.recoveryPoint && c.cleanedTo == o.cleanedTo && c.gapsBelow == o.gapsBelow && slices.Equal(c.gaps, o.gaps) &&
		c.hw == o.hw && c.hasHW == o.hasHW && c.truncating == o.truncating && c.truncateTo == o.truncateTo && c.truncateFull == o.truncateFull
}

// v3 reports whether the checkpoint needs version 3.
func (c checkpoint) v3() bool { return c.hasHW || c.truncating }

// encode lays the checkpoint out as: magic "GDRC", version byte, log start,
// recovery point, cleaned-to and gaps-below offsets (big-endian int64),
// in version 3 the high watermark and the truncation offset (int64, -1
// for none) and a byte 1 if the truncation empties the log (else 0), gap
// count (uint32) and the gaps as pairs of int64, then a CRC-32C of
// everything before it. Version 1 had no cleaner offsets; version 2 is
// written when there is neither a high watermark nor a truncation.
func (c checkpoint) encode() []byte {
	b := make([]byte, 0, checkpointFixedLen+len(c.gaps)*checkpointGapLen)
	b = append(b, checkpointMagic[:]...)
	if c.v3() {
		b = append(b, checkpointVersion)
	} else {
		b = append(b, 2)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(c.logStart))
	b = binary.BigEndian.AppendUint64(b, uint64(c.recoveryPoint))
	b = binary.BigEndian.AppendUint64(b, uint64(c.cleanedTo))
	b = binary.BigEndian.AppendUint64(b, uint64(c.gapsBelow))
	if c.v3() {
		b = binary.BigEndian.AppendUint64(b, uint64(c.hw))
		to := int64(-1)
		if c.truncating {
			to = c.truncateTo
		}
		b = binary.BigEndian.AppendUint64(b, uint64(to))
		full := byte(0)
		if c.truncateFull {
			full = 1
		}
		b = append(b, full)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.gaps)))
	for _, g := range c.gaps {
		b = binary.BigEndian.AppendUint64(b, uint64(g.from))
		b = binary.BigEndian.AppendUint64(b, uint64(g.to))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeCheckpoint parses a checkpoint file. Anything that is not exactly
// what encode writes is an error.
func decodeCheckpoint(b []byte) (checkpoint, error) {
	var c checkpoint
	if len(b) < checkpointV1FixedLen {
		return c, fmt.Errorf("%d bytes, want at least %d", len(b), checkpointV1FixedLen)
	}
	if [4]byte(b[:4]) != checkpointMagic {
		return c, fmt.Errorf("bad magic %q", b[:4])
	}
	var fixed int
	switch b[4] {
	case 1:
		fixed = checkpointV1FixedLen
	case 2:
		fixed = checkpointV2FixedLen
	case checkpointVersion:
		fixed = checkpointFixedLen
	default:
		return c, fmt.Errorf("unknown version %d", b[4])
	}
	if len(b) < fixed {
		return c, fmt.Errorf("%d bytes, want at least %d", len(b), fixed)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return c, fmt.Errorf("crc %08x, stored %08x", got, sum)
	}
	be := binary.BigEndian
	c.logStart = int64(be.Uint64(b[5:]))
	c.recoveryPoint = int64(be.Uint64(b[13:]))
	pos := 21
	if fixed >= checkpointV2FixedLen {
		c.cleanedTo = int64(be.Uint64(b[21:]))
		c.gapsBelow = int64(be.Uint64(b[29:]))
		pos += 16
	}
	if fixed == checkpointFixedLen {
		c.hw, c.hasHW = int64(be.Uint64(b[pos:])), true
		switch to := int64(be.Uint64(b[pos+8:])); {
		case to >= 0:
			c.truncating, c.truncateTo = true, to
		case to != -1:
			return c, fmt.Errorf("truncation to %d", to)
		}
		switch b[pos+16] {
		case 0:
		case 1:
			c.truncateFull = true
		default:
			return c, fmt.Errorf("truncation flag %d", b[pos+16])
		}
		pos += 17
	}
	n := be.Uint32(b[pos:])
	rest := body[pos+4:]
	if uint64(len(rest)) != uint64(n)*checkpointGapLen {
		return c, fmt.Errorf("%d gaps in %d bytes", n, len(rest))
	}
	if c.logStart < 0 || c.recoveryPoint < c.logStart || c.cleanedTo < 0 || c.gapsBelow < c.cleanedTo {
		return c, fmt.Errorf("log start %d, recovery point %d, cleaned to %d, gaps below %d", c.logStart, c.recoveryPoint, c.cleanedTo, c.gapsBelow)
	}
	// A truncation is recorded with the recovery point at or below it,
	// and one that empties the log restarts it there.
	if c.hw < 0 || (c.truncating && (c.truncateTo < c.logStart || c.recoveryPoint > c.truncateTo)) ||
		(c.truncateFull && (!c.truncating || c.truncateTo != c.logStart)) {
		return c, fmt.Errorf("high watermark %d, truncation to %d (full %v), log start %d, recovery point %d", c.hw, c.truncateTo, c.truncateFull, c.logStart, c.recoveryPoint)
	}
	prev := c.logStart
	for i := range int(n) {
		g := offsetRange{int64(be.Uint64(rest[i*16:])), int64(be.Uint64(rest[i*16+8:]))}
		if g.from < prev || g.to <= g.from {
			return c, fmt.Errorf("gap [%d, %d) out of order", g.from, g.to)
		}
		c.gaps = append(c.gaps, g)
		prev = g.to
	}
	return c, nil
}

// hasGap reports whether [from, to) is a recorded gap.
func (c checkpoint) hasGap(from, to int64) bool {
	return slices.Contains(c.gaps, offsetRange{from, to})
}

// addGap records [from, to), merging it with touching gaps.
func (c *checkpoint) addGap(from, to int64) {
	c.gaps = append(slices.Clone(c.gaps), offsetRange{from, to})
	c.normalize()
}

// normalize sorts and merges the gaps and drops those at or below the log
// start, and keeps the recovery point at or above the log start.
func (c *checkpoint) normalize() {
	c.recoveryPoint = max(c.recoveryPoint, c.logStart)
	gs := slices.Clone(c.gaps)
	slices.SortFunc(gs, func(a, b offsetRange) int { return cmp.Compare(a.from, b.from) })
	var out []offsetRange
	for _, g := range gs {
		if g.to <= c.logStart {
			continue
		}
		if n := len(out); n > 0 && g.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, g.to)
			continue
		}
		out = append(out, g)
	}
	c.gaps = out
}

// readCheckpoint reads dir's checkpoint; ok is false if there is none.
func readCheckpoint(dir string) (c checkpoint, ok bool, err error) {
	path := filepath.Join(dir, checkpointName)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, false, nil
	}
	if err != nil {
		return c, false, err
	}
	c, err = decodeCheckpoint(raw)
	if err != nil {
		return c, false, &DamageError{File: path, Offset: -1, Position: -1,
			Reason: fmt.Sprintf("unreadable recovery checkpoint: %v", err)}
	}
	return c, true, nil
}

// writeCheckpoint replaces dir's checkpoint atomically: a crash leaves
// either the old or the new one, never a mix.
func writeCheckpoint(dir string, c checkpoint) error {
	return WriteFileAtomic(filepath.Join(dir, checkpointName), c.encode())
}

// WriteFileAtomic replaces path with data so that a crash leaves either
// the old or the new content: it writes a temporary file beside it, fsyncs
// it, renames it over path and fsyncs the directory. The broker's metadata
// files use it too.
func WriteFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}
