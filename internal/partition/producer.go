package partition

import "github.com/groupd/groupd/internal/batch"

// producerBatchesToRetain is how many recent batches per producer are kept
// for duplicate detection; it matches Kafka's limit of five in-flight
// requests per idempotent producer.
const producerBatchesToRetain = 5

// producerBatch remembers one appended batch of an idempotent producer.
type producerBatch struct {
	firstSeq, lastSeq       int32
	firstOffset, lastOffset int64
}

// producerEntry is the state of one producer id, like Kafka's
// ProducerStateEntry: its current epoch, its last batches, oldest first,
// and the timestamp of its last batch, from which it expires.
type producerEntry struct {
	epoch         int16
	batches       []producerBatch
	lastTimestamp int64
}

func (e *producerEntry) clone() *producerEntry {
	c := *e
	c.batches = append([]producerBatch(nil), e.batches...)
	return &c
}

// findDuplicate returns the cached batch with exactly h's sequence range in
// h's epoch, if any: a retry of a batch that was already written.
func (e *producerEntry) findDuplicate(h batch.Header) (producerBatch, bool) {
	if e == nil || h.ProducerEpoch != e.epoch {
		return producerBatch{}, false
	}
	last := h.LastSequence()
	for _, b := range e.batches {
		if b.firstSeq == h.BaseSequence && b.lastSeq == last {
			return b, true
		}
	}
	return producerBatch{}, false
}

// check validates h's epoch and sequence against the entry, following
// Kafka's ProducerAppendInfo.checkProducerEpoch and checkSequence. A nil
// entry is an unknown producer, accepted at any sequence (its earlier
// batches may simply predate the log, as after Kafka's retention).
func (e *producerEntry) check(h batch.Header) error {
	if e == nil {
		return nil
	}
	switch {
	case h.ProducerEpoch < e.epoch:
		return errorf(ErrInvalidProducerEpoch, "producer %d epoch %d is older than current epoch %d", h.ProducerID, h.ProducerEpoch, e.epoch)
	case h.ProducerEpoch > e.epoch:
		if h.BaseSequence != 0 {
			return errorf(ErrOutOfOrderSequence, "producer %d: new epoch %d must start at sequence 0, got %d", h.ProducerID, h.ProducerEpoch, h.BaseSequence)
		}
		return nil
	}
	lastSeq := int32(-1)
	if n := len(e.batches); n > 0 {
		lastSeq = e.batches[n-1].lastSeq
	}
	if !inSequence(lastSeq, h.BaseSequence) {
		return errorf(ErrOutOfOrderSequence, "producer %d epoch %d: expected sequence %d, got %d", h.ProducerID, h.ProducerEpoch, batch.IncrementSequence(lastSeq, 1), h.BaseSequence)
	}
	return nil
}

func inSequence(last, next int32) bool {
	return int64(next) == int64(last)+1 || (next == 0 && last == 1<<31-1)
}

// add records a batch written at baseOffset; a new epoch forgets the old
// epoch's batches.
func (e *producerEntry) add(h batch.Header, baseOffset int64) {
	if h.ProducerEpoch != e.epoch {
		e.epoch = h.ProducerEpoch
		e.batches = e.batches[:0]
	}
	e.lastTimestamp = h.MaxTimestamp
	if len(e.batches) == producerBatchesToRetain {
		copy(e.batches, e.batches[1:])
		e.batches = e.batches[:producerBatchesToRetain-1]
	}
	e.batches = append(e.batches, producerBatch{
		firstSeq:    h.BaseSequence,
		lastSeq:     h.LastSequence(),
		firstOffset: baseOffset,
		lastOffset:  baseOffset + int64(h.LastOffsetDelta),
	})
}

// ExpireProducers forgets the idempotent producers whose last batch is
// older than the producer id expiration (Kafka's producer.id.expiration.ms,
// judged by the batch's timestamp as Kafka does) and returns how many it
// forgot. A forgotten producer's next batch is accepted at any sequence,
// like one the log has never seen.
func (l *Log) ExpireProducers() int {
	now := l.nowMs()
	limit := l.opts.ProducerIDExpiration.Milliseconds()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	n := 0
	for id, e := range l.producers {
		if now-e.lastTimestamp >= limit {
			delete(l.producers, id)
			n++
		}
	}
	return n
}

// Producers is the number of idempotent producers whose state the log
// keeps.
func (l *Log) Producers() int {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return len(l.producers)
}
