package broker

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"

	"github.com/groupd/groupd/internal/partition"
)

// The data directory:
//
//	meta.json                 cluster id, producer-id limit, topics, pending removals
//	logs/<topic id>/topic.json   the topic's own descriptor (name, partitions, configs)
//	logs/<topic id>/<partition>/ one partition log (internal/partition)
//	quarantine/<topic id>/<partition>/ segments set aside by the operator's choice
//
// meta.json is the source of truth. Every change that creates or removes
// directories under logs/ is recorded in it first, as a pending removal,
// so that a start after a crash knows which directories it may remove; a
// directory it cannot account for stops the start. The descriptors let
// `groupd recover` rebuild meta.json if it is lost.

const (
	metaName       = "meta.json"
	logsDirName    = "logs"
	descriptorName = "topic.json"
	quarantineName = "quarantine"
)

type topicMeta struct {
	Name       string            `json:"name"`
	ID         string            `json:"id"`
	Partitions int32             `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
}

// removal is a directory change recorded before it is made: on start the
// directories it names are removed (they belong to a deletion that did not
// finish, or to a creation that did not).
type removal struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
	// FromPartition 0 removes the whole topic directory; more removes
	// the partition directories from it on (a CreatePartitions that did
	// not finish).
	FromPartition int32  `json:"from_partition"`
	Reason        string `json:"reason"`
}

type metaFile struct {
	ClusterID       string      `json:"cluster_id"`
	ProducerIDLimit int64       `json:"producer_id_limit"`
	Topics          []topicMeta `json:"topics"`
	PendingRemovals []removal   `json:"pending_removals,omitempty"`
}

// descriptor is logs/<id>/topic.json.
type descriptor struct {
	Name       string            `json:"name"`
	ID         string            `json:"id"`
	Partitions int32             `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
	ClusterID  string            `json:"cluster_id"`
}

func (d descriptor) equal(o descriptor) bool {
	return d.Name == o.Name && d.ID == o.ID && d.Partitions == o.Partitions &&
		d.ClusterID == o.ClusterID && maps.Equal(d.Configs, o.Configs)
}

func parseTopicID(s string) (TopicID, bool) {
	var id TopicID
	raw, err := hex.DecodeString(s)
	if err != nil || len(raw) != len(id) || hex.EncodeToString(raw) != s {
		return id, false
	}
	copy(id[:], raw)
	return id, true
}

// readMeta reads and checks meta.json; ok is false if it does not exist.
func readMeta(dataDir string) (m metaFile, ok bool, err error) {
	path := filepath.Join(dataDir, metaName)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return m, false, nil
	}
	if err != nil {
		return m, false, err
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return m, false, err
	}
	return m, true, m.check()
}

// check rejects metadata that cannot be trusted as a whole.
func (m metaFile) check() error {
	if m.ClusterID == "" {
		return errors.New("no cluster id")
	}
	if m.ProducerIDLimit < 0 {
		return fmt.Errorf("negative producer id limit %d", m.ProducerIDLimit)
	}
	names, ids := map[string]bool{}, map[string]bool{}
	for _, t := range m.Topics {
		if _, ok := parseTopicID(t.ID); !ok {
			return fmt.Errorf("topic %q: bad id %q", t.Name, t.ID)
		}
		if ValidateTopicName(t.Name) != nil || t.Partitions < 1 {
			return fmt.Errorf("topic %q: bad name or partition count %d", t.Name, t.Partitions)
		}
		if names[t.Name] || ids[t.ID] {
			return fmt.Errorf("topic %q (id %s) listed twice", t.Name, t.ID)
		}
		names[t.Name], ids[t.ID] = true, true
	}
	for _, r := range m.PendingRemovals {
		if _, ok := parseTopicID(r.ID); !ok || r.FromPartition < 0 {
			return fmt.Errorf("pending removal of %q: bad id %q or partition %d", r.Topic, r.ID, r.FromPartition)
		}
		if r.FromPartition == 0 && ids[r.ID] {
			return fmt.Errorf("pending removal of the whole directory of live topic %q (id %s)", r.Topic, r.ID)
		}
	}
	return nil
}

func readDescriptor(topicDir string) (descriptor, error) {
	var d descriptor
	raw, err := os.ReadFile(filepath.Join(topicDir, descriptorName))
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return d, fmt.Errorf("%s: %w", filepath.Join(topicDir, descriptorName), err)
	}
	return d, nil
}

func writeDescriptor(topicDir string, d descriptor) error {
	raw, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	return partition.WriteFileAtomic(filepath.Join(topicDir, descriptorName), raw)
}

// partitionDirs returns the partition numbers of the numbered directories
// in topicDir and the names of every other entry except the descriptor
// (and its temporary file).
func partitionDirs(topicDir string) (parts map[int32]bool, other []string, err error) {
	ents, err := os.ReadDir(topicDir)
	if err != nil {
		return nil, nil, err
	}
	parts = map[int32]bool{}
	for _, e := range ents {
		switch name := e.Name(); {
		case name == descriptorName || name == descriptorName+".tmp":
		case e.IsDir():
			p, err := strconv.ParseInt(name, 10, 32)
			if err != nil || p < 0 || strconv.Itoa(int(p)) != name {
				other = append(other, name)
				continue
			}
			parts[int32(p)] = true
		default:
			other = append(other, name)
		}
	}
	return parts, other, nil
}

// UnknownDirError is a directory under logs/ that the metadata does not
// account for: not a topic, not a recorded removal. Start stops rather
// than guess whether it is data.
type UnknownDirError struct {
	Path    string
	Reason  string
	DataDir string
}

func (e *UnknownDirError) Error() string {
	return fmt.Sprintf("%s: %s; groupd does not delete what its metadata does not account for: move it out of the data directory to start without it, or rebuild %s from the directories with `groupd recover --data-dir %s --force`", e.Path, e.Reason, metaName, e.DataDir)
}
