package partition

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/batch/batchtest"
)

// TestAppendOwned checks that an owned append stores what a copying one
// stores: a single batch is patched in place (its offset, and for a
// LogAppendTime topic its timestamp and CRC) and written from the
// caller's memory; several batches are copied as by Append.
func TestAppendOwned(t *testing.T) {
	for _, lat := range []bool{false, true} {
		t.Run(fmt.Sprintf("logAppendTime=%v", lat), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.LogAppendTime = lat
			copied := openT(t, t.TempDir(), Options{Sync: SyncNever, Config: &cfg, Now: fixedNow})
			owned := openT(t, t.TempDir(), Options{Sync: SyncNever, Config: &cfg, Now: fixedNow})
			for i := range 5 {
				one := plain(3+i, 1_700_000_000_000+int64(i), batch.CodecNone)
				mine := bytes.Clone(one)
				want, err := copied.Append([][]byte{one})
				if err != nil {
					t.Fatal(err)
				}
				got, err := owned.AppendOwned([][]byte{mine})
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("append %d: owned %+v, copied %+v", i, got, want)
				}
				if h, _ := batch.ParseHeader(mine); h.BaseOffset != want.BaseOffset {
					t.Fatalf("append %d: the owned batch was not patched in place: base offset %d, want %d", i, h.BaseOffset, want.BaseOffset)
				}
				if err := batch.VerifyCRC(mine); err != nil {
					t.Fatalf("append %d: the owned batch's CRC: %v", i, err)
				}
			}
			// Two batches at once go through the copy.
			two := [][]byte{plain(2, 1_700_000_000_100, batch.CodecNone), plain(2, 1_700_000_000_101, batch.CodecNone)}
			orig := [][]byte{bytes.Clone(two[0]), bytes.Clone(two[1])}
			if _, err := copied.Append(orig); err != nil {
				t.Fatal(err)
			}
			if _, err := owned.AppendOwned(two); err != nil {
				t.Fatal(err)
			}
			a, b := readAll(t, copied), readAll(t, owned)
			if len(a) != len(b) {
				t.Fatalf("%d batches stored by copying appends, %d by owned ones", len(a), len(b))
			}
			for i := range a {
				if !bytes.Equal(a[i], b[i]) {
					t.Fatalf("batch %d differs:\ncopied %x\nowned  %x", i, a[i], b[i])
				}
			}
		})
	}
}

func fixedNow() time.Time { return time.UnixMilli(1_700_000_000_500) }

// produceBatch is a batch shaped like those of the produce benchmark
// (franz-go's uncompressed batches of 512-byte values without keys,
// about a megabyte), or compressed with codec.
func produceBatch(codec batch.Codec) []byte {
	recs := make([]batchtest.Record, 2000)
	for i := range recs {
		v := make([]byte, 512)
		for k := range v {
			v[k] = "abcdefghijklmnopqrstuvwxyz0123456789"[(i*7+k*k)%36]
		}
		recs[i] = batchtest.Record{Value: v}
	}
	s := batchtest.NonIdempotent(time.Now().UnixMilli(), recs...)
	s.Codec = codec
	return batchtest.Build(s)
}

// BenchmarkAppendProduce appends megabyte batches as the produce path
// does: validated in full, then written by copying (AppendDeferred) or
// from the caller's memory (AppendOwned).
func BenchmarkAppendProduce(b *testing.B) {
	for _, owned := range []bool{false, true} {
		b.Run(fmt.Sprintf("owned=%v", owned), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.SegmentBytes = 64 << 20
			l := openT(b, b.TempDir(), Options{Sync: SyncNever, Config: &cfg})
			in := [][]byte{produceBatch(batch.CodecNone)}
			b.SetBytes(int64(len(in[0])))
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if owned {
					_, err = l.AppendOwned(in)
				} else {
					_, err = l.AppendDeferred(in)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
