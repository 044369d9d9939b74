package partition

import (
	"fmt"
	"log/slog"
	"time"
)

// SyncPolicy says when appended data is fsynced.
type SyncPolicy int

const (
	// SyncAlways fsyncs the segment before Append returns: an acknowledged
	// append survives a machine crash.
	SyncAlways SyncPolicy = iota
	// SyncInterval fsyncs in the background every Options.SyncInterval
	// (and on roll and Close). A crash can lose up to one interval of
	// acknowledged appends; recovery truncates any torn tail.
	SyncInterval
	// SyncNever leaves flushing to the operating system (segments are
	// still fsynced when rolled and on Close), like Kafka's defaults.
	SyncNever
)

// ParseSyncPolicy parses "always", "interval" or "never".
func ParseSyncPolicy(s string) (SyncPolicy, error) {
	switch s {
	case "always":
		return SyncAlways, nil
	case "interval":
		return SyncInterval, nil
	case "never":
		return SyncNever, nil
	}
	return 0, fmt.Errorf("unknown sync policy %q (want always, interval or never)", s)
}

func (p SyncPolicy) String() string {
	switch p {
	case SyncAlways:
		return "always"
	case SyncInterval:
		return "interval"
	case SyncNever:
		return "never"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// Defaults for zero Options fields.
const (
	DefaultSegmentBytes       = 256 << 20
	DefaultIndexIntervalBytes = 4096
	DefaultSyncInterval       = time.Second
	// DefaultProducerIDExpiration is Kafka's producer.id.expiration.ms.
	DefaultProducerIDExpiration = 24 * time.Hour
)

// Options configure a Log. Zero values mean the defaults.
type Options struct {
	// Config is the topic's log settings; nil is DefaultConfig with
	// SegmentBytes (if set) as its segment size.
	Config *Config
	// SegmentBytes is the size after which the active segment is rolled,
	// when Config is nil. A segment can exceed it by at most one Append
	// call's bytes.
	SegmentBytes int64
	// IndexIntervalBytes is the minimum number of log bytes between two
	// sparse index entries.
	IndexIntervalBytes int
	Sync               SyncPolicy
	SyncInterval       time.Duration
	Logger             *slog.Logger
	// QuarantineDir, if set, is where Open moves segments it finds
	// damaged (below the recovery point, or not the last segment)
	// instead of refusing to open; the offsets they held become a gap
	// and are never given out again. It is an operator's choice: the
	// records in a moved segment are no longer served.
	QuarantineDir string
	// Now is the clock for timestamps, segment age, retention and
	// producer expiry; nil is time.Now. Tests move it by hand.
	Now func() time.Time
	// ProducerIDExpiration is how long an idempotent producer's state is
	// kept after its last batch (producer.id.expiration.ms).
	ProducerIDExpiration time.Duration
	// FullStartCheck makes Open read every batch header of every segment,
	// as it does without a producer-state snapshot, instead of trusting
	// the sealed segments the snapshot describes.
	FullStartCheck bool
	// HeaderOnlyCompressed validates compressed batches by their header
	// only (batch.ValidateCompressedHeader) instead of decoding their
	// records as Kafka does; decompressing is most of what validating
	// produce costs. Compacted topics still decode every record, since
	// their cleaner needs each record's key.
	HeaderOnlyCompressed bool
	// Replicated makes the log a replica of a replicated partition: its
	// high watermark is no longer the log end but what the replica
	// machine publishes with SetHighWatermark (kept in the recovery
	// checkpoint, so it survives a restart), and consumers read below it
	// only. False, a single node's log, keeps the high watermark at the
	// log end after every append and truncation.
	Replicated bool
}

func (o Options) withDefaults() Options {
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.IndexIntervalBytes <= 0 {
		o.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ProducerIDExpiration <= 0 {
		o.ProducerIDExpiration = DefaultProducerIDExpiration
	}
	if o.Config == nil {
		c := DefaultConfig()
		c.SegmentBytes = o.SegmentBytes
		o.Config = &c
	}
	if o.Config.SegmentBytes <= 0 {
		c := *o.Config
		c.SegmentBytes = o.SegmentBytes
		o.Config = &c
	}
	return o
}
