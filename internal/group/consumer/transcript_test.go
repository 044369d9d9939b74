package consumer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestTranscripts drives the machine from testdata/*. Rewrite expectations
// with `go test ./internal/group/consumer -run TestTranscripts -rewrite`,
// then read the diff: the files are the review of the protocol. After every
// command the harness also checks the machine's bookkeeping, that its timer
// updates describe its deadline table, and that replaying the store into a
// fresh machine rebuilds the same state.
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if strings.Contains(path, "rapid") || strings.Contains(path, "fuzz") {
			t.Skip("rapid's failure files and the fuzz corpus")
		}
		h := newHarness(Config{})
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

var epoch0 = time.UnixMilli(1_700_000_000_000)

type harness struct {
	cfg    Config
	m      *Machine
	now    time.Time
	nextID RequestID
	timers map[TimerKey]time.Time
	store  map[string][]byte // encoded key -> encoded value

	topics   []Topic            // the current metadata, as last given
	names    map[TopicID]string // every id ever created, for printing
	ids      map[string]TopicID // latest id of each name, deleted or not
	live     map[string]bool    // names that exist now
	created  uint16
	buf      *bytes.Buffer
	cmdCount int
}

func newHarness(cfg Config) *harness {
	h := &harness{cfg: cfg, now: epoch0, timers: map[TimerKey]time.Time{}, store: map[string][]byte{},
		names: map[TopicID]string{}, ids: map[string]TopicID{}}
	h.cfg.NewMemberID = SequentialMemberIDs("gen-")
	h.m = New(h.cfg)
	return h
}

func ms(t time.Time) int64 { return t.Sub(epoch0).Milliseconds() }

func (h *harness) topicName(id TopicID) string {
	if n, ok := h.names[id]; ok {
		return n
	}
	return id.String()
}

// topicID returns the latest id of a topic name (a deleted topic keeps
// it), or a made-up id never created, for requests naming unknown topics.
func (h *harness) topicID(name string) TopicID {
	if id, ok := h.ids[name]; ok {
		return id
	}
	var id TopicID
	copy(id[:], "unknown:"+name)
	return id
}

type args map[string][]string

func (a args) has(k string) bool { _, ok := a[k]; return ok }

func (a args) str(k, def string) string {
	if v, ok := a[k]; ok {
		if len(v) == 0 {
			return ""
		}
		return v[0]
	}
	return def
}

// list returns a list argument: absent or "null" is nil, "()" or "" is
// empty, and (a,,b) has an empty string in the middle.
func (a args) list(k string) []string {
	v, ok := a[k]
	if !ok || (len(v) == 1 && v[0] == "null") {
		return nil
	}
	if len(v) == 0 || (len(v) == 1 && v[0] == "") {
		return []string{}
	}
	return v
}

func (a args) num(t *testing.T, k string, def int64) int64 {
	s := a.str(k, "")
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(s, "ms"), 10, 64)
	if err != nil {
		t.Fatalf("bad number %s=%q", k, s)
	}
	return n
}

func (a args) optStr(k string) *string {
	if !a.has(k) || a.str(k, "") == "null" {
		return nil
	}
	s := a.str(k, "")
	return &s
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	h.buf = &bytes.Buffer{}
	h.cmdCount++
	a := args{}
	for _, ca := range d.CmdArgs {
		a[ca.Key] = ca.Vals
	}
	switch d.Cmd {
	case "new":
		cfg := Config{
			SessionTimeout:    time.Duration(a.num(t, "session", 0)) * time.Millisecond,
			HeartbeatInterval: time.Duration(a.num(t, "heartbeat", 0)) * time.Millisecond,
			MaxSize:           int(a.num(t, "max-size", 0)),
			Assignors:         a.list("assignors"),
			HistorySize:       int(a.num(t, "history", 0)),
		}
		*h = *newHarness(cfg)
		return "ok"

	case "topics", "topics-offline":
		// topics a=3 b=6: the whole metadata; a name not listed is
		// deleted, and created again later under a new id.
		// topics-offline changes it without telling the machine, as if
		// it happened while the coordinator was not running.
		var ts []Topic
		seen := map[string]bool{}
		for _, ca := range d.CmdArgs {
			n, err := strconv.Atoi(ca.Vals[0])
			if err != nil {
				t.Fatalf("%s: topics %s=%v", d.Pos, ca.Key, ca.Vals)
			}
			id, ok := h.ids[ca.Key]
			if !ok || !h.live[ca.Key] {
				h.created++
				binary.BigEndian.PutUint16(id[:], h.created)
				id[15] = 1
				h.ids[ca.Key] = id
				h.names[id] = ca.Key
			}
			seen[ca.Key] = true
			ts = append(ts, Topic{Name: ca.Key, ID: id, Partitions: int32(n)})
		}
		h.live = seen
		h.topics = ts
		if d.Cmd == "topics" {
			h.apply(t, h.m.Step(h.now, TopicsChanged{Topics: ts}))
		}
		return h.result()

	case "hb":
		return h.heartbeat(t, d, a)

	case "describe":
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Version = int16(a.num(t, "version", 1))
		req.Groups = a.list("groups")
		if !a.has("groups") {
			req.Groups = []string{"g1"}
		}
		return h.send(t, "c", req)

	case "advance":
		n, err := strconv.ParseInt(strings.TrimSuffix(d.CmdArgs[0].Key, "ms"), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		h.advance(t, h.now.Add(time.Duration(n)*time.Millisecond))
		fmt.Fprintf(h.buf, "now @%d\n", ms(h.now))
		return h.buf.String()

	case "timers":
		for _, u := range h.m.Deadlines() {
			fmt.Fprintf(h.buf, "%s @%d\n", u.Key, ms(u.Deadline))
		}
		return h.result()

	case "state":
		h.printState(a.str("g", "g1"))
		return h.result()

	case "history":
		for _, r := range h.m.Rebalances(a.str("g", "g1")) {
			end := "-"
			if r.EndedAt != nil {
				end = strconv.FormatInt(ms(*r.EndedAt), 10)
			}
			who := "-"
			if r.Member != nil {
				who = r.Member.MemberID
			}
			fmt.Fprintf(h.buf, "epoch %d->%d trigger=%s member=%s start=%d end=%s outcome=%s in=%v out=%v\n",
				r.GenerationBefore, r.GenerationAfter, r.Trigger, who, ms(r.StartedAt), end, r.Outcome, r.MembersIn, r.MembersOut)
			for _, w := range r.WaitedFor {
				fmt.Fprintf(h.buf, "  waited %s %dms\n", w.Member, w.WaitedMs)
			}
			for _, mv := range r.Moved {
				fmt.Fprintf(h.buf, "  moved %s-%d %q -> %q pause=%dms\n", h.printable(mv.Topic), mv.Partition, mv.From, mv.To, mv.PauseMs)
			}
		}
		return h.result()

	case "restart":
		// A fresh machine: topics first, as the coordinator loads the
		// broker's metadata before its groups, then the store, then the
		// topics again so that groups whose topics changed meanwhile
		// move on.
		h.m = New(h.cfg)
		h.m.Step(h.now, TopicsChanged{Topics: h.topics})
		h.timers = map[TimerKey]time.Time{}
		out, err := h.m.Replay(h.now, h.storeRecords(t))
		if err != nil {
			t.Fatalf("%s: replay: %v", d.Pos, err)
		}
		h.apply(t, out)
		h.apply(t, h.m.Step(h.now, TopicsChanged{Topics: h.topics}))
		return h.result()
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

// printable turns a hex topic id (a deleted topic) back into its name.
func (h *harness) printable(topic string) string {
	for id, n := range h.names {
		if id.String() == topic {
			return n + "(deleted)"
		}
	}
	return topic
}

// heartbeat sends a ConsumerGroupHeartbeat. Defaults: v1, group g1, epoch
// 0; a join (epoch 0) carries rebalance=300000 and an empty owned list
// unless told otherwise, other heartbeats send nulls. "null" sends a null,
// "()" an empty list.
func (h *harness) heartbeat(t *testing.T, d *datadriven.TestData, a args) string {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = int16(a.num(t, "version", 1))
	req.Group = a.str("g", "g1")
	req.MemberID = a.str("member", "")
	req.MemberEpoch = int32(a.num(t, "epoch", 0))
	req.InstanceID = a.optStr("instance")
	req.RackID = a.optStr("rack")
	req.RebalanceTimeoutMillis = -1
	if req.MemberEpoch == 0 {
		req.RebalanceTimeoutMillis = 300000
	}
	req.RebalanceTimeoutMillis = int32(a.num(t, "rebalance", int64(req.RebalanceTimeoutMillis)))
	req.SubscribedTopicNames = a.list("topics")
	req.SubscribedTopicRegex = a.optStr("regex")
	req.ServerAssignor = a.optStr("assignor")
	if req.MemberEpoch == 0 && !a.has("owned") {
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	}
	if owned := a.list("owned"); owned != nil {
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		for _, item := range owned {
			f := strings.Split(item, ".")
			rt := kmsg.NewConsumerGroupHeartbeatRequestTopic()
			rt.TopicID = h.topicID(f[0])
			for _, p := range f[1:] {
				n, err := strconv.Atoi(p)
				if err != nil {
					t.Fatalf("%s: owned %q", d.Pos, item)
				}
				rt.Partitions = append(rt.Partitions, int32(n))
			}
			req.Topics = append(req.Topics, rt)
		}
	}
	return h.send(t, a.str("client", "c"), req)
}

func (h *harness) send(t *testing.T, client string, req kmsg.Request) string {
	h.nextID++
	out := h.m.Step(h.now, Request{ID: h.nextID, ClientID: client, ClientHost: "/127.0.0.1", Msg: req})
	if len(out.Replies) != 1 || out.Replies[0].ID != h.nextID {
		t.Fatalf("request #%d got replies %v", h.nextID, out.Replies)
	}
	h.apply(t, out)
	return h.result()
}

func (h *harness) result() string {
	if h.buf.Len() == 0 {
		return "ok"
	}
	return h.buf.String()
}

func (h *harness) apply(t *testing.T, out Output) {
	for _, r := range out.Records {
		fmt.Fprintf(h.buf, "record %s\n", h.fmtRecord(r))
		// Every record goes through the codec, as it would to the store.
		k, v := r.Key(), r.Value()
		back, err := DecodeRecord(k, v)
		if err != nil {
			t.Fatalf("record %s does not decode: %v", h.fmtRecord(r), err)
		}
		if h.fmtRecord(back) != h.fmtRecord(r) {
			t.Fatalf("record %s decodes as %s", h.fmtRecord(r), h.fmtRecord(back))
		}
		if v == nil {
			delete(h.store, string(k))
		} else {
			h.store[string(k)] = v
		}
	}
	for _, r := range out.Replies {
		fmt.Fprintf(h.buf, "#%d %s\n", r.ID, h.fmtResponse(r.Msg))
	}
	for _, u := range out.Timers {
		if u.Cancel {
			delete(h.timers, u.Key)
			fmt.Fprintf(h.buf, "timer %s cancel\n", u.Key)
		} else {
			h.timers[u.Key] = u.Deadline
			fmt.Fprintf(h.buf, "timer %s @%d\n", u.Key, ms(u.Deadline))
		}
	}
	h.check(t)
}

// check runs after every step: bookkeeping, timer table, and replay of the
// store into a fresh machine giving the same state.
func (h *harness) check(t *testing.T) {
	if err := h.m.checkInvariants(); err != nil {
		t.Fatalf("invariant: %v\n%s", err, h.m.dump(h.topicName))
	}
	want := h.m.Deadlines()
	if len(want) != len(h.timers) {
		t.Fatalf("timer table drift: machine %v, caller %v", want, h.timers)
	}
	for _, u := range want {
		if !h.timers[u.Key].Equal(u.Deadline) {
			t.Fatalf("timer table drift at %s", u.Key)
		}
	}
	fresh := New(h.cfg)
	fresh.Step(h.now, TopicsChanged{Topics: h.m.topicList()})
	if _, err := fresh.Replay(h.now, h.storeRecords(t)); err != nil {
		t.Fatalf("replay: %v", err)
	}
	if got, live := fresh.dump(h.topicName), h.m.dump(h.topicName); got != live {
		t.Fatalf("replay differs from the live state\nlive:\n%s\nreplayed:\n%s", live, got)
	}
}

// storeRecords decodes the store in key order, as a load would scan it.
func (h *harness) storeRecords(t *testing.T) []Record {
	keys := make([]string, 0, len(h.store))
	for k := range h.store {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	recs := make([]Record, 0, len(keys))
	for _, k := range keys {
		r, err := DecodeRecord([]byte(k), h.store[k])
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		recs = append(recs, r)
	}
	return recs
}

func (h *harness) advance(t *testing.T, to time.Time) {
	for {
		var next *TimerKey
		var at time.Time
		keys := make([]TimerKey, 0, len(h.timers))
		for k := range h.timers {
			keys = append(keys, k)
		}
		sortTimerKeys(keys)
		for _, k := range keys {
			d := h.timers[k]
			if d.After(to) {
				continue
			}
			if next == nil || d.Before(at) {
				k := k
				next, at = &k, d
			}
		}
		if next == nil {
			break
		}
		if at.After(h.now) {
			h.now = at
		}
		fmt.Fprintf(h.buf, "fire %s @%d\n", *next, ms(h.now))
		h.apply(t, h.m.Step(h.now, Timer{Key: *next}))
	}
	h.now = to
}

func errName(code int16) string {
	if code == 0 {
		return "OK"
	}
	if e, ok := kerr.ErrorForCode(code).(*kerr.Error); ok {
		return e.Message
	}
	return fmt.Sprintf("ERR%d", code)
}

func (h *harness) fmtRecParts(ts []TopicPartitions) string {
	var s partSet
	for _, t := range ts {
		s = append(s, topicParts{id: t.TopicID, parts: t.Partitions, epochs: t.Epochs})
	}
	return fmtParts(s, h.topicName)
}

func (h *harness) fmtRecord(r Record) string {
	key := r.Group
	if r.Type.memberKeyed() {
		key += "/" + r.Member
	}
	if r.Tombstone() {
		return fmt.Sprintf("%s %s tombstone", r.Type, key)
	}
	switch r.Type {
	case RecordGroupEpoch:
		return fmt.Sprintf("%s %s epoch=%d hash=%016x", r.Type, key, r.GroupEpoch.Epoch, r.GroupEpoch.MetadataHash)
	case RecordMemberMetadata:
		v := r.MemberMetadata
		return fmt.Sprintf("%s %s instance=%q rack=%q client=%s topics=%v regex=%q rebalance=%d assignor=%q",
			r.Type, key, v.InstanceID, v.RackID, v.ClientID, v.SubscribedTopicNames, v.SubscribedTopicRegex,
			v.RebalanceTimeoutMs, v.ServerAssignor)
	case RecordTargetMember:
		return fmt.Sprintf("%s %s %s", r.Type, key, h.fmtRecParts(r.Target.Partitions))
	case RecordTargetEpoch:
		return fmt.Sprintf("%s %s epoch=%d", r.Type, key, r.TargetEpoch.AssignmentEpoch)
	case RecordCurrentAssignment:
		v := r.Current
		return fmt.Sprintf("%s %s epoch=%d prev=%d state=%s assigned=%s pending=%s", r.Type, key,
			v.MemberEpoch, v.PreviousMemberEpoch, v.State, h.fmtRecParts(v.Assigned), h.fmtRecParts(v.PendingRevocation))
	}
	return "?"
}

func deref(s *string) string {
	if s == nil {
		return "null"
	}
	return strconv.Quote(*s)
}

func (h *harness) fmtResponse(msg kmsg.Response) string {
	name := fmt.Sprintf("%s v%d:", kmsg.NameForKey(msg.Key()), msg.GetVersion())
	switch r := msg.(type) {
	case *kmsg.ConsumerGroupHeartbeatResponse:
		if r.ErrorCode != 0 {
			return fmt.Sprintf("%s %s %s", name, errName(r.ErrorCode), deref(r.ErrorMessage))
		}
		s := fmt.Sprintf("%s OK member=%s epoch=%d interval=%d", name, deref(r.MemberID), r.MemberEpoch, r.HeartbeatIntervalMillis)
		if r.Assignment == nil {
			return s + " assignment=null"
		}
		var set partSet
		for _, at := range r.Assignment.Topics {
			set = append(set, topicParts{id: at.TopicID, parts: at.Partitions})
		}
		return s + " assignment=" + fmtParts(set, h.topicName)
	case *kmsg.ConsumerGroupDescribeResponse:
		s := name
		for _, g := range r.Groups {
			if g.ErrorCode != 0 {
				s += fmt.Sprintf("\n  %q %s %s", g.Group, errName(g.ErrorCode), deref(g.ErrorMessage))
				continue
			}
			s += fmt.Sprintf("\n  %s state=%s epoch=%d assignment-epoch=%d assignor=%s ops=%d", g.Group, g.State, g.Epoch,
				g.AssignmentEpoch, g.AssignorName, g.AuthorizedOperations)
			for _, m := range g.Members {
				s += fmt.Sprintf("\n    %s epoch=%d instance=%s rack=%s client=%s host=%s topics=%v regex=%s type=%d",
					m.MemberID, m.MemberEpoch, deref(m.InstanceID), deref(m.RackID), m.ClientID, m.ClientHost,
					m.SubscribedTopics, deref(m.SubscribedTopicRegex), m.MemberType)
				s += fmt.Sprintf("\n      assignment=%s target=%s", fmtDescribed(m.Assignment), fmtDescribed(m.TargetAssignment))
			}
		}
		return s
	}
	return fmt.Sprintf("%s %+v", name, msg)
}

func fmtDescribed(a kmsg.Assignment) string {
	if len(a.TopicPartitions) == 0 {
		return "-"
	}
	var parts []string
	for _, t := range a.TopicPartitions {
		parts = append(parts, fmt.Sprintf("%s%v", t.Topic, t.Partitions))
	}
	return strings.Join(parts, "+")
}

// printState shows a group as people read it.
func (h *harness) printState(id string) {
	g := h.m.groups[id]
	if g == nil {
		fmt.Fprintf(h.buf, "%s: absent\n", id)
		return
	}
	fmt.Fprintf(h.buf, "%s: state=%s epoch=%d assignment-epoch=%d\n", id, g.state(), g.epoch, g.assignmentEpoch)
	for _, mem := range g.sortedMembers() {
		line := fmt.Sprintf("  %s epoch=%d prev=%d %s assigned=%s", mem.id, mem.epoch, mem.prevEpoch, mem.state,
			fmtParts(mem.assigned, h.topicName))
		if len(mem.pending) > 0 {
			line += " revoking=" + fmtParts(mem.pending, h.topicName)
		}
		line += " target=" + fmtParts(g.target[mem.id], h.topicName)
		fmt.Fprintln(h.buf, line)
	}
}

// topicList is the machine's topic metadata, sorted by name.
func (m *Machine) topicList() []Topic {
	out := make([]Topic, 0, len(m.topics.byName))
	for _, n := range m.topics.names {
		out = append(out, m.topics.byName[n])
	}
	return slices.Clip(out)
}
