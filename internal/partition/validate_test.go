package partition

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/batch/batchtest"
)

// misnumbered is a batch of two records whose second record claims offset
// delta 5: only decoding the records finds it.
func misnumbered(c batch.Codec) []byte {
	rec := func(od int64) []byte {
		body := []byte{0}
		body = binary.AppendVarint(body, 0)  // timestamp delta
		body = binary.AppendVarint(body, od) // offset delta
		body = binary.AppendVarint(body, 1)  // key length
		body = append(body, 'k')
		body = binary.AppendVarint(body, -1) // null value
		body = binary.AppendVarint(body, 0)  // no headers
		return append(binary.AppendVarint(nil, int64(len(body))), body...)
	}
	s := batchtest.NonIdempotent(1_000, batchtest.Values("a", "b")...)
	s.Codec = c
	return batchtest.Wrap(s, append(rec(0), rec(5)...), 2, 1)
}

func TestHeaderOnlyCompressedValidation(t *testing.T) {
	compact := withConfig(DefaultConfig(), func(c *Config) { c.Compact, c.Delete = true, false })
	cases := []struct {
		name       string
		opts       Options
		codec      batch.Codec
		wantRefuse bool
	}{
		{"full validation decodes snappy records", Options{}, batch.CodecSnappy, true},
		{"header only skips decoding snappy records", Options{HeaderOnlyCompressed: true}, batch.CodecSnappy, false},
		{"header only still decodes uncompressed records", Options{HeaderOnlyCompressed: true}, batch.CodecNone, true},
		{"header only still decodes a compacted topic's records", Options{HeaderOnlyCompressed: true, Config: compact}, batch.CodecZstd, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := openT(t, t.TempDir(), tc.opts)
			_, err := l.Append([][]byte{misnumbered(tc.codec)})
			if refused := errors.Is(err, batch.ErrInvalidRecord); refused != tc.wantRefuse {
				t.Fatalf("append of a misnumbered %s batch: %v; want refused %v", tc.codec, err, tc.wantRefuse)
			}
		})
	}
}
