package batch_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/batch/batchtest"
)

// BenchmarkValidateRecords validates batches shaped like the produce
// throughput benchmark's: franz-go's default snappy, 1 KiB records with
// short keys, as many as fit a 1 MB batch.
func BenchmarkValidateRecords(b *testing.B) {
	for _, c := range []batch.Codec{batch.CodecNone, batch.CodecGzip, batch.CodecSnappy, batch.CodecLZ4, batch.CodecZstd} {
		recs := make([]batchtest.Record, 1000)
		for i := range recs {
			recs[i] = batchtest.Record{Key: fmt.Appendf(nil, "%d", i), Value: make([]byte, 1024)}
		}
		s := batchtest.Spec{FirstTimestamp: 1_700_000_000_000, Codec: c, ProducerID: -1, BaseSequence: -1, Records: recs}
		bt := batchtest.Build(s)
		h, _ := batch.Check(bt)
		o := batch.ValidateOptions{Now: 1_700_000_000_000, TimestampBeforeMax: math.MaxInt64, TimestampAfterMax: math.MaxInt64}
		b.Run(c.String(), func(b *testing.B) {
			b.SetBytes(int64(len(recs)) * 1024)
			for range b.N {
				if _, err := batch.ValidateRecords(bt, h, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
