package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Header is the Kafka request header (v1 or v2; the client id is a classic
// nullable string even in the flexible v2 header).
type Header struct {
	Key           int16
	Version       int16
	CorrelationID int32
	ClientID      string
}

// Errors returned by ReadFrame, ParseHeader and DecodeRequest. Each of them ends the
// connection: a Kafka broker cannot answer a request it cannot frame or parse.
var (
	ErrFrameTooLarge = errors.New("request frame larger than the maximum request size")
	ErrFrameTooSmall = errors.New("request frame smaller than a request header")
	ErrUnknownKey    = errors.New("unknown api key")
	ErrTruncated     = errors.New("truncated request header")
	ErrRequestDecode = errors.New("request body does not decode")
	// ErrUnsupportedVersion is a key and version the handler does not
	// serve.
	ErrUnsupportedVersion = errors.New("unsupported request version")
	errNegativeLength     = errors.New("negative frame length")
)

// frameChunk is the buffer a frame starts with. A frame's buffer grows
// (doubling) only as its bytes arrive, so a client that announces a large
// frame and sends little of it holds little memory: at most twice what it
// sent, plus one chunk.
const frameChunk = 64 << 10

// checkFrameSize checks a frame's announced size before anything is
// allocated for it.
func checkFrameSize(n, max int32) error {
	switch {
	case n < 0:
		return errNegativeLength
	case n > max:
		return fmt.Errorf("%w: %d > %d", ErrFrameTooLarge, n, max)
	case n < 8: // key, version, correlation id
		return fmt.Errorf("%w: %d bytes", ErrFrameTooSmall, n)
	}
	return nil
}

// growFrame makes room for more of a frame of n bytes whose first got
// bytes are in body (nil at first).
func growFrame(body []byte, got, n int) []byte {
	grown := make([]byte, min(n, max(frameChunk, 2*len(body))))
	copy(grown, body[:got])
	return grown
}

// ReadFrame reads one size-prefixed frame. The size is checked against max
// before anything is allocated, and the buffer grows with the bytes
// received, not the size announced.
func ReadFrame(r io.Reader, sizeBuf []byte, max int32) ([]byte, error) {
	if _, err := io.ReadFull(r, sizeBuf[:4]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(sizeBuf[:4]))
	if err := checkFrameSize(n, max); err != nil {
		return nil, err
	}
	var body []byte
	for got := 0; got < int(n); {
		body = growFrame(body, got, int(n))
		m, err := io.ReadFull(r, body[got:])
		got += m
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // the frame had begun
			}
			return nil, err
		}
	}
	return body, nil
}

// Read buffering of a connection. A connection waiting for a request
// holds only a small buffer, large enough for the requests of a consumer
// at rest (a heartbeat, a commit of a few partitions) to arrive in one
// read, and none once it is parked. A read that fills it suggests a client
// with more to send (pipelined requests, a produce), so the next read goes
// into a large buffer borrowed from a pool and given back as soon as the
// bytes it holds are consumed. A frame larger than the buffer at hand is
// read straight into its own buffer.
const (
	smallReadBuffer = 512
	largeReadBuffer = 64 << 10
)

var (
	smallReadBuffers = sync.Pool{New: func() any { return new([smallReadBuffer]byte) }}
	largeReadBuffers = sync.Pool{New: func() any { return new([largeReadBuffer]byte) }}
)

// frameBudget bounds the bytes of large frames being received that were
// given their whole buffer at once (see frameReader.readFrame).
type frameBudget struct {
	limit int64
	used  atomic.Int64
}

// reserve takes n bytes of the budget, or reports false.
func (b *frameBudget) reserve(n int64) bool {
	if b == nil {
		return false
	}
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *frameBudget) release(n int64) { b.used.Add(-n) }

// frameReader reads request frames from a connection through the buffers
// above.
type frameReader struct {
	// budget, if not nil, lets a large frame take its whole buffer once
	// its first chunk has arrived.
	budget *frameBudget
	rd     io.Reader
	small  *[smallReadBuffer]byte // taken when first needed, kept until release
	large  *[largeReadBuffer]byte // borrowed while it holds unread bytes
	buf    []byte                 // small[:] or large[:]; nil before the first read
	r, w   int                    // buf[r:w] is read from rd, not yet consumed
	// filled is set when the last read filled the small buffer.
	filled bool
}

func (f *frameReader) init(rd io.Reader) { f.rd = rd }

func (f *frameReader) buffered() int { return f.w - f.r }

// fill reads once from rd into the buffer, borrowing the large buffer
// first if the small one is full or was filled by the last read. An error
// is returned only if nothing was read.
func (f *frameReader) fill() error {
	if f.buf == nil {
		if f.small == nil {
			f.small = smallReadBuffers.Get().(*[smallReadBuffer]byte)
		}
		f.buf = f.small[:]
	}
	if f.r > 0 {
		copy(f.buf, f.buf[f.r:f.w])
		f.w -= f.r
		f.r = 0
	}
	if f.large == nil && (f.filled || f.w == len(f.buf)) {
		f.large = largeReadBuffers.Get().(*[largeReadBuffer]byte)
		copy(f.large[:], f.buf[:f.w])
		f.buf = f.large[:]
	}
	n, err := f.rd.Read(f.buf[f.w:])
	f.w += n
	f.filled = f.large == nil && f.w == len(f.buf)
	if n > 0 {
		return nil
	}
	f.consumed() // a failed read gives back a buffer it borrowed
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// consumed gives the large buffer back once it holds nothing unread.
func (f *frameReader) consumed() {
	if f.r < f.w {
		return
	}
	f.r, f.w = 0, 0
	if f.large != nil {
		largeReadBuffers.Put(f.large)
		f.large = nil
		f.buf = f.small[:]
	}
}

// frameBuffered reports whether a whole frame is in the buffer.
func (f *frameReader) frameBuffered() bool {
	if f.buffered() < 4 {
		return false
	}
	size := int32(binary.BigEndian.Uint32(f.buf[f.r:]))
	return size >= 0 && int(size) <= f.buffered()-4
}

// readFrame reads the next frame, like ReadFrame: the size is checked
// against max first, and the frame's buffer grows with the bytes received.
// The frame is a buffer of its own, since a request may keep slices of it.
func (f *frameReader) readFrame(max int32) ([]byte, error) {
	for f.buffered() < 4 {
		if err := f.fill(); err != nil {
			if err == io.EOF && f.buffered() > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	n := int32(binary.BigEndian.Uint32(f.buf[f.r:]))
	if err := checkFrameSize(n, max); err != nil {
		return nil, err
	}
	f.r += 4
	if int(n) <= f.buffered() {
		body := make([]byte, n)
		f.r += copy(body, f.buf[f.r:f.w])
		f.consumed()
		return body, nil
	}
	var body []byte
	got := 0
	whole := false
	defer func() {
		if whole {
			f.budget.release(int64(n))
		}
	}()
	for got < int(n) {
		if got == len(body) {
			// Once a chunk of a large frame has come, the client is
			// sending it: the rest gets its buffer at once, within
			// the server's budget, instead of doubling through
			// copies. A frame announced and then not sent holds at
			// most a chunk.
			if got >= frameChunk && !whole && f.budget.reserve(int64(n)) {
				whole = true
				grown := make([]byte, n)
				copy(grown, body[:got])
				body = grown
			} else {
				body = growFrame(body, got, int(n))
			}
		}
		if f.buffered() > 0 {
			m := copy(body[got:], f.buf[f.r:f.w])
			f.r += m
			got += m
			f.consumed()
			continue
		}
		var err error
		if int(n)-got >= len(f.buf) {
			// More than a buffer's worth is missing: read it in place.
			var m int
			m, err = f.rd.Read(body[got:])
			got += m
			if m > 0 {
				err = nil
			} else if err == nil {
				err = io.ErrNoProgress
			}
		} else {
			err = f.fill()
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // the frame had begun
			}
			return nil, err
		}
	}
	return body, nil
}

// release gives back both buffers, when nothing is buffered: the
// connection is parked or done.
func (f *frameReader) release() {
	f.r, f.w = 0, 0
	f.consumed()
	if f.small != nil {
		smallReadBuffers.Put(f.small)
		f.small, f.buf = nil, nil
	}
	f.filled = false
}

// ParseHeader reads the request header from a frame and returns it with the
// remaining body. The request type decides whether a tagged-field section
// follows the client id, so the header cannot be parsed without the key.
func ParseHeader(frame []byte) (Header, kmsg.Request, []byte, error) {
	return parseHeader(frame, nil)
}

// parseHeader is ParseHeader with the last client id a connection sent,
// if cache is not nil: a client sends the same one on every request, and
// reusing its string saves an allocation per request.
func parseHeader(frame []byte, cache *string) (Header, kmsg.Request, []byte, error) {
	rd := kbin.Reader{Src: frame}
	h := Header{Key: rd.Int16(), Version: rd.Int16(), CorrelationID: rd.Int32()}
	if len(frame) < 8 {
		return h, nil, nil, ErrTruncated
	}
	// The client id: a nullable string, an int16 length and its bytes.
	if n := int(rd.Int16()); n > 0 {
		id := rd.Span(n)
		switch {
		case cache == nil:
			h.ClientID = string(id)
		case *cache == string(id): // compared without a copy
			h.ClientID = *cache
		default:
			h.ClientID = string(id)
			*cache = h.ClientID
		}
	}
	if rd.Complete() != nil {
		return h, nil, nil, ErrTruncated
	}
	req := kmsg.RequestForKey(h.Key)
	if req == nil {
		return h, nil, nil, fmt.Errorf("%w %d", ErrUnknownKey, h.Key)
	}
	req.SetVersion(h.Version)
	if req.IsFlexible() {
		skipTags(&rd)
		if rd.Complete() != nil {
			return h, nil, nil, ErrTruncated
		}
	}
	return h, req, rd.Src, nil
}

// skipTags skips a tagged-field section, as kmsg.SkipTags does, without
// passing the reader through an interface (which would move it to the
// heap on every request).
func skipTags(rd *kbin.Reader) {
	for n := rd.Uvarint(); n > 0 && rd.Ok(); n-- {
		rd.Uvarint() // the tag
		rd.Span(int(rd.Uvarint()))
	}
}

// DecodeBody decodes the request body into req. kmsg decodes leniently past
// the end of the fields it knows; a short body is an error. A decoder that
// panics is a bug to be found (FuzzRequest), so the panic is not hidden
// here; the server recovers from it per request.
func DecodeBody(req kmsg.Request, body []byte) error {
	if err := req.ReadFrom(body); err != nil {
		return fmt.Errorf("%w: %v", ErrRequestDecode, err)
	}
	return nil
}

// DecodeRequest turns a frame into the request a Handler is given, or the
// error that closes the connection instead: a header that does not parse,
// a key and version h does not serve, a body that does not decode. The
// header is returned as far as it was parsed.
func DecodeRequest(frame []byte, h Handler) (Header, kmsg.Request, error) {
	return decodeRequest(frame, h, nil)
}

// decodeRequest is DecodeRequest with a connection's client id cache (see
// parseHeader).
func decodeRequest(frame []byte, h Handler, clientID *string) (Header, kmsg.Request, error) {
	hdr, req, body, err := parseHeader(frame, clientID)
	if err != nil {
		return hdr, nil, err
	}
	if hdr.Key == int16(kmsg.ApiVersions) {
		if hdr.Version > req.MaxVersion() {
			// A version newer than kmsg knows cannot be decoded; the
			// handler answers it in v0 form (KIP-511) from the header.
			return hdr, req, nil
		}
	} else if !h.Supports(hdr.Key, hdr.Version) {
		return hdr, nil, fmt.Errorf("%w: %s v%d", ErrUnsupportedVersion, kmsg.NameForKey(hdr.Key), hdr.Version)
	}
	if err := DecodeBody(req, body); err != nil {
		return hdr, nil, err
	}
	return hdr, req, nil
}

// AppendResponse appends a whole response frame (size, correlation id,
// header tags, body) to dst. ApiVersions always uses response header v0
// (KIP-511) so that a client can read it whatever version it sent.
func AppendResponse(dst []byte, corr int32, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(corr))
	if resp.IsFlexible() && resp.Key() != int16(kmsg.ApiVersions) {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}
