package batch_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/batch/batchtest"
)

type codecCase struct {
	name   string
	codec  batch.Codec
	xerial bool
}

var codecCases = []codecCase{
	{"none", batch.CodecNone, false},
	{"gzip", batch.CodecGzip, false},
	{"snappy", batch.CodecSnappy, false},
	{"snappy-xerial", batch.CodecSnappy, true},
	{"lz4", batch.CodecLZ4, false},
	{"zstd", batch.CodecZstd, false},
}

func sampleRecords() []batchtest.Record {
	return []batchtest.Record{
		{TimestampDelta: 0, Key: []byte("k1"), Value: []byte("hello")},
		{TimestampDelta: 5, Key: nil, Value: nil},
		{TimestampDelta: 3, Key: []byte{}, Value: bytes.Repeat([]byte("x"), 70000),
			Headers: []batch.RecordHeader{{Key: "h1", Value: []byte("v1")}, {Key: "h2", Value: nil}}},
	}
}

func TestRoundTripAllCodecs(t *testing.T) {
	var all []byte
	var built [][]byte
	for _, c := range codecCases {
		t.Run(c.name, func(t *testing.T) {
			spec := batchtest.Spec{BaseOffset: 100, FirstTimestamp: 1_700_000_000_000, Codec: c.codec, Xerial: c.xerial,
				ProducerID: 7, ProducerEpoch: 2, BaseSequence: 40, Records: sampleRecords()}
			b := batchtest.Build(spec)
			built = append(built, b)
			all = append(all, b...)
			if err := batch.VerifyCRC(b); err != nil {
				t.Fatal(err)
			}
			h, err := batch.Check(b)
			if err != nil {
				t.Fatal(err)
			}
			if h.Codec() != c.codec || h.NumRecords != 3 || h.LastOffsetDelta != 2 || h.ProducerID != 7 ||
				h.ProducerEpoch != 2 || h.BaseSequence != 40 || h.LastSequence() != 42 || h.BaseOffset != 100 ||
				h.MaxTimestamp != spec.FirstTimestamp+5 || h.Size() != int64(len(b)) || h.LastOffset() != 102 {
				t.Fatalf("header %+v", h)
			}
			if c.xerial && !bytes.HasPrefix(b[batch.HeaderLen:], []byte("\x82SNAPPY\x00")) {
				t.Fatal("xerial framing not used")
			}
			recs, err := batch.Records(b)
			if err != nil {
				t.Fatal(err)
			}
			want := sampleRecords()
			if len(recs) != len(want) {
				t.Fatalf("got %d records", len(recs))
			}
			for i, r := range recs {
				w := want[i]
				if r.Offset != 100+int64(i) || r.OffsetDelta != int32(i) || r.Timestamp != spec.FirstTimestamp+w.TimestampDelta ||
					!bytes.Equal(r.Key, w.Key) || (r.Key == nil) != (w.Key == nil) ||
					!bytes.Equal(r.Value, w.Value) || (r.Value == nil) != (w.Value == nil) ||
					fmt.Sprint(r.Headers) != fmt.Sprint(w.Headers) {
					t.Fatalf("record %d: got %+v", i, r)
				}
			}
		})
	}
	parts, err := batch.Split(all)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != len(built) {
		t.Fatalf("split into %d, want %d", len(parts), len(built))
	}
	for i := range parts {
		if !bytes.Equal(parts[i], built[i]) {
			t.Fatalf("batch %d differs after split", i)
		}
		if cap(parts[i]) != len(parts[i]) {
			t.Fatalf("batch %d: capacity not clipped", i)
		}
	}
}

func TestCRCDetectsFlippedByte(t *testing.T) {
	b := batchtest.Build(batchtest.NonIdempotent(1000, batchtest.Values("a", "bb", "ccc")...))
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x01
		err := batch.VerifyCRC(c)
		// Bytes before the attributes (offset, length, leader epoch,
		// magic, the CRC itself) are not covered by the checksum, except
		// that changing the CRC field makes it disagree.
		covered := i >= 17
		if covered && !errors.Is(err, batch.ErrCorrupt) {
			t.Fatalf("flip at %d not detected: %v", i, err)
		}
		if !covered && err != nil {
			t.Fatalf("flip at %d outside CRC range reported: %v", i, err)
		}
	}
	batch.SetBaseOffset(b, 12345)
	batch.SetPartitionLeaderEpoch(b, 0)
	if err := batch.VerifyCRC(b); err != nil {
		t.Fatalf("patching offset/epoch broke CRC: %v", err)
	}
	h, _ := batch.ParseHeader(b)
	if h.BaseOffset != 12345 || h.PartitionLeaderEpoch != 0 {
		t.Fatalf("patch not applied: %+v", h)
	}
	if err := batch.VerifyCRC(b[:40]); !errors.Is(err, batch.ErrCorrupt) {
		t.Fatalf("short batch: %v", err)
	}
}

func TestSplitRejects(t *testing.T) {
	good := batchtest.Build(batchtest.NonIdempotent(1000, batchtest.Values("a", "b")...))
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	put32 := func(off int, v int32) []byte {
		return mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[off:], uint32(v)); return b })
	}
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, batch.ErrInvalidRecord},
		{"short", good[:10], batch.ErrCorrupt},
		{"header-truncated", good[:40], batch.ErrCorrupt},
		{"body-truncated", good[:len(good)-1], batch.ErrCorrupt},
		{"trailing-garbage", append(bytes.Clone(good), 1, 2, 3), batch.ErrCorrupt},
		{"two-then-truncated", append(bytes.Clone(good), good[:30]...), batch.ErrCorrupt},
		{"magic1", mod(func(b []byte) []byte { b[16] = 1; return b }), batch.ErrUnsupportedMagic},
		{"magic0-short", mod(func(b []byte) []byte { b[16] = 0; return b[:20] }), batch.ErrUnsupportedMagic},
		{"length-small", put32(8, 10), batch.ErrCorrupt},
		{"length-negative", put32(8, -1), batch.ErrCorrupt},
		{"length-huge", put32(8, math.MaxInt32), batch.ErrCorrupt},
		{"num-records-negative", put32(57, -1), batch.ErrCorrupt},
		{"last-offset-delta-negative", put32(23, -1), batch.ErrCorrupt},
		{"count-exceeds-delta", put32(57, 3), batch.ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := batch.Split(c.in)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v (%d batches), want %v", err, len(got), c.want)
			}
		})
	}
	if parts, err := batch.Split(append(bytes.Clone(good), good...)); err != nil || len(parts) != 2 {
		t.Fatalf("two good batches: %v %d", err, len(parts))
	}
}

func TestValidateProduce(t *testing.T) {
	h := func(f func(s *batchtest.Spec)) batch.Header {
		s := batchtest.NonIdempotent(1, batchtest.Values("a", "b")...)
		f(&s)
		hd, err := batch.Check(batchtest.Build(s))
		if err != nil {
			t.Fatal(err)
		}
		return hd
	}
	if err := batch.ValidateProduce(h(func(*batchtest.Spec) {})); err != nil {
		t.Fatal(err)
	}
	if err := batch.ValidateProduce(h(func(s *batchtest.Spec) { s.Attributes = batch.AttrControl })); !errors.Is(err, batch.ErrInvalidRecord) {
		t.Fatalf("control: %v", err)
	}
	hd := h(func(*batchtest.Spec) {})
	hd.NumRecords = 0
	if err := batch.ValidateProduce(hd); !errors.Is(err, batch.ErrInvalidRecord) {
		t.Fatalf("empty: %v", err)
	}
	hd = h(func(*batchtest.Spec) {})
	hd.NumRecords = 1
	if err := batch.ValidateProduce(hd); !errors.Is(err, batch.ErrInvalidRecord) {
		t.Fatalf("count mismatch: %v", err)
	}
	hd = h(func(*batchtest.Spec) {})
	hd.Attributes = 6
	if err := batch.ValidateProduce(hd); !errors.Is(err, batch.ErrUnsupportedCompression) {
		t.Fatalf("codec 6: %v", err)
	}
}

func TestAttributes(t *testing.T) {
	a := int16(batch.CodecLZ4) | batch.AttrTransactional
	if batch.Compression(a) != batch.CodecLZ4 || !batch.IsTransactional(a) || batch.IsControl(a) || batch.IsLogAppendTime(a) {
		t.Fatal("attribute decoding")
	}
	a = batch.AttrControl | batch.AttrLogAppendTime
	if batch.Compression(a) != batch.CodecNone || batch.IsTransactional(a) || !batch.IsControl(a) || !batch.IsLogAppendTime(a) {
		t.Fatal("attribute decoding")
	}
}

func TestLogAppendTimeUsesMaxTimestamp(t *testing.T) {
	s := batchtest.NonIdempotent(1000, batchtest.Values("a", "b", "c")...)
	s.Attributes = batch.AttrLogAppendTime
	b := batchtest.Build(s)
	binary.BigEndian.PutUint64(b[35:], 5000) // broker-set append time
	recs, err := batch.Records(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Timestamp != 5000 {
			t.Fatalf("timestamp %d, want 5000", r.Timestamp)
		}
	}
}

func TestIncrementSequenceWraps(t *testing.T) {
	for _, c := range []struct{ seq, n, want int32 }{
		{0, 4, 4}, {math.MaxInt32, 1, 0}, {math.MaxInt32 - 1, 3, 1}, {math.MaxInt32, 0, math.MaxInt32},
	} {
		if got := batch.IncrementSequence(c.seq, c.n); got != c.want {
			t.Fatalf("IncrementSequence(%d,%d)=%d want %d", c.seq, c.n, got, c.want)
		}
	}
}

func TestDecompressionBounded(t *testing.T) {
	big := bytes.Repeat([]byte{0}, 2<<20)
	raw := batchtest.Compress(batch.CodecNone, false, big)
	for _, c := range codecCases[1:] {
		t.Run(c.name, func(t *testing.T) {
			z := batchtest.Compress(c.codec, c.xerial, raw)
			if _, err := batch.Decompress(c.codec, z, 1<<20); !errors.Is(err, batch.ErrTooLarge) {
				t.Fatalf("got %v, want ErrTooLarge", err)
			}
			out, err := batch.Decompress(c.codec, z, 4<<20)
			if err != nil || !bytes.Equal(out, big) {
				t.Fatalf("within limit: %v", err)
			}
			if _, err := batch.Decompress(c.codec, z[:len(z)/2], 4<<20); err == nil {
				t.Fatal("truncated input decoded without error")
			}
		})
	}
	// A batch whose records decompress past the limit fails as a whole.
	s := batchtest.NonIdempotent(1, batchtest.Record{Value: big})
	s.Codec = batch.CodecZstd
	if _, err := batch.RecordsLimit(batchtest.Build(s), 1<<20); !errors.Is(err, batch.ErrTooLarge) {
		t.Fatalf("RecordsLimit: %v", err)
	}
	if _, err := batch.Decompress(batch.Codec(7), nil, 10); !errors.Is(err, batch.ErrUnsupportedCompression) {
		t.Fatalf("codec 7: %v", err)
	}
}

func TestRecordsRejectsBadBodies(t *testing.T) {
	good := batchtest.Build(batchtest.NonIdempotent(1, batchtest.Values("abc", "def")...))
	for _, c := range []struct {
		name string
		f    func(b []byte) []byte
	}{
		{"count-too-high-for-bytes", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[23:], 1000)
			binary.BigEndian.PutUint32(b[57:], 1000)
			return b
		}},
		{"record-length-overflows", func(b []byte) []byte { b[batch.HeaderLen] = 0x7e; return b }},
		{"trailing-bytes", func(b []byte) []byte {
			b = append(b, 0, 0)
			binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
			return b
		}},
		{"fewer-records", func(b []byte) []byte { binary.BigEndian.PutUint32(b[57:], 1); return b }},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := c.f(bytes.Clone(good))
			if _, err := batch.Records(b); !errors.Is(err, batch.ErrCorrupt) {
				t.Fatalf("got %v", err)
			}
		})
	}
}

var genCorpus = flag.Bool("gencorpus", false, "rewrite testdata/fuzz/FuzzSplitAndRecords seed files")

// TestGenerateCorpus writes the fuzz seed corpus when run with -gencorpus;
// otherwise it checks that the committed seeds still parse, so the seeds
// keep exercising the decoders rather than only the error paths.
func TestGenerateCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzSplitAndRecords")
	if *genCorpus {
		os.MkdirAll(dir, 0o755)
		for _, c := range codecCases {
			s := batchtest.Spec{FirstTimestamp: 1700000000000, Codec: c.codec, Xerial: c.xerial, ProducerID: 3, ProducerEpoch: 0,
				BaseSequence: 0, Records: []batchtest.Record{
					{Key: []byte("k"), Value: []byte("value one")},
					{TimestampDelta: 2, Value: []byte("value two"), Headers: []batch.RecordHeader{{Key: "h", Value: []byte("v")}}},
				}}
			b := batchtest.Build(s)
			if c.codec == batch.CodecNone {
				b = append(b, batchtest.Build(batchtest.NonIdempotent(5, batchtest.Values("x")...))...)
			}
			content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
			if err := os.WriteFile(filepath.Join(dir, c.name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) < len(codecCases) {
		t.Fatalf("seed corpus missing (%v); run go test -run TestGenerateCorpus -gencorpus", err)
	}
	for _, c := range codecCases {
		data, err := os.ReadFile(filepath.Join(dir, c.name))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(string(data), "\n", 3)
		var b []byte
		if _, err := fmt.Sscanf(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"), "%q", &b); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		parts, err := batch.Split(b)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, p := range parts {
			if err := batch.VerifyCRC(p); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if _, err := batch.Records(p); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
	}
}

func FuzzSplitAndRecords(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		parts, err := batch.Split(data)
		if err != nil {
			if parts != nil {
				t.Fatal("batches returned with error")
			}
			return
		}
		total := 0
		for _, p := range parts {
			total += len(p)
			h, err := batch.Check(p)
			if err != nil {
				t.Fatalf("Split returned a batch Check rejects: %v", err)
			}
			_ = batch.VerifyCRC(p)
			_ = batch.ValidateProduce(h)
			recs, err := batch.RecordsLimit(p, 1<<20)
			if err != nil {
				continue
			}
			if len(recs) != int(h.NumRecords) {
				t.Fatalf("%d records, header says %d", len(recs), h.NumRecords)
			}
		}
		if total != len(data) {
			t.Fatalf("split covers %d of %d bytes", total, len(data))
		}
	})
}
