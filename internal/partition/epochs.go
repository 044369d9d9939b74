package partition

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/groupd/groupd/internal/batch"
)

// The leader-epoch cache, as Kafka's LeaderEpochFileCache: the first
// offset of every leader epoch the log holds records of, strictly
// increasing in both epoch and offset. The leader stamps its epoch in
// every batch it appends (PartitionLeaderEpoch); a follower learns the
// epochs from the batches it copies. A replica asking OffsetForLeaderEpoch
// (and a leader answering it) finds with EndOffsetFor where its log and
// the leader's part.
//
// The cache lives in "leader-epoch-checkpoint" in the partition
// directory, in Kafka's text format: a version line "0", a count line,
// then one "<epoch> <start offset>" line per entry. It is replaced
// atomically (WriteFileAtomic) at every change, before the records it
// describes are written: after a crash the file can only describe more
// than the log holds, and Open drops the entries past the log end. A
// log without the file (written before groupd kept one) gets its cache
// from its batch headers.

// epochFileName is the leader-epoch cache's file, named as Kafka's.
const epochFileName = "leader-epoch-checkpoint"

// epochEntry is one leader epoch and the first offset written in it.
type epochEntry struct {
	epoch int32
	start int64
}

// epochCache is the list of epochs, oldest first. Its methods are
// Kafka's; the Log guards it with epochMu.
type epochCache struct {
	entries []epochEntry
}

// latest is the newest entry.
func (c *epochCache) latest() (epochEntry, bool) {
	if len(c.entries) == 0 {
		return epochEntry{}, false
	}
	return c.entries[len(c.entries)-1], true
}

// endOffsetFor is the largest cached epoch at or below epoch and where it
// ends: the next entry's start, or leo for the newest. ok is false if
// every cached epoch is larger (or none is cached).
func (c *epochCache) endOffsetFor(epoch int32, leo int64) (found int32, end int64, ok bool) {
	for i := len(c.entries) - 1; i >= 0; i-- {
		if e := c.entries[i]; e.epoch <= epoch {
			end = leo
			if i+1 < len(c.entries) {
				end = c.entries[i+1].start
			}
			return e.epoch, end, true
		}
	}
	return 0, 0, false
}

// leaderAnswer is Kafka's LeaderEpochFileCache.endOffsetFor as a leader
// answers OffsetForLeaderEpoch: for the newest cached epoch, it and leo;
// for an older one, the largest cached epoch at or below it and the start
// of the next; for one older than every cached epoch (the log's start
// moved past it), the epoch asked for and the first cached start, so
// that a follower truncates no further than where the leader's log
// begins; and the undefined epoch and offset (-1, -1) for an undefined
// epoch, one newer than every cached, or an empty cache.
func (c *epochCache) leaderAnswer(epoch int32, leo int64) (int32, int64) {
	latest, ok := c.latest()
	switch {
	case !ok || epoch < 0:
		return -1, -1
	case epoch == latest.epoch:
		return epoch, leo
	}
	higher := -1
	for i, e := range c.entries {
		if e.epoch > epoch {
			higher = i
			break
		}
	}
	switch {
	case higher < 0:
		return -1, -1
	case higher == 0:
		return epoch, c.entries[0].start
	}
	return c.entries[higher-1].epoch, c.entries[higher].start
}

// truncateFromEnd drops the entries starting at or after offset (Kafka's
// truncateFromEnd); it reports whether any went.
func (c *epochCache) truncateFromEnd(offset int64) bool {
	n := len(c.entries)
	for n > 0 && c.entries[n-1].start >= offset {
		n--
	}
	changed := n < len(c.entries)
	c.entries = c.entries[:n:n]
	return changed
}

// truncateFromStart drops the entries wholly below offset and moves the
// start of the one covering it up to offset (Kafka's truncateFromStart);
// it reports whether anything changed.
func (c *epochCache) truncateFromStart(offset int64) bool {
	n := 0
	for n < len(c.entries) && c.entries[n].start <= offset {
		n++
	}
	if n == 0 || (n == 1 && c.entries[0].start == offset) {
		return false
	}
	covering := c.entries[n-1]
	covering.start = offset
	c.entries = append([]epochEntry{covering}, c.entries[n:]...)
	return true
}

// add appends e, which must follow the newest entry in epoch, and replaces
// a newest entry at the same start (an epoch in which nothing was
// written), as Kafka's assign does.
func (c *epochCache) add(e epochEntry) {
	if n := len(c.entries); n > 0 && c.entries[n-1].start == e.start {
		c.entries = c.entries[:n-1]
	}
	c.entries = append(c.entries[:len(c.entries):len(c.entries)], e)
}

// clone returns a copy that does not share the entries.
func (c *epochCache) clone() epochCache {
	return epochCache{entries: append([]epochEntry(nil), c.entries...)}
}

// encodeEpochs writes the entries in Kafka's leader-epoch-checkpoint
// format.
func encodeEpochs(entries []epochEntry) []byte {
	b := make([]byte, 0, 8+len(entries)*16)
	b = append(b, "0\n"...)
	b = strconv.AppendInt(b, int64(len(entries)), 10)
	b = append(b, '\n')
	for _, e := range entries {
		b = strconv.AppendInt(b, int64(e.epoch), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, e.start, 10)
		b = append(b, '\n')
	}
	return b
}

// decodeEpochs parses a leader-epoch-checkpoint file. It accepts exactly
// what encodeEpochs writes (which is what Kafka writes): version 0, a
// count that matches the lines, decimal numbers without signs or leading
// zeros, one space between epoch and offset, each line ending in a
// newline, epochs and offsets not negative and strictly increasing.
func decodeEpochs(b []byte) ([]epochEntry, error) {
	s := string(b)
	if !strings.HasSuffix(s, "\n") {
		return nil, errors.New("the last line does not end with a newline")
	}
	lines := strings.Split(s[:len(s)-1], "\n")
	if len(lines) < 2 {
		return nil, fmt.Errorf("%d lines, want a version and a count", len(lines))
	}
	if lines[0] != "0" {
		return nil, fmt.Errorf("version %q, want 0", lines[0])
	}
	n, err := parseCanonical(lines[1], 31)
	if err != nil {
		return nil, fmt.Errorf("count: %v", err)
	}
	if n != int64(len(lines)-2) {
		return nil, fmt.Errorf("count %d, but %d entries follow", n, len(lines)-2)
	}
	out := make([]epochEntry, 0, n)
	for i, line := range lines[2:] {
		es, ss, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("entry %d: %q is not \"<epoch> <offset>\"", i, line)
		}
		epoch, err := parseCanonical(es, 31)
		if err != nil {
			return nil, fmt.Errorf("entry %d: epoch: %v", i, err)
		}
		start, err := parseCanonical(ss, 63)
		if err != nil {
			return nil, fmt.Errorf("entry %d: offset: %v", i, err)
		}
		e := epochEntry{epoch: int32(epoch), start: start}
		if k := len(out); k > 0 && (e.epoch <= out[k-1].epoch || e.start <= out[k-1].start) {
			return nil, fmt.Errorf("entry %d (epoch %d at %d) does not follow epoch %d at %d", i, e.epoch, e.start, out[k-1].epoch, out[k-1].start)
		}
		out = append(out, e)
	}
	return out, nil
}

// parseCanonical parses a non-negative decimal below 2^bits written
// without sign or leading zeros.
func parseCanonical(s string, bits int) (int64, error) {
	if s == "" || (len(s) > 1 && s[0] == '0') || s[0] < '0' || s[0] > '9' {
		return 0, fmt.Errorf("%q is not a decimal number", s)
	}
	v, err := strconv.ParseInt(s, 10, bits+1)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a decimal number below 2^%d", s, bits)
	}
	return v, nil
}

// readEpochFile reads dir's leader-epoch cache; ok is false if there is
// none. A file that does not decode is a DamageError naming it.
func readEpochFile(dir string) (entries []epochEntry, ok bool, err error) {
	path := filepath.Join(dir, epochFileName)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	entries, err = decodeEpochs(raw)
	if err != nil {
		return nil, false, &DamageError{File: path, Offset: -1, Position: -1,
			Reason: fmt.Sprintf("unreadable leader-epoch checkpoint: %v", err)}
	}
	return entries, true, nil
}

// writeEpochFile replaces dir's leader-epoch cache atomically.
func writeEpochFile(dir string, entries []epochEntry) error {
	return WriteFileAtomic(filepath.Join(dir, epochFileName), encodeEpochs(entries))
}

// editEpochs changes the cache with edit, which reports whether it
// changed anything, and then writes it, before anyone sees the change.
// epochMu is held throughout, so edits do not interleave and readers never
// see a cache the file does not hold yet. A failed write leaves the cache
// as it was.
func (l *Log) editEpochs(edit func(c *epochCache) (bool, error)) error {
	l.epochMu.Lock()
	defer l.epochMu.Unlock()
	c := l.epochs.clone()
	changed, err := edit(&c)
	if err != nil || !changed {
		return err
	}
	if err := writeEpochFile(l.dir, c.entries); err != nil {
		return fmt.Errorf("writing the leader-epoch checkpoint: %w", err)
	}
	l.epochs = c
	return nil
}

// restamp makes the newest cached epoch the one appends stamp. Caller
// holds wmu (or is Open).
func (l *Log) restamp() {
	l.epochMu.Lock()
	defer l.epochMu.Unlock()
	e, ok := l.epochs.latest()
	l.stamp, l.stampKnown = e.epoch, ok
}

// Latest is the newest leader epoch in the cache; ok is false if it is
// empty. (replica.EpochCache)
func (l *Log) Latest() (epoch int32, ok bool) {
	l.epochMu.Lock()
	defer l.epochMu.Unlock()
	e, ok := l.epochs.latest()
	return e.epoch, ok
}

// EndOffsetFor is Kafka's LeaderEpochFileCache.endOffsetFor as
// replica.EpochCache has it: the largest cached epoch at or below epoch,
// and its end offset, the start of the next cached epoch or, for the
// newest, the log end offset. ok is false if every cached epoch is larger
// than epoch, or none is cached. A follower asks its own cache this;
// a leader answering OffsetForLeaderEpoch uses OffsetForLeaderEpoch.
func (l *Log) EndOffsetFor(epoch int32) (found int32, end int64, ok bool) {
	l.epochMu.Lock()
	defer l.epochMu.Unlock()
	return l.epochs.endOffsetFor(epoch, l.leo.Load())
}

// OffsetForLeaderEpoch is what the partition's leader answers to
// OffsetForLeaderEpoch for epoch: Kafka's LeaderEpochFileCache.endOffsetFor,
// the epoch and its end offset, or -1, -1 when it cannot say.
func (l *Log) OffsetForLeaderEpoch(epoch int32) (int32, int64) {
	l.epochMu.Lock()
	defer l.epochMu.Unlock()
	return l.epochs.leaderAnswer(epoch, l.leo.Load())
}

// LeaderEpochs returns the cache as (epoch, start offset) pairs, oldest
// first, for diagnostics and tests.
func (l *Log) LeaderEpochs() [][2]int64 {
	l.epochMu.Lock()
	defer l.epochMu.Unlock()
	out := make([][2]int64, len(l.epochs.entries))
	for i, e := range l.epochs.entries {
		out[i] = [2]int64{int64(e.epoch), e.start}
	}
	return out
}

// AssignEpoch records that leader epoch epoch starts at offset start, as
// a new leader does (Kafka's assign): from then on Append stamps epoch as
// the PartitionLeaderEpoch of every batch. The entry is durable when
// AssignEpoch returns. An epoch equal to the newest cached one is already
// assigned and changes nothing; an older one is refused, as is a start
// past the log end. A start below the log end (records the leader
// appended in its previous epoch that the caller had not heard of yet)
// is recorded at the log end, where the epoch's first record will go: the
// cache must describe the batches as they are stamped. A newest entry
// with no record (starting at the log end) is replaced.
func (l *Log) AssignEpoch(epoch int32, start int64) error {
	if epoch < 0 || start < 0 {
		return fmt.Errorf("leader epoch %d at offset %d: negative", epoch, start)
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.isClosed() {
		return ErrClosed
	}
	if l.failed != nil {
		return fmt.Errorf("%w: %v", ErrFailed, l.failed)
	}
	err := l.editEpochs(func(c *epochCache) (bool, error) {
		if last, ok := c.latest(); ok {
			if epoch == last.epoch {
				return false, nil
			}
			if epoch < last.epoch {
				return false, fmt.Errorf("leader epoch %d is older than the newest cached epoch %d (from offset %d)", epoch, last.epoch, last.start)
			}
		}
		leo := l.leo.Load()
		if start > leo {
			return false, fmt.Errorf("leader epoch %d at offset %d: past the log end offset %d", epoch, start, leo)
		}
		if start < leo {
			l.log.Warn("a leader epoch starts below the log end; recording it at the log end", "epoch", epoch, "start", start, "log_end", leo)
			start = leo
		}
		c.add(epochEntry{epoch: epoch, start: start})
		return true, nil
	})
	l.restamp()
	return err
}

// epochsFromHeaders rebuilds the cache from the batches' PartitionLeaderEpoch
// in one pass over the batch headers of every segment: an entry at each
// batch whose epoch is newer than the last. Negative epochs (none
// stamped) are passed over.
func (l *Log) epochsFromHeaders() (epochCache, error) {
	var c epochCache
	for _, s := range l.segs {
		v := s.view()
		sc := newScanner(v.f, v.stats.size)
		for pos := int64(0); pos+batch.HeaderLen <= v.stats.size; {
			hb, err := sc.at(pos, batch.HeaderLen)
			if err != nil {
				return c, readErr(err)
			}
			h, err := batch.ParseHeader(hb)
			if err != nil {
				return c, fmt.Errorf("segment %d position %d: %w", v.base, pos, err)
			}
			if last, ok := c.latest(); h.PartitionLeaderEpoch >= 0 && (!ok || h.PartitionLeaderEpoch > last.epoch) {
				c.add(epochEntry{epoch: h.PartitionLeaderEpoch, start: h.BaseOffset})
			}
			pos += h.Size()
		}
	}
	return c, nil
}

// loadEpochs sets up the cache on Open, once the segments are recovered:
// from the file (entries holds it, have says it was there) or, without
// one, from the batch headers; then cut to the log as it is (from the
// start at the log start offset, from the end past the log end) and
// written back if that changed it.
func (l *Log) loadEpochs(entries []epochEntry, have bool) error {
	var c epochCache
	write := false
	switch {
	case have:
		c.entries = entries
	case l.hasData():
		var err error
		if c, err = l.epochsFromHeaders(); err != nil {
			return fmt.Errorf("rebuilding the leader-epoch cache from batch headers: %w", err)
		}
		l.log.Info("rebuilt the leader-epoch cache from batch headers", "epochs", len(c.entries))
		write = len(c.entries) > 0
	}
	if c.truncateFromStart(l.start.Load()) {
		write = true
	}
	// Entries written ahead of records a crash then lost. One starting
	// at the log end is kept: an epoch assigned before anything was
	// written in it.
	n := len(c.entries)
	for n > 0 && c.entries[n-1].start > l.leo.Load() {
		n--
	}
	if n < len(c.entries) {
		l.log.Info("dropping leader epochs past the log end", "epochs", len(c.entries)-n, "log_end", l.leo.Load())
		c.entries, write = c.entries[:n], true
	}
	l.epochs = c
	if write {
		if err := writeEpochFile(l.dir, c.entries); err != nil {
			return fmt.Errorf("writing the leader-epoch checkpoint: %w", err)
		}
	}
	l.restamp()
	return nil
}

// hasData reports whether any segment holds a batch. Open only.
func (l *Log) hasData() bool {
	for _, s := range l.segs {
		if s.stats.size > 0 {
			return true
		}
	}
	return false
}
