// Package meta defines the values cluster mode keeps in etcd (the table in
// docs/cluster.md), their keys, and their encoding.
//
// Each value is a JSON object with a "version" field. Decoding is strict:
// a value of a version this node does not know, with a field it does not
// know, or that breaks the value's rules (a leader outside its ISR, a
// replica listed twice, ...) is refused with an error naming the key. A
// node must never act on a value it does not understand: it stops and
// says which key, rather than guess. A format change that older nodes
// could misread therefore takes a new version, written only once every
// node understands it (as Kafka gates new formats behind
// inter.broker.protocol.version). Encoding checks the same rules, so that
// a node never writes what the others would refuse.
package meta

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// Version is the one version of every value this code reads and writes.
const Version = 1

// ErrInvalid is wrapped by every error of decoding, encoding, and key
// parsing.
var ErrInvalid = errors.New("meta: invalid")

// ID is a 16-byte id: a topic's id (Kafka's topic UUID) or a process's
// incarnation. JSON and keys carry it as 32 lowercase hex digits. The zero
// ID means none, and is never valid where an ID is required.
type ID [16]byte

// String returns the 32 lowercase hex digits.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is the zero ID.
func (id ID) IsZero() bool { return id == ID{} }

// ParseID parses 32 lowercase hex digits; anything else (upper case
// included, so that an id has one spelling in keys) is refused.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*len(id) {
		return ID{}, fmt.Errorf("%w id %q: want %d hex digits", ErrInvalid, s, 2*len(id))
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil || id.String() != s {
		return ID{}, fmt.Errorf("%w id %q: want lowercase hex digits", ErrInvalid, s)
	}
	return id, nil
}

// MarshalText implements encoding.TextMarshaler.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *ID) UnmarshalText(b []byte) error {
	v, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// value is what every value type does: check its own rules.
type value interface {
	validate() error
}

// encode checks v and writes it with the version field first.
func encode[T value](what string, v T) ([]byte, error) {
	if err := v.validate(); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrInvalid, what, err)
	}
	vb, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrInvalid, what, err)
	}
	// The version goes first, where a person reading etcd sees it.
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"version":%d`, Version)
	if len(vb) > 2 {
		b.WriteByte(',')
	}
	b.Write(vb[1:])
	return b.Bytes(), nil
}

// decode reads the value of key: the version first, then strictly the
// fields of T (no unknown field, nothing after the object), then T's
// rules.
func decode[T value](key string, data []byte) (T, error) {
	var zero T
	fail := func(format string, args ...any) (T, error) {
		return zero, fmt.Errorf("%w value at %q: %s", ErrInvalid, key, fmt.Sprintf(format, args...))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return fail("%v", err)
	}
	if fields == nil {
		return fail("not an object")
	}
	raw, ok := fields["version"]
	if !ok {
		return fail("no version")
	}
	var version int
	if err := json.Unmarshal(raw, &version); err != nil {
		return fail("version %s: %v", raw, err)
	}
	if version != Version {
		return fail("version %d, this node understands only %d", version, Version)
	}
	delete(fields, "version")
	rest, err := json.Marshal(fields)
	if err != nil {
		return fail("%v", err)
	}
	var v T
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return fail("%v", err)
	}
	if err := v.validate(); err != nil {
		return fail("%v", err)
	}
	return v, nil
}
