package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/server"
)

// DescribeCluster (KIP-700): v1 adds the endpoint type, v2 fenced brokers.
func init() { register(kmsg.DescribeCluster, 0, 2, (*Handler).describeCluster) }

// endpointTypeBroker is DescribeCluster's endpoint type of a broker's
// listener, as opposed to a KRaft controller's (2).
const endpointTypeBroker = 1

// describeCluster names this node as the cluster's only broker and, as a
// Kafka broker does for the clients it serves, as its controller.
func (h *Handler) describeCluster(_ context.Context, r *server.Request) (kmsg.Response, error) {
	req := r.Msg.(*kmsg.DescribeClusterRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.EndpointType = endpointTypeBroker
	if req.Version >= 1 && req.EndpointType != endpointTypeBroker {
		resp.ErrorCode = kerr.MismatchedEndpointType.Code
		resp.ErrorMessage = strp("the request was sent to a broker endpoint, not a controller's")
		return resp, nil
	}
	if h.cl != nil {
		h.cl.describeCluster(resp)
		resp.ClusterAuthorizedOperations = authorizedOpsOmitted
		return resp, nil
	}
	resp.ClusterID = h.b.ClusterID()
	resp.ControllerID = h.b.NodeID()
	b := kmsg.NewDescribeClusterResponseBroker()
	b.NodeID, b.Host, b.Port = h.b.NodeID(), h.host, h.port
	resp.Brokers = append(resp.Brokers, b)
	resp.ClusterAuthorizedOperations = authorizedOpsOmitted
	return resp, nil
}
