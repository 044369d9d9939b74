package e2e

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// rawConn speaks Kafka frames directly, so tests can send what no client
// library would.
type rawConn struct {
	t    testing.TB
	c    net.Conn
	corr int32
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c}
}

// frame builds a request frame for req at its version.
func requestFrame(req kmsg.Request, corr int32) []byte {
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "test"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func (rc *rawConn) write(b []byte) {
	rc.t.Helper()
	rc.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := rc.c.Write(b); err != nil {
		rc.t.Fatalf("write: %v", err)
	}
}

// readFrame returns the next response frame's body after the correlation
// id, or an error if the server closed the connection.
func (rc *rawConn) readFrame() (int32, []byte, error) {
	rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(rc.c, size[:]); err != nil {
		return 0, nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(rc.c, body); err != nil {
		return 0, nil, err
	}
	if len(body) < 4 {
		return 0, nil, errors.New("short response")
	}
	return int32(binary.BigEndian.Uint32(body)), body[4:], nil
}

// do sends req and decodes the reply at the request's version.
func (rc *rawConn) do(req kmsg.Request) (kmsg.Response, error) {
	rc.t.Helper()
	rc.corr++
	rc.write(requestFrame(req, rc.corr))
	corr, body, err := rc.readFrame()
	if err != nil {
		return nil, err
	}
	if corr != rc.corr {
		rc.t.Fatalf("correlation id %d, want %d", corr, rc.corr)
	}
	resp := req.ResponseKind()
	if resp.IsFlexible() && resp.Key() != int16(kmsg.ApiVersions) {
		if len(body) == 0 || body[0] != 0 {
			rc.t.Fatalf("response header tags: %x", body[:min(len(body), 1)])
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, err
	}
	return resp, nil
}

// expectClosed asserts that the server closes the connection.
func (rc *rawConn) expectClosed() {
	rc.t.Helper()
	if _, _, err := rc.readFrame(); err == nil {
		rc.t.Fatal("server answered; want the connection closed")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		rc.t.Fatal("connection still open; want it closed")
	}
}

// expectServing asserts that a fresh connection is served.
func expectServing(t testing.TB, addr string) {
	t.Helper()
	rc := dialRaw(t, addr)
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1.0"
	resp, err := rc.do(req)
	if err != nil {
		t.Fatalf("server no longer serves: %v", err)
	}
	if ec := resp.(*kmsg.ApiVersionsResponse).ErrorCode; ec != 0 {
		t.Fatalf("ApiVersions error %d", ec)
	}
}

// produce sends records to partition 0 of topic with acks=all (Produce v9)
// and returns the partition's answer.
func (rc *rawConn) produce(topic string, records []byte) kmsg.ProduceResponseTopicPartition {
	rc.t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version = 9
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := rc.do(req)
	if err != nil {
		rc.t.Fatal(err)
	}
	return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}
