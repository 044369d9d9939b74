// Package batchtest builds Kafka magic v2 record batches for tests, with any
// of the five compression codecs, so tests of code that stores or serves
// batches do not depend on a real producer.
package batchtest

import (
	"bytes"
	"encoding/binary"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy/xerial"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/batch"
)

// Record is one record to put in a batch. TimestampDelta is relative to the
// batch's FirstTimestamp. A nil Key or Value is encoded as null.
type Record struct {
	TimestampDelta int64
	Key, Value     []byte
	Headers        []batch.RecordHeader
}

// Spec describes a batch to build.
type Spec struct {
	BaseOffset     int64
	FirstTimestamp int64
	// Attributes are OR'ed with the codec bits.
	Attributes    int16
	Codec         batch.Codec
	Xerial        bool // frame snappy the way snappy-java does
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	Records       []Record
}

// NonIdempotent returns a Spec without producer id, as a plain producer
// sends it.
func NonIdempotent(firstTS int64, recs ...Record) Spec {
	return Spec{FirstTimestamp: firstTS, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: recs}
}

// Values returns records with the given values and timestamp deltas 0,1,2...
func Values(vals ...string) []Record {
	out := make([]Record, len(vals))
	for i, v := range vals {
		out[i] = Record{TimestampDelta: int64(i), Value: []byte(v)}
	}
	return out
}

// Build encodes the batch with a valid CRC. PartitionLeaderEpoch is -1, as
// producers send it.
func Build(s Spec) []byte {
	var raw []byte
	maxTS := s.FirstTimestamp
	for i, r := range s.Records {
		raw = appendRecord(raw, int32(i), r)
		if ts := s.FirstTimestamp + r.TimestampDelta; ts > maxTS {
			maxTS = ts
		}
	}
	body := Compress(s.Codec, s.Xerial, raw)
	rb := kmsg.RecordBatch{
		FirstOffset:          s.BaseOffset,
		Length:               int32(batch.HeaderLen - batch.LogOverhead + len(body)),
		PartitionLeaderEpoch: -1,
		Magic:                batch.MagicV2,
		Attributes:           s.Attributes | int16(s.Codec),
		LastOffsetDelta:      int32(len(s.Records) - 1),
		FirstTimestamp:       s.FirstTimestamp,
		MaxTimestamp:         maxTS,
		ProducerID:           s.ProducerID,
		ProducerEpoch:        s.ProducerEpoch,
		FirstSequence:        s.BaseSequence,
		NumRecords:           int32(len(s.Records)),
		Records:              body,
	}
	b := rb.AppendTo(nil)
	Fix(b)
	return b
}

// Fix recomputes the CRC of a batch after a test has edited it.
func Fix(b []byte) {
	binary.BigEndian.PutUint32(b[17:21], batch.ComputeCRC(b))
}

// Compress compresses raw records with codec c.
func Compress(c batch.Codec, xerialFraming bool, raw []byte) []byte {
	switch c {
	case batch.CodecGzip:
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write(raw)
		w.Close()
		return buf.Bytes()
	case batch.CodecSnappy:
		if xerialFraming {
			return xerial.Encode(nil, raw)
		}
		return s2.EncodeSnappy(nil, raw)
	case batch.CodecLZ4:
		var buf bytes.Buffer
		w := lz4.NewWriter(&buf)
		w.Write(raw)
		w.Close()
		return buf.Bytes()
	case batch.CodecZstd:
		w, _ := zstd.NewWriter(nil)
		defer w.Close()
		return w.EncodeAll(raw, nil)
	}
	return raw
}

func appendRecord(dst []byte, offsetDelta int32, r Record) []byte {
	var body []byte
	body = append(body, 0) // attributes
	body = binary.AppendVarint(body, r.TimestampDelta)
	body = binary.AppendVarint(body, int64(offsetDelta))
	body = appendNullable(body, r.Key)
	body = appendNullable(body, r.Value)
	body = binary.AppendVarint(body, int64(len(r.Headers)))
	for _, h := range r.Headers {
		body = appendNullable(body, []byte(h.Key))
		body = appendNullable(body, h.Value)
	}
	dst = binary.AppendVarint(dst, int64(len(body)))
	return append(dst, body...)
}

func appendNullable(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}
