package api

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/coordinator"
	"github.com/groupd/groupd/internal/server"
)

// Coordinator serves the group APIs (internal/coordinator).
type Coordinator interface {
	Start(ctx context.Context, clientID, clientHost string, req kmsg.Request, p *coordinator.Pending)
	// DeleteTopicOffsets removes deleted topics' committed offsets from
	// every group, durably.
	DeleteTopicOffsets(ctx context.Context, topics []string) error
}

// coordinate hands a group request to the coordinator in request order and
// answers with a reply the server writes once the coordinator has released
// it. That may take as long as a rebalance: a JoinGroup is answered when
// the join phase completes, a follower's SyncGroup when the leader's
// arrives, a commit when it is durable. Meanwhile the connection's next
// requests are already handled, so pipelined commits share a write.
func (h *Handler) coordinate(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	return h.coordinateThen(ctx, r, nil), nil
}

// coordinateThen is coordinate with a step that adapts the coordinator's
// response before it is written.
func (h *Handler) coordinateThen(ctx context.Context, r *server.Request, then func(kmsg.Response) kmsg.Response) *later {
	if h.cl != nil {
		h.ensureClusterOffsetsTopic(ctx)
	} else {
		h.ensureOffsetsTopic()
	}
	l := laters.Get().(*later)
	l.brief, l.ctx, l.then = !parks(r.Msg), ctx, then
	h.coord.Start(ctx, r.Header.ClientID, r.ClientHost(), r.Msg, &l.pending)
	return l
}

// laters recycles the replies of group requests once they are written
// (Recycle): every heartbeat and commit has one.
var laters = sync.Pool{New: func() any { return new(later) }}

// parks reports whether the coordinator may hold a request until other
// members act: a JoinGroup until the join phase completes, a SyncGroup
// until the leader's arrives. Every other reply waits only for its
// records to be durable.
func parks(req kmsg.Request) bool {
	switch req.(type) {
	case *kmsg.JoinGroupRequest, *kmsg.SyncGroupRequest:
		return true
	}
	return false
}

// later is a response known only after Wait (server.Waiter).
type later struct {
	kmsg.Response
	brief   bool
	ctx     context.Context
	pending coordinator.Pending
	then    func(kmsg.Response) kmsg.Response
	// answered is set once Wait has the coordinator's reply: the shard
	// no longer holds the request, and l may be recycled once written.
	answered bool
}

// Brief implements server.Brief.
func (l *later) Brief() bool { return l.brief }

// OnDone implements server.Completer for a reply the coordinator releases
// as it is, brief or parked: fn runs on the coordinator's goroutine that
// releases it (coordinator.Pending.OnDone), which then writes it. A reply
// that is adapted first (then) is left to the connection's own goroutine.
func (l *later) OnDone(fn func()) bool {
	if l.then != nil {
		return false
	}
	return l.pending.OnDone(fn)
}

func (l *later) Wait() error {
	resp, err := l.pending.Wait(l.ctx)
	if err == nil && l.then != nil {
		resp = l.then(resp)
	}
	l.Response, l.answered = resp, err == nil
	return err
}

// Recycle implements server.Recycler: the reply has been encoded. A
// later whose wait ended without the coordinator's reply is left to the
// garbage collector, since the shard may still deliver to it.
func (l *later) Recycle() {
	if !l.answered {
		return
	}
	*l = later{}
	laters.Put(l)
}

// ensureOffsetsTopic makes __consumer_offsets appear in Metadata once the
// coordinator serves a group, as in Kafka. A failure only delays it.
func (h *Handler) ensureOffsetsTopic() {
	if _, ok := h.b.OffsetsTopic(); ok {
		return
	}
	if _, err := h.b.EnsureOffsetsTopic(); err != nil {
		h.log.Warn("creating the internal topic", "topic", "__consumer_offsets", "err", err)
	}
}
