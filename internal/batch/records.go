package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Codec is a record batch compression codec (attribute bits 0-2).
type Codec int8

// The codecs Kafka defines.
const (
	CodecNone   Codec = 0
	CodecGzip   Codec = 1
	CodecSnappy Codec = 2
	CodecLZ4    Codec = 3
	CodecZstd   Codec = 4
)

// Valid reports whether c is one of the codecs Kafka defines.
func (c Codec) Valid() bool { return c >= CodecNone && c <= CodecZstd }

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLZ4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", int(c))
}

// Compression extracts the codec from batch attributes.
func Compression(attrs int16) Codec { return Codec(attrs & AttrCompressionMask) }

// MaxDecompressedSize bounds how many bytes the records of one batch may
// decompress to. It protects the broker from decompression bombs: a few
// kilobytes of zstd or gzip can claim gigabytes. 64 MiB is far above
// Kafka's default max.message.bytes (1 MiB) times any sane compression
// ratio for real data, so legitimate batches are not affected.
const MaxDecompressedSize = 64 << 20

// RecordHeader is one header of a record. Header keys are never null in
// Kafka; a null value is a nil Value.
type RecordHeader struct {
	Key   string
	Value []byte
}

// Record is one decoded record of a batch. Key and Value are nil when null
// on the wire. They alias the batch bytes (uncompressed batches) or a
// buffer private to the Records call (compressed batches).
type Record struct {
	Attributes     int8
	TimestampDelta int64
	OffsetDelta    int32
	// Offset is BaseOffset + OffsetDelta.
	Offset int64
	// Timestamp is FirstTimestamp + TimestampDelta, or the batch
	// MaxTimestamp for LogAppendTime batches.
	Timestamp int64
	Key       []byte
	Value     []byte
	Headers   []RecordHeader
}

// Records decodes all records of the batch b, decompressing them if needed
// with the MaxDecompressedSize bound. It checks the batch structure but not
// the CRC.
func Records(b []byte) ([]Record, error) {
	return RecordsLimit(b, MaxDecompressedSize)
}

// RecordsLimit is Records with a custom bound on the decompressed size;
// limits <= 0 or above MaxDecompressedSize mean MaxDecompressedSize.
func RecordsLimit(b []byte, limit int) ([]Record, error) {
	h, err := Check(b)
	if err != nil {
		return nil, err
	}
	if limit <= 0 || limit > MaxDecompressedSize {
		limit = MaxDecompressedSize
	}
	data := b[HeaderLen:]
	if c := h.Codec(); c != CodecNone {
		data, err = Decompress(c, data, limit)
		if err != nil {
			return nil, err
		}
	}
	return parseRecords(h, data)
}

// Decompress inflates src compressed with codec c, failing with ErrTooLarge
// if the output would exceed limit bytes. Snappy accepts both raw blocks and
// the xerial framing used by the Java client.
func Decompress(c Codec, src []byte, limit int) ([]byte, error) {
	return DecompressTo(nil, c, src, limit)
}

// DecompressTo is Decompress into dst's storage (from its length 0), which
// it grows as needed; callers that decompress many batches reuse one
// buffer. For CodecNone it returns src itself.
func DecompressTo(dst []byte, c Codec, src []byte, limit int) ([]byte, error) {
	var (
		out []byte
		err error
	)
	dst = dst[:0]
	switch c {
	case CodecNone:
		if len(src) > limit {
			return nil, ErrTooLarge
		}
		return src, nil
	case CodecGzip:
		d := gzipReaders.Get().(*gzipReader)
		d.src.Reset(src)
		if err = d.zr.Reset(&d.src); err == nil {
			out, err = readLimited(dst, &d.zr, limit)
		}
		d.src.Reset(nil)
		gzipReaders.Put(d)
	case CodecSnappy:
		out, err = decodeSnappy(dst, src, limit)
	case CodecLZ4:
		d := lz4Readers.Get().(*lz4Reader)
		d.src.Reset(src)
		d.zr.Reset(&d.src)
		out, err = readLimited(dst, d.zr, limit)
		d.src.Reset(nil)
		lz4Readers.Put(d)
	case CodecZstd:
		out, err = zstdDecoder.DecodeAll(src, dst)
		if (err == nil && len(out) > limit) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
			err = ErrTooLarge
		}
	default:
		return nil, fmt.Errorf("%w: codec id %d", ErrUnsupportedCompression, int(c))
	}
	if err == ErrTooLarge {
		return nil, fmt.Errorf("%w (%s, limit %d bytes)", ErrTooLarge, c, limit)
	}
	if err != nil {
		return nil, corrupt("%s decompression: %v", c, err)
	}
	return out, nil
}

// zstdDecoder is shared because creating decoders is expensive; DecodeAll
// is safe for concurrent use. The memory cap makes it refuse frames that
// declare or produce more than MaxDecompressedSize.
var zstdDecoder = func() *zstd.Decoder {
	d, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(MaxDecompressedSize),
		zstd.WithDecoderMaxWindow(MaxDecompressedSize))
	if err != nil {
		panic(err) // only fails on invalid options
	}
	return d
}()

// Gzip and lz4 readers keep tables and buffers worth reusing: a new one
// per batch allocated more than small batches hold.
type (
	gzipReader struct {
		src bytes.Reader
		zr  gzip.Reader
	}
	lz4Reader struct {
		src bytes.Reader
		zr  *lz4.Reader
	}
)

var (
	gzipReaders = sync.Pool{New: func() any { return new(gzipReader) }}
	lz4Readers  = sync.Pool{New: func() any { return &lz4Reader{zr: lz4.NewReader(nil)} }}
)

func readLimited(dst []byte, r io.Reader, limit int) ([]byte, error) {
	buf := bytes.NewBuffer(dst[:0])
	n, err := buf.ReadFrom(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if n > int64(limit) {
		return nil, ErrTooLarge
	}
	return buf.Bytes(), nil
}

// xerialMagic starts snappy data framed the way snappy-java's
// SnappyOutputStream writes it; it is followed by two int32 version fields
// and then blocks of [int32 length][raw snappy block].
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const xerialHeaderLen = 16

func decodeSnappy(dst, src []byte, limit int) ([]byte, error) {
	if !bytes.HasPrefix(src, xerialMagic) {
		return decodeSnappyBlock(dst[:0], src, limit)
	}
	if len(src) < xerialHeaderLen {
		return nil, fmt.Errorf("xerial header truncated")
	}
	out := dst[:0]
	for pos := xerialHeaderLen; pos < len(src); {
		if len(src)-pos < 4 {
			return nil, fmt.Errorf("xerial block length truncated")
		}
		n := int(binary.BigEndian.Uint32(src[pos:]))
		pos += 4
		if n < 0 || n > len(src)-pos {
			return nil, fmt.Errorf("xerial block of %d bytes exceeds input", n)
		}
		var err error
		out, err = decodeSnappyBlock(out, src[pos:pos+n], limit)
		if err != nil {
			return nil, err
		}
		pos += n
	}
	if out == nil {
		out = []byte{}
	}
	return out, nil
}

// decodeSnappyBlock appends the decoding of one raw snappy block to dst,
// checking the block's declared length against the limit before
// allocating.
func decodeSnappyBlock(dst, block []byte, limit int) ([]byte, error) {
	n, err := s2.DecodedLen(block)
	if err != nil {
		return nil, err
	}
	if n > limit-len(dst) {
		return nil, ErrTooLarge
	}
	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	if _, err := s2.Decode(dst[start:], block); err != nil {
		return nil, err
	}
	return dst, nil
}

// minRecordLen is the smallest encoding of a record: one byte each for the
// length, attributes, timestamp delta, offset delta, key length, value
// length and header count. It bounds preallocation from a hostile count.
const minRecordLen = 7

func parseRecords(h Header, data []byte) ([]Record, error) {
	n := int(h.NumRecords)
	if n > len(data)/minRecordLen {
		return nil, corrupt("%d records cannot fit in %d bytes", n, len(data))
	}
	recs := make([]Record, n)
	logAppend := IsLogAppendTime(h.Attributes)
	r := reader{b: data}
	for i := range recs {
		length := r.varint()
		if r.err || length < 0 || length > int64(len(r.b)) {
			return nil, corrupt("record %d: bad length", i)
		}
		rr := reader{b: r.b[:length]}
		r.b = r.b[length:]
		rec := &recs[i]
		if len(rr.b) < 1 {
			return nil, corrupt("record %d: truncated", i)
		}
		rec.Attributes = int8(rr.b[0])
		rr.b = rr.b[1:]
		rec.TimestampDelta = rr.varint()
		od := rr.varint()
		if od < 0 || od > math.MaxInt32 {
			return nil, corrupt("record %d: bad offset delta", i)
		}
		rec.OffsetDelta = int32(od)
		rec.Offset = h.BaseOffset + od
		if logAppend {
			rec.Timestamp = h.MaxTimestamp
		} else {
			rec.Timestamp = h.FirstTimestamp + rec.TimestampDelta
		}
		rec.Key = rr.nullableBytes()
		rec.Value = rr.nullableBytes()
		nh := rr.varint()
		if rr.err || nh < 0 || nh > int64(len(rr.b)/2) {
			return nil, corrupt("record %d: bad header count", i)
		}
		if nh > 0 {
			rec.Headers = make([]RecordHeader, nh)
			for j := range rec.Headers {
				k := rr.nullableBytes()
				if k == nil {
					return nil, corrupt("record %d: null header key", i)
				}
				rec.Headers[j] = RecordHeader{Key: string(k), Value: rr.nullableBytes()}
			}
		}
		if rr.err {
			return nil, corrupt("record %d: truncated", i)
		}
		if len(rr.b) != 0 {
			return nil, corrupt("record %d: %d trailing bytes", i, len(rr.b))
		}
	}
	if len(r.b) != 0 {
		return nil, corrupt("%d bytes after the last record", len(r.b))
	}
	return recs, nil
}

// reader decodes Kafka's zigzag varints; after the first error every
// further read is a no-op and err stays set.
type reader struct {
	b   []byte
	err bool
}

func (r *reader) varint() int64 {
	if r.err {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// nullableBytes reads a varint length followed by that many bytes; length
// -1 is null.
func (r *reader) nullableBytes() []byte {
	n := r.varint()
	if r.err {
		return nil
	}
	if n == -1 {
		return nil
	}
	if n == 0 {
		return []byte{}
	}
	if n < -1 || n > int64(len(r.b)) {
		r.err = true
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}
