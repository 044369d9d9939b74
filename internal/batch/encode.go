package batch

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// AttrDeleteHorizon marks a batch whose FirstTimestamp holds the time after
// which a log cleaner may remove its tombstones (KIP-534); the records'
// timestamps stay FirstTimestamp + TimestampDelta.
const AttrDeleteHorizon = 0x40

// HasDeleteHorizon reports whether the attributes carry a delete horizon.
func HasDeleteHorizon(attrs int16) bool { return attrs&AttrDeleteHorizon != 0 }

// Compress compresses raw records with codec c (snappy as a raw block, the
// way Kafka's Java client reads it either way).
func Compress(c Codec, raw []byte) ([]byte, error) {
	switch c {
	case CodecNone:
		return raw, nil
	case CodecGzip:
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		if _, err := w.Write(raw); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	case CodecSnappy:
		return s2.EncodeSnappy(nil, raw), nil
	case CodecLZ4:
		var buf bytes.Buffer
		w := lz4.NewWriter(&buf)
		if _, err := w.Write(raw); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	case CodecZstd:
		return zstdEncoder.EncodeAll(raw, nil), nil
	}
	return nil, fmt.Errorf("%w: codec id %d", ErrUnsupportedCompression, int(c))
}

// zstdEncoder is shared; EncodeAll is safe for concurrent use.
var zstdEncoder = func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic(err) // only fails on invalid options
	}
	return e
}()

// AppendRecord appends r in the v2 record encoding with the given offset
// and timestamp deltas (relative to its batch's base offset and
// FirstTimestamp).
func AppendRecord(dst []byte, r Record, offsetDelta int32, timestampDelta int64) []byte {
	size := 1 + varintLen(timestampDelta) + varintLen(int64(offsetDelta)) +
		nullableLen(r.Key) + nullableLen(r.Value) + varintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
		size += varintLen(int64(len(h.Key))) + len(h.Key) + nullableLen(h.Value)
	}
	dst = binary.AppendVarint(dst, int64(size))
	dst = append(dst, byte(r.Attributes))
	dst = binary.AppendVarint(dst, timestampDelta)
	dst = binary.AppendVarint(dst, int64(offsetDelta))
	dst = appendNullable(dst, r.Key)
	dst = appendNullable(dst, r.Value)
	dst = binary.AppendVarint(dst, int64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = binary.AppendVarint(dst, int64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = appendNullable(dst, h.Value)
	}
	return dst
}

func varintLen(v int64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutVarint(b[:], v)
}

func nullableLen(b []byte) int {
	if b == nil {
		return varintLen(-1)
	}
	return varintLen(int64(len(b))) + len(b)
}

func appendNullable(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// Encode builds a batch from a header and records. The header gives the
// base offset, attributes (codec, timestamp type, delete horizon), last
// offset delta, timestamps and producer fields; the length, record count
// and CRC are computed. Each record keeps its OffsetDelta, so a batch a
// cleaner thinned out keeps every remaining record at its offset, and its
// timestamp delta is recomputed against h.FirstTimestamp. The partition
// leader epoch is 0, as the log stores it.
func Encode(h Header, recs []Record) ([]byte, error) {
	var raw []byte
	for _, r := range recs {
		raw = AppendRecord(raw, r, r.OffsetDelta, r.Timestamp-h.FirstTimestamp)
	}
	body, err := Compress(h.Codec(), raw)
	if err != nil {
		return nil, err
	}
	b := make([]byte, HeaderLen, HeaderLen+len(body))
	be := binary.BigEndian
	be.PutUint64(b[0:], uint64(h.BaseOffset))
	be.PutUint32(b[offLength:], uint32(HeaderLen-LogOverhead+len(body)))
	be.PutUint32(b[offPartitionLeaderEpoch:], 0)
	b[offMagic] = MagicV2
	be.PutUint16(b[offAttributes:], uint16(h.Attributes))
	be.PutUint32(b[23:], uint32(h.LastOffsetDelta))
	be.PutUint64(b[offFirstTimestamp:], uint64(h.FirstTimestamp))
	be.PutUint64(b[offMaxTimestamp:], uint64(h.MaxTimestamp))
	be.PutUint64(b[43:], uint64(h.ProducerID))
	be.PutUint16(b[51:], uint16(h.ProducerEpoch))
	be.PutUint32(b[53:], uint32(h.BaseSequence))
	be.PutUint32(b[57:], uint32(len(recs)))
	b = append(b, body...)
	be.PutUint32(b[offCRC:], ComputeCRC(b))
	return b, nil
}
