package e2e

import (
	"flag"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/partition"
)

// The cost of the HTTP side. The group benchmarks also run a second
// groupd with the HTTP side on (--http-listen: Prometheus metrics recorded
// on every request, connection, rebalance and store write; the admin API
// and the status page served), in the same run and interleaved with the
// plain one, and report its time over the plain groupd's:
//
//	go test ./internal/e2e -run '^$' -bench 'Rebalance|Heartbeats|Commits' -count 5
//
// http-cost is that ratio (1.03: the HTTP side costs 3%). Nothing scrapes
// during the measured windows: a scrape reads the groups once, at
// Prometheus's interval, and is not on the request path.
// -args -http-side=false leaves the second groupd out.
var benchHTTPSide = flag.Bool("http-side", true, "also benchmark groupd with its HTTP side (metrics) on, and report the cost")

// httpSideName names the groupd with the HTTP side on among the targets.
const httpSideName = "groupd+http"

// httpSideTarget starts, if -http-side is set, a groupd like the one
// groupBenchTargets starts but with its HTTP side on; it returns a nil App
// otherwise.
func httpSideTarget(b *testing.B, sync partition.SyncPolicy) (benchTarget, *app.App) {
	b.Helper()
	if !*benchHTTPSide || *benchFloor != "" {
		return benchTarget{}, nil
	}
	a := startServer(b, b.TempDir(), func(c *app.Config) {
		c.Log.Sync = sync
		c.Group.InitialRebalanceDelay = -1
		c.HTTPListen = "127.0.0.1:0"
	})
	createTopic(b, a.Addr(), benchGroupTop, commitParts)
	return benchTarget{httpSideName, a.Addr()}, a
}

// reportHTTPCost reports the time the groupd with the HTTP side took over
// the plain groupd's time for the same work, when both ran.
func reportHTTPCost(b *testing.B, elapsed map[string]time.Duration) {
	with, plain := elapsed[httpSideName], elapsed["groupd"]
	if with == 0 || plain == 0 {
		return
	}
	b.ReportMetric(with.Seconds()/plain.Seconds(), "http-cost")
}
