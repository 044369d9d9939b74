package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/batch/batchtest"
)

// rawRecord encodes one v2 record by hand, so a test can get any field
// wrong; trailing bytes are added inside its declared length.
func rawRecord(offsetDelta int64, key, value []byte, trailing int) []byte {
	var body []byte
	body = append(body, 0)
	body = binary.AppendVarint(body, 0)
	body = binary.AppendVarint(body, offsetDelta)
	for _, b := range [][]byte{key, value} {
		if b == nil {
			body = binary.AppendVarint(body, -1)
			continue
		}
		body = append(binary.AppendVarint(body, int64(len(b))), b...)
	}
	body = binary.AppendVarint(body, 0)
	body = append(body, make([]byte, trailing)...)
	return append(binary.AppendVarint(nil, int64(len(body))), body...)
}

// TestBadBatchesRejected produces every kind of bad batch Kafka's
// LogValidator refuses and checks the code, the message and the record
// named; afterwards a real consumer reads the partition from its start and
// gets exactly the good records.
func TestBadBatchesRejected(t *testing.T) {
	a := startServer(t, t.TempDir())
	cl := newClient(t, a.Addr())
	adm := kadm.NewClient(cl)
	createWithConfigs(t, adm, "strict", map[string]string{"max.message.bytes": "3000", "message.timestamp.after.max.ms": "3600000"})
	createWithConfigs(t, adm, "small-segments", map[string]string{"segment.bytes": "500"})
	createWithConfigs(t, adm, "keyed", map[string]string{"cleanup.policy": "compact"})

	now := time.Now().UnixMilli()
	spec := func(codec batch.Codec, n int) batchtest.Spec {
		recs := make([]batchtest.Record, n)
		for i := range recs {
			recs[i] = batchtest.Record{Key: []byte("k"), Value: []byte("good")}
		}
		return batchtest.Spec{FirstTimestamp: now, Codec: codec, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: recs}
	}
	good := func(i int64) []byte { return rawRecord(i, []byte("k"), []byte("a good value"), 0) }
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	crcFlipped := batchtest.Build(spec(0, 2))
	crcFlipped[len(crcFlipped)-1] ^= 1
	bigValue := batchtest.Build(batchtest.Spec{FirstTimestamp: now, ProducerID: -1, BaseSequence: -1,
		Records: []batchtest.Record{{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 4000)}}})
	segValue := batchtest.Build(batchtest.Spec{FirstTimestamp: now, ProducerID: -1, BaseSequence: -1,
		Records: []batchtest.Record{{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 600)}}})
	logAppend := spec(batch.CodecSnappy, 1)
	logAppend.Attributes = batch.AttrLogAppendTime
	control := spec(0, 1)
	control.Attributes = batch.AttrControl
	future := spec(batch.CodecNone, 2)
	future.Records[1].TimestampDelta = 2 * 3_600_000
	badCodec := batchtest.Build(spec(0, 1))
	badCodec[22] |= 7
	batchtest.Fix(badCodec)
	undecodable := batchtest.Build(spec(batch.CodecZstd, 3))
	undecodable[batch.HeaderLen+6] ^= 0xff
	batchtest.Fix(undecodable)

	cases := []struct {
		name, topic string
		records     []byte
		code        *kerr.Error
		index       int32 // record named in the reply, -1 for none
		says        string
	}{
		{"crc mismatch", "strict", crcFlipped, kerr.CorruptMessage, -1, "crc"},
		{"record count above the records", "strict", batchtest.Wrap(spec(batch.CodecGzip, 3), join(good(0), good(1)), 3, 2), kerr.CorruptMessage, 2, "record 2: bad record length"},
		{"records past the count", "strict", batchtest.Wrap(spec(batch.CodecLZ4, 2), join(good(0), good(1), good(2)), 2, 1), kerr.CorruptMessage, -1, "after the last"},
		{"record cut short", "strict", batchtest.Wrap(spec(batch.CodecNone, 3), join(good(0), rawRecord(1, []byte("k"), []byte("v"), 3), good(2)), 3, 2), kerr.CorruptMessage, 1, "past the end of its fields"},
		{"offset delta out of order", "strict", batchtest.Wrap(spec(batch.CodecSnappy, 3), join(good(0), good(1), good(7)), 3, 2), kerr.InvalidRecord, 2, "offset delta 7, expected 2"},
		{"two billion offsets in a compressed batch", "strict", batchtest.Wrap(spec(batch.CodecZstd, 1), good(0), 2_000_000_000, 1_999_999_999), kerr.CorruptMessage, -1, "cannot fit"},
		{"undecompressable", "strict", undecodable, kerr.CorruptMessage, -1, "decompression"},
		{"unknown codec", "strict", badCodec, kerr.UnsupportedCompressionType, -1, "codec"},
		{"timestamp too far ahead", "strict", batchtest.Build(future), kerr.InvalidTimestamp, 1, "out of range"},
		{"producer sets log append time", "strict", batchtest.Build(logAppend), kerr.InvalidTimestamp, 0, "LogAppendTime"},
		{"control batch", "strict", batchtest.Build(control), kerr.InvalidRecord, -1, "control"},
		{"larger than max.message.bytes", "strict", bigValue, kerr.MessageTooLarge, -1, "max.message.bytes 3000"},
		{"larger than a segment", "small-segments", segValue, kerr.RecordListTooLarge, -1, "segment.bytes 500"},
		{"no key on a compacted topic", "keyed", batchtest.Wrap(spec(batch.CodecGzip, 2), join(good(0), rawRecord(1, nil, []byte("v"), 0)), 2, 1), kerr.InvalidRecord, 1, "without a key"},
	}
	rc := dialRaw(t, a.Addr())
	wanted := map[string][]string{}
	produceGood := func(topic string, n int) {
		for i := range n {
			v := fmt.Sprintf("%s-%d", topic, len(wanted[topic])+i)
			if err := cl.ProduceSync(ctxFor(t, 10*time.Second), &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			wanted[topic] = append(wanted[topic], v)
		}
	}
	for _, topic := range []string{"strict", "small-segments", "keyed"} {
		produceGood(topic, 2)
	}
	for _, c := range cases {
		sp := rc.produce(c.topic, c.records)
		msg := ""
		if sp.ErrorMessage != nil {
			msg = *sp.ErrorMessage
		}
		if sp.ErrorCode != c.code.Code || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %s %q, want %s saying %q", c.name, kerr.ErrorForCode(sp.ErrorCode), msg, c.code.Message, c.says)
			continue
		}
		switch {
		case c.index < 0 && len(sp.ErrorRecords) != 0:
			t.Errorf("%s: records named %+v, want none", c.name, sp.ErrorRecords)
		case c.index >= 0 && (len(sp.ErrorRecords) != 1 || sp.ErrorRecords[0].RelativeOffset != c.index || sp.ErrorRecords[0].ErrorMessage == nil):
			t.Errorf("%s: records named %+v, want record %d with a message", c.name, sp.ErrorRecords, c.index)
		}
		produceGood(c.topic, 1)
	}
	for topic, want := range wanted {
		got := readCompacted(t, a.Addr(), topic, int64(len(want)))
		if len(got) != len(want) {
			t.Fatalf("%s: read %d records, want %d", topic, len(got), len(want))
		}
		for i, r := range got {
			if r.Offset != int64(i) || string(r.Value) != want[i] {
				t.Fatalf("%s: record %d is %q at %d, want %q", topic, i, r.Value, r.Offset, want[i])
			}
		}
	}
}
