package batch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
)

// ErrInvalidTimestamp means a record's timestamp is outside what the topic
// accepts, or a producer claimed broker append time. Kafka answers
// INVALID_TIMESTAMP.
var ErrInvalidTimestamp = errors.New("invalid record timestamp")

// NoTimestamp is the timestamp of a record that carries none.
const NoTimestamp = -1

// ValidateOptions are a topic's rules for the records of a batch arriving
// from a producer, as Kafka's LogValidator applies them.
type ValidateOptions struct {
	// Now is the broker's time in Unix milliseconds, against which
	// CreateTime timestamps are checked.
	Now int64
	// LogAppendTime is set when the topic's message.timestamp.type is
	// LogAppendTime: record timestamps are then the broker's and not
	// checked.
	LogAppendTime bool
	// TimestampBeforeMax and TimestampAfterMax bound how far a CreateTime
	// timestamp may lie before or after Now (message.timestamp.before.max.ms
	// and message.timestamp.after.max.ms); math.MaxInt64 is no bound.
	TimestampBeforeMax, TimestampAfterMax int64
	// RequireKeys refuses records without a key (compacted topics).
	RequireKeys bool
}

// RecordError names one record of a batch and what is wrong with it, as
// Kafka's ProduceResponse carries it (batch_index, batch_index_error_message).
type RecordError struct {
	Index   int32
	Message string
}

// ValidationError is why ValidateRecords refused a batch. It wraps one of
// ErrCorrupt, ErrInvalidRecord or ErrInvalidTimestamp; Records lists the
// records at fault when the fault is a record's (empty when it is the
// batch's).
type ValidationError struct {
	Err     error
	Records []RecordError
}

func (e *ValidationError) Error() string {
	if len(e.Records) == 0 {
		return e.Err.Error()
	}
	var b strings.Builder
	b.WriteString(e.Err.Error())
	// Like Kafka, at most the first three.
	for i, r := range e.Records[:min(len(e.Records), 3)] {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "record %d: %s", r.Index, r.Message)
	}
	return b.String()
}

func (e *ValidationError) Unwrap() error { return e.Err }

// maxRecordErrors bounds the record errors one batch reports, so a batch of
// many bad records costs a bounded reply.
const maxRecordErrors = 100

// Validated is what ValidateRecords learnt from a valid batch.
type Validated struct {
	// MaxTimestamp is the largest record timestamp (NoTimestamp if none
	// has one). A batch whose header says otherwise gets it corrected on
	// append, as Kafka does.
	MaxTimestamp int64
	// UncompressedBytes is the size of the records once decompressed.
	UncompressedBytes int
}

// decompressBufs recycles the buffers compressed batches are inflated into
// for validation, which only reads them.
var decompressBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBuffer is the largest buffer kept for reuse; rarer, larger ones
// are left to the collector.
const maxPooledBuffer = 4 << 20

// ValidateRecords decodes every record of the batch b (decompressing it if
// needed, within MaxDecompressedSize) and applies Kafka's LogValidator
// checks: the declared record count is the number of records present, each
// record's offset delta is its index, each record is well formed and fills
// exactly its declared length, nothing follows the last record, timestamps
// obey the topic's type and bounds, and, for compacted topics, every record
// has a key. h is b's parsed header. It allocates nothing for a valid
// uncompressed batch.
func ValidateRecords(b []byte, h Header, o ValidateOptions) (Validated, error) {
	v := Validated{MaxTimestamp: NoTimestamp}
	if len(b) < HeaderLen {
		return v, &ValidationError{Err: corrupt("batch truncated (%d bytes)", len(b))}
	}
	data := b[HeaderLen:]
	if c := h.Codec(); c != CodecNone {
		bufp := decompressBufs.Get().(*[]byte)
		out, err := DecompressTo((*bufp)[:0], c, data, MaxDecompressedSize)
		if err != nil {
			decompressBufs.Put(bufp)
			return v, decompressError(err)
		}
		defer func() {
			if cap(out) <= maxPooledBuffer {
				*bufp = out
				decompressBufs.Put(bufp)
			}
		}()
		data = out
	}
	v.UncompressedBytes = len(data)
	if IsLogAppendTime(h.Attributes) {
		return v, &ValidationError{Err: fmt.Errorf("%w: producers may not set the log append time attribute", ErrInvalidTimestamp),
			Records: []RecordError{{0, "the batch claims LogAppendTime; producers send CreateTime and the broker sets append times"}}}
	}
	n := int(h.NumRecords)
	if n > len(data)/minRecordLen {
		return v, &ValidationError{Err: corrupt("%d records cannot fit in %d bytes", n, len(data))}
	}
	var errs []RecordError
	var kind error
	fail := func(i int, sentinel error, format string, args ...any) {
		if kind == nil || sentinel == ErrInvalidTimestamp {
			kind = sentinel
		}
		if len(errs) < maxRecordErrors {
			errs = append(errs, RecordError{Index: int32(i), Message: fmt.Sprintf(format, args...)})
		}
	}
	maxTS := int64(NoTimestamp)
	r := data
	for i := range n {
		length, k := varint(r)
		if k <= 0 || length < 1 || length > int64(len(r)-k) {
			return v, corruptRecord(i, "bad record length")
		}
		rec := r[k : k+int(length)]
		r = r[k+int(length):]
		rec = rec[1:] // attributes: unused in v2
		tsDelta, k := varint(rec)
		if k <= 0 {
			return v, corruptRecord(i, "bad timestamp delta")
		}
		rec = rec[k:]
		od, k := varint(rec)
		if k <= 0 {
			return v, corruptRecord(i, "bad offset delta")
		}
		rec = rec[k:]
		if od != int64(i) {
			fail(i, ErrInvalidRecord, "offset delta %d, expected %d: records must be numbered 0, 1, 2... within their batch", od, i)
		}
		keyLen, rest, ok := skipNullable(rec)
		if !ok {
			return v, corruptRecord(i, "bad key length")
		}
		if keyLen < 0 && o.RequireKeys {
			fail(i, ErrInvalidRecord, "compacted topic cannot accept a record without a key")
		}
		if _, rest, ok = skipNullable(rest); !ok {
			return v, corruptRecord(i, "bad value length")
		}
		nh, k := varint(rest)
		if k <= 0 || nh < 0 || nh > int64(len(rest)-k)/2 {
			return v, corruptRecord(i, "bad header count")
		}
		rest = rest[k:]
		for range nh {
			var hk int64
			if hk, rest, ok = skipNullable(rest); !ok || hk < 0 {
				return v, corruptRecord(i, "bad header key")
			}
			if _, rest, ok = skipNullable(rest); !ok {
				return v, corruptRecord(i, "bad header value")
			}
		}
		if len(rest) != 0 {
			return v, corruptRecord(i, fmt.Sprintf("%d bytes past the end of its fields", len(rest)))
		}
		ts := h.FirstTimestamp + tsDelta
		if ts > maxTS {
			maxTS = ts
		}
		if !o.LogAppendTime && ts != NoTimestamp {
			if o.Now-ts > o.TimestampBeforeMax || ts-o.Now > o.TimestampAfterMax {
				fail(i, ErrInvalidTimestamp, "timestamp %d is out of range: the topic accepts [%d, %d]",
					ts, satSub(o.Now, o.TimestampBeforeMax), satAdd(o.Now, o.TimestampAfterMax))
			}
		}
	}
	if len(r) != 0 {
		return v, &ValidationError{Err: corrupt("%d bytes after the last of the %d records the batch declares", len(r), n)}
	}
	if kind != nil {
		return v, &ValidationError{Err: fmt.Errorf("%w: %d of %d records rejected", kind, len(errs), n), Records: errs}
	}
	v.MaxTimestamp = maxTS
	return v, nil
}

// decompressError is the ValidationError for records that do not
// decompress; records decompressing past the limit are invalid, not
// corrupt.
func decompressError(err error) error {
	if errors.Is(err, ErrTooLarge) {
		err = fmt.Errorf("%w: %w", ErrInvalidRecord, err)
	}
	return &ValidationError{Err: err}
}

// corruptRecord names a record that does not decode; Error says
// "corrupt record batch: record i: msg".
func corruptRecord(i int, msg string) error {
	return &ValidationError{Err: ErrCorrupt, Records: []RecordError{{Index: int32(i), Message: msg}}}
}

// skipNullable skips a varint length and that many bytes (-1 is null) and
// returns the length.
func skipNullable(b []byte) (int64, []byte, bool) {
	n, k := varint(b)
	if k <= 0 || n < -1 || n > int64(len(b)-k) {
		return 0, nil, false
	}
	if n < 0 {
		return n, b[k:], true
	}
	return n, b[k+int(n):], true
}

// varint is binary.Varint with the one- and two-byte encodings, which
// nearly every record field uses, decoded inline.
func varint(b []byte) (int64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		u := uint64(b[0])
		return int64(u>>1) ^ -int64(u&1), 1
	}
	if len(b) > 1 && b[1] < 0x80 {
		u := uint64(b[0]&0x7f) | uint64(b[1])<<7
		return int64(u>>1) ^ -int64(u&1), 2
	}
	return binary.Varint(b)
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satSub(a, b int64) int64 {
	if b > 0 && a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}

// SetMaxTimestamp overwrites the batch's MaxTimestamp and sets or clears
// its log-append-time attribute, then recomputes the CRC; b must be one
// whole batch. The broker uses it to stamp LogAppendTime topics and to
// correct a header whose MaxTimestamp is not its records' largest.
func SetMaxTimestamp(b []byte, ts int64, logAppendTime bool) {
	be := binary.BigEndian
	attrs := be.Uint16(b[offAttributes:])
	if logAppendTime {
		attrs |= AttrLogAppendTime
	} else {
		attrs &^= AttrLogAppendTime
	}
	be.PutUint16(b[offAttributes:], attrs)
	be.PutUint64(b[offMaxTimestamp:], uint64(ts))
	be.PutUint32(b[offCRC:], ComputeCRC(b))
}
