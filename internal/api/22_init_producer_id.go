package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.InitProducerID, 0, 5, (*Handler).initProducerID) }

func (h *Handler) initProducerID(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		// Transactions are not served (no transaction coordinator).
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil
	}
	// As in Kafka, an idempotent producer without a transactional id gets
	// a fresh id at epoch 0 each time, also when it asks to bump an epoch.
	id, err := int64(0), error(nil)
	if h.cl != nil {
		id, err = h.clusterProducerID(ctx)
	} else {
		id, err = h.b.NextProducerID()
	}
	if err != nil {
		h.log.Error("allocating a producer id", "err", err)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp, nil
}
