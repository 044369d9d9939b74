package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

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

// ReadFrame reads one size-prefixed frame. The size is checked against max
// before anything is allocated, and the buffer grows with the bytes
// received, not the size announced.
func ReadFrame(r io.Reader, sizeBuf []byte, max int32) ([]byte, error) {
	if _, err := io.ReadFull(r, sizeBuf[:4]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(sizeBuf[:4]))
	switch {
	case n < 0:
		return nil, errNegativeLength
	case n > max:
		return nil, fmt.Errorf("%w: %d > %d", ErrFrameTooLarge, n, max)
	case n < 8: // key, version, correlation id
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooSmall, n)
	}
	body := make([]byte, min(int(n), frameChunk))
	got := 0
	for {
		m, err := io.ReadFull(r, body[got:])
		got += m
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // the frame had begun
			}
			return nil, err
		}
		if got == int(n) {
			return body, nil
		}
		grown := make([]byte, min(int(n), 2*len(body)))
		copy(grown, body[:got])
		body = grown
	}
}

// ParseHeader reads the request header from a frame and returns it with the
// remaining body. The request type decides whether a tagged-field section
// follows the client id, so the header cannot be parsed without the key.
func ParseHeader(frame []byte) (Header, kmsg.Request, []byte, error) {
	rd := kbin.Reader{Src: frame}
	h := Header{Key: rd.Int16(), Version: rd.Int16(), CorrelationID: rd.Int32()}
	if len(frame) < 8 {
		return h, nil, nil, ErrTruncated
	}
	cid := rd.NullableString()
	if rd.Complete() != nil {
		return h, nil, nil, ErrTruncated
	}
	if cid != nil {
		h.ClientID = *cid
	}
	req := kmsg.RequestForKey(h.Key)
	if req == nil {
		return h, nil, nil, fmt.Errorf("%w %d", ErrUnknownKey, h.Key)
	}
	req.SetVersion(h.Version)
	if req.IsFlexible() {
		kmsg.SkipTags(&rd)
		if rd.Complete() != nil {
			return h, nil, nil, ErrTruncated
		}
	}
	return h, req, rd.Src, nil
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
	hdr, req, body, err := ParseHeader(frame)
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
