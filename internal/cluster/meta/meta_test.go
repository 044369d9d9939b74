package meta_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/groupd/groupd/internal/cluster/meta"
)

var (
	topicID     = mustID("0123456789abcdef0123456789abcdef")
	incarnation = mustID("00000000000000000000000000000001")
)

func mustID(s string) meta.ID {
	id, err := meta.ParseID(s)
	if err != nil {
		panic(err)
	}
	return id
}

// The encodings are what etcd holds and what other nodes, of other
// versions, read: a change here is a change of format.
func TestEncodeGolden(t *testing.T) {
	for _, c := range []struct {
		v    interface{ Encode() ([]byte, error) }
		want string
	}{
		{meta.NodeInfo{ID: 1, Host: "h1", Port: 9092, Rack: "r1", Incarnation: incarnation},
			`{"version":1,"id":1,"host":"h1","port":9092,"rack":"r1","incarnation":"00000000000000000000000000000001"}`},
		{meta.NodeInfo{ID: 0, Host: "h", Port: 1, Incarnation: incarnation},
			`{"version":1,"id":0,"host":"h","port":1,"incarnation":"00000000000000000000000000000001"}`},
		{meta.Controller{NodeID: 2, Epoch: 7}, `{"version":1,"node_id":2,"epoch":7}`},
		{meta.ControllerEpoch{Epoch: 7}, `{"version":1,"epoch":7}`},
		{meta.Topic{Name: "t", ID: topicID, Partitions: [][]int32{{1, 2}, {2, 1}}, Configs: map[string]string{"retention.ms": "1", "cleanup.policy": "compact"}},
			`{"version":1,"name":"t","id":"0123456789abcdef0123456789abcdef","partitions":[[1,2],[2,1]],"configs":{"cleanup.policy":"compact","retention.ms":"1"}}`},
		{meta.PartitionState{Leader: 1, LeaderEpoch: 3, ISR: []int32{1, 2}, PartitionEpoch: 5, ControllerEpoch: 7},
			`{"version":1,"leader":1,"leader_epoch":3,"isr":[1,2],"partition_epoch":5,"controller_epoch":7}`},
		{meta.PartitionState{Leader: meta.NoLeader, ISR: []int32{}},
			`{"version":1,"leader":-1,"leader_epoch":0,"isr":[],"partition_epoch":0,"controller_epoch":0}`},
		{meta.Reassignment{Target: []int32{3, 4}, Adding: []int32{4}, Removing: []int32{1}},
			`{"version":1,"target":[3,4],"adding":[4],"removing":[1]}`},
		{meta.ControlledShutdown{NodeID: 3, Incarnation: incarnation},
			`{"version":1,"node_id":3,"incarnation":"00000000000000000000000000000001"}`},
		{meta.Reassignment{Target: []int32{1, 2}, Removing: []int32{3}, Revert: true},
			`{"version":1,"target":[1,2],"removing":[3],"revert":true}`},
		{meta.Election{Type: meta.ElectPreferred}, `{"version":1,"type":"preferred"}`},
		{meta.Election{Type: meta.ElectUnclean}, `{"version":1,"type":"unclean"}`},
	} {
		got, err := c.v.Encode()
		if err != nil {
			t.Errorf("%+v: %v", c.v, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%T:\n got %s\nwant %s", c.v, got, c.want)
		}
	}
}

func TestDecode(t *testing.T) {
	type decodeFn func(key string, data []byte) (any, error)
	node := func(k string, b []byte) (any, error) { return meta.DecodeNodeInfo(k, b) }
	ctl := func(k string, b []byte) (any, error) { return meta.DecodeController(k, b) }
	epoch := func(k string, b []byte) (any, error) { return meta.DecodeControllerEpoch(k, b) }
	topic := func(k string, b []byte) (any, error) { return meta.DecodeTopic(k, b) }
	part := func(k string, b []byte) (any, error) { return meta.DecodePartitionState(k, b) }
	reas := func(k string, b []byte) (any, error) { return meta.DecodeReassignment(k, b) }
	shut := func(k string, b []byte) (any, error) { return meta.DecodeControlledShutdown(k, b) }
	elect := func(k string, b []byte) (any, error) { return meta.DecodeElection(k, b) }
	const inc = `"00000000000000000000000000000001"`
	const tid = `"0123456789abcdef0123456789abcdef"`

	for _, c := range []struct {
		name   string
		decode decodeFn
		data   string
		want   any    // the value, when it decodes
		reason string // part of the error, when it does not
	}{
		{"node", node, `{"version":1,"id":1,"host":"h","port":9092,"incarnation":` + inc + `}`,
			meta.NodeInfo{ID: 1, Host: "h", Port: 9092, Incarnation: incarnation}, ""},
		{"field order free", node, `{"port":9092,"incarnation":` + inc + `,"host":"h","id":1,"version":1}`,
			meta.NodeInfo{ID: 1, Host: "h", Port: 9092, Incarnation: incarnation}, ""},
		{"future version", node, `{"version":2,"id":1,"host":"h","port":9092,"incarnation":` + inc + `}`, nil, "version 2"},
		{"no version", node, `{"id":1,"host":"h","port":9092,"incarnation":` + inc + `}`, nil, "no version"},
		{"version as a string", node, `{"version":"1","id":1}`, nil, "version"},
		{"version not whole", ctl, `{"version":1.0,"node_id":1,"epoch":1}`, nil, "version"},
		{"unknown field", node, `{"version":1,"id":1,"host":"h","port":9092,"incarnation":` + inc + `,"zone":"a"}`, nil, "unknown field"},
		{"trailing data", ctl, `{"version":1,"node_id":1,"epoch":1} {}`, nil, "invalid character"},
		{"not an object", ctl, `[1]`, nil, "cannot unmarshal"},
		{"null", ctl, `null`, nil, "not an object"},
		{"empty", ctl, ``, nil, "unexpected end"},
		{"no host", node, `{"version":1,"id":1,"port":9092,"incarnation":` + inc + `}`, nil, "no host"},
		{"port out of range", node, `{"version":1,"id":1,"host":"h","port":65536,"incarnation":` + inc + `}`, nil, "port 65536"},
		{"zero incarnation", node, `{"version":1,"id":1,"host":"h","port":1,"incarnation":"00000000000000000000000000000000"}`, nil, "no incarnation"},
		{"short incarnation", node, `{"version":1,"id":1,"host":"h","port":1,"incarnation":"01"}`, nil, "hex digits"},
		{"upper-case incarnation", node, `{"version":1,"id":1,"host":"h","port":1,"incarnation":"0000000000000000000000000000000A"}`, nil, "lowercase"},
		{"id beyond int32", node, `{"version":1,"id":2147483648,"host":"h","port":1,"incarnation":` + inc + `}`, nil, "cannot unmarshal"},
		{"controller", ctl, `{"version":1,"node_id":3,"epoch":9}`, meta.Controller{NodeID: 3, Epoch: 9}, ""},
		{"negative controller", ctl, `{"version":1,"node_id":-1,"epoch":9}`, nil, "node id -1"},
		{"controller epoch", epoch, `{"version":1,"epoch":9}`, meta.ControllerEpoch{Epoch: 9}, ""},
		{"negative controller epoch", epoch, `{"version":1,"epoch":-9}`, nil, "epoch -9"},
		{"topic", topic, `{"version":1,"name":"orders.v1","id":` + tid + `,"partitions":[[1,2,3]]}`,
			meta.Topic{Name: "orders.v1", ID: topicID, Partitions: [][]int32{{1, 2, 3}}}, ""},
		{"topic name", topic, `{"version":1,"name":"a/b","id":` + tid + `,"partitions":[[1]]}`, nil, "topic name"},
		{"topic name dot", topic, `{"version":1,"name":"..","id":` + tid + `,"partitions":[[1]]}`, nil, "topic name"},
		{"topic without id", topic, `{"version":1,"name":"t","partitions":[[1]]}`, nil, "no topic id"},
		{"topic without partitions", topic, `{"version":1,"name":"t","id":` + tid + `,"partitions":[]}`, nil, "no partitions"},
		{"partition without replicas", topic, `{"version":1,"name":"t","id":` + tid + `,"partitions":[[1],[]]}`, nil, "partition 1 has no replicas"},
		{"replica twice", topic, `{"version":1,"name":"t","id":` + tid + `,"partitions":[[1,2,1]]}`, nil, "node 1 listed twice"},
		{"empty config name", topic, `{"version":1,"name":"t","id":` + tid + `,"partitions":[[1]],"configs":{"":"x"}}`, nil, "empty name"},
		{"partition", part, `{"version":1,"leader":2,"leader_epoch":4,"isr":[2,1],"partition_epoch":6,"controller_epoch":1}`,
			meta.PartitionState{Leader: 2, LeaderEpoch: 4, ISR: []int32{2, 1}, PartitionEpoch: 6, ControllerEpoch: 1}, ""},
		{"offline", part, `{"version":1,"leader":-1,"leader_epoch":4,"isr":[1],"partition_epoch":6,"controller_epoch":1}`,
			meta.PartitionState{Leader: -1, LeaderEpoch: 4, ISR: []int32{1}, PartitionEpoch: 6, ControllerEpoch: 1}, ""},
		{"leader outside isr", part, `{"version":1,"leader":3,"leader_epoch":4,"isr":[2,1],"partition_epoch":6,"controller_epoch":1}`, nil, "leader 3 not in isr"},
		{"leader below -1", part, `{"version":1,"leader":-2,"leader_epoch":4,"isr":[],"partition_epoch":6,"controller_epoch":1}`, nil, "leader -2"},
		{"negative epoch", part, `{"version":1,"leader":1,"leader_epoch":-4,"isr":[1],"partition_epoch":6,"controller_epoch":1}`, nil, "negative epoch"},
		{"reassignment", reas, `{"version":1,"target":[4,5],"adding":[5],"removing":[1]}`,
			meta.Reassignment{Target: []int32{4, 5}, Adding: []int32{5}, Removing: []int32{1}}, ""},
		{"adding outside target", reas, `{"version":1,"target":[4,5],"adding":[6]}`, nil, "adding 6"},
		{"removing a target", reas, `{"version":1,"target":[4,5],"removing":[4]}`, nil, "removing 4"},
		{"no target", reas, `{"version":1,"target":[]}`, nil, "no target"},
		{"revert", reas, `{"version":1,"target":[1,2],"removing":[3],"revert":true}`,
			meta.Reassignment{Target: []int32{1, 2}, Removing: []int32{3}, Revert: true}, ""},
		{"a revert that adds", reas, `{"version":1,"target":[1,2],"adding":[2],"revert":true}`, nil, "adds no replica"},
		{"preferred election", elect, `{"version":1,"type":"preferred"}`, meta.Election{Type: meta.ElectPreferred}, ""},
		{"unclean election", elect, `{"version":1,"type":"unclean"}`, meta.Election{Type: meta.ElectUnclean}, ""},
		{"election type unknown", elect, `{"version":1,"type":"clean"}`, nil, "election type"},
		{"election type missing", elect, `{"version":1}`, nil, "election type"},
		{"election type as a number", elect, `{"version":1,"type":0}`, nil, "cannot unmarshal"},
		{"shutdown", shut, `{"version":1,"node_id":2,"incarnation":` + inc + `}`, meta.ControlledShutdown{NodeID: 2, Incarnation: incarnation}, ""},
		{"shutdown without incarnation", shut, `{"version":1,"node_id":2}`, nil, "no incarnation"},
	} {
		const key = "/groupd/g/some/key"
		got, err := c.decode(key, []byte(c.data))
		if c.reason == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else if !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: decoded %+v, want an error about %q", c.name, got, c.reason)
			continue
		}
		if !errors.Is(err, meta.ErrInvalid) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: error %q: want ErrInvalid naming the key and %q", c.name, err, c.reason)
		}
	}
}

// A node never writes what the others would refuse.
func TestEncodeRefusesInvalid(t *testing.T) {
	for _, v := range []interface{ Encode() ([]byte, error) }{
		meta.NodeInfo{ID: 1, Host: "h", Port: 9092}, // no incarnation
		meta.Controller{NodeID: -5},
		meta.Topic{Name: "t", ID: topicID},
		meta.PartitionState{Leader: 1, ISR: []int32{2}},
		meta.Reassignment{},
		meta.Reassignment{Target: []int32{1}, Adding: []int32{1}, Revert: true},
		meta.Election{},
		meta.Election{Type: "PREFERRED"},
		meta.ControlledShutdown{NodeID: 1},
	} {
		if b, err := v.Encode(); err == nil || !errors.Is(err, meta.ErrInvalid) {
			t.Errorf("%+v encoded to %s, err %v", v, b, err)
		}
	}
}

func TestKeys(t *testing.T) {
	k := meta.NewKeys("/groupd/prod")
	if k.Prefix() != "/groupd/prod/" || meta.NewKeys("/groupd/prod/").Prefix() != "/groupd/prod/" {
		t.Fatalf("prefix %q", k.Prefix())
	}
	for _, c := range []struct {
		key    string
		want   string
		parsed meta.Key
	}{
		{k.Node(0), "/groupd/prod/nodes/0", meta.Key{Kind: meta.KindNode, Node: 0}},
		{k.Node(12), "/groupd/prod/nodes/12", meta.Key{Kind: meta.KindNode, Node: 12}},
		{k.Controller(), "/groupd/prod/controller", meta.Key{Kind: meta.KindController}},
		{k.ControllerEpoch(), "/groupd/prod/controller_epoch", meta.Key{Kind: meta.KindControllerEpoch}},
		{k.Topic("orders"), "/groupd/prod/topics/orders", meta.Key{Kind: meta.KindTopic, Topic: "orders"}},
		{k.Partition(topicID, 7), "/groupd/prod/partitions/0123456789abcdef0123456789abcdef/7",
			meta.Key{Kind: meta.KindPartition, TopicID: topicID, Partition: 7}},
		{k.Reassignment(topicID, 0), "/groupd/prod/reassignments/0123456789abcdef0123456789abcdef/0",
			meta.Key{Kind: meta.KindReassignment, TopicID: topicID, Partition: 0}},
		{k.Election(topicID, 2), "/groupd/prod/elections/0123456789abcdef0123456789abcdef/2",
			meta.Key{Kind: meta.KindElection, TopicID: topicID, Partition: 2}},
		{k.ControlledShutdown(3), "/groupd/prod/controlled_shutdown/3", meta.Key{Kind: meta.KindControlledShutdown, Node: 3}},
	} {
		if c.key != c.want {
			t.Errorf("built %q, want %q", c.key, c.want)
		}
		got, err := k.Parse(c.key)
		if err != nil || got != c.parsed {
			t.Errorf("parse %q: %+v %v, want %+v", c.key, got, err, c.parsed)
		}
	}
	for _, p := range []struct{ prefix, key string }{
		{k.NodesPrefix(), k.Node(1)},
		{k.TopicsPrefix(), k.Topic("t")},
		{k.PartitionsPrefix(), k.Partition(topicID, 1)},
		{k.TopicPartitionsPrefix(topicID), k.Partition(topicID, 1)},
		{k.ReassignmentsPrefix(), k.Reassignment(topicID, 1)},
		{k.ElectionsPrefix(), k.Election(topicID, 1)},
		{k.ControlledShutdownsPrefix(), k.ControlledShutdown(1)},
	} {
		if !strings.HasPrefix(p.key, p.prefix) || !strings.HasSuffix(p.prefix, "/") {
			t.Errorf("key %q not under prefix %q, or the prefix does not end with /", p.key, p.prefix)
		}
	}
	for _, bad := range []string{
		"/groupd/other/nodes/1",
		"/groupd/prod/",
		"/groupd/prod/nodes/",
		"/groupd/prod/nodes/01",
		"/groupd/prod/nodes/-1",
		"/groupd/prod/nodes/+1",
		"/groupd/prod/nodes/2147483648",
		"/groupd/prod/nodes/1/x",
		"/groupd/prod/controllers",
		"/groupd/prod/topics/",
		"/groupd/prod/topics/a b",
		"/groupd/prod/partitions/0123456789abcdef0123456789abcdef",
		"/groupd/prod/partitions/0123456789ABCDEF0123456789abcdef/1",
		"/groupd/prod/partitions/00000000000000000000000000000000/1",
		"/groupd/prod/partitions/0123456789abcdef0123456789abcdef/1/2",
		"/groupd/prod/reassignments/0123456789abcdef0123456789abcdef/x",
		"/groupd/prod/elections/0123456789abcdef0123456789abcdef/01",
		"/groupd/prod/elections/00000000000000000000000000000000/1",
		"/groupd/prod/elections/0123456789abcdef0123456789abcdef",
		"/groupd/prod/acls/1",
	} {
		if got, err := k.Parse(bad); err == nil || !errors.Is(err, meta.ErrInvalid) || !strings.Contains(err.Error(), bad) {
			t.Errorf("parse %q: %+v, err %v: want ErrInvalid naming the key", bad, got, err)
		}
	}
}
