package server

import (
	"bytes"
	"encoding/binary"
	"errors"
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
