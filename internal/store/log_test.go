package store

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/groupd/groupd/internal/group"
)

// logEntries counts a shard's log entries.
func logEntries(t *testing.T, p *Pebble, shard int) int {
	t.Helper()
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: logPrefix(shard), UpperBound: shardPrefix(shard + 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n
}

// model is the state a sequence of Applies must leave: the latest record
// per key, per shard.
type model map[int]map[string]group.Record

func (m model) apply(recs []group.Record, shards int) {
	for _, r := range recs {
		sh := ShardOf(r.Group, shards)
		if m[sh] == nil {
			m[sh] = map[string]group.Record{}
		}
		if r.Tombstone() {
			delete(m[sh], string(r.Key()))
		} else {
			m[sh][string(r.Key())] = r
		}
	}
}

func (m model) check(t *testing.T, s Store, shards int) {
	t.Helper()
	got := loadAll(t, s, shards)
	for sh := 0; sh < shards; sh++ {
		if len(got[sh]) != len(m[sh]) {
			t.Errorf("shard %d: loaded %d records, want %d", sh, len(got[sh]), len(m[sh]))
		}
		for _, r := range got[sh] {
			if want := m[sh][string(r.Key())]; !reflect.DeepEqual(r, want) {
				t.Errorf("shard %d: %s = %+v, want %+v", sh, r.Key(), r, want)
			}
		}
	}
}

// randomBatch commits offsets over a few groups, with metadata updates and
// tombstones among them, so that keys are rewritten and deleted.
func randomBatch(rng *rand.Rand) []group.Record {
	var recs []group.Record
	for range 1 + rng.IntN(20) {
		g := fmt.Sprintf("g%d", rng.IntN(6))
		switch rng.IntN(10) {
		case 0:
			recs = append(recs, group.Record{Type: group.RecordOffsetCommit, Group: g, Topic: "t", Partition: int32(rng.IntN(8))})
		case 1:
			recs = append(recs, metaRec(g, int32(rng.IntN(100))))
		case 2:
			recs = append(recs, group.Record{Type: group.RecordGroupMetadata, Group: g})
		default:
			recs = append(recs, offsetRec(g, "t", int32(rng.IntN(8)), rng.Int64N(1e6)))
		}
	}
	return recs
}

func TestPebbleFoldKeepsLatestState(t *testing.T) {
	const shards = 3
	dir := t.TempDir()
	open := func() *Pebble {
		s, err := OpenPebble(dir, Options{Shards: shards, FoldBytes: 2 << 10})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	m := model{}
	rng := rand.New(rand.NewPCG(1, 2))
	applies := 0
	for i := 0; i < 600; i++ {
		recs := randomBatch(rng)
		m.apply(recs, shards)
		if err := s.Apply(recs); err != nil {
			t.Fatal(err)
		}
		applies++
		if i%100 == 0 {
			m.check(t, s, shards) // while folds may be running
		}
	}
	m.check(t, s, shards)
	// Folds run in the background; wait for the logs to shrink.
	deadline := time.Now().Add(10 * time.Second)
	for {
		entries := 0
		for sh := 0; sh < shards; sh++ {
			entries += logEntries(t, s, sh)
		}
		if entries < applies/4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d log entries left of %d applies: the log is not folded", entries, applies)
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.check(t, s, shards)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open()
	defer s.Close()
	m.check(t, s, shards)
	// Appends after a reopen continue the log and still win over folded
	// records.
	for i := 0; i < 200; i++ {
		recs := randomBatch(rng)
		m.apply(recs, shards)
		if err := s.Apply(recs); err != nil {
			t.Fatal(err)
		}
	}
	m.check(t, s, shards)
}

func TestPebbleLongKeysAndValues(t *testing.T) {
	s, err := OpenPebble(t.TempDir(), Options{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	long := strings.Repeat("x", 300)
	rec := offsetRec("group-"+long, "topic-"+long, 3, 42)
	rec.Offset.Metadata = long + long
	recs := []group.Record{rec, metaRec("group-"+long, 9), offsetRec("short", "t", 0, 1)}
	if err := s.Apply(recs); err != nil {
		t.Fatal(err)
	}
	m := model{}
	m.apply(recs, 2)
	m.check(t, s, 2)
}

func TestPebbleCorruptLogEntryNamesKey(t *testing.T) {
	s, err := OpenPebble(t.TempDir(), Options{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sh := ShardOf("g", 2)
	key := logKey(sh, 7)
	if err := s.db.Set(key, []byte{5, 1, 2}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	err = s.Load(sh, func(group.Record) error { return nil })
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%x", key)) {
		t.Fatalf("Load = %v, want an error naming log key %x", err, key)
	}
}

// FuzzLogEntry feeds arbitrary bytes to the log entry decoder: it must
// report corruption, never panic or read out of bounds, and what it accepts
// must survive a re-encoding unchanged.
func FuzzLogEntry(f *testing.F) {
	fail := func(err error) error { return err }
	f.Add(appendLogRecord(nil, offsetRec("g", "t", 1, 2)))
	f.Add(appendLogRecord(appendLogRecord(nil, metaRec("g", 3)), group.Record{Type: group.RecordGroupMetadata, Group: "g"}))
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, entry []byte) {
		var recs []group.Record
		err := decodeLogEntry(0, []byte("k"), entry, func(r group.Record) error {
			recs = append(recs, r)
			return nil
		}, fail)
		if err != nil {
			return
		}
		var again []byte
		for _, r := range recs {
			again = appendLogRecord(again, r)
		}
		var back []group.Record
		if err := decodeLogEntry(0, []byte("k"), again, func(r group.Record) error {
			back = append(back, r)
			return nil
		}, fail); err != nil {
			t.Fatalf("re-encoded entry does not decode: %v", err)
		}
		if !reflect.DeepEqual(recs, back) {
			t.Fatalf("round trip changed records:\n%+v\n%+v", recs, back)
		}
	})
}
