package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/server"
)

func init() { register(kmsg.FindCoordinator, 0, 6, (*Handler).findCoordinator) }

// Coordinator key types.
const (
	keyTypeGroup       = 0
	keyTypeTransaction = 1
)

// findCoordinator names the node that coordinates each group: this one
// on a single node, the leader of the group's partition of
// __consumer_offsets in a cluster. There is no transaction coordinator.
func (h *Handler) findCoordinator(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	answer := func(key string) (nodeID int32, host string, port int32, code int16, msg *string) {
		switch req.CoordinatorType {
		case keyTypeGroup:
			if h.cl != nil {
				h.ensureClusterOffsetsTopic(ctx)
				n, err := h.cl.groupCoordinator(key)
				if err != nil {
					return -1, "", -1, errCode(err), errMessage(err)
				}
				return n.ID, n.Host, n.Port, 0, nil
			}
			h.ensureOffsetsTopic()
			return h.b.NodeID(), h.host, h.port, 0, nil
		case keyTypeTransaction:
			return -1, "", -1, kerr.CoordinatorNotAvailable.Code, strp("transactions are not served")
		default:
			return -1, "", -1, kerr.InvalidRequest.Code, strp("unsupported coordinator key type")
		}
	}
	if req.Version < 4 {
		resp.NodeID, resp.Host, resp.Port, resp.ErrorCode, resp.ErrorMessage = answer(req.CoordinatorKey)
		return resp, nil
	}
	for _, key := range req.CoordinatorKeys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key = key
		c.NodeID, c.Host, c.Port, c.ErrorCode, c.ErrorMessage = answer(key)
		resp.Coordinators = append(resp.Coordinators, c)
	}
	return resp, nil
}
