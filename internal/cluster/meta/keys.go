package meta

import (
	"fmt"
	"strconv"
	"strings"
)

// Keys builds and parses the keys of one cluster, all under its prefix
// (--etcd-prefix, by default /groupd/<cluster id>).
//
// A prefix for listing or watching a family of keys ends with "/", so that
// nodes/1/ never takes in nodes/10. Watches in package kv are by prefix: a
// watch of Controller() also sees ControllerEpoch(), which changes in the
// same transactions.
type Keys struct {
	prefix string
}

// NewKeys returns the keys under prefix; a "/" is added to a prefix that
// does not end with one.
func NewKeys(prefix string) Keys {
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return Keys{prefix: prefix}
}

// Prefix returns the prefix of every key of the cluster, ending with "/".
func (k Keys) Prefix() string { return k.prefix }

// Node is nodes/<id>, holding a NodeInfo.
func (k Keys) Node(id int32) string { return k.NodesPrefix() + itoa(id) }

// NodesPrefix is the prefix of every Node key.
func (k Keys) NodesPrefix() string { return k.prefix + "nodes/" }

// ProducerIDs is producer_ids, holding a ProducerIDs.
func (k Keys) ProducerIDs() string { return k.prefix + "producer_ids" }

// Controller is controller, holding a Controller.
func (k Keys) Controller() string { return k.prefix + "controller" }

// ControllerEpoch is controller_epoch, holding a ControllerEpoch.
func (k Keys) ControllerEpoch() string { return k.prefix + "controller_epoch" }

// Topic is topics/<name>, holding a Topic.
func (k Keys) Topic(name string) string { return k.TopicsPrefix() + name }

// TopicsPrefix is the prefix of every Topic key.
func (k Keys) TopicsPrefix() string { return k.prefix + "topics/" }

// Partition is partitions/<topic id>/<partition>, holding a
// PartitionState.
func (k Keys) Partition(topic ID, partition int32) string {
	return k.TopicPartitionsPrefix(topic) + itoa(partition)
}

// TopicPartitionsPrefix is the prefix of the Partition keys of one topic.
func (k Keys) TopicPartitionsPrefix(topic ID) string {
	return k.PartitionsPrefix() + topic.String() + "/"
}

// PartitionsPrefix is the prefix of every Partition key.
func (k Keys) PartitionsPrefix() string { return k.prefix + "partitions/" }

// Reassignment is reassignments/<topic id>/<partition>, holding a
// Reassignment.
func (k Keys) Reassignment(topic ID, partition int32) string {
	return k.ReassignmentsPrefix() + topic.String() + "/" + itoa(partition)
}

// ReassignmentsPrefix is the prefix of every Reassignment key.
func (k Keys) ReassignmentsPrefix() string { return k.prefix + "reassignments/" }

// Election is elections/<topic id>/<partition>, holding an Election: a
// leader election an ElectLeaders request asked the controller for.
func (k Keys) Election(topic ID, partition int32) string {
	return k.ElectionsPrefix() + topic.String() + "/" + itoa(partition)
}

// ElectionsPrefix is the prefix of every Election key.
func (k Keys) ElectionsPrefix() string { return k.prefix + "elections/" }

// ControlledShutdown is controlled_shutdown/<id>, holding a
// ControlledShutdown.
func (k Keys) ControlledShutdown(id int32) string {
	return k.ControlledShutdownsPrefix() + itoa(id)
}

// ControlledShutdownsPrefix is the prefix of every ControlledShutdown key.
func (k Keys) ControlledShutdownsPrefix() string { return k.prefix + "controlled_shutdown/" }

func itoa(n int32) string { return strconv.FormatInt(int64(n), 10) }

// KeyKind says which value a key holds.
type KeyKind int

const (
	KindNode KeyKind = iota + 1
	KindController
	KindControllerEpoch
	KindTopic
	KindPartition
	KindReassignment
	KindControlledShutdown
	KindProducerIDs
	KindElection
)

func (k KeyKind) String() string {
	switch k {
	case KindNode:
		return "node"
	case KindController:
		return "controller"
	case KindControllerEpoch:
		return "controller_epoch"
	case KindTopic:
		return "topic"
	case KindPartition:
		return "partition"
	case KindReassignment:
		return "reassignment"
	case KindControlledShutdown:
		return "controlled_shutdown"
	case KindProducerIDs:
		return "producer_ids"
	case KindElection:
		return "election"
	}
	return fmt.Sprintf("KeyKind(%d)", int(k))
}

// Key is a parsed key: its kind and the fields its kind has.
type Key struct {
	Kind KeyKind
	// Node for KindNode and KindControlledShutdown.
	Node int32
	// Topic for KindTopic.
	Topic string
	// TopicID and Partition for KindPartition, KindReassignment and
	// KindElection.
	TopicID   ID
	Partition int32
}

// Parse tells which value key holds. It accepts only keys the builders
// above make, spelled as they spell them (no leading zeros, lowercase
// ids), so that every value has exactly one key.
func (k Keys) Parse(key string) (Key, error) {
	fail := func(why string) (Key, error) {
		return Key{}, fmt.Errorf("%w key %q: %s", ErrInvalid, key, why)
	}
	rest, ok := strings.CutPrefix(key, k.prefix)
	if !ok {
		return fail("not under " + k.prefix)
	}
	switch rest {
	case "controller":
		return Key{Kind: KindController}, nil
	case "controller_epoch":
		return Key{Kind: KindControllerEpoch}, nil
	case "producer_ids":
		return Key{Kind: KindProducerIDs}, nil
	}
	family, name, ok := strings.Cut(rest, "/")
	if !ok {
		return fail("unknown key")
	}
	switch family {
	case "nodes", "controlled_shutdown":
		id, err := parseNonNegative(name)
		if err != nil {
			return fail(err.Error())
		}
		kind := KindNode
		if family == "controlled_shutdown" {
			kind = KindControlledShutdown
		}
		return Key{Kind: kind, Node: id}, nil
	case "topics":
		if err := ValidTopicName(name); err != nil {
			return fail(err.Error())
		}
		return Key{Kind: KindTopic, Topic: name}, nil
	case "partitions", "reassignments", "elections":
		idText, pText, ok := strings.Cut(name, "/")
		if !ok {
			return fail("want <topic id>/<partition>")
		}
		id, err := ParseID(idText)
		if err != nil {
			return fail(err.Error())
		}
		if id.IsZero() {
			return fail("zero topic id")
		}
		p, err := parseNonNegative(pText)
		if err != nil {
			return fail(err.Error())
		}
		kind := KindPartition
		switch family {
		case "reassignments":
			kind = KindReassignment
		case "elections":
			kind = KindElection
		}
		return Key{Kind: kind, TopicID: id, Partition: p}, nil
	}
	return fail("unknown key")
}

// parseNonNegative parses a node id or partition as the builders write
// it: decimal, no sign, no leading zero, within int32.
func parseNonNegative(s string) (int32, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, fmt.Errorf("number %q", s)
	}
	return int32(n), nil
}
