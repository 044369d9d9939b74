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

// Errors returned by ReadFrame and ParseRequest. Each of them ends the
// connection: a Kafka broker cannot answer a request it cannot frame or parse.
var (
	ErrFrameTooLarge  = errors.New("request frame larger than the maximum request size")
	ErrFrameTooSmall  = errors.New("request frame smaller than a request header")
	ErrUnknownKey     = errors.New("unknown api key")
	ErrTruncated      = errors.New("truncated request header")
	ErrRequestDecode  = errors.New("request body does not decode")
	errNegativeLength = errors.New("negative frame length")
)

// ReadFrame reads one size-prefixed frame. The size is checked against max
// before anything is allocated, so a hostile length cannot make us allocate.
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
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return body, nil
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
// the end of the fields it knows; a short body is an error.
func DecodeBody(req kmsg.Request, body []byte) (err error) {
	// kmsg does not panic on malformed input today, but a decoder of
	// outside bytes is the last place a panic should take the server down.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: panic: %v", ErrRequestDecode, r)
		}
	}()
	if err := req.ReadFrom(body); err != nil {
		return fmt.Errorf("%w: %v", ErrRequestDecode, err)
	}
	return nil
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
