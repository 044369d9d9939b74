package store

import (
	"errors"
	"sort"
	"strings"
	"sync"

	"github.com/groupd/groupd/internal/group"
)

// DefaultShards is the shard count of NewMemory, equal to the coordinator's
// default.
const DefaultShards = 8

// ErrCrashed is returned by a Memory store after Crash.
var ErrCrashed = errors.New("store: crashed")

// Memory is an in-memory Store for tests and simulation. Apply is its
// durability point: whatever an Apply returned nil for survives Crash, and
// nothing else does. It stores encoded bytes, not records, so a round trip
// through it exercises the same codec as Pebble.
type Memory struct {
	shards int

	mu        sync.Mutex
	data      map[string][]byte
	crashed   bool
	closed    bool
	failNext  []failure
	applies   int
	appliedOK int
	hook      func(recs []group.Record)
}

type failure struct {
	err   error
	write bool // the batch is written before the error is returned
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store with DefaultShards shards.
func NewMemory() *Memory { return NewMemoryShards(DefaultShards) }

// NewMemoryShards returns an empty in-memory store routing keys over n
// shards.
func NewMemoryShards(n int) *Memory {
	if n < 1 || n > MaxShards {
		panic("store: shard count out of range")
	}
	return &Memory{shards: n, data: map[string][]byte{}}
}

// Shards returns the shard count keys are routed by.
func (m *Memory) Shards() int { return m.shards }

// Apply stores recs atomically, or fails without storing anything when an
// error was injected with FailNext.
func (m *Memory) Apply(recs []group.Record) error {
	m.mu.Lock()
	hook := m.hook
	m.mu.Unlock()
	if hook != nil {
		hook(recs)
	}
	type kv struct {
		k string
		v []byte
	}
	// Encode outside the lock; it is the expensive part.
	kvs := make([]kv, len(recs))
	for i, r := range recs {
		kvs[i] = kv{string(storeKey(r, m.shards)), r.Value()}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return err
	}
	m.applies++
	var f *failure
	if len(m.failNext) > 0 {
		f = &m.failNext[0]
		m.failNext = m.failNext[1:]
		if !f.write {
			return f.err
		}
	}
	for _, e := range kvs {
		if e.v == nil {
			delete(m.data, e.k)
		} else {
			m.data[e.k] = e.v
		}
	}
	if f != nil {
		return f.err
	}
	m.appliedOK++
	return nil
}

// Load calls fn with the records of a shard in key order. It reads a
// snapshot, so fn may call Apply.
func (m *Memory) Load(shard int, fn func(group.Record) error) error {
	if err := checkShard(shard, m.shards); err != nil {
		return err
	}
	prefix := string(shardPrefix(shard))
	m.mu.Lock()
	if err := m.usable(); err != nil {
		m.mu.Unlock()
		return err
	}
	type kv struct {
		k string
		v []byte
	}
	var kvs []kv
	for k, v := range m.data {
		if strings.HasPrefix(k, prefix) {
			kvs = append(kvs, kv{k, v})
		}
	}
	m.mu.Unlock()
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].k < kvs[j].k })
	for _, e := range kvs {
		rec, err := decode(shard, []byte(e.k), e.v)
		if err != nil {
			return err
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	return nil
}

// Close makes later calls fail with ErrClosed.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

func (m *Memory) usable() error {
	if m.crashed {
		return ErrCrashed
	}
	if m.closed {
		return ErrClosed
	}
	return nil
}

// Crash simulates a process crash: this store fails every later call with
// ErrCrashed, like a process that is gone, and the returned store is what a
// restart finds on disk — every batch Apply returned nil for (or that was
// written before an injected error), nothing else. An Apply racing with
// Crash is either entirely in the returned store or entirely absent, and in
// the latter case it returns ErrCrashed.
func (m *Memory) Crash() *Memory {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.crashed = true
	n := NewMemoryShards(m.shards)
	for k, v := range m.data {
		n.data[k] = v
	}
	return n
}

// FailNext makes the next Apply return err without storing anything, like
// a write that failed before reaching the disk. Calls queue: each fails one
// Apply.
func (m *Memory) FailNext(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failNext = append(m.failNext, failure{err: err})
}

// FailNextAfterWrite makes the next Apply store its batch and then return
// err, like an fsync that reported failure for data that did reach the
// disk. A caller cannot tell this from FailNext, and must not assume either.
func (m *Memory) FailNextAfterWrite(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failNext = append(m.failNext, failure{err: err, write: true})
}

// OnApply makes every later Apply call fn with its records before it
// stores anything (nil removes the hook). fn runs without the store's lock
// and may block, which lets a test hold a write in flight and watch what
// its caller does meanwhile.
func (m *Memory) OnApply(fn func(recs []group.Record)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hook = fn
}

// Applies returns how many Apply calls reached the store, and how many of
// them succeeded. Tests use it to see batching (group commit).
func (m *Memory) Applies() (calls, ok int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.applies, m.appliedOK
}

// Len returns the number of stored keys.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.data)
}
