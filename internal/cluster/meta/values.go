package meta

import (
	"errors"
	"fmt"
)

// NoLeader is PartitionState.Leader of a partition without a leader
// (offline), as in Kafka.
const NoLeader int32 = -1

// NodeInfo is the value of nodes/<id>: a live node, put under the node's
// lease, so that it goes away when the node does.
type NodeInfo struct {
	ID   int32  `json:"id"`
	Host string `json:"host"`
	Port int32  `json:"port"`
	Rack string `json:"rack,omitempty"`
	// Incarnation is a random id the process draws when it starts: a node
	// that restarted (or re-registered after losing its lease) is told
	// apart from its earlier self.
	Incarnation ID `json:"incarnation"`
	// EmptyDisk says the process started without a replica log on its
	// disk: a new node, or one whose disk was lost. A partition whose
	// state was written before it registered must not take it as leader
	// from the ISR, which it joined with a log it no longer has (Kafka's
	// KIP-966 case of an unclean start); it leads such a partition again
	// only by an unclean election, or once a leader has taken it back into
	// the ISR.
	EmptyDisk bool `json:"empty_disk,omitempty"`
}

// Controller is the value of controller: which node controls the cluster,
// at which controller epoch. The controller creates it under its lease, if
// absent, in the same transaction that bumps controller_epoch.
type Controller struct {
	NodeID int32 `json:"node_id"`
	Epoch  int32 `json:"epoch"`
}

// ControllerEpoch is the value of controller_epoch: the last controller
// epoch. It outlives the controller key, so that epochs only grow.
type ControllerEpoch struct {
	Epoch int32 `json:"epoch"`
}

// Topic is the value of topics/<name>.
type Topic struct {
	Name string `json:"name"`
	ID   ID     `json:"id"`
	// Partitions holds, for each partition from 0, its replicas, the
	// preferred leader first.
	Partitions [][]int32 `json:"partitions"`
	// Configs are the topic's config overrides.
	Configs map[string]string `json:"configs,omitempty"`
}

// PartitionState is the value of partitions/<topic id>/<partition>: who
// leads the partition, at which leader epoch, with which in-sync replicas.
type PartitionState struct {
	// Leader is the leading replica's node id, or NoLeader.
	Leader      int32 `json:"leader"`
	LeaderEpoch int32 `json:"leader_epoch"`
	// ISR is the in-sync replicas; a leader is always one of them.
	ISR []int32 `json:"isr"`
	// PartitionEpoch grows with every change of the state (Kafka's
	// partition epoch, the znode version of the ZooKeeper years).
	PartitionEpoch int32 `json:"partition_epoch"`
	// ControllerEpoch is the epoch of the controller that last elected
	// the leader.
	ControllerEpoch int32 `json:"controller_epoch"`
}

// Reassignment is the value of reassignments/<topic id>/<partition>: a
// partition moving to Target, adding the replicas in Adding and then
// dropping those in Removing (both relative to the partition's replicas
// before the reassignment, its original replicas).
//
// A Revert is a cancelled reassignment whose added replicas are already
// in the partition's assignment: Target is then the original replicas,
// Removing the added ones, and the controller gives the partition back
// its original replicas at once, without waiting for them to be in sync
// (as Kafka reverts a cancelled reassignment).
type Reassignment struct {
	Target   []int32 `json:"target"`
	Adding   []int32 `json:"adding,omitempty"`
	Removing []int32 `json:"removing,omitempty"`
	Revert   bool    `json:"revert,omitempty"`
}

// ElectionType is the kind of leader election an Election asks for.
type ElectionType string

// The election types, as ElectLeaders names them (0 and 1 on the wire).
const (
	// ElectPreferred gives leadership to the partition's preferred
	// replica (the first of its assignment) if it is alive and in sync.
	ElectPreferred ElectionType = "preferred"
	// ElectUnclean gives a partition with no live leader a leader,
	// outside the ISR if no ISR member is alive.
	ElectUnclean ElectionType = "unclean"
)

// Election is the value of elections/<topic id>/<partition>: an election
// asked of the controller, which deletes the key when it has elected, or
// has found that it cannot.
type Election struct {
	Type ElectionType `json:"type"`
}

// ControlledShutdown is the value of controlled_shutdown/<id>: the node
// asks the controller to move its leaderships away before it stops. The
// incarnation tells the request of a process from that of its successor.
type ControlledShutdown struct {
	NodeID      int32 `json:"node_id"`
	Incarnation ID    `json:"incarnation"`
}

// Encode returns the value as etcd holds it, or an error if it breaks the
// value's rules.
func (v NodeInfo) Encode() ([]byte, error) { return encode("node info", v) }

// Encode: see NodeInfo.Encode.
func (v Controller) Encode() ([]byte, error) { return encode("controller", v) }

// Encode: see NodeInfo.Encode.
func (v ControllerEpoch) Encode() ([]byte, error) { return encode("controller epoch", v) }

// Encode: see NodeInfo.Encode.
func (v Topic) Encode() ([]byte, error) { return encode("topic", v) }

// Encode: see NodeInfo.Encode.
func (v PartitionState) Encode() ([]byte, error) { return encode("partition state", v) }

// Encode: see NodeInfo.Encode.
func (v Reassignment) Encode() ([]byte, error) { return encode("reassignment", v) }

// Encode: see NodeInfo.Encode.
func (v Election) Encode() ([]byte, error) { return encode("election", v) }

// Encode: see NodeInfo.Encode.
func (v ControlledShutdown) Encode() ([]byte, error) { return encode("controlled shutdown", v) }

// ProducerIDs is the value of producer_ids: the first producer id no
// node has taken yet. A node takes a block of them by compare-and-swap
// (KIP-730), so that no two nodes hand out the same id.
type ProducerIDs struct {
	Next int64 `json:"next"`
}

// Encode: see NodeInfo.Encode.
func (v ProducerIDs) Encode() ([]byte, error) { return encode("producer ids", v) }

// DecodeProducerIDs: see DecodeNodeInfo.
func DecodeProducerIDs(key string, data []byte) (ProducerIDs, error) {
	return decode[ProducerIDs](key, data)
}

func (v ProducerIDs) validate() error {
	if v.Next < 0 {
		return fmt.Errorf("next producer id %d", v.Next)
	}
	return nil
}

// DecodeNodeInfo decodes the value at key (which only names it in errors).
func DecodeNodeInfo(key string, data []byte) (NodeInfo, error) { return decode[NodeInfo](key, data) }

// DecodeController: see DecodeNodeInfo.
func DecodeController(key string, data []byte) (Controller, error) {
	return decode[Controller](key, data)
}

// DecodeControllerEpoch: see DecodeNodeInfo.
func DecodeControllerEpoch(key string, data []byte) (ControllerEpoch, error) {
	return decode[ControllerEpoch](key, data)
}

// DecodeTopic: see DecodeNodeInfo.
func DecodeTopic(key string, data []byte) (Topic, error) { return decode[Topic](key, data) }

// DecodePartitionState: see DecodeNodeInfo.
func DecodePartitionState(key string, data []byte) (PartitionState, error) {
	return decode[PartitionState](key, data)
}

// DecodeReassignment: see DecodeNodeInfo.
func DecodeReassignment(key string, data []byte) (Reassignment, error) {
	return decode[Reassignment](key, data)
}

// DecodeElection: see DecodeNodeInfo.
func DecodeElection(key string, data []byte) (Election, error) { return decode[Election](key, data) }

// DecodeControlledShutdown: see DecodeNodeInfo.
func DecodeControlledShutdown(key string, data []byte) (ControlledShutdown, error) {
	return decode[ControlledShutdown](key, data)
}

func (v NodeInfo) validate() error {
	switch {
	case v.ID < 0:
		return fmt.Errorf("node id %d", v.ID)
	case v.Host == "":
		return errors.New("no host")
	case v.Port <= 0 || v.Port > 65535:
		return fmt.Errorf("port %d", v.Port)
	case v.Incarnation.IsZero():
		return errors.New("no incarnation")
	}
	return nil
}

func (v Controller) validate() error {
	if v.NodeID < 0 {
		return fmt.Errorf("node id %d", v.NodeID)
	}
	if v.Epoch < 0 {
		return fmt.Errorf("epoch %d", v.Epoch)
	}
	return nil
}

func (v ControllerEpoch) validate() error {
	if v.Epoch < 0 {
		return fmt.Errorf("epoch %d", v.Epoch)
	}
	return nil
}

func (v Topic) validate() error {
	if err := ValidTopicName(v.Name); err != nil {
		return err
	}
	if v.ID.IsZero() {
		return errors.New("no topic id")
	}
	if len(v.Partitions) == 0 {
		return errors.New("no partitions")
	}
	for p, rs := range v.Partitions {
		if len(rs) == 0 {
			return fmt.Errorf("partition %d has no replicas", p)
		}
		if err := nodeSet(rs); err != nil {
			return fmt.Errorf("partition %d replicas: %v", p, err)
		}
	}
	for k := range v.Configs {
		if k == "" {
			return errors.New("config with an empty name")
		}
	}
	return nil
}

func (v PartitionState) validate() error {
	if v.Leader < NoLeader {
		return fmt.Errorf("leader %d", v.Leader)
	}
	if v.LeaderEpoch < 0 || v.PartitionEpoch < 0 || v.ControllerEpoch < 0 {
		return fmt.Errorf("negative epoch (leader %d, partition %d, controller %d)", v.LeaderEpoch, v.PartitionEpoch, v.ControllerEpoch)
	}
	if err := nodeSet(v.ISR); err != nil {
		return fmt.Errorf("isr: %v", err)
	}
	if v.Leader != NoLeader && !contains(v.ISR, v.Leader) {
		return fmt.Errorf("leader %d not in isr %v", v.Leader, v.ISR)
	}
	return nil
}

func (v Reassignment) validate() error {
	if len(v.Target) == 0 {
		return errors.New("no target replicas")
	}
	for _, s := range []struct {
		name  string
		nodes []int32
	}{{"target", v.Target}, {"adding", v.Adding}, {"removing", v.Removing}} {
		if err := nodeSet(s.nodes); err != nil {
			return fmt.Errorf("%s: %v", s.name, err)
		}
	}
	target := make(map[int32]bool, len(v.Target))
	for _, n := range v.Target {
		target[n] = true
	}
	for _, n := range v.Adding {
		if !target[n] {
			return fmt.Errorf("adding %d, which is not a target", n)
		}
	}
	for _, n := range v.Removing {
		if target[n] {
			return fmt.Errorf("removing %d, which is a target", n)
		}
	}
	if v.Revert && len(v.Adding) > 0 {
		return errors.New("a revert adds no replica")
	}
	return nil
}

func (v Election) validate() error {
	switch v.Type {
	case ElectPreferred, ElectUnclean:
		return nil
	}
	return fmt.Errorf("election type %q", v.Type)
}

func (v ControlledShutdown) validate() error {
	if v.NodeID < 0 {
		return fmt.Errorf("node id %d", v.NodeID)
	}
	if v.Incarnation.IsZero() {
		return errors.New("no incarnation")
	}
	return nil
}

// nodeSet checks a list of node ids: none negative, none twice.
func nodeSet(ns []int32) error {
	seen := make(map[int32]bool, len(ns))
	for _, n := range ns {
		if n < 0 {
			return fmt.Errorf("node id %d", n)
		}
		if seen[n] {
			return fmt.Errorf("node %d listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

func contains(ns []int32, n int32) bool {
	for _, m := range ns {
		if m == n {
			return true
		}
	}
	return false
}

// ValidTopicName applies Kafka's rules for topic names: 1 to 249 of
// [a-zA-Z0-9._-], and not "." or "..". They also keep a name safe in a
// key.
func ValidTopicName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 249 {
		return fmt.Errorf("topic name %q", name)
	}
	for _, c := range []byte(name) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("topic name %q: character %q", name, c)
		}
	}
	return nil
}
