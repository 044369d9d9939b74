package api

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/batch"
	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/server"
)

// Produce v0–v2 carry message formats v0/v1, which groupd does not store;
// Kafka 4 also starts at v3.
func init() { register(kmsg.Produce, 3, 13, (*Handler).produce) }

func (h *Handler) produce(_ context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.ProduceRequest)
	if h.cl != nil {
		return h.clusterProduce(r, req)
	}
	resp := req.ResponseKind().(*kmsg.ProduceResponse)

	acksOK := req.Acks == 0 || req.Acks == 1 || req.Acks == -1
	// Partitions are appended concurrently and without waiting for
	// fsyncs; under --fsync=always the reply waits for them (see
	// durableProduce).
	var (
		wg    sync.WaitGroup
		syncs struct {
			sync.Mutex
			logs []pendingSync
		}
	)
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for ti, rt := range req.Topics {
		st := &resp.Topics[ti]
		*st = kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		st.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		t, topicErr := h.produceTopic(req.Version, rt)
		for pi, rp := range rt.Partitions {
			sp := &st.Partitions[pi]
			if err := startProduceAnswer(sp, rp, req, acksOK, topicErr); err != nil {
				h.setProduceError(req.Version, rt.Topic, sp, err)
				continue
			}
			wg.Go(func() {
				l, end, err := h.producePartition(t, rp, sp)
				h.setProduceError(req.Version, rt.Topic, sp, err)
				if err == nil && l.SyncsAppends() && req.Acks != 0 {
					syncs.Lock()
					syncs.logs = append(syncs.logs, pendingSync{sp, l, end})
					syncs.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if req.Acks == 0 {
		// The client reads no reply; errors only reach the log.
		return nil, nil
	}
	if len(syncs.logs) > 0 {
		return &durableProduce{ProduceResponse: resp, syncs: syncs.logs, h: h, version: req.Version}, nil
	}
	return resp, nil
}

// startProduceAnswer lays out the answer to one produced partition, as
// failed until its append succeeds, and returns the error the request
// itself gives it: acks that are not 0, 1 or -1, a transaction, or its
// topic's error.
func startProduceAnswer(sp *kmsg.ProduceResponseTopicPartition, rp kmsg.ProduceRequestTopicPartition, req *kmsg.ProduceRequest, acksOK bool, topicErr error) error {
	*sp = kmsg.NewProduceResponseTopicPartition()
	sp.Partition = rp.Partition
	sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = -1, -1, -1
	switch {
	case !acksOK:
		return kerr.InvalidRequiredAcks
	case req.TransactionID != nil:
		// Transactions are not served; producers only get here if they
		// ignore that AddPartitionsToTxn is not advertised.
		return kerr.TransactionalIDAuthorizationFailed
	}
	return topicErr
}

// pendingSync is one partition whose append must be fsynced before the
// reply: the response partition to fail if the fsync fails, and the log
// offset the fsync must cover.
type pendingSync struct {
	sp  *kmsg.ProduceResponseTopicPartition
	log *partition.Log
	end int64
}

// durableProduce is a produce reply that the server sends only after Wait:
// every appended partition is fsynced, concurrently and shared with the
// appends that came after it.
type durableProduce struct {
	*kmsg.ProduceResponse
	syncs   []pendingSync
	h       *Handler
	version int16
}

func (d *durableProduce) Wait() error {
	var wg sync.WaitGroup
	for _, s := range d.syncs {
		wg.Go(func() {
			if err := s.log.SyncTo(s.end); err != nil {
				d.h.log.Error("fsync of produced records failed", "partition", s.sp.Partition, "err", err)
				s.sp.BaseOffset = -1
				d.h.setProduceError(d.version, "", s.sp, kerr.KafkaStorageError)
			}
		})
	}
	wg.Wait()
	return nil
}

func (h *Handler) setProduceError(version int16, topic string, sp *kmsg.ProduceResponseTopicPartition, err error) {
	if err == nil {
		return
	}
	sp.ErrorCode = produceErrCode(err)
	if version >= 8 {
		sp.ErrorMessage = errMessage(err)
		// The records at fault, by their index in the batch.
		var ve *batch.ValidationError
		if errors.As(err, &ve) {
			for _, re := range ve.Records {
				er := kmsg.NewProduceResponseTopicPartitionErrorRecord()
				er.RelativeOffset, er.ErrorMessage = re.Index, strp(re.Message)
				sp.ErrorRecords = append(sp.ErrorRecords, er)
			}
		}
	}
	h.log.Debug("produce rejected", "topic", topic, "partition", sp.Partition, "err", err)
}

func (h *Handler) produceTopic(version int16, rt kmsg.ProduceRequestTopic) (*broker.Topic, error) {
	ot, internal := h.b.OffsetsTopic()
	if version >= 13 {
		if t, ok := h.b.TopicByID(rt.TopicID); ok {
			return t, nil
		}
		if internal && rt.TopicID == ot.ID {
			return nil, errInternalAppend
		}
		return nil, kerr.UnknownTopicID
	}
	if err := broker.ValidateTopicName(rt.Topic); err != nil {
		return nil, err
	}
	if t, ok := h.b.Topic(rt.Topic); ok {
		return t, nil
	}
	if internal && rt.Topic == broker.OffsetsTopicName {
		return nil, errInternalAppend
	}
	return nil, kerr.UnknownTopicOrPartition
}

// errInternalAppend is Kafka's answer to a produce to an internal topic.
var errInternalAppend = detail(kerr.InvalidTopicException, "cannot append to internal topic %s", broker.OffsetsTopicName)

// producePartition appends one partition's batch without waiting for an
// fsync; it returns the log and the offset an fsync must cover before the
// append may be acknowledged.
func (h *Handler) producePartition(t *broker.Topic, rp kmsg.ProduceRequestTopicPartition, sp *kmsg.ProduceResponseTopicPartition) (*partition.Log, int64, error) {
	l := t.Partition(rp.Partition)
	if l == nil {
		return nil, 0, kerr.UnknownTopicOrPartition
	}
	end, err := h.appendProduced(l, rp, sp)
	if err != nil {
		return nil, 0, err
	}
	return l, end, nil
}

// appendProduced appends a produced batch to l, as leader, without
// waiting for an fsync; it returns the end offset of the append (which
// an fsync or the ISR must reach before it is acknowledged).
func (h *Handler) appendProduced(l *partition.Log, rp kmsg.ProduceRequestTopicPartition, sp *kmsg.ProduceResponseTopicPartition) (int64, error) {
	batches, err := batch.Split(rp.Records)
	if err != nil {
		return 0, err
	}
	// Since Produce v3 Kafka takes exactly one batch per partition, so a
	// producer's batch is the unit of idempotent deduplication.
	if len(batches) != 1 {
		return 0, fmt.Errorf("%w: %d batches for one partition; exactly one is allowed", batch.ErrInvalidRecord, len(batches))
	}
	if hd, err := batch.ParseHeader(batches[0]); err == nil && batch.IsTransactional(hd.Attributes) {
		return 0, kerr.TransactionalIDAuthorizationFailed
	}
	// A duplicate's original may itself still await its fsync: the end
	// offset covers it either way. The batch is a slice of the request's
	// frame, which nothing reads once the request is answered: the log
	// patches it in place and writes it without a copy.
	res, err := l.AppendOwned(batches)
	if err != nil {
		return 0, err
	}
	sp.BaseOffset = res.BaseOffset
	sp.LogAppendTime = res.LogAppendTime
	sp.LogStartOffset = l.LogStartOffset()
	return res.LastOffset + 1, nil
}

// produceErrCode maps append failures to the codes a Kafka broker sends.
func produceErrCode(err error) int16 {
	switch {
	case errors.Is(err, partition.ErrMessageTooLarge):
		return kerr.MessageTooLarge.Code
	case errors.Is(err, partition.ErrRecordListTooLarge):
		return kerr.RecordListTooLarge.Code
	case errors.Is(err, batch.ErrInvalidTimestamp):
		return kerr.InvalidTimestamp.Code
	case errors.Is(err, batch.ErrTooLarge):
		return kerr.InvalidRecord.Code
	case errors.Is(err, batch.ErrCorrupt):
		return kerr.CorruptMessage.Code
	case errors.Is(err, batch.ErrUnsupportedMagic):
		return kerr.InvalidRecord.Code
	case errors.Is(err, batch.ErrInvalidRecord):
		return kerr.InvalidRecord.Code
	case errors.Is(err, batch.ErrUnsupportedCompression):
		return kerr.UnsupportedCompressionType.Code
	case errors.Is(err, partition.ErrOutOfOrderSequence):
		return kerr.OutOfOrderSequenceNumber.Code
	case errors.Is(err, partition.ErrInvalidProducerEpoch):
		return kerr.InvalidProducerEpoch.Code
	case errors.Is(err, partition.ErrClosed):
		return kerr.UnknownTopicOrPartition.Code
	}
	return errCode(err)
}
