package partition

import (
	"encoding/binary"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/groupd/groupd/internal/batch/batchtest"
)

// The start benchmark: how long Open takes on a log of -start-bytes of 1
// KiB records from idempotent producers, from its producer snapshot (the
// sealed segments trusted, nothing read but the indexes) and without one
// (every batch header read and replayed, as every start did before
// snapshots). The log is written once per run, or kept in -start-dir:
//
//	go test ./internal/partition -run '^$' -bench Open -benchtime 5x -start-bytes 10737418240 -start-dir /var/tmp/groupd-start
var (
	startBytes = flag.Int64("start-bytes", 256<<20, "bytes of 1 KiB records in the log BenchmarkOpen opens")
	startDir   = flag.String("start-dir", "", "where BenchmarkOpen keeps its log between runs (default: a temporary directory)")
)

// startLog writes (or finds) the benchmark's log: batches of 16 records of
// 1 KiB from 8 idempotent producers in turn, in 256 MiB segments.
func startLog(b *testing.B) string {
	dir := *startDir
	if dir == "" {
		dir = filepath.Join(b.TempDir(), "log")
	}
	marker := filepath.Join(dir, "complete")
	if _, err := os.Stat(marker); err == nil {
		return dir
	}
	recs := make([]batchtest.Record, 16)
	for i := range recs {
		recs[i] = batchtest.Record{Key: []byte{byte(i)}, Value: make([]byte, 1024)}
	}
	const producers = 8
	tmpl := make([][]byte, producers)
	for p := range tmpl {
		tmpl[p] = batchtest.Build(batchtest.Spec{FirstTimestamp: 1_700_000_000_000, ProducerID: int64(p + 1), Records: recs})
	}
	l, err := Open(dir, Options{Sync: SyncNever})
	if err != nil {
		b.Fatal(err)
	}
	seq := make([]int32, producers)
	for written, i := int64(0), 0; written < *startBytes; i++ {
		p := i % producers
		bt := tmpl[p]
		binary.BigEndian.PutUint32(bt[53:], uint32(seq[p]))
		batchtest.Fix(bt)
		seq[p] += int32(len(recs))
		if _, err := l.Append([][]byte{bt}); err != nil {
			b.Fatal(err)
		}
		written += int64(len(bt))
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

func BenchmarkOpen(b *testing.B) {
	dir := startLog(b)
	open := func(b *testing.B, before func()) {
		b.SetBytes(*startBytes)
		for range b.N {
			b.StopTimer()
			before()
			b.StartTimer()
			l, err := Open(dir, Options{Sync: SyncNever})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if l.Producers() != 8 {
				b.Fatalf("%d producers after open", l.Producers())
			}
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.Run("snapshot", func(b *testing.B) { open(b, func() {}) })
	b.Run("no-snapshot", func(b *testing.B) {
		open(b, func() {
			snaps, _ := filepath.Glob(filepath.Join(dir, "*"+snapshotSuffix))
			for _, s := range snaps {
				os.Remove(s)
			}
		})
	})
}
