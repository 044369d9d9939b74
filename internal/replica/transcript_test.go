package replica

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestTranscripts drives one machine from testdata/*. Rewrite expectations
// with `go test ./internal/replica -run TestTranscripts -rewrite`, then
// read the diff: the files are the review of the protocol.
//
// Commands (times are offsets from the start, e.g. at=5ms, deadline=30s):
//
//	new node=1 [leo= hw= start= lag= margin= backoff= epochs=E:S,...]
//	state [leader= epoch= isr= replicas= rev= min-isr= regs=] [at=]   (unset: as before)
//	lease deadline= [at=]
//	tick at=
//	append leo= [at=]
//	log-start offset=
//	follower-fetch node= epoch= offset= [log-start=] [at=]
//	produce id= end= [deadline=] [acks=1] [at=]
//	isr-result ok rev= | isr-result fail [leader= epoch= isr= replicas= rev= min-isr=]
//	epoch-answer epoch= end= [err=] [leader-epoch=] [at=]
//	truncated [leo=] [at=]
//	fetched leo= hw= [epochs=E:S,...] [leader-epoch=] [at=]
//	fetch-error err= [log-start=] [leader-epoch=] [at=]   (log-start: the leader's, given with the error)
//	check-append [acks=1] [at=] | client-hw [at=] | check-epoch epoch= [at=] | status | epochs
//	low-watermark [at=]
//	followers   (a leader's followers: LEO, lag, ISR, last caught up)
//	awaits-fetch [leader-epoch=] offset=
//
// Each step prints the effects, one a line, then "= " and a summary of the
// machine. The test keeps a small model of the local log (its start, LEO
// and leader-epoch cache) and applies StartEpoch, Truncate and
// TruncateFully to it as the runtime would.
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

var t0 = time.UnixMilli(1_700_000_000_000)

func since(t time.Time) string { return t.Sub(t0).String() }

// testLog is the test's model of the local log: the LEO and the
// leader-epoch cache, which the machine reads through EpochCache.
type testLog struct {
	start  int64
	leo    int64
	epochs []epochEntry // ascending
}

type epochEntry struct {
	epoch int32
	start int64
}

func (l *testLog) Latest() (int32, bool) {
	if len(l.epochs) == 0 {
		return 0, false
	}
	return l.epochs[len(l.epochs)-1].epoch, true
}

func (l *testLog) EndOffsetFor(epoch int32) (int32, int64, bool) {
	for i := len(l.epochs) - 1; i >= 0; i-- {
		if l.epochs[i].epoch <= epoch {
			end := l.leo
			if i+1 < len(l.epochs) {
				end = l.epochs[i+1].start
			}
			return l.epochs[i].epoch, end, true
		}
	}
	return 0, 0, false
}

// assign records that epoch starts at start, as Kafka's
// LeaderEpochFileCache.assign: entries at or after it are replaced.
func (l *testLog) assign(epoch int32, start int64) {
	if n := len(l.epochs); n > 0 && l.epochs[n-1].epoch >= epoch {
		return
	}
	kept := l.epochs[:0]
	for _, e := range l.epochs {
		if e.start < start {
			kept = append(kept, e)
		}
	}
	l.epochs = append(kept, epochEntry{epoch, start})
}

func (l *testLog) truncate(to int64) {
	l.leo = min(l.leo, to)
	kept := l.epochs[:0]
	for _, e := range l.epochs {
		if e.start < to {
			kept = append(kept, e)
		}
	}
	l.epochs = kept
}

// truncateFully empties the log and restarts it at offset.
func (l *testLog) truncateFully(offset int64) {
	l.start, l.leo, l.epochs = offset, offset, nil
}

func (l *testLog) String() string {
	var b strings.Builder
	if l.start != 0 {
		fmt.Fprintf(&b, "start=%d ", l.start)
	}
	fmt.Fprintf(&b, "leo=%d epochs=", l.leo)
	for i, e := range l.epochs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d", e.epoch, e.start)
	}
	return b.String()
}

type harness struct {
	m     *Machine
	log   *testLog
	now   time.Time
	ids   map[string]RequestID
	names map[RequestID]string
}

type args map[string][]string

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	a := args{}
	for _, arg := range d.CmdArgs {
		a[arg.Key] = arg.Vals
	}
	has := func(k string) bool { _, ok := a[k]; return ok }
	str := func(k string) string {
		if v := a[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	num := func(k string, def int64) int64 {
		if !has(k) {
			return def
		}
		n, err := strconv.ParseInt(str(k), 10, 64)
		if err != nil {
			d.Fatalf(t, "%s: %v", k, err)
		}
		return n
	}
	dur := func(k string, def time.Duration) time.Duration {
		if !has(k) {
			return def
		}
		v, err := time.ParseDuration(str(k))
		if err != nil {
			d.Fatalf(t, "%s: %v", k, err)
		}
		return v
	}
	ids := func(k string, def []int32) []int32 {
		if !has(k) {
			return def
		}
		var out []int32
		for _, v := range a[k] {
			for _, s := range strings.Split(v, ",") {
				if s == "" {
					continue
				}
				n, err := strconv.Atoi(s)
				if err != nil {
					d.Fatalf(t, "%s: %v", k, err)
				}
				out = append(out, int32(n))
			}
		}
		return out
	}
	epochs := func(k string) []epochEntry {
		var out []epochEntry
		for _, v := range a[k] {
			for _, s := range strings.Split(v, ",") {
				e, st, ok := strings.Cut(s, ":")
				en, err1 := strconv.Atoi(e)
				sn, err2 := strconv.ParseInt(st, 10, 64)
				if !ok || err1 != nil || err2 != nil {
					d.Fatalf(t, "%s: bad %q (want epoch:start)", k, s)
				}
				out = append(out, epochEntry{int32(en), sn})
			}
		}
		return out
	}
	partition := func(base Partition) Partition {
		p := Partition{
			Replicas:    ids("replicas", base.Replicas),
			Leader:      int32(num("leader", int64(base.Leader))),
			LeaderEpoch: int32(num("epoch", int64(base.LeaderEpoch))),
			Revision:    num("rev", base.Revision),
			MinInsync:   int(num("min-isr", int64(base.MinInsync))),
		}
		p.ISR = ids("isr", base.ISR)
		p.Registrations = base.Registrations
		if has("regs") {
			p.Registrations = nil
			for _, v := range strings.Split(str("regs"), ",") {
				if v == "" {
					continue
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					d.Fatalf(t, "regs: %v", err)
				}
				p.Registrations = append(p.Registrations, n)
			}
		}
		return p
	}
	errArg := func() error {
		s := str("err")
		if s == "" {
			return nil
		}
		if s == "NOT_LEADER_OR_FOLLOWER" {
			return errNotLeader
		}
		if s == "NETWORK" {
			return errors.New("connection refused")
		}
		for c := int16(0); c < 200; c++ {
			if e := kerr.ErrorForCode(c); e != nil {
				var ke *kerr.Error
				if errors.As(e, &ke) && ke.Message == s {
					return e
				}
			}
		}
		d.Fatalf(t, "unknown error %q", s)
		return nil
	}
	if d.Cmd != "new" && h.m == nil {
		d.Fatalf(t, "new first")
	}
	if has("at") {
		at := t0.Add(dur("at", 0))
		if at.Before(h.now) {
			d.Fatalf(t, "time goes back: at=%s, now %s", since(at), since(h.now))
		}
		h.now = at
	}
	leaderEpoch := func() int32 { return int32(num("leader-epoch", int64(h.m.p.LeaderEpoch))) }

	var ev Event
	switch d.Cmd {
	case "new":
		h.log = &testLog{start: num("start", 0), leo: num("leo", 0), epochs: epochs("epochs")}
		h.now = t0
		h.ids, h.names = map[string]RequestID{}, map[RequestID]string{}
		h.m = New(Config{
			Node:         int32(num("node", 1)),
			LagTimeMax:   dur("lag", 0),
			LeaseMargin:  dur("margin", 0),
			RetryBackoff: dur("backoff", 0),
			Epochs:       h.log,
		}, Local{LogStart: h.log.start, LEO: h.log.leo, HW: num("hw", 0)})
		return "ok"
	case "state":
		base := h.m.p
		if !h.m.hasState {
			base = Partition{Leader: NoLeader, MinInsync: 1}
		}
		ev = SetState{State: partition(base)}
	case "lease":
		ev = Lease{Deadline: t0.Add(dur("deadline", 0))}
	case "tick":
		ev = Tick{}
	case "append":
		h.log.leo = num("leo", 0)
		ev = Appended{LEO: h.log.leo}
	case "log-start":
		h.log.start = num("offset", 0)
		ev = LogStart{Offset: h.log.start}
	case "follower-fetch":
		ev = FollowerFetch{Node: int32(num("node", 0)), LeaderEpoch: int32(num("epoch", -1)), Offset: num("offset", 0), LogStart: num("log-start", -1)}
	case "produce":
		name := str("id")
		id := RequestID(len(h.ids) + 1)
		h.ids[name], h.names[id] = id, name
		end := num("end", 0)
		h.log.leo = max(h.log.leo, end)
		var deadline time.Time
		if has("deadline") {
			deadline = t0.Add(dur("deadline", 0))
		}
		ev = Produce{ID: id, End: end, Deadline: deadline, LeaderOnly: str("acks") == "1"}
	case "isr-result":
		if has("ok") {
			ev = ISRWritten{Revision: num("rev", 0)}
		} else {
			ev = ISRWriteFailed{Current: partition(h.m.p)}
		}
	case "epoch-answer":
		ev = EpochAnswer{LeaderEpoch: leaderEpoch(), Err: errArg(), Epoch: int32(num("epoch", -1)), End: num("end", -1)}
	case "truncated":
		if has("leo") {
			h.log.leo = num("leo", 0)
		}
		ev = Truncated{LEO: h.log.leo}
	case "fetched":
		h.log.leo = num("leo", 0)
		for _, e := range epochs("epochs") {
			h.log.assign(e.epoch, e.start)
		}
		ev = Fetched{LeaderEpoch: leaderEpoch(), LEO: h.log.leo, HW: num("hw", 0)}
	case "fetch-error":
		ev = FetchFailed{LeaderEpoch: leaderEpoch(), Err: errArg(), LeaderLogStart: num("log-start", -1)}
	case "check-append":
		return errName(h.m.CheckAppend(h.now, str("acks") != "1"))
	case "client-hw":
		hw, err := h.m.ClientHW(h.now)
		return fmt.Sprintf("%d %s", hw, errName(err))
	case "check-epoch":
		return errName(h.m.CheckLeaderEpoch(h.now, int32(num("epoch", -1))))
	case "low-watermark":
		low, err := h.m.LowWatermark(h.now)
		return fmt.Sprintf("%d %s", low, errName(err))
	case "awaits-fetch":
		return fmt.Sprint(h.m.AwaitsFetch(leaderEpoch(), num("offset", 0)))
	case "epochs":
		return h.log.String()
	case "status":
		return h.status()
	case "followers":
		return h.followers()
	default:
		d.Fatalf(t, "unknown command %s", d.Cmd)
	}
	var b strings.Builder
	for _, e := range h.m.Step(h.now, ev) {
		b.WriteString(h.effect(e))
		b.WriteByte('\n')
	}
	b.WriteString(h.summary())
	return b.String()
}

// effect prints an effect and applies the log's part of it to the model,
// as the runtime would.
func (h *harness) effect(e Effect) string {
	switch e := e.(type) {
	case StartEpoch:
		h.log.assign(e.Epoch, e.Offset)
		return fmt.Sprintf("start-epoch epoch=%d offset=%d", e.Epoch, e.Offset)
	case SetHW:
		return fmt.Sprintf("hw %d", e.HW)
	case Ack:
		return fmt.Sprintf("ack %s %s", h.names[e.ID], errName(e.Err))
	case WriteISR:
		return fmt.Sprintf("write-isr isr=%s leader-epoch=%d expect-rev=%d", list(e.ISR), e.LeaderEpoch, e.ExpectRevision)
	case FetchAnswer:
		if e.Err != nil {
			return fmt.Sprintf("answer node=%d %s", e.Node, errName(e.Err))
		}
		return fmt.Sprintf("answer node=%d hw=%d", e.Node, e.HW)
	case AskEpoch:
		return fmt.Sprintf("ask-epoch leader=%d leader-epoch=%d epoch=%d", e.Leader, e.LeaderEpoch, e.Epoch)
	case Truncate:
		h.log.truncate(e.To)
		return fmt.Sprintf("truncate to=%d", e.To)
	case TruncateFully:
		h.log.truncateFully(e.Offset)
		return fmt.Sprintf("truncate-fully offset=%d", e.Offset)
	case Fetch:
		if e.LogStart != 0 {
			return fmt.Sprintf("fetch leader=%d leader-epoch=%d offset=%d log-start=%d", e.Leader, e.LeaderEpoch, e.Offset, e.LogStart)
		}
		return fmt.Sprintf("fetch leader=%d leader-epoch=%d offset=%d", e.Leader, e.LeaderEpoch, e.Offset)
	}
	return fmt.Sprintf("%#v", e)
}

func errName(err error) string {
	if err == nil {
		return "OK"
	}
	if err == errNotLeader {
		return "NOT_LEADER_OR_FOLLOWER"
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return err.Error()
}

func list(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}

// summary is one line on the machine after a step.
func (h *harness) summary() string {
	m := h.m
	var b strings.Builder
	fmt.Fprintf(&b, "= %s", m.role)
	if m.role != RoleNone {
		fmt.Fprintf(&b, " e%d", m.p.LeaderEpoch)
	}
	if m.logStart != 0 {
		fmt.Fprintf(&b, " start=%d", m.logStart)
	}
	fmt.Fprintf(&b, " leo=%d hw=%d", m.leo, m.hw)
	switch m.role {
	case RoleLeader:
		fmt.Fprintf(&b, " isr=%s", list(m.p.ISR))
		if w := m.leader.write; w != nil {
			fmt.Fprintf(&b, " writing=%s", list(w.isr))
		}
	case RoleFollower:
		f := m.follower
		fmt.Fprintf(&b, " of %d %s", m.p.Leader, f.phase)
		if f.inFlight {
			b.WriteString(" in-flight")
		}
		if f.retryAt.After(h.now) {
			fmt.Fprintf(&b, " retry-at=%s", since(f.retryAt))
		}
	}
	if len(m.leader.acks) > 0 {
		var names []string
		for _, a := range m.leader.acks {
			names = append(names, h.names[a.id])
		}
		fmt.Fprintf(&b, " acks=%s", strings.Join(names, ","))
	}
	if !m.live(h.now) {
		b.WriteString(" lease-past")
	}
	return b.String()
}

// status prints the whole machine.
func (h *harness) status() string {
	m := h.m
	var b strings.Builder
	b.WriteString(h.summary())
	b.WriteByte('\n')
	if m.role == RoleLeader {
		fmt.Fprintf(&b, "epoch-start=%d maximal-isr=%s rev=%d min-isr=%d\n", m.leader.epochStart, list(m.maximalISR()), m.p.Revision, m.p.MinInsync)
		for _, p := range m.leader.peers {
			fmt.Fprintf(&b, "peer %d leo=%d caught-up=%s last-fetch=%s@%d", p.id, p.leo, stamp(p.lastCaughtUp), stamp(p.lastFetchTime), p.lastFetchLeaderLEO)
			if p.logStart >= 0 {
				fmt.Fprintf(&b, " log-start=%d", p.logStart)
			}
			b.WriteByte('\n')
		}
	}
	if t, ok := m.NextDeadline(); ok {
		fmt.Fprintf(&b, "next-deadline=%s\n", since(t))
	}
	b.WriteString("log " + h.log.String())
	return b.String()
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return since(t)
}

// followers prints Followers, one a line.
func (h *harness) followers() string {
	fs := h.m.Followers()
	if fs == nil {
		return "not leader"
	}
	var b strings.Builder
	for _, f := range fs {
		caught := "never"
		if !f.LastCaughtUp.IsZero() {
			caught = since(f.LastCaughtUp)
		}
		fmt.Fprintf(&b, "node=%d leo=%d lag=%d isr=%v caught-up=%s\n", f.Node, f.LEO, f.Lag, f.InISR, caught)
	}
	return b.String()
}
