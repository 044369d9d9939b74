// Package admin is groupd's HTTP side: Prometheus metrics at /metrics, a
// read-only JSON API under /api/v1, and a status page at / whose assets
// are compiled into the binary, so it works with no network beyond the
// operator's connection to groupd.
//
// Everything here reads through an inspect.Source and never touches group
// state. Without a Source, or while the Source reports
// inspect.ErrUnavailable, the API answers 503 with Retry-After and the
// page says so. In cluster mode a ClusterSource adds the cluster's nodes
// and partitions under /api/v1/cluster and a Cluster tab to the page.
package admin

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sort"
	"time"

	"github.com/groupd/groupd/internal/inspect"
)

// DefaultReadTimeout bounds one API request's read from the Source.
const DefaultReadTimeout = 10 * time.Second

//go:embed ui
var uiFiles embed.FS

// Config configures the HTTP side.
type Config struct {
	// Source is what the API and the page read; nil answers 503.
	Source inspect.Source
	// Metrics serves /metrics; nil leaves /metrics unserved.
	Metrics http.Handler
	// ReadTimeout bounds each read from Source; 0 means
	// DefaultReadTimeout.
	ReadTimeout time.Duration
	Logger      *slog.Logger
	// Cluster is this node's picture of its cluster; nil in single-node
	// mode, where /api/v1/cluster answers 404 and the page shows no
	// Cluster tab.
	Cluster ClusterSource
	// Profiling serves Go's runtime profiles under /debug/pprof/ (CPU,
	// heap, goroutines, ...), for an operator who needs to see where the
	// time goes. Off by default: a profile shows the process's insides.
	Profiling bool
}

// ClusterSource is a node's picture of its cluster (its view of etcd).
type ClusterSource interface {
	// Cluster returns the cluster as of one revision: its nodes and
	// counts, and every partition sorted by topic and partition.
	Cluster() (inspect.Cluster, []inspect.ClusterPartition)
}

// contentSecurityPolicy keeps the page to its own origin: it loads
// nothing and talks to nothing but groupd itself.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler returns the HTTP handler for every route.
func Handler(cfg Config) http.Handler {
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &api{cfg: cfg}
	mux := http.NewServeMux()
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
	}
	if cfg.Profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	// Group ids may hold any character. The mux matches escaped path
	// segments and unescapes the {group} wildcard, so "a/b" arrives as
	// a%2Fb. Browsers (and curl) rewrite "." and ".." segments, escaped
	// or not, the mux takes a segment of just %2F for a trailing slash,
	// and a path cannot carry an empty segment, so the same reads also
	// take the id as a query parameter.
	mux.HandleFunc("/api/v1/groups", a.get(noID, a.groups))
	mux.HandleFunc("/api/v1/groups/{group}", a.get(pathID, a.group))
	mux.HandleFunc("/api/v1/groups/{group}/rebalances", a.get(pathID, a.rebalances))
	mux.HandleFunc("/api/v1/group", a.get(queryID, a.group))
	mux.HandleFunc("/api/v1/group/rebalances", a.get(queryID, a.rebalances))
	mux.HandleFunc("/api/v1/cluster", a.clusterGet(a.cluster))
	mux.HandleFunc("/api/v1/cluster/partitions", a.clusterGet(a.clusterPartitions))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no API endpoint %s", r.URL.Path))
	})

	static, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(static)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		page(w)
		http.ServeFileFS(w, r, static, "index.html")
	})
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page(w)
		files.ServeHTTP(w, r)
	})))
	return mux
}

// page sets the headers of the status page and its assets. The assets
// change only with the binary, but an upgrade should show at once, so
// browsers revalidate.
func page(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

type api struct{ cfg Config }

// readOnly answers a method other than GET and HEAD with 405 and says
// whether it did.
func readOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return false
	}
	w.Header().Set("Allow", "GET, HEAD")
	writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s not allowed; the admin API is read-only", r.Method))
	return true
}

// get wraps an API handler: GET and HEAD only, a Source present, the
// group id taken from the request, a deadline on the read, and the result
// or the error written as JSON.
func (a *api) get(idOf func(*http.Request) (string, error), fn func(ctx context.Context, id string) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if readOnly(w, r) {
			return
		}
		id, err := idOf(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if a.cfg.Source == nil {
			unavailable(w)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), a.cfg.ReadTimeout)
		defer cancel()
		v, err := fn(ctx, id)
		var nf notFound
		switch {
		case errors.As(err, &nf):
			writeError(w, http.StatusNotFound, nf.Error())
		case errors.Is(err, inspect.ErrUnavailable):
			unavailable(w)
		case errors.Is(err, context.DeadlineExceeded):
			a.cfg.Logger.Warn("admin API read timed out", "path", r.URL.Path, "timeout", a.cfg.ReadTimeout)
			writeError(w, http.StatusGatewayTimeout, "timed out reading from the group coordinator")
		case err != nil:
			a.cfg.Logger.Warn("admin API read failed", "path", r.URL.Path, "err", err)
			writeError(w, http.StatusInternalServerError, err.Error())
		default:
			writeJSON(w, r, http.StatusOK, v)
		}
	}
}

func noID(*http.Request) (string, error) { return "", nil }

func pathID(r *http.Request) (string, error) { return r.PathValue("group"), nil }

func queryID(r *http.Request) (string, error) {
	q := r.URL.Query()
	if !q.Has("id") {
		return "", errors.New("missing the id parameter: the group id")
	}
	return q.Get("id"), nil
}

type notFound struct{ group string }

func (e notFound) Error() string { return fmt.Sprintf("group %q not found", e.group) }

func (a *api) groups(ctx context.Context, _ string) (any, error) {
	gs, err := a.cfg.Source.Groups(ctx)
	if err != nil {
		return nil, err
	}
	gs = append([]inspect.GroupSummary{}, gs...)
	sort.SliceStable(gs, func(i, j int) bool { return gs[i].Group < gs[j].Group })
	return gs, nil
}

func (a *api) group(ctx context.Context, id string) (any, error) {
	g, ok, err := a.cfg.Source.Group(ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound{id}
	}
	fillGroup(&g)
	return g, nil
}

func (a *api) rebalances(ctx context.Context, id string) (any, error) {
	rs, ok, err := a.cfg.Source.Rebalances(ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound{id}
	}
	if rs == nil {
		rs = []inspect.Rebalance{}
	}
	for i := range rs {
		fillRebalance(&rs[i])
	}
	return rs, nil
}

// NotInCluster is the error of the cluster reads in single-node mode.
const NotInCluster = "not in cluster mode: this groupd is a single node (it joins a cluster with --etcd-endpoints)"

// clusterGet wraps a cluster read: GET and HEAD only, and, in
// single-node mode, 404 with NotInCluster. A single node could answer
// with a one-node picture instead, but a script asking whether it talks
// to a cluster, and the page deciding whether to show its Cluster tab,
// are better told plainly; Metadata still describes the single node.
// The reads come from the node's own view, which is never out of reach,
// so there is no deadline and no 503.
func (a *api) clusterGet(fn func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if readOnly(w, r) {
			return
		}
		if a.cfg.Cluster == nil {
			writeError(w, http.StatusNotFound, NotInCluster)
			return
		}
		v, err := fn(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, r, http.StatusOK, v)
	}
}

// cluster is GET /api/v1/cluster: the cluster id, the controller, the
// live nodes (this one and the controller marked) and the partition
// counts.
func (a *api) cluster(*http.Request) (any, error) {
	c, _ := a.cfg.Cluster.Cluster()
	c.Nodes = orEmpty(c.Nodes)
	return c, nil
}

// clusterPartitions is GET /api/v1/cluster/partitions[?topic=NAME]: each
// partition's leader, leader epoch, replicas, ISR and flags, by topic and
// partition; with ?topic= only that topic's (an empty list for a topic
// the cluster does not have). ?under_replicated and ?offline keep only
// the partitions with that flag (both: with either).
func (a *api) clusterPartitions(r *http.Request) (any, error) {
	q := r.URL.Query()
	if q.Has("topic") && q.Get("topic") == "" {
		return nil, errors.New("the topic parameter is empty: give a topic name, or leave it out for every topic")
	}
	under, offline := q.Has("under_replicated"), q.Has("offline")
	_, ps := a.cfg.Cluster.Cluster()
	out := []inspect.ClusterPartition{}
	for _, p := range ps {
		if q.Has("topic") && p.Topic != q.Get("topic") {
			continue
		}
		if (under || offline) && !(under && p.UnderReplicated || offline && p.Offline) {
			continue
		}
		p.Replicas, p.ISR, p.OfflineReplicas = orEmpty(p.Replicas), orEmpty(p.ISR), orEmpty(p.OfflineReplicas)
		out = append(out, p)
	}
	return out, nil
}

// retryAfterSeconds is what a 503 asks a client to wait: the coordinator
// loads its groups within seconds of a start.
const retryAfterSeconds = "2"

// unavailable answers a read the Source cannot serve yet (the
// coordinator is loading its groups, or shutting down): 503, and when to
// try again.
func unavailable(w http.ResponseWriter) {
	w.Header().Set("Retry-After", retryAfterSeconds)
	writeError(w, http.StatusServiceUnavailable,
		"the group coordinator is not available: it is loading its groups after a start, or shutting down; retry in "+retryAfterSeconds+" s")
}

// errorBody is every API error.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, nil, status, errorBody{Error: msg})
}

// writeJSON writes v compactly, or indented when the request asks with
// ?pretty.
func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	if r != nil && r.Method == http.MethodHead {
		return
	}
	enc := json.NewEncoder(w)
	if r != nil && r.URL.Query().Has("pretty") {
		enc.SetIndent("", "  ")
	}
	// The header is out; a failed write means the client went away.
	_ = enc.Encode(v)
}

// The fill functions turn nil lists into empty ones, so that every list
// field is a JSON array and scripts need not test for null.

func fillGroup(g *inspect.Group) {
	g.Members = orEmpty(g.Members)
	g.Offsets = orEmpty(g.Offsets)
	for i := range g.Members {
		m := &g.Members[i]
		m.Assignment = orEmpty(m.Assignment)
		for j := range m.Assignment {
			m.Assignment[j].Partitions = orEmpty(m.Assignment[j].Partitions)
		}
	}
}

func fillRebalance(r *inspect.Rebalance) {
	r.MembersIn = orEmpty(r.MembersIn)
	r.MembersOut = orEmpty(r.MembersOut)
	r.WaitedFor = orEmpty(r.WaitedFor)
	r.Moved = orEmpty(r.Moved)
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Server is the HTTP listener serving Handler.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// Listen binds addr and serves Handler(cfg) on it until Shutdown.
func Listen(addr string, cfg Config) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{
		srv: &http.Server{
			Handler:           Handler(cfg),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
		ln:   ln,
		done: make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the listener is bound to.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops accepting and waits (until ctx ends) for requests in
// flight to finish.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
