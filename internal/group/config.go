package group

import (
	"fmt"
	"math"
	"time"
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
	s := seed
	next := func() uint64 {
		s += 0x9e3779b97f4a7c15
		z := s
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return z ^ (z >> 31)
	}
	return func(prefix string) string {
		return fmt.Sprintf("%s-%016x%016x", prefix, next(), next())
	}
}
