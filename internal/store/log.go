package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/groupd/groupd/internal/group"
)

// The Pebble store keeps each shard in two forms under the shard's prefix:
//
//   - folded records, one key per record key (group metadata, one offset),
//     holding the value that was latest when they were folded;
//   - a log: one key per Apply, shard prefix + logMarker + a big-endian
//     sequence number, whose value is every record of that Apply in order.
//
// Apply only appends to the log, so a commit of many offsets costs one
// memtable insert instead of one per offset, which is what bounded commit
// throughput. When a shard's log has grown by DefaultFoldBytes, a background
// fold reads it back, keeps the last record per key and, in one atomic
// batch, writes those as folded records and deletes the log entries it read.
// Load reads a shard with one iterator, so it sees a single consistent view:
// the folded records (in key order) and then the log (in Apply order), and
// replaying them in that order gives the latest state. Log entries written
// while a fold runs are newer than anything it folds and stay in the log.

// logMarker follows the shard prefix of log keys. Record keys begin with
// their key version (0), so the log sorts after every folded record.
const logMarker = 0xff

// DefaultFoldBytes is how much a shard's log may grow before it is folded.
const DefaultFoldBytes = 4 << 20

// shardLog is the append state of one shard's log.
type shardLog struct {
	mu      sync.Mutex
	next    uint64 // sequence number of the next entry
	bytes   int64  // bytes appended since the last fold was started
	folding bool   // a fold of this shard is queued or running
}

func logPrefix(shard int) []byte {
	return append(shardPrefix(shard), logMarker)
}

func logKey(shard int, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(logPrefix(shard), seq)
}

func isLogKey(key []byte) bool { return len(key) > 2 && key[2] == logMarker }

// appendLogRecord appends one record to a log entry: its key and its value
// (none for a tombstone), each behind a four-byte big-endian length, the
// value's being tombstoneLen for a tombstone.
func appendLogRecord(b []byte, r group.Record) []byte {
	b = appendSized(b, r.AppendKey)
	if r.Tombstone() {
		return binary.BigEndian.AppendUint32(b, tombstoneLen)
	}
	return appendSized(b, r.AppendValue)
}

const tombstoneLen = 1<<32 - 1

// appendSized appends what appendTo appends, behind its length.
func appendSized(b []byte, appendTo func([]byte) []byte) []byte {
	at := len(b)
	b = appendTo(append(b, 0, 0, 0, 0))
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

var errCorruptLog = errors.New("corrupt log entry")

// eachLogRecord calls fn with the key and value (nil for a tombstone) of
// every record in a log entry, in order. The slices alias entry.
func eachLogRecord(entry []byte, fn func(key, value []byte) error) error {
	// next takes a length and what follows it off entry; ok is false if
	// entry is too short for them.
	next := func(tombstoneOK bool) (field []byte, ok bool) {
		if len(entry) < 4 {
			return nil, false
		}
		n := binary.BigEndian.Uint32(entry)
		entry = entry[4:]
		if n == tombstoneLen && tombstoneOK {
			return nil, true
		}
		if uint64(n) > uint64(len(entry)) {
			return nil, false
		}
		field, entry = entry[:n:n], entry[n:]
		return field, true
	}
	for len(entry) > 0 {
		key, ok := next(false)
		if !ok {
			return errCorruptLog
		}
		value, ok := next(true)
		if !ok {
			return errCorruptLog
		}
		if err := fn(key, value); err != nil {
			return err
		}
	}
	return nil
}

// decodeLogEntry calls fn with every record of a shard's log entry. A
// record that does not decode is passed to undecodable as an
// *UndecodableError; if that returns nil the record is skipped and the rest
// of the entry is read. A malformed entry, which cannot be read past, is
// passed to undecodable the same way.
func decodeLogEntry(shard int, key, entry []byte, fn func(group.Record) error, undecodable func(error) error) error {
	err := eachLogRecord(entry, func(k, v []byte) error {
		rec, err := group.DecodeRecord(k, v)
		if err != nil {
			return undecodable(&UndecodableError{Shard: shard, Key: bytes.Clone(k), Entry: bytes.Clone(key), Err: err})
		}
		return fn(rec)
	})
	if errors.Is(err, errCorruptLog) {
		return undecodable(&UndecodableError{Shard: shard, Entry: bytes.Clone(key), Err: err})
	}
	return err
}

// folder runs folds, one at a time, until foldq is closed.
func (p *Pebble) folder() {
	defer close(p.folderDone)
	for shard := range p.foldq {
		if err := p.Fold(shard); err != nil && !errors.Is(err, ErrClosed) {
			// The log is left as it was: nothing is lost, it is only
			// longer to load. The next growth retries.
			p.log.Error("folding the coordinator log failed", "shard", shard, "err", err)
		}
		l := &p.logs[shard]
		l.mu.Lock()
		l.folding = false
		l.mu.Unlock()
	}
}

// Fold replaces the log entries of a shard that exist now by the latest
// record of each key they hold. The store does this in the background as
// logs grow, unless Options.ManualFold leaves it to the caller. What Load
// returns is the same before and after.
func (p *Pebble) Fold(shard int) error {
	if err := checkShard(shard, p.shards); err != nil {
		return err
	}
	gen, err := p.acquire()
	if err != nil {
		return err
	}
	err = p.foldLocked(shard)
	p.mu.RUnlock()
	p.afterFailure(gen, err)
	return err
}

func (p *Pebble) foldLocked(shard int) error {
	it, err := p.db.NewIter(&pebble.IterOptions{
		LowerBound: logPrefix(shard),
		UpperBound: shardPrefix(shard + 1),
	})
	if err != nil {
		return err
	}
	defer it.Close()
	last := map[string][]byte{} // key -> latest value, nil for a tombstone
	var order []string          // first appearance, so the batch is built deterministically
	var first, end []byte
	for it.First(); it.Valid(); it.Next() {
		if first == nil {
			first = append([]byte(nil), it.Key()...)
		}
		end = append(end[:0], it.Key()...)
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := eachLogRecord(v, func(k, v []byte) error {
			ks := string(k)
			if _, ok := last[ks]; !ok {
				order = append(order, ks)
			}
			last[ks] = bytesOrNil(v)
			return nil
		}); err != nil {
			return fmt.Errorf("log entry %x: %w", it.Key(), err)
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	if first == nil {
		return nil
	}
	b := p.db.NewBatch()
	defer b.Close()
	prefix := shardPrefix(shard)
	var key []byte
	for _, k := range order {
		key = append(append(key[:0], prefix...), k...)
		if v := last[k]; v == nil {
			err = b.Delete(key, nil)
		} else {
			err = b.Set(key, v, nil)
		}
		if err != nil {
			return err
		}
	}
	// The range ends just past the last entry read: entries appended
	// since are newer and stay.
	if err := b.DeleteRange(first, append(end, 0), nil); err != nil {
		return err
	}
	return p.commit(b)
}

// bytesOrNil copies v, keeping nil (a tombstone) distinct from empty.
func bytesOrNil(v []byte) []byte {
	if v == nil {
		return nil
	}
	return append(make([]byte, 0, len(v)), v...)
}
