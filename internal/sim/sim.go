package sim

import (
	"container/heap"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/group/consumer"
)

// Options configures one simulated run.
type Options struct {
	// Seed fixes the whole run.
	Seed uint64
	// Bugs deliberately breaks the runtime contract (test-only).
	Bugs Bugs
	// KeepTrace keeps every trace line in Result.Trace, for replays.
	KeepTrace bool
	// Runtime runs the real coordinator runtime over the real pebble
	// store on a fault-injecting in-memory filesystem (runtime.go)
	// instead of the model of it (coord.go).
	Runtime bool
	// Mix selects the group types: classic only (the zero value), both,
	// or consumer (KIP-848) groups only.
	Mix Mix
}

// Bugs are harness switches that break the coordinator runtime (never
// internal/group itself) so tests can show the checkers notice. All false is
// the correct runtime.
type Bugs struct {
	// ReplyBeforeApply releases replies before their records are durable.
	ReplyBeforeApply bool
	// DropOffsetRecords leaves offset-commit records out of store writes
	// while still acknowledging them.
	DropOffsetRecords bool
	// DropGroupRecords leaves group-metadata records out of store writes.
	DropGroupRecords bool
	// ServeStaleSync answers a stale or unknown member's SyncGroup with the
	// last assignment that member id received instead of the error.
	ServeStaleSync bool
	// EagerInCooperative makes cooperative leaders run the eager sticky
	// assignor under the cooperative-sticky name (a client-side bug the
	// cooperative checker must see).
	EagerInCooperative bool
	// LoseSessionTimers drops every session (heartbeat) deadline firing.
	LoseSessionTimers bool
	// AckFailedWrite releases the held replies as successes when a store
	// write fails, and keeps the machine instead of rebuilding it.
	AckFailedWrite bool
	// ConsumerKeepRevoked makes consumer-protocol clients go on consuming
	// the partitions they acknowledge giving up (a client bug the
	// ownership checker must see).
	ConsumerKeepRevoked bool
	// ConsumerReplyBeforeApply releases ConsumerGroupHeartbeat replies
	// before their records are durable (ReplyBeforeApply for consumer
	// groups alone).
	ConsumerReplyBeforeApply bool
	// DropConsumerRecords leaves consumer-group records out of store
	// writes while still acknowledging them.
	DropConsumerRecords bool
	// ClassicKeepRevoked makes classic clients of migrating groups go on
	// consuming the partitions they revoke (a client bug the ownership
	// checker must see).
	ClassicKeepRevoked bool
	// DropConvertedGroupRecords leaves a migrating group's records (but
	// not its offsets) out of store writes from its first conversion on,
	// so the store keeps the old type.
	DropConvertedGroupRecords bool
}

// Failure is a checker violation (or a panic) in one run.
type Failure struct {
	Seed    uint64
	Runtime bool // the run was in Options.Runtime mode
	Mix     Mix
	Check   string
	Msg     string
	At      time.Duration // virtual time since the start
	Tail    []string      // the last trace lines
}

// ReplayCommand is the command that replays a seed.
func ReplayCommand(seed uint64, runtime bool, mix Mix) string {
	test := "TestSim"
	if runtime {
		test = "TestSimRuntime"
	}
	return fmt.Sprintf("go test ./internal/sim -run '%s$' -seed=%d -mix=%s -v", test, seed, mix)
}

func (f *Failure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: checker %q failed at %v: %s\n", f.Seed, f.Check, f.At, f.Msg)
	fmt.Fprintf(&b, "last %d events:\n", len(f.Tail))
	for _, l := range f.Tail {
		b.WriteString("  ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "replay: %s", ReplayCommand(f.Seed, f.Runtime, f.Mix))
	return b.String()
}

// Stats counts faults injected, checks run and other events. Keys are
// "fault.*", "check.*" and "run.*".
type Stats map[string]int64

// Add merges o into s.
func (s Stats) Add(o Stats) {
	for k, v := range o {
		s[k] += v
	}
}

// String prints the counters sorted by name, one per line.
func (s Stats) String() string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%-40s %d\n", k, s[k])
	}
	return b.String()
}

// consumerTotals sums the counters of consumer-group events (requests,
// faults and other run events) and of consumer-group checks.
func (s Stats) consumerTotals() (events, checks int64) {
	for k, v := range s {
		if !strings.Contains(k, "consumer") {
			continue
		}
		if strings.HasPrefix(k, "check.") {
			checks += v
		} else {
			events += v
		}
	}
	return events, checks
}

// Result is the outcome of one run.
type Result struct {
	Seed      uint64
	Failure   *Failure
	TraceHash uint64
	Events    int
	Virtual   time.Duration
	Stats     Stats
	Trace     []string // only with Options.KeepTrace
}

// start is the virtual epoch; nothing reads the wall clock.
var start = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

const tailLen = 30

// maxEvents stops a run whose event count explodes (a livelock in the
// simulated clients or the machine) instead of hanging the batch.
const maxEvents = 2_000_000

type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// world is one run: clock, queue, randomness, coordinator, clients and
// checkers. Everything happens on the goroutine that calls Run.
type world struct {
	opts Options
	rng  *rand.Rand
	now  time.Time
	q    eventHeap
	seq  uint64

	reqSeq uint64
	readID group.RequestID // ids of the checkers' read-only requests

	p  params
	cp cparams
	// topicIDs names the broker's topics by id (consumer groups').
	topicIDs map[consumer.TopicID]string
	groups   []*groupSpec
	procs    []*process
	coord    backend
	chk      *checker
	stats    Stats

	quiet    bool
	quietAt  time.Time
	deadline time.Time
	done     bool
	failure  *Failure
	events   int

	// dropped are the migrating groups whose records
	// Bugs.DropConvertedGroupRecords leaves out of store writes.
	dropped map[string]bool

	hash  uint64
	tail  [tailLen]string
	ntail int
	trace []string
}

// Run simulates one seed.
func Run(opts Options) (res Result) {
	w := &world{
		opts:  opts,
		rng:   rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		now:   start,
		stats: Stats{},
		hash:  fnv.New64a().Sum64(),
	}
	defer func() {
		if r := recover(); r != nil {
			w.fail("panic", fmt.Sprintf("%v\n%s", r, debug.Stack()))
		}
		if w.coord != nil {
			w.coord.close()
		}
		res = Result{
			Seed:      opts.Seed,
			Failure:   w.failure,
			TraceHash: w.hash,
			Events:    w.events,
			Virtual:   w.now.Sub(start),
			Stats:     w.stats,
			Trace:     w.trace,
		}
	}()
	w.setup()
	w.loop()
	return
}

func (w *world) loop() {
	for w.q.Len() > 0 && w.failure == nil && !w.done {
		e := heap.Pop(&w.q).(*event)
		w.now = e.at
		w.events++
		if w.events > maxEvents {
			w.fail("runaway", fmt.Sprintf("more than %d events", maxEvents))
			return
		}
		e.fn()
	}
	if w.failure == nil && !w.done {
		w.fail("liveness", "event queue ran dry before the groups converged")
	}
}

// at schedules fn at t (never before now).
func (w *world) at(t time.Time, fn func()) {
	if t.Before(w.now) {
		t = w.now
	}
	w.seq++
	heap.Push(&w.q, &event{at: t, seq: w.seq, fn: fn})
}

func (w *world) after(d time.Duration, fn func()) { w.at(w.now.Add(d), fn) }

// logf adds a line to the trace: it feeds the trace hash and the tail
// printed on failure.
func (w *world) logf(format string, args ...any) {
	line := fmt.Sprintf("%9.3fs ", w.now.Sub(start).Seconds()) + fmt.Sprintf(format, args...)
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(w.hash >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(line))
	w.hash = h.Sum64()
	w.tail[w.ntail%tailLen] = line
	w.ntail++
	if w.opts.KeepTrace {
		w.trace = append(w.trace, line)
	}
}

func (w *world) count(k string) { w.stats[k]++ }

// fail records the first violation and stops the run.
func (w *world) fail(check, msg string) {
	if w.failure != nil {
		return
	}
	w.logf("FAIL %s: %s", check, firstLine(msg))
	n := min(w.ntail, tailLen)
	tail := make([]string, 0, n)
	for i := w.ntail - n; i < w.ntail; i++ {
		tail = append(tail, w.tail[i%tailLen])
	}
	w.failure = &Failure{Seed: w.opts.Seed, Runtime: w.opts.Runtime, Mix: w.opts.Mix, Check: check, Msg: msg, At: w.now.Sub(start), Tail: tail}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Random helpers; every draw comes from the run's one PCG stream.

func (w *world) chance(p float64) bool { return p > 0 && w.rng.Float64() < p }

func (w *world) intn(n int) int { return w.rng.IntN(n) }

// between returns a duration in [lo, hi], in whole milliseconds so traces
// stay readable.
func (w *world) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	ms := (hi - lo).Milliseconds()
	return lo + time.Duration(w.rng.Int64N(ms+1))*time.Millisecond
}

func pick[T any](w *world, xs []T) T { return xs[w.intn(len(xs))] }
