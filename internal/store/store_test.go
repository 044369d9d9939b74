package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/groupd/groupd/internal/group"
)

func offsetRec(g, topic string, p int32, off int64) group.Record {
	return group.Record{Type: group.RecordOffsetCommit, Group: g, Topic: topic, Partition: p,
		Offset: &group.OffsetCommit{Offset: off, LeaderEpoch: -1, Metadata: "m", CommitTimestamp: 1000, ExpireTimestamp: -1}}
}

func metaRec(g string, gen int32) group.Record {
	return group.Record{Type: group.RecordGroupMetadata, Group: g, Metadata: &group.GroupMetadata{
		ProtocolType: "consumer", Generation: gen, Protocol: "range", Leader: "a", StateTimestamp: 5,
		Members: []group.MemberMetadata{{MemberID: "a", ClientID: "c", ClientHost: "/h",
			RebalanceTimeout: 1000, SessionTimeout: 6000, Subscription: []byte{1}, Assignment: []byte{}}},
	}}
}

// loadAll loads every shard and replays what Load emitted as the
// coordinator does, later records superseding earlier ones of the same key
// and tombstones deleting: it returns each shard's resulting records in key
// order.
func loadAll(t *testing.T, s Store, shards int) map[int][]group.Record {
	t.Helper()
	out := map[int][]group.Record{}
	for sh := 0; sh < shards; sh++ {
		latest := map[string]group.Record{}
		err := s.Load(sh, func(r group.Record) error {
			if ShardOf(r.Group, shards) != sh {
				t.Errorf("group %q loaded from shard %d, belongs to %d", r.Group, sh, ShardOf(r.Group, shards))
			}
			if r.Tombstone() {
				delete(latest, string(r.Key()))
			} else {
				latest[string(r.Key())] = r
			}
			return nil
		})
		if err != nil {
			t.Fatalf("load shard %d: %v", sh, err)
		}
		for _, r := range latest {
			out[sh] = append(out[sh], r)
		}
		slices.SortFunc(out[sh], func(a, b group.Record) int { return bytes.Compare(a.Key(), b.Key()) })
	}
	return out
}

// impls runs a test against both implementations; reopen returns a store
// over the same durable state (a reopened directory, or a crashed Memory).
type impl struct {
	name   string
	open   func(t *testing.T) Store
	reopen func(t *testing.T, s Store) Store
}

func impls(shards int) []impl {
	return []impl{
		{
			name: "memory",
			open: func(t *testing.T) Store { return NewMemoryShards(shards) },
			reopen: func(t *testing.T, s Store) Store {
				return s.(*Memory).Crash()
			},
		},
		{
			name: "pebble",
			open: func(t *testing.T) Store {
				s, err := OpenPebble(t.TempDir(), Options{Shards: shards, Sync: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			},
			reopen: func(t *testing.T, s Store) Store {
				dir := s.(*Pebble).dir
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				n, err := OpenPebble(dir, Options{Shards: shards, Sync: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { n.Close() })
				return n
			},
		},
	}
}

func TestRoundTripTombstonesReopen(t *testing.T) {
	const shards = 4
	for _, im := range impls(shards) {
		t.Run(im.name, func(t *testing.T) {
			s := im.open(t)
			var recs []group.Record
			for i := 0; i < 20; i++ {
				g := fmt.Sprintf("g%d", i)
				recs = append(recs, metaRec(g, int32(i)), offsetRec(g, "t", 0, int64(i)), offsetRec(g, "t", 1, 7))
			}
			if err := s.Apply(recs); err != nil {
				t.Fatal(err)
			}
			// Later records win; tombstones delete.
			if err := s.Apply([]group.Record{
				offsetRec("g1", "t", 0, 99),
				{Type: group.RecordOffsetCommit, Group: "g2", Topic: "t", Partition: 1},
				{Type: group.RecordGroupMetadata, Group: "g3"},
				{Type: group.RecordGroupMetadata, Group: "never-existed"},
			}); err != nil {
				t.Fatal(err)
			}
			check := func(s Store) {
				got := loadAll(t, s, shards)
				n := 0
				byKey := map[string]group.Record{}
				for _, rs := range got {
					for _, r := range rs {
						byKey[string(r.Key())] = r
						n++
					}
				}
				if n != 60-2 {
					t.Errorf("loaded %d records, want 58", n)
				}
				if r := byKey[string(offsetRec("g1", "t", 0, 0).Key())]; r.Offset == nil || r.Offset.Offset != 99 {
					t.Errorf("g1 t/0 = %+v, want offset 99", r.Offset)
				}
				if _, ok := byKey[string(offsetRec("g2", "t", 1, 0).Key())]; ok {
					t.Error("tombstoned offset g2 t/1 still present")
				}
				if _, ok := byKey[string(metaRec("g3", 0).Key())]; ok {
					t.Error("tombstoned metadata g3 still present")
				}
				want := metaRec("g5", 5)
				if r := byKey[string(want.Key())]; !reflect.DeepEqual(r, want) {
					t.Errorf("g5 metadata = %+v, want %+v", r, want)
				}
			}
			check(s)
			check(im.reopen(t, s))
		})
	}
}

func TestConcurrentApply(t *testing.T) {
	const shards = 4
	for _, im := range impls(shards) {
		t.Run(im.name, func(t *testing.T) {
			s := im.open(t)
			var wg sync.WaitGroup
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 50; i++ {
						g := fmt.Sprintf("g%d", w)
						if err := s.Apply([]group.Record{offsetRec(g, "t", int32(i%5), int64(i))}); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			got := loadAll(t, im.reopen(t, s), shards)
			n := 0
			for _, rs := range got {
				for _, r := range rs {
					n++
					if r.Offset.Offset < 45 {
						t.Errorf("%s %d = %d, want the last commit", r.Group, r.Partition, r.Offset.Offset)
					}
				}
			}
			if n != 8*5 {
				t.Errorf("loaded %d records, want 40", n)
			}
		})
	}
}

func TestLoadStopsOnCallbackError(t *testing.T) {
	for _, im := range impls(1) {
		t.Run(im.name, func(t *testing.T) {
			s := im.open(t)
			if err := s.Apply([]group.Record{metaRec("a", 1), metaRec("b", 1)}); err != nil {
				t.Fatal(err)
			}
			boom := errors.New("boom")
			calls := 0
			err := s.Load(0, func(group.Record) error { calls++; return boom })
			if !errors.Is(err, boom) || calls != 1 {
				t.Fatalf("Load = %v after %d calls, want boom after 1", err, calls)
			}
			if err := s.Load(1, func(group.Record) error { return nil }); err == nil {
				t.Fatal("Load of a shard out of range succeeded")
			}
		})
	}
}

func TestPebbleCorruptRecordNamesKey(t *testing.T) {
	s, err := OpenPebble(t.TempDir(), Options{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	good := metaRec("g", 1)
	key := storeKey(good, 2)
	if err := s.db.Set(key, []byte{0, 0, 0xff}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	err = s.Load(ShardOf("g", 2), func(group.Record) error { return nil })
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%x", key)) {
		t.Fatalf("Load = %v, want an error naming key %x", err, key)
	}
}

func TestPebbleShardCountIsFixed(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenPebble(dir, Options{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err := OpenPebble(dir, Options{Shards: 8}); err == nil {
		s.Close()
		t.Fatal("reopening with another shard count succeeded")
	}
	s, err = OpenPebble(dir, Options{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.Apply([]group.Record{metaRec("g", 1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Apply after Close = %v, want ErrClosed", err)
	}
}

func TestMemoryCrashAndFailures(t *testing.T) {
	m := NewMemoryShards(2)
	if err := m.Apply([]group.Record{offsetRec("g", "t", 0, 1)}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk on fire")
	m.FailNext(boom)
	if err := m.Apply([]group.Record{offsetRec("g", "t", 0, 2), offsetRec("g", "t", 1, 2)}); !errors.Is(err, boom) {
		t.Fatalf("Apply = %v, want injected error", err)
	}
	m.FailNextAfterWrite(boom)
	if err := m.Apply([]group.Record{offsetRec("g", "u", 0, 3)}); !errors.Is(err, boom) {
		t.Fatalf("Apply = %v, want injected error", err)
	}
	if calls, ok := m.Applies(); calls != 3 || ok != 1 {
		t.Fatalf("Applies = %d, %d; want 3, 1", calls, ok)
	}
	r := m.Crash()
	if err := m.Apply([]group.Record{offsetRec("g", "t", 0, 4)}); !errors.Is(err, ErrCrashed) {
		t.Fatalf("Apply on crashed store = %v, want ErrCrashed", err)
	}
	if err := m.Load(0, func(group.Record) error { return nil }); !errors.Is(err, ErrCrashed) {
		t.Fatalf("Load on crashed store = %v, want ErrCrashed", err)
	}
	got := map[string]int64{}
	for _, rs := range loadAll(t, r, 2) {
		for _, rec := range rs {
			got[fmt.Sprintf("%s/%d", rec.Topic, rec.Partition)] = rec.Offset.Offset
		}
	}
	// t/0=1 was acknowledged; the failed batch left nothing (not even its
	// t/1); the write-then-fail batch is on disk.
	want := map[string]int64{"t/0": 1, "u/0": 3}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after crash: %v, want %v", got, want)
	}
}

func TestShardOfIsStable(t *testing.T) {
	// These values are stored in every key; they must never change.
	for _, c := range []struct {
		id     string
		shards int
		want   int
	}{{"", 8, 5}, {"g1", 8, 5}, {"my-consumer-group", 8, 4}, {"g1", 1, 0}, {"g1", 50, 29}} {
		if got := ShardOf(c.id, c.shards); got != c.want {
			t.Errorf("ShardOf(%q, %d) = %d, want %d", c.id, c.shards, got, c.want)
		}
	}
}

// TestPebbleNoSyncSurvivesKill kills a child process with SIGKILL right after
// its Apply (with Sync false) returned, then checks that the record is there.
func TestPebbleNoSyncSurvivesKill(t *testing.T) {
	if dir := os.Getenv("STORE_KILL_CHILD_DIR"); dir != "" {
		s, err := OpenPebble(dir, Options{Shards: 2, Sync: false})
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(2)
		}
		for i := 0; i < 100; i++ {
			if err := s.Apply([]group.Record{offsetRec("g", "t", int32(i), int64(i))}); err != nil {
				fmt.Println("apply:", err)
				os.Exit(2)
			}
		}
		fmt.Println("applied")
		os.Stdout.Sync()
		select {} // wait to be killed
	}
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPebbleNoSyncSurvivesKill$")
	cmd.Env = append(os.Environ(), "STORE_KILL_CHILD_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if !strings.Contains(string(buf[:n]), "applied") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q", buf[:n])
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	s, err := OpenPebble(filepath.Clean(dir), Options{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	count := 0
	for _, rs := range loadAll(t, s, 2) {
		count += len(rs)
	}
	if count != 100 {
		t.Fatalf("after kill -9: %d records, want 100", count)
	}
}
