// Package api turns Kafka requests into calls on the broker and answers
// with Kafka responses. One file per API key registers the versions it
// serves beside its handler; that single table feeds ApiVersions and the
// server's version check, so nothing is advertised that is not handled.
package api

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/fetchsession"
	"github.com/groupd/groupd/internal/server"
)

// Handler serves the API keys in the version table.
type Handler struct {
	b     *broker.Broker
	coord Coordinator
	log   *slog.Logger
	// advertised is the host and port Metadata gives clients.
	host string
	port int32
	// fetchMaxBytes caps the record data of one fetch reply.
	fetchMaxBytes int32
	// sessions holds the incremental fetch sessions; sessionSlots is its
	// size as configured (see FetchSessionCacheSlots).
	sessions     *fetchsession.Cache
	sessionSlots int
	// cl is cluster mode's side (cluster.go); nil on a single node.
	cl *clusterMode
}

// DefaultFetchMaxBytes is Kafka's fetch.max.bytes.
const DefaultFetchMaxBytes = 55 << 20

// Option configures a Handler.
type Option func(*Handler)

// FetchMaxBytes caps the record data of one fetch reply, whatever the
// request asks for (Kafka's fetch.max.bytes); a first batch larger than
// that is still returned whole so that a consumer can progress. n <= 0
// keeps DefaultFetchMaxBytes.
func FetchMaxBytes(n int32) Option {
	return func(h *Handler) {
		if n > 0 {
			h.fetchMaxBytes = n
		}
	}
}

// New returns a Handler over the broker b and the group coordinator c that
// advertises host:port in Metadata and FindCoordinator.
func New(b *broker.Broker, c Coordinator, host string, port int32, log *slog.Logger, opts ...Option) *Handler {
	if log == nil {
		log = slog.Default()
	}
	h := &Handler{b: b, coord: c, log: log, host: host, port: port, fetchMaxBytes: DefaultFetchMaxBytes}
	for _, o := range opts {
		o(h)
	}
	h.sessions = fetchsession.New(fetchsession.Config{MaxSessions: h.sessionSlots})
	return h
}

type handlerFunc func(h *Handler, ctx context.Context, r *server.Request) (kmsg.Response, error)

// VersionRange is the range of versions served for one API key.
type VersionRange struct {
	Key      int16
	Min, Max int16
}

type entry struct {
	VersionRange
	fn handlerFunc
}

var table = map[int16]entry{}

// register is called from each API file's init: its version range sits
// beside its handler.
func register(key kmsg.Key, min, max int16, fn handlerFunc) {
	k := int16(key)
	if _, dup := table[k]; dup {
		panic(fmt.Sprintf("api key %d registered twice", k))
	}
	if req := kmsg.RequestForKey(k); req == nil || max > req.MaxVersion() || min < 0 || min > max {
		panic(fmt.Sprintf("api key %d: bad version range %d..%d", k, min, max))
	}
	table[k] = entry{VersionRange{k, min, max}, fn}
}

// Versions returns the supported version table sorted by key.
func Versions() []VersionRange {
	vs := make([]VersionRange, 0, len(table))
	for _, e := range table {
		vs = append(vs, e.VersionRange)
	}
	slices.SortFunc(vs, func(a, b VersionRange) int { return int(a.Key) - int(b.Key) })
	return vs
}

// Supports reports whether key and version are in the table.
func (h *Handler) Supports(key, version int16) bool {
	e, ok := table[key]
	return ok && version >= e.Min && version <= e.Max
}

// Handle dispatches one request to its API's handler.
func (h *Handler) Handle(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	e, ok := table[r.Header.Key]
	if !ok {
		return nil, fmt.Errorf("unsupported api key %d", r.Header.Key)
	}
	injectFault(r)
	return e.fn(h, ctx, r)
}
