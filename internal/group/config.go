package group

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/group/core"
	"github.com/groupd/groupd/internal/inspect"
)

// Config holds the broker-level settings of the classic protocol. Zero fields
// take Kafka's defaults (see DefaultConfig).
type Config struct {
	// InitialRebalanceDelay is group.initial.rebalance.delay.ms: how long a
	// new or empty group waits for more members before its first join phase
	// completes. A negative value means no delay.
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound the session timeout a
	// member may ask for (group.min/max.session.timeout.ms).
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	// MaxGroupSize is group.max.size.
	MaxGroupSize int
	// OffsetsRetention is offsets.retention.minutes.
	OffsetsRetention time.Duration
	// OffsetMetadataMaxBytes is offset.metadata.max.bytes.
	OffsetMetadataMaxBytes int
	// NewMemberJoinTimeout bounds how long a newly added member's first
	// JoinGroup may stay parked (KAFKA-7610).
	NewMemberJoinTimeout time.Duration
	// HistorySize is how many rebalances each group remembers (and
	// keeps in the store).
	HistorySize int
	// StormWindow and StormCount define a rebalance storm: a rebalance
	// whose trigger came from the same member (by instance id, or client
	// id and host) at least StormCount times within StormWindow.
	StormWindow time.Duration
	StormCount  int
	// NewMemberID returns a fresh member id given a prefix (the group
	// instance id or client id). It must be deterministic for
	// reproducibility and should not repeat ids across restarts: give it a
	// seed that differs per load (see SeededMemberIDs). The machine retries
	// if the id is already in use in the group.
	NewMemberID func(prefix string) string
	// MigrationPolicy is group.consumer.migration.policy: whether a
	// non-empty group may change between the classic and the consumer
	// protocol while it runs. "" means bidirectional.
	MigrationPolicy MigrationPolicy
	// Consumer configures the consumer (KIP-848) groups. Its
	// CommittedOffset and Downgrade are the machine's own.
	Consumer consumer.Config
	// LoadTrigger names the trigger of a rebalance that a load of the
	// group's records started or resumed: coordinator-loaded (the
	// default) on a single node, coordinator-moved in a cluster.
	LoadTrigger string
}

// MigrationPolicy is Kafka's group.consumer.migration.policy. Empty groups
// change type whatever it says.
type MigrationPolicy string

// The migration policies.
const (
	// MigrationBidirectional allows both directions (Kafka's default).
	MigrationBidirectional MigrationPolicy = "bidirectional"
	// MigrationUpgrade lets a classic group become a consumer group when
	// a consumer-protocol member joins it.
	MigrationUpgrade MigrationPolicy = "upgrade"
	// MigrationDowngrade lets a consumer group become classic when its
	// last consumer-protocol member leaves.
	MigrationDowngrade MigrationPolicy = "downgrade"
	// MigrationDisabled converts only empty groups.
	MigrationDisabled MigrationPolicy = "disabled"
)

// String returns the policy's name ("" reads as bidirectional).
func (p MigrationPolicy) String() string {
	if p == "" {
		return string(MigrationBidirectional)
	}
	return string(p)
}

// Set parses a policy, case-insensitively as Kafka does; it makes the type
// a command-line flag value.
func (p *MigrationPolicy) Set(s string) error {
	v := MigrationPolicy(strings.ToLower(strings.TrimSpace(s)))
	if err := v.validate(); err != nil {
		return err
	}
	*p = v
	return nil
}

// Type names the flag value's type.
func (p *MigrationPolicy) Type() string { return "policy" }

func (p MigrationPolicy) validate() error {
	switch p {
	case "", MigrationBidirectional, MigrationUpgrade, MigrationDowngrade, MigrationDisabled:
		return nil
	}
	return fmt.Errorf("group.consumer.migration.policy: unknown policy %q (bidirectional, upgrade, downgrade, disabled)", string(p))
}

// UpgradeEnabled reports whether a non-empty classic group may become a
// consumer group.
func (p MigrationPolicy) UpgradeEnabled() bool {
	return p == "" || p == MigrationBidirectional || p == MigrationUpgrade
}

// DowngradeEnabled reports whether a non-empty consumer group may become
// a classic group.
func (p MigrationPolicy) DowngradeEnabled() bool {
	return p == "" || p == MigrationBidirectional || p == MigrationDowngrade
}

// Validate checks the settings as Kafka does when the broker starts: the
// migration policy and the consumer groups' settings.
func (c Config) Validate() error {
	return errors.Join(c.MigrationPolicy.validate(), c.Consumer.Validate())
}

// DefaultConfig returns Kafka 4.3's defaults.
func DefaultConfig() Config {
	return Config{
		InitialRebalanceDelay:  3000 * time.Millisecond,
		MinSessionTimeout:      6000 * time.Millisecond,
		MaxSessionTimeout:      1800000 * time.Millisecond,
		MaxGroupSize:           math.MaxInt32,
		OffsetsRetention:       7 * 24 * time.Hour,
		OffsetMetadataMaxBytes: 4096,
		NewMemberJoinTimeout:   5 * time.Minute,
		HistorySize:            100,
		StormWindow:            5 * time.Minute,
		StormCount:             3,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.LoadTrigger == "" {
		c.LoadTrigger = inspect.TriggerCoordinatorLoaded
	}
	if c.InitialRebalanceDelay == 0 {
		c.InitialRebalanceDelay = d.InitialRebalanceDelay
	} else if c.InitialRebalanceDelay < 0 {
		c.InitialRebalanceDelay = 0
	}
	if c.MinSessionTimeout == 0 {
		c.MinSessionTimeout = d.MinSessionTimeout
	}
	if c.MaxSessionTimeout == 0 {
		c.MaxSessionTimeout = d.MaxSessionTimeout
	}
	if c.MaxGroupSize <= 0 {
		c.MaxGroupSize = d.MaxGroupSize
	}
	if c.OffsetsRetention == 0 {
		c.OffsetsRetention = d.OffsetsRetention
	}
	if c.OffsetMetadataMaxBytes == 0 {
		c.OffsetMetadataMaxBytes = d.OffsetMetadataMaxBytes
	}
	if c.NewMemberJoinTimeout == 0 {
		c.NewMemberJoinTimeout = d.NewMemberJoinTimeout
	}
	if c.HistorySize <= 0 {
		c.HistorySize = d.HistorySize
	}
	if c.StormWindow <= 0 {
		c.StormWindow = d.StormWindow
	}
	if c.StormCount <= 0 {
		c.StormCount = d.StormCount
	}
	if c.NewMemberID == nil {
		c.NewMemberID = SeededMemberIDs(0)
	}
	return c
}

// SequentialMemberIDs returns ids "<prefix>-1", "<prefix>-2", ... counted per
// generator. Readable in tests; a runtime should prefer SeededMemberIDs.
func SequentialMemberIDs() func(string) string {
	var n uint64
	return func(prefix string) string {
		n++
		return fmt.Sprintf("%s-%d", prefix, n)
	}
}

// SeededMemberIDs returns ids "<prefix>-<32 hex digits>" drawn from a
// splitmix64 stream started at seed, so ids look like Kafka's UUID suffixes
// while staying reproducible for a given seed.
func SeededMemberIDs(seed uint64) func(string) string {
	next := core.SplitMix64(seed)
	return func(prefix string) string {
		// fmt.Sprintf("%s-%016x%016x", ...), without fmt: every new
		// member of a large group takes one.
		var raw [16]byte
		binary.BigEndian.PutUint64(raw[:8], next())
		binary.BigEndian.PutUint64(raw[8:], next())
		out := make([]byte, len(prefix)+1+2*len(raw))
		n := copy(out, prefix)
		out[n] = '-'
		hex.Encode(out[n+1:], raw[:])
		return string(out)
	}
}
