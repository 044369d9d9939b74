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
)

// Options configure a Log. Zero values mean the defaults.
type Options struct {
	// SegmentBytes is the size after which the active segment is rolled.
	// A segment can exceed it by at most one Append call's bytes.
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
	return o
}
