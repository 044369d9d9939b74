package api

import (
	"context"
	"net"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/server"
)

// Coordinator serves the group APIs (internal/coordinator).
type Coordinator interface {
	Handle(ctx context.Context, clientID, clientHost string, req kmsg.Request) (kmsg.Response, error)
}

// coordinate hands a group request to the coordinator. It may wait for as
// long as a rebalance takes: a JoinGroup is answered when the join phase
// completes, a follower's SyncGroup when the leader's arrives.
func (h *Handler) coordinate(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	host := ""
	if tcp, ok := r.Remote.(*net.TCPAddr); ok {
		host = "/" + tcp.IP.String()
	}
	return h.coord.Handle(ctx, r.Header.ClientID, host, r.Msg)
}
