package batch

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// ValidateCompressedHeader is the cheap alternative to ValidateRecords for
// a compressed batch, for brokers that choose not to decompress produced
// batches (decompressing is most of what validation costs): it checks the
// batch-level rules ValidateRecords checks without decoding records. A
// producer may not claim LogAppendTime; the header's first and max
// timestamps must lie within the topic's bounds; and for snappy, whose
// blocks declare their decoded size, the records must fit in it and it
// within MaxDecompressedSize, so a few compressed bytes cannot claim
// billions of offsets. It does not find undecodable records, offset
// deltas out of order, a record count that does not match the records,
// or, for other codecs, a count the records cannot hold. MaxTimestamp
// is the header's.
func ValidateCompressedHeader(b []byte, h Header, o ValidateOptions) (Validated, error) {
	v := Validated{MaxTimestamp: h.MaxTimestamp}
	if len(b) < HeaderLen {
		return v, &ValidationError{Err: corrupt("batch truncated (%d bytes)", len(b))}
	}
	if IsLogAppendTime(h.Attributes) {
		return v, &ValidationError{Err: fmt.Errorf("%w: producers may not set the log append time attribute", ErrInvalidTimestamp)}
	}
	if h.Codec() == CodecSnappy {
		size, err := snappyDeclaredSize(b[HeaderLen:])
		if err != nil {
			return v, decompressError(err)
		}
		if int(h.NumRecords) > size/minRecordLen {
			return v, &ValidationError{Err: corrupt("%d records cannot fit in %d bytes", h.NumRecords, size)}
		}
		v.UncompressedBytes = size
	}
	if !o.LogAppendTime {
		for _, ts := range []int64{h.FirstTimestamp, h.MaxTimestamp} {
			if ts != NoTimestamp && (o.Now-ts > o.TimestampBeforeMax || ts-o.Now > o.TimestampAfterMax) {
				return v, &ValidationError{Err: fmt.Errorf("%w: batch timestamp %d is out of range: the topic accepts [%d, %d]",
					ErrInvalidTimestamp, ts, satSub(o.Now, o.TimestampBeforeMax), satAdd(o.Now, o.TimestampAfterMax))}
			}
		}
	}
	return v, nil
}

// snappyDeclaredSize is the decoded size snappy records declare: a raw
// block's length prefix, or the sum of those of xerial frames. It fails
// like Decompress on a malformed framing or a size over
// MaxDecompressedSize.
func snappyDeclaredSize(src []byte) (int, error) {
	blockSize := func(block []byte) (int, error) {
		n, k := binary.Uvarint(block)
		if k <= 0 || n > 0xffffffff {
			return 0, corrupt("snappy decompression: bad block length")
		}
		return int(n), nil
	}
	tooLarge := func() error { return fmt.Errorf("%w (snappy, limit %d bytes)", ErrTooLarge, MaxDecompressedSize) }
	if !bytes.HasPrefix(src, xerialMagic) {
		n, err := blockSize(src)
		if err == nil && n > MaxDecompressedSize {
			err = tooLarge()
		}
		return n, err
	}
	if len(src) < xerialHeaderLen {
		return 0, corrupt("snappy decompression: xerial header truncated")
	}
	total := 0
	for pos := xerialHeaderLen; pos < len(src); {
		if len(src)-pos < 4 {
			return 0, corrupt("snappy decompression: xerial block length truncated")
		}
		n := int(binary.BigEndian.Uint32(src[pos:]))
		pos += 4
		if n < 0 || n > len(src)-pos {
			return 0, corrupt("snappy decompression: xerial block of %d bytes exceeds input", n)
		}
		size, err := blockSize(src[pos : pos+n])
		if err != nil {
			return 0, err
		}
		if total += size; total > MaxDecompressedSize {
			return 0, tooLarge()
		}
		pos += n
	}
	return total, nil
}
