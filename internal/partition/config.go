package partition

import (
	"math"
	"time"
)

// Config is what a topic's configs say about its log (Kafka's topic
// configs that act on a partition). The broker resolves it from the
// topic's overrides and the broker defaults; SetConfig changes it while
// the log serves.
type Config struct {
	// SegmentBytes rolls the active segment once it would grow past this
	// size (segment.bytes).
	SegmentBytes int64
	// SegmentMs rolls the active segment once its first batch is this
	// old (segment.ms); 0 never.
	SegmentMs int64
	// RetentionMs deletes segments whose newest record is older than this
	// (retention.ms); -1 keeps them by age.
	RetentionMs int64
	// RetentionBytes deletes the oldest segments while the log is larger
	// than this (retention.bytes); -1 keeps them by size.
	RetentionBytes int64
	// MaxMessageBytes is the largest batch a producer may append
	// (max.message.bytes).
	MaxMessageBytes int64
	// Delete and Compact are the cleanup.policy: retention deletes old
	// segments, the cleaner keeps the last record of each key.
	Delete, Compact bool
	// LogAppendTime stamps batches with the broker's time
	// (message.timestamp.type=LogAppendTime) instead of checking the
	// producer's.
	LogAppendTime bool
	// TimestampBeforeMaxMs and TimestampAfterMaxMs bound how far a
	// producer's timestamp may be from the broker's clock
	// (message.timestamp.before.max.ms, message.timestamp.after.max.ms).
	TimestampBeforeMaxMs, TimestampAfterMaxMs int64
	// MinCompactionLagMs keeps records younger than this out of the
	// cleaner's reach (min.compaction.lag.ms); MaxCompactionLagMs makes
	// a log cleanable whatever its dirty ratio once its oldest uncleaned
	// record is this old (max.compaction.lag.ms).
	MinCompactionLagMs, MaxCompactionLagMs int64
	// DeleteRetentionMs is how long a tombstone stays readable after the
	// cleaner first kept it (delete.retention.ms).
	DeleteRetentionMs int64
	// MinCleanableDirtyRatio is the share of the log that must be
	// uncleaned before the cleaner rewrites it (min.cleanable.dirty.ratio).
	MinCleanableDirtyRatio float64
}

// DefaultConfig is Kafka's topic defaults, with groupd's segment size.
func DefaultConfig() Config {
	return Config{
		SegmentBytes:           DefaultSegmentBytes,
		SegmentMs:              7 * 24 * time.Hour.Milliseconds(),
		RetentionMs:            7 * 24 * time.Hour.Milliseconds(),
		RetentionBytes:         -1,
		MaxMessageBytes:        1<<20 + 12,
		Delete:                 true,
		TimestampBeforeMaxMs:   math.MaxInt64,
		TimestampAfterMaxMs:    math.MaxInt64,
		MaxCompactionLagMs:     math.MaxInt64,
		DeleteRetentionMs:      24 * time.Hour.Milliseconds(),
		MinCleanableDirtyRatio: 0.5,
	}
}
