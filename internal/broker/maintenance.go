package broker

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/groupd/groupd/internal/partition"
)

// Defaults of the background maintenance, as Kafka's.
const (
	// DefaultRetentionCheckInterval is log.retention.check.interval.ms.
	DefaultRetentionCheckInterval = 5 * time.Minute
	// DefaultCleanerBackoff is log.cleaner.backoff.ms.
	DefaultCleanerBackoff = 15 * time.Second
	// DefaultCleanerBufferBytes is log.cleaner.dedupe.buffer.size.
	DefaultCleanerBufferBytes = 128 << 20
)

// EnforceRetention runs retention on every partition whose topic's cleanup
// policy includes delete and expires idempotent producers, as the broker
// does every RetentionCheckInterval; it returns the segments deleted.
func (b *Broker) EnforceRetention() int {
	deleted := 0
	for _, nl := range b.allLogs() {
		res, err := nl.log.EnforceRetention()
		if err != nil && !errors.Is(err, partition.ErrClosed) {
			b.log.Warn("retention", "topic", nl.topic, "partition", nl.part, "err", err)
		}
		if res.Segments > 0 {
			b.log.Info("retention deleted segments", "topic", nl.topic, "partition", nl.part,
				"segments", res.Segments, "bytes", res.Bytes, "log_start", res.LogStart)
		}
		deleted += res.Segments
		if n := nl.log.ExpireProducers(); n > 0 {
			b.log.Info("expired idempotent producers", "topic", nl.topic, "partition", nl.part, "producers", n)
		}
	}
	return deleted
}

// CleanLogs compacts every compacted partition that is due, dirtiest
// first, with km as the cleaner's key map, until none is or the broker
// stops; it returns how many cleans ran.
func (b *Broker) CleanLogs(km *partition.KeyMap) int {
	type due struct {
		topic string
		part  int
		log   *partition.Log
		ratio float64
	}
	cleans := 0
	for {
		var all []due
		for _, nl := range b.allLogs() {
			if ratio, ok := nl.log.Cleanable(); ok {
				all = append(all, due{nl.topic, nl.part, nl.log, ratio})
			}
		}
		if len(all) == 0 {
			return cleans
		}
		slices.SortStableFunc(all, func(a, b due) int { return cmp.Compare(b.ratio, a.ratio) })
		for _, d := range all {
			select {
			case <-b.stopCheckpoints:
				return cleans
			default:
			}
			if _, err := d.log.Clean(km); err != nil {
				if errors.Is(err, partition.ErrClosed) {
					continue
				}
				b.log.Error("cleaning a compacted log; it is retried after the cleaner's backoff", "topic", d.topic, "partition", d.part, "err", err)
				return cleans
			}
			cleans++
		}
	}
}

func (b *Broker) retentionLoop() {
	tick := time.NewTicker(b.cfg.RetentionCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			b.EnforceRetention()
		case <-b.stopCheckpoints:
			return
		}
	}
}

func (b *Broker) cleanerLoop() {
	var km *partition.KeyMap
	tick := time.NewTicker(b.cfg.CleanerBackoff)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if km == nil {
				km = partition.NewKeyMap(b.cfg.CleanerBufferBytes)
			}
			b.CleanLogs(km)
		case <-b.stopCheckpoints:
			return
		}
	}
}
