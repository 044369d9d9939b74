// Package store keeps the coordinator's durable records: committed offsets
// and group metadata, as encoded by package group.
//
// A Store has two operations that matter. Apply makes a batch of records
// durable before it returns, so the coordinator can release the replies that
// acknowledge them (durable before visible). Load reads back the records of
// one shard when it starts; the shard replays them, in order, into a fresh
// group.Machine, a later record of a key superseding an earlier one.
//
// Keys are the record's own key (group.Record.Key) behind a two-byte
// big-endian shard number, so the records of a shard are one contiguous key
// range and Load is a single range scan. The shard of a group is ShardOf its
// id; the store and the coordinator both use it, so they cannot disagree.
// Pebble appends each Apply to a per-shard log under the same prefix and
// folds the log into per-key records in the background (log.go).
//
// Two implementations are here: Pebble, on cockroachdb/pebble, for the
// broker, and Memory, for tests and simulation, which can crash and inject
// write errors.
package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/groupd/groupd/internal/group"
)

// Store is durable storage for coordinator records.
type Store interface {
	// Apply makes recs durable (per the implementation's sync policy)
	// before returning. Records with a nil payload (group.Record.Tombstone)
	// delete their key. A batch is atomic: after a crash either all of it
	// or none of it is visible. Concurrent calls may share one sync.
	Apply(recs []group.Record) error
	// Load calls fn with the records of a shard such that replaying them
	// in order, a later record of a key superseding an earlier one and a
	// tombstone deleting it, gives the state the Applies left. It stops
	// at the first error from fn and returns it. A stored record that does
	// not decode is an error naming its key: corruption must be seen, not
	// skipped.
	Load(shard int, fn func(group.Record) error) error
	// Close releases the store. Calls after Close fail.
	Close() error
}

// MaxShards bounds the shard count: shard numbers are two bytes, and the
// highest prefix is kept for the store's own metadata.
const MaxShards = 1<<16 - 1

// ErrClosed is returned by calls on a closed store.
var ErrClosed = errors.New("store: closed")

// ShardOf returns the shard, in [0, shards), that owns a group. It is FNV-1a
// over the group id: stable across processes, versions and platforms, which
// matters because the shard number is part of every stored key. Changing it,
// or the shard count of an existing store, would strand records in shards
// that no longer own them.
func ShardOf(groupID string, shards int) int {
	if shards <= 1 {
		return 0
	}
	// FNV-1a, written out: hash/fnv would cost an allocation per call on
	// the commit path.
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(groupID); i++ {
		h ^= uint64(groupID[i])
		h *= prime64
	}
	return int(h % uint64(shards))
}

// shardPrefix returns the two-byte key prefix of a shard.
func shardPrefix(shard int) []byte {
	return binary.BigEndian.AppendUint16(nil, uint16(shard))
}

// storeKey prefixes a record's key with its shard.
func storeKey(r group.Record, shards int) []byte {
	return appendStoreKey(nil, r, shards)
}

// appendStoreKey appends the store key of r to b.
func appendStoreKey(b []byte, r group.Record, shards int) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(ShardOf(r.Group, shards)))
	return r.AppendKey(b)
}

// UndecodableError reports a stored record that cannot be turned back into
// a group.Record. Reading it again gives the same bytes, so retrying cannot
// help: the coordinator stops its start on it, unless the store was opened
// to skip such records (Options.SkipUndecodable). Nothing is deleted either
// way; the bytes stay in the store for an operator or a newer version to
// read.
type UndecodableError struct {
	Shard int
	// Key is the stored key of the record (with its shard prefix), or
	// the key of the record inside a log entry; nil when the log entry
	// itself is malformed.
	Key []byte
	// Entry is the key of the log entry holding the record, if any.
	Entry []byte
	Err   error
}

func (e *UndecodableError) Error() string {
	switch {
	case e.Key == nil:
		return fmt.Sprintf("store: shard %d: log entry %x does not decode: %v", e.Shard, e.Entry, e.Err)
	case e.Entry != nil:
		return fmt.Sprintf("store: shard %d: log entry %x: record with key %x does not decode: %v", e.Shard, e.Entry, e.Key, e.Err)
	}
	return fmt.Sprintf("store: shard %d: record with key %x does not decode: %v", e.Shard, e.Key, e.Err)
}

func (e *UndecodableError) Unwrap() error { return e.Err }

var errOutsideShard = errors.New("key is outside its shard's range")

// decode turns a stored key and value back into a record; an
// *UndecodableError names the key if it does not decode.
func decode(shard int, key, value []byte) (group.Record, error) {
	if len(key) < 2 || int(binary.BigEndian.Uint16(key)) != shard {
		return group.Record{}, &UndecodableError{Shard: shard, Key: bytes.Clone(key), Err: errOutsideShard}
	}
	rec, err := group.DecodeRecord(key[2:], value)
	if err != nil {
		return group.Record{}, &UndecodableError{Shard: shard, Key: bytes.Clone(key), Err: err}
	}
	return rec, nil
}

func checkShard(shard, shards int) error {
	if shard < 0 || shard >= shards {
		return fmt.Errorf("store: shard %d out of range [0, %d)", shard, shards)
	}
	return nil
}
