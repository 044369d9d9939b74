package core

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// The record encoding both machines use: unsigned lengths and counts as
// uvarints, signed numbers as varints, strings behind their length. A
// Reader accepts only the shortest encoding of each number, so that
// whatever decodes encodes back to the same bytes.

// ErrCorrupt is what a Reader reports for input it cannot read.
var ErrCorrupt = errors.New("corrupt record")

// AppendString appends s behind its length.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendBytes appends v behind its length plus one, 0 standing for nil:
// an empty value and a missing one mean different things to clients.
func AppendBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(v))+1)
	return append(b, v...)
}

// AppendBool appends 1 or 0.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// AppendStrings appends a count and the strings.
func AppendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = AppendString(b, s)
	}
	return b
}

// Reader reads what the Append functions and encoding/binary's varint
// functions wrote. After the first failure every read returns a zero value
// and Err stays ErrCorrupt, so a decoder reads on and checks once.
type Reader struct {
	B   []byte // what is left to read
	Err error
}

// NewReader reads b.
func NewReader(b []byte) Reader { return Reader{B: b} }

// Fail marks the input corrupt.
func (r *Reader) Fail() {
	if r.Err == nil {
		r.Err = ErrCorrupt
	}
}

// Uvarint reads an unsigned varint in its shortest encoding.
func (r *Reader) Uvarint() uint64 {
	if r.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.B)
	if n <= 0 || n != len(binary.AppendUvarint(nil, v)) {
		r.Fail()
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Varint reads a signed varint in its shortest encoding.
func (r *Reader) Varint() int64 {
	if r.Err != nil {
		return 0
	}
	v, n := binary.Varint(r.B)
	if n <= 0 || n != len(binary.AppendVarint(nil, v)) {
		r.Fail()
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Int32 reads a varint that must fit an int32.
func (r *Reader) Int32() int32 {
	v := r.Varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.Fail()
		return 0
	}
	return int32(v)
}

// Take returns the next n bytes, sharing the input.
func (r *Reader) Take(n uint64) []byte {
	if r.Err != nil {
		return nil
	}
	if n > uint64(len(r.B)) {
		r.Fail()
		return nil
	}
	v := r.B[:n:n]
	r.B = r.B[n:]
	return v
}

// String reads what AppendString wrote.
func (r *Reader) String() string { return string(r.Take(r.Uvarint())) }

// Bytes reads what AppendBytes wrote, as a copy.
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if n == 0 {
		return nil
	}
	return append([]byte{}, r.Take(n-1)...)
}

// Bool reads a byte that must be 0 or 1.
func (r *Reader) Bool() bool {
	b := r.Take(1)
	if r.Err != nil {
		return false
	}
	if b[0] > 1 {
		r.Fail()
		return false
	}
	return b[0] == 1
}

// Count reads a list length and refuses one the rest of the input cannot
// hold at minSize bytes an element, before anything is allocated for it.
func (r *Reader) Count(minSize int) int {
	n := r.Uvarint()
	if r.Err == nil && n > uint64(len(r.B)/minSize) {
		r.Fail()
		return 0
	}
	return int(n)
}

// Strings reads what AppendStrings wrote; an empty list reads as empty,
// not nil.
func (r *Reader) Strings() []string {
	ss := make([]string, r.Count(1))
	for i := range ss {
		ss[i] = r.String()
	}
	return ss
}

// Time reads unix milliseconds written as a varint, in UTC.
func (r *Reader) Time() time.Time { return time.UnixMilli(r.Varint()).UTC() }
