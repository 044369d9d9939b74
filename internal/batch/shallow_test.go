package batch_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/batch/batchtest"
)

func TestValidateCompressedHeader(t *testing.T) {
	spec := func(c batch.Codec, xerial bool) batchtest.Spec {
		return batchtest.Spec{FirstTimestamp: now, Codec: c, Xerial: xerial, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
			Records: batchtest.Values("a", "b", "c")}
	}
	check := func(t *testing.T, b []byte, o batch.ValidateOptions) (batch.Validated, error) {
		t.Helper()
		h, err := batch.Check(b)
		if err != nil {
			t.Fatalf("test batch does not parse: %v", err)
		}
		return batch.ValidateCompressedHeader(b, h, o)
	}
	good := func(i int64) []byte { return rawRecord(i, i, []byte("key"), []byte("a value"), 0) }
	for _, xerial := range []bool{false, true} {
		name := "raw"
		if xerial {
			name = "xerial"
		}
		t.Run("snappy/"+name, func(t *testing.T) {
			b := batchtest.Build(spec(batch.CodecSnappy, xerial))
			v, err := check(t, b, lenient)
			if err != nil {
				t.Fatal(err)
			}
			h, _ := batch.Check(b)
			full, _ := validate(t, b, lenient)
			if v.UncompressedBytes != full.UncompressedBytes || v.MaxTimestamp != h.MaxTimestamp {
				t.Errorf("validated %+v; the records decode to %d bytes, the header's max timestamp is %d", v, full.UncompressedBytes, h.MaxTimestamp)
			}
			// Two billion offsets claimed by one short record: the
			// declared size cannot hold them.
			claim := batchtest.Wrap(spec(batch.CodecSnappy, xerial), good(0), 2_000_000_000, 1_999_999_999)
			if _, err := check(t, claim, lenient); !errors.Is(err, batch.ErrCorrupt) || !strings.Contains(err.Error(), "cannot fit") {
				t.Errorf("billions of records claimed: %v", err)
			}
		})
	}
	t.Run("snappy/bad length prefix", func(t *testing.T) {
		b := batchtest.Build(spec(batch.CodecSnappy, false))
		for i := batch.HeaderLen; i < batch.HeaderLen+10 && i < len(b); i++ {
			b[i] = 0xff
		}
		batchtest.Fix(b)
		if _, err := check(t, b, lenient); !errors.Is(err, batch.ErrCorrupt) {
			t.Errorf("a block length that does not decode: %v", err)
		}
	})
	t.Run("log append time claimed", func(t *testing.T) {
		s := spec(batch.CodecZstd, false)
		s.Attributes = batch.AttrLogAppendTime
		if _, err := check(t, batchtest.Build(s), lenient); !errors.Is(err, batch.ErrInvalidTimestamp) {
			t.Errorf("err %v", err)
		}
	})
	t.Run("timestamp out of range", func(t *testing.T) {
		o := lenient
		o.TimestampAfterMax = 3_600_000
		s := spec(batch.CodecLZ4, false)
		s.FirstTimestamp = now + 7_200_000
		if _, err := check(t, batchtest.Build(s), o); !errors.Is(err, batch.ErrInvalidTimestamp) {
			t.Errorf("err %v", err)
		}
		o.LogAppendTime = true
		if _, err := check(t, batchtest.Build(s), o); err != nil {
			t.Errorf("a LogAppendTime topic does not check producer timestamps: %v", err)
		}
	})
}

// FuzzValidateCompressedHeader: the header-only check never panics and
// answers only with ValidationErrors, and what it accepts it accepts for
// snappy only if the declared size holds the records.
func FuzzValidateCompressedHeader(f *testing.F) {
	for _, c := range codecCases {
		f.Add(batchtest.Build(batchtest.Spec{FirstTimestamp: now, Codec: c.codec, Xerial: c.xerial,
			ProducerID: -1, BaseSequence: -1, Records: sampleRecords()}))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := batch.Check(b)
		if err != nil {
			return
		}
		v, err := batch.ValidateCompressedHeader(b, h, lenient)
		if err != nil {
			var ve *batch.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %v is not a ValidationError", err)
			}
			return
		}
		if h.Codec() == batch.CodecSnappy && int(h.NumRecords)*7 > v.UncompressedBytes {
			t.Fatalf("%d records accepted in %d declared bytes", h.NumRecords, v.UncompressedBytes)
		}
	})
}
