package consumer

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/groupd/groupd/internal/group/core"
)

// Assignor names, as members send them in ServerAssignor.
const (
	AssignorUniform = "uniform"
	AssignorRange   = "range"
)

// Config holds the broker settings of the consumer protocol, named after
// Kafka's. Zero fields take Kafka 4.3's defaults (see DefaultConfig), except
// that an unset bound widens to admit a timeout or interval that was set,
// so a test can set one value alone; a broker passes all of them and
// Validate then checks them as Kafka does.
type Config struct {
	// SessionTimeout is group.consumer.session.timeout.ms: a member that
	// does not heartbeat for this long is fenced and removed. A static
	// member that left with epoch -2 must rejoin within it too.
	SessionTimeout time.Duration
	// MinSessionTimeout and MaxSessionTimeout are
	// group.consumer.min/max.session.timeout.ms; they bound SessionTimeout.
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	// HeartbeatInterval is group.consumer.heartbeat.interval.ms, sent to
	// members in every successful heartbeat response.
	HeartbeatInterval time.Duration
	// MinHeartbeatInterval and MaxHeartbeatInterval are
	// group.consumer.min/max.heartbeat.interval.ms.
	MinHeartbeatInterval time.Duration
	MaxHeartbeatInterval time.Duration
	// MaxSize is group.consumer.max.size: the most members in one group.
	MaxSize int
	// Assignors is group.consumer.assignors: the server assignors members
	// may name, the first being the default. Known names: "uniform",
	// "range".
	Assignors []string
	// NewMemberID returns a fresh member id for ConsumerGroupHeartbeat v0,
	// where the coordinator generates it. It must be deterministic for
	// reproducibility and should not repeat across restarts: seed it
	// differently per load (see SeededMemberIDs). The machine retries if
	// the id is already in use in the group.
	NewMemberID func() string
	// CommittedOffset, if set, looks up a group's committed offset of a
	// partition, for the rebalance record of the partitions that change
	// owner. The offsets live beside the machine (with the classic
	// groups'), so this is how it reads them; nil leaves them unknown.
	CommittedOffset func(group, topic string, partition int32) (int64, bool)
	// Downgrade says whether a group whose last consumer-protocol member
	// leaves becomes a classic group again (Output.Downgrades). Package
	// group sets it from its migration policy and group.max.size; the
	// zero value never downgrades.
	Downgrade DowngradePolicy
	// LoadTrigger names the trigger of a rebalance that was in progress
	// when the group's records were loaded (default coordinator-loaded).
	LoadTrigger string
}

// DefaultConfig returns Kafka 4.3's defaults.
func DefaultConfig() Config {
	return Config{
		SessionTimeout:       45 * time.Second,
		MinSessionTimeout:    45 * time.Second,
		MaxSessionTimeout:    60 * time.Second,
		HeartbeatInterval:    5 * time.Second,
		MinHeartbeatInterval: 5 * time.Second,
		MaxHeartbeatInterval: 15 * time.Second,
		MaxSize:              math.MaxInt32,
		Assignors:            []string{AssignorUniform, AssignorRange},
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.LoadTrigger == "" {
		c.LoadTrigger = triggerCoordinatorLoaded
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = d.SessionTimeout
	}
	if c.MinSessionTimeout == 0 {
		c.MinSessionTimeout = min(d.MinSessionTimeout, c.SessionTimeout)
	}
	if c.MaxSessionTimeout == 0 {
		c.MaxSessionTimeout = max(d.MaxSessionTimeout, c.SessionTimeout)
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = d.HeartbeatInterval
	}
	if c.MinHeartbeatInterval == 0 {
		c.MinHeartbeatInterval = min(d.MinHeartbeatInterval, c.HeartbeatInterval)
	}
	if c.MaxHeartbeatInterval == 0 {
		c.MaxHeartbeatInterval = max(d.MaxHeartbeatInterval, c.HeartbeatInterval)
	}
	if c.MaxSize <= 0 {
		c.MaxSize = d.MaxSize
	}
	if len(c.Assignors) == 0 {
		c.Assignors = d.Assignors
	}
	if c.NewMemberID == nil {
		c.NewMemberID = SeededMemberIDs(0)
	}
	return c
}

// Validate applies Kafka's checks of these settings (GroupCoordinatorConfig)
// after defaults are filled in, so a broker refuses to start with a
// combination Kafka would refuse.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.MaxHeartbeatInterval >= c.MinHeartbeatInterval,
		"group.consumer.max.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms")
	check(c.HeartbeatInterval >= c.MinHeartbeatInterval,
		"group.consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms")
	check(c.HeartbeatInterval <= c.MaxHeartbeatInterval,
		"group.consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms")
	check(c.MaxSessionTimeout >= c.MinSessionTimeout,
		"group.consumer.max.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms")
	check(c.SessionTimeout >= c.MinSessionTimeout,
		"group.consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms")
	check(c.SessionTimeout <= c.MaxSessionTimeout,
		"group.consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms")
	check(c.HeartbeatInterval < c.SessionTimeout,
		"group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")
	check(c.HeartbeatInterval >= time.Millisecond && c.SessionTimeout <= math.MaxInt32*time.Millisecond,
		"group.consumer heartbeat interval and session timeout must be between 1 ms and 2^31-1 ms")
	for i, a := range c.Assignors {
		check(a == AssignorUniform || a == AssignorRange, "group.consumer.assignors: unknown assignor %q (known: uniform, range)", a)
		check(!slices.Contains(c.Assignors[:i], a), "group.consumer.assignors: %q listed twice", a)
	}
	return errors.Join(errs...)
}

// SequentialMemberIDs returns ids "<prefix>1", "<prefix>2", ... Readable in
// tests; a runtime should prefer SeededMemberIDs.
func SequentialMemberIDs(prefix string) func() string {
	var n uint64
	return func() string {
		n++
		return fmt.Sprintf("%s%d", prefix, n)
	}
}

// SeededMemberIDs returns ids shaped like Kafka's Uuid.toString (16 bytes,
// base64url without padding) drawn from a splitmix64 stream started at seed,
// so they are reproducible for a given seed.
func SeededMemberIDs(seed uint64) func() string {
	next := core.SplitMix64(seed)
	return func() string {
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], next())
		binary.BigEndian.PutUint64(b[8:], next())
		return base64.RawURLEncoding.EncodeToString(b[:])
	}
}
