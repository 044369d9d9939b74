package e2e

import (
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/batch/batchtest"
)

func TestBadInputClosesOnlyThatConnection(t *testing.T) {
	a := startServer(t, t.TempDir(), func(c *app.Config) { c.MaxRequestBytes = 1 << 20 })
	addr := a.Addr()

	// A long-lived connection that must be unaffected by all of the below.
	bystander := dialRaw(t, addr)

	apiVersions := func(v int16) []byte {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = v
		req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1.0"
		return requestFrame(req, 1)
	}
	cases := []struct {
		name  string
		frame func() []byte
	}{
		{"frame larger than max-request-bytes", func() []byte {
			return binary.BigEndian.AppendUint32(nil, 1<<20+1)
		}},
		{"negative frame size", func() []byte { return []byte{0xff, 0xff, 0xff, 0xf0} }},
		{"garbage bytes", func() []byte {
			return append([]byte{0, 0, 0, 12}, "GET / HTTP/1"...)
		}},
		{"frame shorter than a header", func() []byte { return []byte{0, 0, 0, 3, 0, 18, 0} }},
		{"truncated request body", func() []byte {
			req := kmsg.NewPtrMetadataRequest()
			req.Version = 9
			req.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("some-topic")}}
			f := requestFrame(req, 1)
			f = f[:len(f)-6]
			binary.BigEndian.PutUint32(f, uint32(len(f)-4))
			return f
		}},
		{"truncated client id", func() []byte {
			f := apiVersions(0)[:12]
			binary.BigEndian.PutUint32(f, uint32(len(f)-4))
			return f
		}},
		{"unknown api key", func() []byte {
			f := apiVersions(0)
			binary.BigEndian.PutUint16(f[4:], 9999)
			return f
		}},
		{"unsupported version", func() []byte {
			req := kmsg.NewPtrMetadataRequest()
			req.Version = 13
			f := requestFrame(req, 1)
			binary.BigEndian.PutUint16(f[6:], 99)
			return f
		}},
		{"version below the served range", func() []byte {
			req := kmsg.NewPtrProduceRequest()
			req.Version = 2
			return requestFrame(req, 1)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rc := dialRaw(t, addr)
			rc.write(tc.frame())
			rc.expectClosed()
			expectServing(t, addr)
		})
	}
	if _, err := bystander.do(kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatalf("bystander connection broken: %v", err)
	}
}

func TestApiVersionsTooNewAnswersV0(t *testing.T) {
	a := startServer(t, t.TempDir())
	rc := dialRaw(t, a.Addr())
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 5
	req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1.0"
	f := requestFrame(req, 7)
	binary.BigEndian.PutUint16(f[6:], 42) // newer than anything known
	rc.write(f)
	corr, body, err := rc.readFrame()
	if err != nil {
		t.Fatal(err)
	}
	if corr != 7 {
		t.Fatalf("correlation %d", corr)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("error %d, want UNSUPPORTED_VERSION", resp.ErrorCode)
	}
	if len(resp.ApiKeys) != 1 || resp.ApiKeys[0].ApiKey != 18 || resp.ApiKeys[0].MaxVersion != 5 {
		t.Fatalf("api keys %+v, want only ApiVersions with max 5", resp.ApiKeys)
	}
	expectServing(t, a.Addr())
}

func TestProduceBadCRCAppendsNothing(t *testing.T) {
	a := startServer(t, t.TempDir())
	createTopic(t, a.Addr(), "crc", 1)
	rc := dialRaw(t, a.Addr())

	good := batchtest.Build(batchtest.NonIdempotent(1000, batchtest.Values("a", "b")...))
	bad := batchtest.Build(batchtest.NonIdempotent(1000, batchtest.Values("c", "d")...))
	bad[len(bad)-1] ^= 0xff // a flipped bit the CRC covers

	if p := rc.produce("crc", bad); p.ErrorCode != kerr.CorruptMessage.Code {
		t.Fatalf("bad CRC: error %d, want CORRUPT_MESSAGE", p.ErrorCode)
	}
	// Two batches for one partition: Kafka takes exactly one (v3+).
	if p := rc.produce("crc", append(append([]byte{}, good...), good...)); p.ErrorCode != kerr.InvalidRecord.Code {
		t.Fatalf("two batches: error %d, want INVALID_RECORD", p.ErrorCode)
	}
	if p := rc.produce("crc", good); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("good batch after a rejected one: error %d, base offset %d; want 0, 0", p.ErrorCode, p.BaseOffset)
	}
	expectServing(t, a.Addr())
}

func TestInvalidTopicNames(t *testing.T) {
	a := startServer(t, t.TempDir())
	rc := dialRaw(t, a.Addr())
	for _, name := range []string{"bad name", "..", "a/b", string(make([]byte, 250))} {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Version = 7
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
		req.Topics = append(req.Topics, rt)
		resp, err := rc.do(req)
		if err != nil {
			t.Fatal(err)
		}
		if ec := resp.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; ec != kerr.InvalidTopicException.Code {
			t.Errorf("CreateTopics %q: error %d, want INVALID_TOPIC_EXCEPTION", name, ec)
		}

		md := kmsg.NewPtrMetadataRequest()
		md.Version = 12
		md.AllowAutoTopicCreation = true
		md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr(name)}}
		mresp, err := rc.do(md)
		if err != nil {
			t.Fatal(err)
		}
		if ec := mresp.(*kmsg.MetadataResponse).Topics[0].ErrorCode; ec != kerr.InvalidTopicException.Code {
			t.Errorf("Metadata %q: error %d, want INVALID_TOPIC_EXCEPTION", name, ec)
		}
	}
	expectServing(t, a.Addr())
}
