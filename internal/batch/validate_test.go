package batch_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/batch/batchtest"
)

const now = 1_700_000_000_000

var lenient = batch.ValidateOptions{Now: now, TimestampBeforeMax: math.MaxInt64, TimestampAfterMax: math.MaxInt64}

func validate(t *testing.T, b []byte, o batch.ValidateOptions) (batch.Validated, error) {
	t.Helper()
	h, err := batch.Check(b)
	if err != nil {
		t.Fatalf("test batch does not parse: %v", err)
	}
	return batch.ValidateRecords(b, h, o)
}

// rawRecord encodes one record by hand, so tests can get every field wrong.
func rawRecord(offsetDelta, tsDelta int64, key, value []byte, trailing int) []byte {
	var body []byte
	body = append(body, 0)
	body = binary.AppendVarint(body, tsDelta)
	body = binary.AppendVarint(body, offsetDelta)
	body = appendNullable(body, key)
	body = appendNullable(body, value)
	body = binary.AppendVarint(body, 0)
	body = append(body, make([]byte, trailing)...)
	return append(binary.AppendVarint(nil, int64(len(body))), body...)
}

func appendNullable(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	return append(binary.AppendVarint(dst, int64(len(b))), b...)
}

func TestValidateRecordsAcceptsEveryCodec(t *testing.T) {
	for _, c := range codecCases {
		t.Run(c.name, func(t *testing.T) {
			spec := batchtest.Spec{FirstTimestamp: now - 10, Codec: c.codec, Xerial: c.xerial,
				ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: sampleRecords()}
			v, err := validate(t, batchtest.Build(spec), lenient)
			if err != nil {
				t.Fatal(err)
			}
			if v.MaxTimestamp != now-5 {
				t.Errorf("max timestamp %d, want %d", v.MaxTimestamp, now-5)
			}
			if v.UncompressedBytes < 70000 {
				t.Errorf("uncompressed bytes %d", v.UncompressedBytes)
			}
		})
	}
}

func TestValidateRecordsRejects(t *testing.T) {
	spec := func(codec batch.Codec) batchtest.Spec {
		return batchtest.Spec{FirstTimestamp: now, Codec: codec, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
			Records: batchtest.Values("a", "b", "c")}
	}
	good := func(i int64) []byte { return rawRecord(i, i, []byte("key"), []byte("a value"), 0) }
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name     string
		build    func(c batch.Codec) []byte
		opts     func(*batch.ValidateOptions)
		sentinel error
		index    int32 // -1: no record named
		message  string
	}{
		{"declares more records than it holds", func(c batch.Codec) []byte {
			return batchtest.Wrap(spec(c), join(good(0), good(1)), 3, 2)
		}, nil, batch.ErrCorrupt, 2, "bad record length"},
		{"holds more records than it declares", func(c batch.Codec) []byte {
			return batchtest.Wrap(spec(c), join(good(0), good(1), good(2)), 2, 1)
		}, nil, batch.ErrCorrupt, -1, "after the last"},
		{"offset delta out of order", func(c batch.Codec) []byte {
			return batchtest.Wrap(spec(c), join(good(0), good(5), good(2)), 3, 2)
		}, nil, batch.ErrInvalidRecord, 1, "offset delta 5, expected 1"},
		{"record longer than its fields", func(c batch.Codec) []byte {
			return batchtest.Wrap(spec(c), join(good(0), rawRecord(1, 1, nil, []byte("v"), 3), good(2)), 3, 2)
		}, nil, batch.ErrCorrupt, 1, "past the end of its fields"},
		{"key length past the record", func(c batch.Codec) []byte {
			r := rawRecord(1, 1, []byte("key"), nil, 0)
			r[4] = 40 // the key length varint: 20
			return batchtest.Wrap(spec(c), join(good(0), r, good(2)), 3, 2)
		}, nil, batch.ErrCorrupt, 1, "bad key length"},
		{"no key on a compacted topic", func(c batch.Codec) []byte {
			return batchtest.Wrap(spec(c), join(good(0), good(1), rawRecord(2, 2, nil, []byte("v"), 0)), 3, 2)
		}, func(o *batch.ValidateOptions) { o.RequireKeys = true }, batch.ErrInvalidRecord, 2, "without a key"},
		{"timestamp too far ahead", func(c batch.Codec) []byte {
			return batchtest.Wrap(spec(c), join(good(0), rawRecord(1, 7_200_000, []byte("k"), nil, 0), good(2)), 3, 2)
		}, func(o *batch.ValidateOptions) { o.TimestampAfterMax = 3_600_000 }, batch.ErrInvalidTimestamp, 1, "out of range"},
		{"timestamp too old", func(c batch.Codec) []byte {
			return batchtest.Wrap(spec(c), join(rawRecord(0, -7_200_000, []byte("k"), nil, 0), good(1), good(2)), 3, 2)
		}, func(o *batch.ValidateOptions) { o.TimestampBeforeMax = 3_600_000 }, batch.ErrInvalidTimestamp, 0, "out of range"},
		{"producer claims log append time", func(c batch.Codec) []byte {
			s := spec(c)
			s.Attributes = batch.AttrLogAppendTime
			return batchtest.Build(s)
		}, nil, batch.ErrInvalidTimestamp, 0, "LogAppendTime"},
		{"billions of records claimed", func(c batch.Codec) []byte {
			return batchtest.Wrap(spec(c), join(good(0)), 2_000_000_000, 1_999_999_999)
		}, nil, batch.ErrCorrupt, -1, "cannot fit"},
	}
	for _, tc := range cases {
		for _, c := range codecCases {
			if c.xerial {
				continue
			}
			t.Run(tc.name+"/"+c.name, func(t *testing.T) {
				o := lenient
				if tc.opts != nil {
					tc.opts(&o)
				}
				_, err := validate(t, tc.build(c.codec), o)
				var ve *batch.ValidationError
				if !errors.As(err, &ve) || !errors.Is(err, tc.sentinel) {
					t.Fatalf("err %v, want a ValidationError wrapping %v", err, tc.sentinel)
				}
				if !strings.Contains(err.Error(), tc.message) {
					t.Errorf("message %q does not say %q", err, tc.message)
				}
				if tc.index < 0 {
					if len(ve.Records) != 0 {
						t.Errorf("record errors %v, want none", ve.Records)
					}
					return
				}
				if len(ve.Records) != 1 || ve.Records[0].Index != tc.index {
					t.Errorf("record errors %v, want one for record %d", ve.Records, tc.index)
				}
			})
		}
	}
}

func TestValidateRecordsUndecompressable(t *testing.T) {
	b := batchtest.Build(batchtest.Spec{FirstTimestamp: now, Codec: batch.CodecZstd, ProducerID: -1, BaseSequence: -1,
		Records: batchtest.Values("a")})
	b[batch.HeaderLen+5] ^= 0xff
	batchtest.Fix(b)
	if _, err := validate(t, b, lenient); !errors.Is(err, batch.ErrCorrupt) {
		t.Fatalf("err %v, want corrupt", err)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, c := range codecCases {
		if c.xerial {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			orig := batchtest.Build(batchtest.Spec{BaseOffset: 40, FirstTimestamp: now, Codec: c.codec,
				ProducerID: 9, ProducerEpoch: 1, BaseSequence: 3, Records: sampleRecords()})
			h, _ := batch.Check(orig)
			recs, err := batch.Records(orig)
			if err != nil {
				t.Fatal(err)
			}
			// Keep the first and last records, with a delete horizon.
			kept := []batch.Record{recs[0], recs[2]}
			nh := h
			nh.Attributes |= batch.AttrDeleteHorizon
			nh.FirstTimestamp = now + 86_400_000
			b, err := batch.Encode(nh, kept)
			if err != nil {
				t.Fatal(err)
			}
			if err := batch.VerifyCRC(b); err != nil {
				t.Fatal(err)
			}
			got, err := batch.Check(b)
			if err != nil {
				t.Fatal(err)
			}
			if got.BaseOffset != 40 || got.LastOffsetDelta != 2 || got.NumRecords != 2 || got.ProducerID != 9 ||
				got.BaseSequence != 3 || got.Codec() != c.codec || !batch.HasDeleteHorizon(got.Attributes) || got.FirstTimestamp != nh.FirstTimestamp {
				t.Fatalf("header %+v", got)
			}
			back, err := batch.Records(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(back) != 2 || back[0].Offset != 40 || back[1].Offset != 42 || back[1].Timestamp != recs[2].Timestamp ||
				!bytes.Equal(back[1].Value, recs[2].Value) || back[1].Headers[0].Key != "h1" || back[0].Timestamp != recs[0].Timestamp {
				t.Fatalf("records %+v", back)
			}
		})
	}
}

func TestSetMaxTimestamp(t *testing.T) {
	b := batchtest.Build(batchtest.NonIdempotent(now, batchtest.Values("a", "b")...))
	batch.SetMaxTimestamp(b, now+99, true)
	if err := batch.VerifyCRC(b); err != nil {
		t.Fatal(err)
	}
	h, _ := batch.Check(b)
	if h.MaxTimestamp != now+99 || !batch.IsLogAppendTime(h.Attributes) {
		t.Fatalf("header %+v", h)
	}
}

// FuzzValidateRecords: the validator never panics, and what it accepts
// decodes into exactly the records the header declares, numbered in order,
// with the maximum timestamp it reported.
func FuzzValidateRecords(f *testing.F) {
	for _, c := range codecCases {
		f.Add(batchtest.Build(batchtest.Spec{FirstTimestamp: now, Codec: c.codec, Xerial: c.xerial,
			ProducerID: -1, BaseSequence: -1, Records: sampleRecords()}), false)
	}
	f.Add(batchtest.Wrap(batchtest.Spec{FirstTimestamp: now}, rawRecord(0, 0, nil, nil, 2), 1, 0), true)
	f.Fuzz(func(t *testing.T, b []byte, keys bool) {
		h, err := batch.Check(b)
		if err != nil {
			return
		}
		o := lenient
		o.RequireKeys = keys
		v, err := batch.ValidateRecords(b, h, o)
		if err != nil {
			var ve *batch.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %v is not a ValidationError", err)
			}
			return
		}
		recs, err := batch.Records(b)
		if err != nil {
			t.Fatalf("validated batch does not decode: %v", err)
		}
		if len(recs) != int(h.NumRecords) {
			t.Fatalf("%d records, header says %d", len(recs), h.NumRecords)
		}
		maxTS := int64(batch.NoTimestamp)
		for i, r := range recs {
			if r.OffsetDelta != int32(i) {
				t.Fatalf("record %d has offset delta %d", i, r.OffsetDelta)
			}
			if keys && r.Key == nil {
				t.Fatalf("record %d has no key", i)
			}
			maxTS = max(maxTS, h.FirstTimestamp+r.TimestampDelta)
		}
		if maxTS != v.MaxTimestamp {
			t.Fatalf("max timestamp %d, validator said %d", maxTS, v.MaxTimestamp)
		}
	})
}
