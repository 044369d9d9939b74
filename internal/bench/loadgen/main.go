// Command loadgen is the load generator of the benchmark harness
// (internal/bench/harness): a process of its own that drives one Kafka
// server with raw Kafka requests and prints what it measured as lines
// "RESULT {json}" on stdout (see result), one per figure.
//
//	loadgen -target 127.0.0.1:9092 -scenario heartbeat [-server-pid PID] [sizes]
//
// It imports no groupd package: it speaks the wire through kmsg (and kgo
// for the produce scenario), so that it loads groupd, kfake and the naive
// server (internal/bench/naiveserver) alike.
//
// Every request sent in a measured window is encoded before the window
// starts (kmsg's AppendTo behind a request header with correlation id 0,
// patched in place when the frame is sent), except what no client can
// know in advance: a KIP-848 member's report of the partitions it owns
// after its assignment changed, and a heartbeat at an epoch nobody
// foresaw; cg-converge counts those (encoded_in_window). In a window the
// load generator writes the frames and reads the answers, decoding each
// with kmsg (the same for every server) to check its error code and, for
// KIP-848, the epoch and assignment: a server that answers wrongly fails
// the run rather than being measured. Each member holds a connection of
// its own with one request in flight; commits run over -conns
// connections with -inflight in flight each.
//
// With -server-pid, it reads the server's CPU time (/proc/PID/stat) at the
// start and end of each window and its resident memory (/proc/PID/status)
// at the end, and reports CPU time per operation.
//
// Scenarios:
//
//	rebalance     one group of -members members formed -rounds times: the time from the
//	              JoinGroup that completes the join phase to the last SyncGroup answer
//	heartbeat     -groups groups of -size members heartbeat back to back (Heartbeat v4)
//	commit        OffsetCommit v9 to -groups groups, -partitions partitions each,
//	              -conns connections with -inflight in flight each
//	work          "other work", measured by nothing: -commits commits over -groups
//	              groups, then a rebalance of -members members who then leave
//	cg-heartbeat  -groups KIP-848 groups of -size members, settled, heartbeat back to back
//	cg-converge   a KIP-848 group of -members members; the time from one more member's
//	              join until all have reconciled, -rounds times
//	produce       kgo produces -records records of -record-size bytes (-compression),
//	              then a second client fetches them: MB/s of each
//	hold          -groups groups of -size members heartbeat every -period for -hold:
//	              the server's resident memory, CPU share and heartbeat latencies
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"time"
)

// ioTimeout bounds what a connection does between two arms.
const ioTimeout = 5 * time.Minute

type options struct {
	target    string
	scenario  string
	serverPID int
	floor     bool // the server assigns no KIP-848 partitions (the naive floor)
	limit     time.Duration

	members, rounds     int
	groups, size        int
	beats, warm         int
	conns, inflight     int
	commits, partitions int
	records, recordSize int
	compression         string
	period, hold        time.Duration
}

// defaults are each scenario's sizes where a flag is left at 0.
var defaults = map[string]options{
	"rebalance":    {members: 1001, rounds: 5},
	"heartbeat":    {groups: 100, size: 10, beats: 100, warm: 5},
	"commit":       {groups: 1000, partitions: 10, conns: 32, inflight: 4, commits: 64000},
	"work":         {groups: 1000, partitions: 10, conns: 32, commits: 20000, members: 1001},
	"cg-heartbeat": {groups: 100, size: 10, partitions: 20, beats: 100, warm: 5},
	"cg-converge":  {members: 1000, partitions: 2000, rounds: 3},
	"produce":      {records: 400000, recordSize: 512, partitions: 8, compression: "none"},
	"hold":         {groups: 1000, size: 10, period: 3 * time.Second, hold: time.Minute},
}

var run = map[string]func(*options) error{
	"rebalance":    runRebalance,
	"heartbeat":    runHeartbeat,
	"commit":       runCommit,
	"work":         runWork,
	"cg-heartbeat": runCGHeartbeat,
	"cg-converge":  runCGConverge,
	"produce":      runProduce,
	"hold":         runHold,
}

func logf(format string, args ...any) { log.Printf(format, args...) }

func main() {
	log.SetPrefix("loadgen: ")
	log.SetFlags(0)
	var o options
	flag.StringVar(&o.target, "target", "", "HOST:PORT of the server")
	flag.StringVar(&o.scenario, "scenario", "", "what to run (see the package doc)")
	flag.IntVar(&o.serverPID, "server-pid", 0, "the server's process id, to read its CPU time and memory (0: not read)")
	flag.BoolVar(&o.floor, "floor", false, "the server assigns no KIP-848 partitions: settle groups without them")
	flag.DurationVar(&o.limit, "limit", 5*time.Minute, "longest a KIP-848 drive or the produce scenario may take")
	flag.IntVar(&o.members, "members", 0, "members of the one large group (rebalance, cg-converge, work)")
	flag.IntVar(&o.rounds, "rounds", 0, "measured rounds per run (rebalance, cg-converge)")
	flag.IntVar(&o.groups, "groups", 0, "groups")
	flag.IntVar(&o.size, "size", 0, "members per group")
	flag.IntVar(&o.beats, "beats", 0, "measured heartbeats per member")
	flag.IntVar(&o.warm, "warm", 0, "unmeasured heartbeats per member first")
	flag.IntVar(&o.conns, "conns", 0, "connections (commit, work)")
	flag.IntVar(&o.inflight, "inflight", 0, "requests in flight per connection (commit)")
	flag.IntVar(&o.commits, "commits", 0, "measured commits in all (commit, work)")
	flag.IntVar(&o.partitions, "partitions", 0, "partitions per commit, or of the topic")
	flag.IntVar(&o.records, "records", 0, "records (produce)")
	flag.IntVar(&o.recordSize, "record-size", 0, "bytes per record value (produce)")
	flag.StringVar(&o.compression, "compression", "", "none, snappy, lz4, zstd or gzip (produce)")
	flag.DurationVar(&o.period, "period", 0, "heartbeat interval (hold)")
	flag.DurationVar(&o.hold, "hold", 0, "how long members heartbeat once formed (hold)")
	flag.Parse()
	fn, ok := run[o.scenario]
	if !ok || o.target == "" {
		fmt.Fprintf(os.Stderr, "usage: loadgen -target HOST:PORT -scenario NAME (one of %v)\n", scenarioNames())
		os.Exit(2)
	}
	o.fillDefaults()
	if err := fn(&o); err != nil {
		log.Fatalf("%s against %s: %v", o.scenario, o.target, err)
	}
}

func scenarioNames() []string {
	return []string{"rebalance", "heartbeat", "commit", "work", "cg-heartbeat", "cg-converge", "produce", "hold"}
}

// fillDefaults sets every size left at 0 to the scenario's default.
func (o *options) fillDefaults() {
	d := defaults[o.scenario]
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&o.members, d.members)
	setInt(&o.rounds, d.rounds)
	setInt(&o.groups, d.groups)
	setInt(&o.size, d.size)
	setInt(&o.beats, d.beats)
	setInt(&o.warm, d.warm)
	setInt(&o.conns, d.conns)
	setInt(&o.inflight, d.inflight)
	setInt(&o.commits, d.commits)
	setInt(&o.partitions, d.partitions)
	setInt(&o.records, d.records)
	setInt(&o.recordSize, d.recordSize)
	if o.compression == "" {
		o.compression = d.compression
	}
	if o.period == 0 {
		o.period = d.period
	}
	if o.hold == 0 {
		o.hold = d.hold
	}
}
