package cluster

import "fmt"

// record is one record of a partition's log: the id the producer gave it
// (unique over the run) and the leader epoch stamped in its batch.
type record struct {
	id    uint64
	epoch int32
}

type epochEntry struct {
	epoch int32
	start int64
}

// diskLog is one replica's log on a node's disk: its records from offset
// 0 (retention never moves the log start), its leader-epoch cache, and
// the high watermark checkpoint. The disk is durable: whatever was
// appended, truncated or assigned is there after a crash (as if every
// write was fsynced); only the in-memory high watermark is lost, and the
// checkpoint, written every few seconds, stands in for it on restart
// (Kafka's replication-offset-checkpoint). Losing the disk empties it.
//
// It is the simulator's partition.Log: EpochCache for the machine, and
// the operations of cluster.ReplicaLog the runtime uses.
type diskLog struct {
	recs   []record
	epochs []epochEntry // ascending
	hw     int64        // in memory
	ckpt   int64        // the checkpointed HW
}

// Latest implements replica.EpochCache.
func (l *diskLog) Latest() (int32, bool) {
	if len(l.epochs) == 0 {
		return 0, false
	}
	return l.epochs[len(l.epochs)-1].epoch, true
}

// EndOffsetFor implements replica.EpochCache, as Kafka's
// LeaderEpochFileCache.endOffsetFor: the largest epoch <= epoch and its
// end (the next epoch's start, or the LEO for the latest).
func (l *diskLog) EndOffsetFor(epoch int32) (int32, int64, bool) {
	for i := len(l.epochs) - 1; i >= 0; i-- {
		if l.epochs[i].epoch <= epoch {
			end := l.leo()
			if i+1 < len(l.epochs) {
				end = l.epochs[i+1].start
			}
			return l.epochs[i].epoch, end, true
		}
	}
	return 0, 0, false
}

// leaderAnswer is partition.Log.OffsetForLeaderEpoch (Kafka's
// endOffsetFor as a leader answers OffsetForLeaderEpoch).
func (l *diskLog) leaderAnswer(epoch int32) (int32, int64) {
	if len(l.epochs) == 0 || epoch < 0 {
		return -1, -1
	}
	if epoch == l.epochs[len(l.epochs)-1].epoch {
		return epoch, l.leo()
	}
	for i, e := range l.epochs {
		if e.epoch > epoch {
			if i == 0 {
				return epoch, e.start
			}
			return l.epochs[i-1].epoch, e.start
		}
	}
	return -1, -1
}

func (l *diskLog) leo() int64 { return int64(len(l.recs)) }

// assign records that epoch starts at start, as Kafka's
// LeaderEpochFileCache.assign: an epoch not above the latest is ignored,
// and entries starting at or after start are replaced.
func (l *diskLog) assign(epoch int32, start int64) {
	if n := len(l.epochs); n > 0 && l.epochs[n-1].epoch >= epoch {
		return
	}
	kept := l.epochs[:0]
	for _, e := range l.epochs {
		if e.start < start {
			kept = append(kept, e)
		}
	}
	l.epochs = append(kept, epochEntry{epoch, start})
}

// appendLeader appends records as leader, stamped with the latest epoch
// (the one StartEpoch recorded), and returns the new LEO.
func (l *diskLog) appendLeader(ids []uint64) int64 {
	epoch, _ := l.Latest()
	for _, id := range ids {
		l.recs = append(l.recs, record{id: id, epoch: epoch})
	}
	return l.leo()
}

// appendReplicated appends records fetched from the leader at base (which
// must be the LEO), taking their epochs into the cache as
// AppendReplicated does.
func (l *diskLog) appendReplicated(base int64, recs []record) (int64, error) {
	if base != l.leo() {
		return l.leo(), fmt.Errorf("records at %d appended at %d", base, l.leo())
	}
	for i, r := range recs {
		if n := len(l.epochs); n == 0 || l.epochs[n-1].epoch < r.epoch {
			l.assign(r.epoch, base+int64(i))
		}
		l.recs = append(l.recs, r)
	}
	return l.leo(), nil
}

// truncate drops offsets >= to, and the cache's epochs starting at or
// after to; the HW comes down with the log.
func (l *diskLog) truncate(to int64) {
	if to < l.leo() {
		l.recs = l.recs[:max(to, 0)]
	}
	kept := l.epochs[:0]
	for _, e := range l.epochs {
		if e.start < to {
			kept = append(kept, e)
		}
	}
	l.epochs = kept
	l.hw = min(l.hw, l.leo())
}

// read returns up to n records from offset.
func (l *diskLog) read(from, to int64, n int) []record {
	to = min(to, l.leo(), from+int64(n))
	if from >= to || from < 0 {
		return nil
	}
	return append([]record(nil), l.recs[from:to]...)
}

// restart is the log as a new process finds it: the HW from the
// checkpoint.
func (l *diskLog) restart() { l.hw = min(l.ckpt, l.leo()) }

func (l *diskLog) String() string {
	return fmt.Sprintf("leo=%d hw=%d epochs=%v", l.leo(), l.hw, l.epochs)
}
