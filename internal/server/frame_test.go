package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func frameOf(req kmsg.Request, corr int32, clientID string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, uint16(len(clientID)))
	b = append(b, clientID...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	return req.AppendTo(b)
}

func TestParseRoundTrip(t *testing.T) {
	for _, v := range []int16{0, 8, 9, 13} { // classic and flexible headers
		req := kmsg.NewPtrMetadataRequest()
		req.Version = v
		req.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("t")}}
		h, got, body, err := ParseHeader(frameOf(req, 42, "cid"))
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if h.Key != 3 || h.Version != v || h.CorrelationID != 42 || h.ClientID != "cid" {
			t.Fatalf("v%d: header %+v", v, h)
		}
		if err := DecodeBody(got, body); err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if m := got.(*kmsg.MetadataRequest); len(m.Topics) != 1 || *m.Topics[0].Topic != "t" {
			t.Fatalf("v%d: topics %+v", v, m.Topics)
		}
	}
}

func TestParseRejects(t *testing.T) {
	good := frameOf(kmsg.NewPtrApiVersionsRequest(), 1, "x")
	unknown := bytes.Clone(good)
	binary.BigEndian.PutUint16(unknown, 30000)
	if _, _, _, err := ParseHeader(unknown); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("unknown key: %v", err)
	}
	if _, _, _, err := ParseHeader(good[:9]); !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated client id: %v", err)
	}
	if _, _, _, err := ParseHeader(good[:3]); !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated header: %v", err)
	}
}

func TestReadFrameLimits(t *testing.T) {
	var size [4]byte
	big := binary.BigEndian.AppendUint32(nil, 1001)
	if _, err := ReadFrame(bytes.NewReader(big), size[:], 1000); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	small := binary.BigEndian.AppendUint32(nil, 3)
	if _, err := ReadFrame(bytes.NewReader(append(small, 1, 2, 3)), size[:], 1000); !errors.Is(err, ErrFrameTooSmall) {
		t.Fatalf("undersized: %v", err)
	}
	ok := append(binary.BigEndian.AppendUint32(nil, 8), 1, 2, 3, 4, 5, 6, 7, 8)
	if f, err := ReadFrame(bytes.NewReader(ok), size[:], 1000); err != nil || len(f) != 8 {
		t.Fatalf("frame: %v %d", err, len(f))
	}
}

// chunkReader gives its bytes at most step at a time, then io.EOF.
type chunkReader struct {
	b    []byte
	step int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.step)], r.b)
	r.b = r.b[n:]
	return n, nil
}

// sized prefixes each body with its size.
func sized(bodies ...[]byte) []byte {
	var b []byte
	for _, body := range bodies {
		b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
		b = append(b, body...)
	}
	return b
}

func TestFrameReaderBorrowsTheLargeBufferForABurstOnly(t *testing.T) {
	var bodies [][]byte
	for i := range 100 {
		bodies = append(bodies, bytes.Repeat([]byte{byte(i)}, 300))
	}
	in := sized(bodies...)
	// A heartbeat's worth first, then the burst, then a frame larger
	// than the large buffer.
	in = append(sized(bytes.Repeat([]byte{7}, 100)), in...)
	huge := bytes.Repeat([]byte{9}, largeReadBuffer*3)
	in = append(in, sized(huge)...)
	want := append(append([][]byte{bytes.Repeat([]byte{7}, 100)}, bodies...), huge)

	var f frameReader
	f.init(&chunkReader{b: in, step: 1 << 20})
	borrowed := false
	for i, w := range want {
		got, err := f.readFrame(1 << 20)
		if err != nil || !bytes.Equal(got, w) {
			t.Fatalf("frame %d: %v, %d bytes, equal=%v", i, err, len(got), bytes.Equal(got, w))
		}
		borrowed = borrowed || f.large != nil
		if f.buffered() == 0 && f.large != nil {
			t.Fatalf("frame %d: large buffer held with nothing buffered", i)
		}
	}
	if !borrowed {
		t.Fatal("a burst of pipelined frames was read through the small buffer")
	}
	if _, err := f.readFrame(1 << 20); err != io.EOF {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
	if f.large != nil {
		t.Fatal("large buffer held at the end")
	}
}

// FuzzFrameReader checks the connection's buffered frame reader against
// ReadFrame: the same frames and the same error from the same bytes,
// whatever sizes the reads come in, and no large buffer held once the
// bytes read are consumed.
func FuzzFrameReader(f *testing.F) {
	f.Add(sized([]byte("12345678"), bytes.Repeat([]byte{1}, 700), []byte("abcdefghi")), uint16(3))
	f.Add(sized(bytes.Repeat([]byte{2}, 2000)), uint16(511))
	f.Add(append(sized([]byte("12345678")), 0xff, 0xff, 0xff, 0xff), uint16(600))
	f.Add(append(sized([]byte("12345678")), 0, 0, 0, 3, 1, 2, 3), uint16(1))
	f.Add(append(sized([]byte("12345678")), 0, 1, 0, 0, 1, 2), uint16(4096))
	f.Add([]byte{0, 0}, uint16(1))
	f.Fuzz(func(t *testing.T, in []byte, step uint16) {
		step = max(step, 1)
		const max = 64 << 10
		var size [4]byte
		ref := &chunkReader{b: in, step: int(step)}
		var fr frameReader
		fr.init(&chunkReader{b: in, step: int(step)})
		for i := 0; ; i++ {
			want, wantErr := ReadFrame(ref, size[:], max)
			got, err := fr.readFrame(max)
			if (wantErr == nil) != (err == nil) || wantErr != nil && wantErr.Error() != err.Error() {
				t.Fatalf("frame %d: error %v, want %v", i, err, wantErr)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("frame %d: %x, want %x", i, got, want)
			}
			if fr.buffered() == 0 && fr.large != nil {
				t.Fatalf("frame %d: large buffer held with nothing buffered", i)
			}
			if err != nil {
				return
			}
		}
	})
}

// sizedChunkReader hands out its bytes a chunk at a time, recording how large
// the buffer was that each read went into.
type sizedChunkReader struct {
	data  []byte
	chunk int
	bufs  []int
}

func (r *sizedChunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	r.bufs = append(r.bufs, cap(p))
	n := copy(p[:min(len(p), r.chunk)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// A large frame gets its whole buffer once its first chunk has come, within
// the server's budget, and grows with what arrives beyond the budget; the
// budget is given back when the frame is read.
func TestLargeFrameTakesItsWholeBufferWithinBudget(t *testing.T) {
	const n = 1 << 20
	frame := make([]byte, 4+n)
	binary.BigEndian.PutUint32(frame, n)
	for i := range frame[4:] {
		frame[4+i] = byte(i)
	}
	for _, c := range []struct {
		budget    int64
		wantWhole bool
	}{{2 << 20, true}, {n - 1, false}} {
		b := &frameBudget{limit: c.budget}
		rd := &sizedChunkReader{data: frame, chunk: 32 << 10}
		var fr frameReader
		fr.init(rd)
		fr.budget = b
		body, err := fr.readFrame(64 << 20)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(body, frame[4:]) {
			t.Fatal("the frame read is not the frame sent")
		}
		whole := false
		for _, size := range rd.bufs {
			if size > n/2 {
				whole = true
			}
		}
		if bigReads := whole && cap(body) == n; bigReads != c.wantWhole {
			t.Fatalf("budget %d: whole buffer %v (read buffers %v), want %v", c.budget, bigReads, rd.bufs, c.wantWhole)
		}
		if b.used.Load() != 0 {
			t.Fatalf("budget %d: %d bytes still reserved after the frame", c.budget, b.used.Load())
		}
	}
}
