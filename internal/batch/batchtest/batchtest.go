// Package batchtest builds Kafka magic v2 record batches for tests, with any
// of the five compression codecs, so tests of code that stores or serves
// batches do not depend on a real producer.
package batchtest

import (
	"encoding/binary"

	"github.com/klauspost/compress/snappy/xerial"
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
	for i, r := range s.Records {
		raw = batch.AppendRecord(raw, batch.Record{Key: r.Key, Value: r.Value, Headers: r.Headers}, int32(i), r.TimestampDelta)
	}
	n := int32(len(s.Records))
	return Wrap(s, raw, n, n-1)
}

// Wrap encodes a batch around already encoded (uncompressed) records,
// compressing them with s.Codec, with the record count and last offset
// delta given, so tests can build batches whose header and records
// disagree. s.Records only provide the maximum timestamp.
func Wrap(s Spec, raw []byte, numRecords, lastOffsetDelta int32) []byte {
	maxTS := s.FirstTimestamp
	for _, r := range s.Records {
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
		LastOffsetDelta:      lastOffsetDelta,
		FirstTimestamp:       s.FirstTimestamp,
		MaxTimestamp:         maxTS,
		ProducerID:           s.ProducerID,
		ProducerEpoch:        s.ProducerEpoch,
		FirstSequence:        s.BaseSequence,
		NumRecords:           numRecords,
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
	if c == batch.CodecSnappy && xerialFraming {
		return xerial.Encode(nil, raw)
	}
	out, err := batch.Compress(c, raw)
	if err != nil {
		panic(err)
	}
	return out
}
