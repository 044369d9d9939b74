package meta_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/groupd/groupd/internal/cluster/meta"
)

// fuzzDecode checks a decoder on any bytes: it refuses with ErrInvalid
// naming the key, or it decodes a value that encodes, and whose encoding
// decodes to a value with the same encoding.
func fuzzDecode[T interface{ Encode() ([]byte, error) }](f *testing.F, decode func(string, []byte) (T, error), seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`null`))
	const key = "/k/ey"
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := decode(key, data)
		if err != nil {
			if !errors.Is(err, meta.ErrInvalid) || !strings.Contains(err.Error(), key) {
				t.Fatalf("error %q: want ErrInvalid naming the key", err)
			}
			return
		}
		enc, err := v.Encode()
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", v, err)
		}
		v2, err := decode(key, enc)
		if err != nil {
			t.Fatalf("encoding %s does not decode: %v", enc, err)
		}
		enc2, err := v2.Encode()
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encodings differ:\n%s\n%s (%v)", enc, enc2, err)
		}
	})
}

const inc = `"00000000000000000000000000000001"`

func FuzzDecodeNodeInfo(f *testing.F) {
	fuzzDecode(f, meta.DecodeNodeInfo,
		`{"version":1,"id":1,"host":"h","port":9092,"rack":"r","incarnation":`+inc+`}`)
}

func FuzzDecodeController(f *testing.F) {
	fuzzDecode(f, meta.DecodeController, `{"version":1,"node_id":3,"epoch":9}`)
}

func FuzzDecodeControllerEpoch(f *testing.F) {
	fuzzDecode(f, meta.DecodeControllerEpoch, `{"version":1,"epoch":9}`)
}

func FuzzDecodeTopic(f *testing.F) {
	fuzzDecode(f, meta.DecodeTopic,
		`{"version":1,"name":"t","id":"0123456789abcdef0123456789abcdef","partitions":[[1,2],[2,1]],"configs":{"a":"b"}}`)
}

func FuzzDecodePartitionState(f *testing.F) {
	fuzzDecode(f, meta.DecodePartitionState,
		`{"version":1,"leader":1,"leader_epoch":3,"isr":[1,2],"partition_epoch":5,"controller_epoch":7}`,
		`{"version":1,"leader":-1,"leader_epoch":3,"isr":null,"partition_epoch":5,"controller_epoch":7}`)
}

func FuzzDecodeReassignment(f *testing.F) {
	fuzzDecode(f, meta.DecodeReassignment, `{"version":1,"target":[3,4],"adding":[4],"removing":[1]}`,
		`{"version":1,"target":[1,2],"removing":[3],"revert":true}`)
}

func FuzzDecodeElection(f *testing.F) {
	fuzzDecode(f, meta.DecodeElection, `{"version":1,"type":"preferred"}`, `{"version":1,"type":"unclean"}`)
}

func FuzzDecodeControlledShutdown(f *testing.F) {
	fuzzDecode(f, meta.DecodeControlledShutdown, `{"version":1,"node_id":3,"incarnation":`+inc+`}`)
}

// FuzzParseKey: a key parses only if building it from its parts gives it
// back, so that every value has one key.
func FuzzParseKey(f *testing.F) {
	k := meta.NewKeys("/g/")
	id, _ := meta.ParseID("0123456789abcdef0123456789abcdef")
	for _, s := range []string{k.Node(1), k.Controller(), k.ControllerEpoch(), k.Topic("t"), k.Partition(id, 3),
		k.Reassignment(id, 0), k.Election(id, 1), k.ControlledShutdown(2), "/g/nodes/01", "/g/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		p, err := k.Parse(key)
		if err != nil {
			if !errors.Is(err, meta.ErrInvalid) {
				t.Fatalf("error %v: want ErrInvalid", err)
			}
			return
		}
		var built string
		switch p.Kind {
		case meta.KindNode:
			built = k.Node(p.Node)
		case meta.KindController:
			built = k.Controller()
		case meta.KindControllerEpoch:
			built = k.ControllerEpoch()
		case meta.KindTopic:
			built = k.Topic(p.Topic)
		case meta.KindPartition:
			built = k.Partition(p.TopicID, p.Partition)
		case meta.KindReassignment:
			built = k.Reassignment(p.TopicID, p.Partition)
		case meta.KindElection:
			built = k.Election(p.TopicID, p.Partition)
		case meta.KindControlledShutdown:
			built = k.ControlledShutdown(p.Node)
		default:
			t.Fatalf("kind %v", p.Kind)
		}
		if built != key {
			t.Fatalf("parsed %q as %+v, which builds %q", key, p, built)
		}
	})
}
