package group

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/group/core"
	"github.com/groupd/groupd/internal/inspect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestTranscripts drives the machine from testdata/*. Rewrite expectations
// with `go test ./internal/group -run TestTranscripts -rewrite`, then read
// the diff: the files are the review of the protocol.
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if strings.Contains(path, "fuzz") {
			t.Skip()
		}
		h := newHarness(Config{})
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

var epoch = time.UnixMilli(1_700_000_000_000)

type harness struct {
	cfg    Config
	m      *Machine
	now    time.Time
	nextID RequestID
	timers map[TimerKey]time.Time
	store  map[string][]byte
	buf    *bytes.Buffer
	// topics is the metadata last given to the machine (topics).
	topics []Topic
	// holdHistory leaves due history deadlines to advance, instead of
	// firing them after the step that set them (new hold-history).
	holdHistory bool
}

func newHarness(cfg Config) *harness {
	h := &harness{cfg: cfg, now: epoch, timers: map[TimerKey]time.Time{}, store: map[string][]byte{}}
	h.cfg.NewMemberID = SequentialMemberIDs()
	h.cfg.Consumer.NewMemberID = consumer.SequentialMemberIDs("cm")
	h.m = New(h.cfg)
	return h
}

func ms(t time.Time) int64 { return t.Sub(epoch).Milliseconds() }

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	h.buf = &bytes.Buffer{}
	args := map[string][]string{}
	for _, a := range d.CmdArgs {
		args[a.Key] = a.Vals
	}
	str := func(k, def string) string {
		if v, ok := args[k]; ok {
			if len(v) == 0 {
				return ""
			}
			return v[0]
		}
		return def
	}
	num := func(k string, def int64) int64 {
		s := str(k, "")
		if s == "" {
			return def
		}
		s = strings.TrimSuffix(s, "ms")
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s: bad number %q", d.Pos, s)
		}
		return n
	}
	has := func(k string) bool { _, ok := args[k]; return ok }
	optStrArg := func(k string) *string {
		if !has(k) {
			return nil
		}
		s := str(k, "")
		return &s
	}
	version := int16(num("version", -1))
	ver := func(def int16) int16 {
		if version < 0 {
			return def
		}
		return version
	}

	switch d.Cmd {
	case "new":
		cfg := Config{
			InitialRebalanceDelay:  time.Duration(num("initial-delay", 0)) * time.Millisecond,
			MaxGroupSize:           int(num("max-size", 0)),
			OffsetsRetention:       time.Duration(num("retention", 0)) * time.Millisecond,
			OffsetMetadataMaxBytes: int(num("metadata-max", 0)),
			HistorySize:            int(num("history", 0)),
			StormWindow:            time.Duration(num("storm-window", 0)) * time.Millisecond,
			StormCount:             int(num("storm-count", 0)),
			MigrationPolicy:        MigrationPolicy(str("policy", "")),
		}
		cfg.Consumer.MaxSize = int(num("consumer-max-size", 0))
		if has("no-initial-delay") {
			cfg.InitialRebalanceDelay = -1
		}
		*h = *newHarness(cfg)
		h.holdHistory = has("hold-history")
		return "ok"

	case "join":
		req := kmsg.NewPtrJoinGroupRequest()
		req.Version = ver(9)
		req.Group = str("g", "g1")
		req.MemberID = str("member", "")
		req.SessionTimeoutMillis = int32(num("session", 10000))
		req.RebalanceTimeoutMillis = int32(num("rebalance", 60000))
		req.InstanceID = optStrArg("instance")
		req.ProtocolType = str("type", "consumer")
		protos := args["protocols"]
		if !has("protocols") {
			protos = []string{"range"}
		}
		topics := args["topics"]
		if !has("topics") {
			topics = []string{"t"}
		}
		for _, p := range protos {
			if p == "" {
				continue
			}
			jp := kmsg.NewJoinGroupRequestProtocol()
			jp.Name = p
			if has("meta") {
				jp.Metadata = []byte(str("meta", ""))
			} else {
				md := kmsg.NewConsumerMemberMetadata()
				md.Topics = topics
				// owned=(t.0.1,u.2) reports owned partitions, as a
				// cooperative client does (subscription v1+).
				for _, item := range args["owned"] {
					if item == "" {
						continue
					}
					f := strings.Split(item, ".")
					op := kmsg.NewConsumerMemberMetadataOwnedPartition()
					op.Topic = f[0]
					for _, p := range f[1:] {
						n, err := strconv.Atoi(p)
						if err != nil {
							t.Fatalf("%s: owned %q: %v", d.Pos, item, err)
						}
						op.Partitions = append(op.Partitions, int32(n))
					}
					md.OwnedPartitions = append(md.OwnedPartitions, op)
				}
				if has("owned") {
					md.Version = 1
				}
				jp.Metadata = md.AppendTo(nil)
			}
			req.Protocols = append(req.Protocols, jp)
		}
		return h.send(str("client", "c"), req)

	case "sync":
		req := kmsg.NewPtrSyncGroupRequest()
		req.Version = ver(5)
		req.Group = str("g", "g1")
		req.MemberID = str("member", "")
		req.Generation = int32(num("gen", 1))
		req.InstanceID = optStrArg("instance")
		if req.Version >= 5 && !has("noproto") {
			req.ProtocolType = strPtr(str("type", "consumer"))
			req.Protocol = strPtr(str("proto", "range"))
		}
		for _, a := range args["assign"] {
			id, spec, _ := strings.Cut(a, ":")
			ga := kmsg.NewSyncGroupRequestGroupAssignment()
			ga.MemberID = id
			ga.MemberAssignment = encodeAssignment(spec)
			req.GroupAssignment = append(req.GroupAssignment, ga)
		}
		return h.send(str("client", "c"), req)

	case "heartbeat":
		req := kmsg.NewPtrHeartbeatRequest()
		req.Version = ver(4)
		req.Group = str("g", "g1")
		req.MemberID = str("member", "")
		req.Generation = int32(num("gen", 1))
		req.InstanceID = optStrArg("instance")
		return h.send("c", req)

	case "leave":
		req := kmsg.NewPtrLeaveGroupRequest()
		req.Version = ver(5)
		req.Group = str("g", "g1")
		if req.Version < 3 {
			req.MemberID = str("member", "")
		} else {
			specs := args["members"]
			if has("member") {
				specs = []string{str("member", "")}
			}
			for _, s := range specs {
				id, inst, ok := strings.Cut(s, ":")
				lm := kmsg.NewLeaveGroupRequestMember()
				lm.MemberID = id
				if ok {
					lm.InstanceID = &inst
				}
				lm.Reason = optStrArg("reason")
				req.Members = append(req.Members, lm)
			}
		}
		return h.send("c", req)

	case "commit":
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version = ver(8)
		req.Group = str("g", "g1")
		req.MemberID = str("member", "")
		req.Generation = int32(num("gen", -1))
		req.InstanceID = optStrArg("instance")
		req.RetentionTimeMillis = num("retention", -1)
		md := strings.Repeat("m", int(num("metadata-size", 0)))
		byTopic := map[string]int{}
		for _, o := range args["offsets"] {
			tp, off, _ := strings.Cut(o, "=")
			topic, part, _ := strings.Cut(tp, ".")
			p, _ := strconv.Atoi(part)
			n, _ := strconv.ParseInt(off, 10, 64)
			i, ok := byTopic[topic]
			if !ok {
				i = len(req.Topics)
				byTopic[topic] = i
				rt := kmsg.NewOffsetCommitRequestTopic()
				rt.Topic = topic
				req.Topics = append(req.Topics, rt)
			}
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition = int32(p)
			rp.Offset = n
			rp.LeaderEpoch = 5
			rp.Metadata = &md
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
		}
		return h.send("c", req)

	case "fetch":
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version = ver(7)
		var topics []kmsg.OffsetFetchRequestTopic
		if has("topics") {
			topics = []kmsg.OffsetFetchRequestTopic{}
			for _, s := range args["topics"] {
				parts := strings.Split(s, ".")
				ft := kmsg.NewOffsetFetchRequestTopic()
				ft.Topic = parts[0]
				for _, p := range parts[1:] {
					n, _ := strconv.Atoi(p)
					ft.Partitions = append(ft.Partitions, int32(n))
				}
				topics = append(topics, ft)
			}
		}
		if req.Version < 8 {
			req.Group = str("g", "g1")
			req.Topics = topics
		} else {
			groups := args["groups"]
			if !has("groups") {
				groups = []string{"g1"}
			}
			for _, g := range groups {
				rg := kmsg.NewOffsetFetchRequestGroup()
				rg.Group = g
				rg.MemberID = optStrArg("member")
				rg.MemberEpoch = int32(num("epoch", -1))
				if topics != nil {
					rg.Topics = []kmsg.OffsetFetchRequestGroupTopic{}
					for _, ft := range topics {
						rg.Topics = append(rg.Topics, kmsg.OffsetFetchRequestGroupTopic{Topic: ft.Topic, Partitions: ft.Partitions})
					}
				}
				req.Groups = append(req.Groups, rg)
			}
		}
		return h.send("c", req)

	case "topics":
		// topics a=3 b=6: the broker's whole metadata. A topic's id is
		// its name, so transcripts can name it.
		h.topics = nil
		for _, ca := range d.CmdArgs {
			n, err := strconv.Atoi(ca.Vals[0])
			if err != nil {
				t.Fatalf("%s: topics %s=%v", d.Pos, ca.Key, ca.Vals)
			}
			h.topics = append(h.topics, Topic{Name: ca.Key, ID: topicID(ca.Key), Partitions: int32(n)})
		}
		h.apply(t, h.m.Step(h.now, TopicsChanged{Topics: h.topics}))
		return h.result()

	case "cg-hb":
		// A ConsumerGroupHeartbeat: v1, epoch 0 by default. A join
		// carries rebalance=300000 and an empty owned list; other
		// heartbeats send nulls unless told. owned=(t.0.1) names
		// partitions by topic name.
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Version = ver(1)
		req.Group = str("g", "g1")
		req.MemberID = str("member", "")
		req.MemberEpoch = int32(num("epoch", 0))
		req.InstanceID = optStrArg("instance")
		req.RebalanceTimeoutMillis = -1
		if req.MemberEpoch == 0 {
			req.RebalanceTimeoutMillis = 300000
			req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		}
		if has("topics") {
			req.SubscribedTopicNames = args["topics"]
			if req.SubscribedTopicNames == nil {
				req.SubscribedTopicNames = []string{}
			}
		}
		req.SubscribedTopicRegex = optStrArg("regex")
		req.ServerAssignor = optStrArg("assignor")
		if has("owned") {
			req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			for _, item := range args["owned"] {
				if item == "" {
					continue
				}
				f := strings.Split(item, ".")
				rt := kmsg.NewConsumerGroupHeartbeatRequestTopic()
				rt.TopicID = topicID(f[0])
				for _, p := range f[1:] {
					n, _ := strconv.Atoi(p)
					rt.Partitions = append(rt.Partitions, int32(n))
				}
				req.Topics = append(req.Topics, rt)
			}
		}
		return h.send(str("client", "c"), req)

	case "cg-describe":
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Version = ver(1)
		req.Groups = args["groups"]
		if !has("groups") {
			req.Groups = []string{"g1"}
		}
		return h.send("c", req)

	case "inspect":
		v, ok := h.m.Describe(str("g", "g1"), h.now)
		if !ok {
			return "absent"
		}
		fmt.Fprintf(h.buf, "%s type=%s state=%s protocol=%s generation=%d members=%d rebalances=%d\n",
			v.Group, v.Type, v.State, v.Protocol, v.Generation, v.MemberCount, v.Rebalances)
		for _, mem := range v.Members {
			fmt.Fprintf(h.buf, "  member %s %v\n", mem.MemberID, mem.Assignment)
		}
		for _, o := range v.Offsets {
			fmt.Fprintf(h.buf, "  offset %s.%d=%d owner=%q\n", o.Topic, o.Partition, o.Committed, o.Owner)
		}
		return h.result()

	case "describe":
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Version = ver(5)
		req.Groups = args["groups"]
		if !has("groups") {
			req.Groups = []string{"g1"}
		}
		return h.send("c", req)

	case "list":
		req := kmsg.NewPtrListGroupsRequest()
		req.Version = ver(5)
		req.StatesFilter = args["states"]
		req.TypesFilter = args["types"]
		return h.send("c", req)

	case "delete":
		req := kmsg.NewPtrDeleteGroupsRequest()
		req.Version = ver(2)
		req.Groups = args["groups"]
		if !has("groups") {
			req.Groups = []string{"g1"}
		}
		return h.send("c", req)

	case "offset-delete":
		req := kmsg.NewPtrOffsetDeleteRequest()
		req.Group = str("g", "g1")
		for _, o := range args["offsets"] {
			topic, part, _ := strings.Cut(o, ".")
			p, _ := strconv.Atoi(part)
			rt := kmsg.OffsetDeleteRequestTopic{Topic: topic}
			rt.Partitions = append(rt.Partitions, kmsg.OffsetDeleteRequestTopicPartition{Partition: int32(p)})
			req.Topics = append(req.Topics, rt)
		}
		return h.send("c", req)

	case "advance":
		if len(d.CmdArgs) != 1 {
			t.Fatalf("%s: advance <n>ms", d.Pos)
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(d.CmdArgs[0].Key, "ms"), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		h.advance(t, h.now.Add(time.Duration(n)*time.Millisecond))
		fmt.Fprintf(h.buf, "now @%d\n", ms(h.now))
		return h.buf.String()

	case "expire-offsets":
		h.apply(t, h.m.Step(h.now, ExpireOffsets{}))
		return h.result()

	case "unload":
		h.apply(t, h.m.Step(h.now, Unload{}))
		return h.result()

	case "restart":
		keys := make([]string, 0, len(h.store))
		for k := range h.store {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var recs []Record
		for _, k := range keys {
			r, err := DecodeRecord([]byte(k), h.store[k])
			if err != nil {
				t.Fatalf("%s: decode: %v", d.Pos, err)
			}
			recs = append(recs, r)
		}
		// The next incarnation may run with other settings.
		if has("max-size") {
			h.cfg.MaxGroupSize = int(num("max-size", 0))
		}
		if has("history") {
			h.cfg.HistorySize = int(num("history", 0))
		}
		if has("moved") {
			// A load in a cluster: the coordinator moved here.
			h.cfg.LoadTrigger = inspect.TriggerCoordinatorMoved
		}
		h.m = New(h.cfg)
		h.timers = map[TimerKey]time.Time{}
		// The broker's topics first, as the coordinator gives them.
		if h.topics != nil {
			h.m.Step(h.now, TopicsChanged{Topics: h.topics})
		}
		out, err := h.m.Replay(h.now, recs)
		if err != nil {
			return "replay: " + err.Error()
		}
		h.apply(t, out)
		return h.result()

	case "state":
		h.printState(str("g", "g1"))
		return h.buf.String()

	case "history":
		rs, _ := h.m.Rebalances(str("g", "g1"), h.now)
		for _, r := range rs {
			fmt.Fprintln(h.buf, fmtRebalance(&r, true))
		}
		return h.result()

	case "timers":
		for _, u := range h.m.Deadlines() {
			fmt.Fprintf(h.buf, "%s @%d\n", u.Key, ms(u.Deadline))
		}
		return h.result()
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

func (h *harness) result() string {
	if h.buf.Len() == 0 {
		return "ok"
	}
	return h.buf.String()
}

func (h *harness) send(client string, req kmsg.Request) string {
	h.nextID++
	id := h.nextID
	out := h.m.Step(h.now, Request{ID: id, ClientID: client, ClientHost: "/127.0.0.1", Msg: req})
	parked := true
	for _, r := range out.Replies {
		if r.ID == id {
			parked = false
		}
	}
	h.applyNoT(out)
	if parked {
		fmt.Fprintf(h.buf, "#%d %s v%d parked\n", id, kmsg.NameForKey(req.Key()), req.GetVersion())
	}
	h.fireHistory()
	return h.result()
}

// fireHistory fires the history deadlines that are due, as the
// coordinator queues a deadline that is due as soon as it learns of it:
// the rebalance a step ended is recorded by the step after it.
func (h *harness) fireHistory() {
	if h.holdHistory {
		return
	}
	var due []TimerKey
	for k, d := range h.timers {
		if k.Kind == TimerHistory && !d.After(h.now) {
			due = append(due, k)
		}
	}
	core.SortTimerKeys(due)
	for _, k := range due {
		fmt.Fprintf(h.buf, "fire %s @%d\n", k, ms(h.now))
		h.applyNoT(h.m.Step(h.now, Timer{Key: k}))
	}
}

func (h *harness) apply(t *testing.T, out Output) { h.applyNoT(out) }

func (h *harness) applyNoT(out Output) {
	for _, r := range out.Records {
		fmt.Fprintf(h.buf, "record %s\n", fmtRecord(r))
		if r.Tombstone() {
			delete(h.store, string(r.Key()))
		} else {
			h.store[string(r.Key())] = r.Value()
		}
	}
	for _, r := range out.Replies {
		fmt.Fprintf(h.buf, "#%d %s\n", r.ID, fmtResponse(r.Msg))
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
	h.m.checkCounts()
	// The timer updates must describe the machine's own table exactly.
	want := h.m.Deadlines()
	if len(want) != len(h.timers) {
		panic(fmt.Sprintf("timer table drift: machine %v, caller %v", want, h.timers))
	}
	for _, u := range want {
		if !h.timers[u.Key].Equal(u.Deadline) {
			panic(fmt.Sprintf("timer table drift at %s", u.Key))
		}
	}
}

func (h *harness) advance(t *testing.T, to time.Time) {
	for {
		var next *TimerKey
		var at time.Time
		keys := make([]TimerKey, 0, len(h.timers))
		for k := range h.timers {
			keys = append(keys, k)
		}
		core.SortTimerKeys(keys)
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

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func encodeAssignment(spec string) []byte {
	if spec == "" {
		return nil
	}
	if spec == "raw-empty" {
		return []byte{}
	}
	a := kmsg.NewConsumerMemberAssignment()
	for _, ts := range strings.Split(spec, "+") {
		parts := strings.Split(ts, ".")
		at := kmsg.NewConsumerMemberAssignmentTopic()
		at.Topic = parts[0]
		for _, p := range parts[1:] {
			n, _ := strconv.Atoi(p)
			at.Partitions = append(at.Partitions, int32(n))
		}
		a.Topics = append(a.Topics, at)
	}
	return a.AppendTo(nil)
}

func fmtAssignment(b []byte) string {
	if b == nil {
		return "nil"
	}
	if len(b) == 0 {
		return "<empty>"
	}
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(b); err != nil {
		return fmt.Sprintf("%q", b)
	}
	if len(a.Topics) == 0 {
		return "{}"
	}
	var parts []string
	for _, t := range a.Topics {
		parts = append(parts, fmt.Sprintf("%s%v", t.Topic, t.Partitions))
	}
	return strings.Join(parts, "+")
}

func fmtMetadata(b []byte) string {
	if topics, ok := parseSubscribedTopics(b); ok {
		var md kmsg.ConsumerMemberMetadata
		if md.ReadFrom(b) == nil && md.Version >= 1 {
			var owned []string
			for _, t := range md.OwnedPartitions {
				owned = append(owned, fmt.Sprintf("%s%v", t.Topic, t.Partitions))
			}
			return fmt.Sprintf("topics=%v owned=%s", topics, strings.Join(owned, "+"))
		}
		return fmt.Sprintf("topics=%v", topics)
	}
	return fmt.Sprintf("%q", b)
}

func fmtRecord(r Record) string {
	switch r.Type {
	case RecordGroupMetadata:
		if r.Metadata == nil {
			return fmt.Sprintf("GroupMetadata %s tombstone", r.Group)
		}
		v := r.Metadata
		s := fmt.Sprintf("GroupMetadata %s gen=%d type=%q proto=%q leader=%q state-ts=%d", r.Group, v.Generation,
			v.ProtocolType, v.Protocol, v.Leader, v.StateTimestamp-epoch.UnixMilli())
		for _, mm := range v.Members {
			s += fmt.Sprintf("\n  member %s instance=%q client=%s session=%d rebalance=%d %s assignment=%s",
				mm.MemberID, mm.InstanceID, mm.ClientID, mm.SessionTimeout, mm.RebalanceTimeout,
				fmtMetadata(mm.Subscription), fmtAssignment(mm.Assignment))
		}
		return s
	case RecordRebalance:
		if r.Rebalance == nil {
			return fmt.Sprintf("Rebalance %s #%d tombstone", r.Group, r.Seq)
		}
		return fmt.Sprintf("Rebalance %s %s", r.Group, fmtRebalance(r.Rebalance, false))
	case RecordConsumerGroupEpoch, RecordConsumerMemberMetadata, RecordConsumerTargetMember,
		RecordConsumerTargetEpoch, RecordConsumerCurrentAssignment:
		return fmtConsumerRecord(r)
	case RecordOffsetCommit:
		if r.Offset == nil {
			return fmt.Sprintf("OffsetCommit %s %s.%d tombstone", r.Group, r.Topic, r.Partition)
		}
		v := r.Offset
		exp := "none"
		if v.ExpireTimestamp >= 0 {
			exp = strconv.FormatInt(v.ExpireTimestamp-epoch.UnixMilli(), 10)
		}
		return fmt.Sprintf("OffsetCommit %s %s.%d offset=%d epoch=%d metadata-len=%d commit-ts=%d expire-ts=%s",
			r.Group, r.Topic, r.Partition, v.Offset, v.LeaderEpoch, len(v.Metadata), v.CommitTimestamp-epoch.UnixMilli(), exp)
	}
	return "?"
}

func fmtResponse(msg kmsg.Response) string {
	name := fmt.Sprintf("%s v%d:", kmsg.NameForKey(msg.Key()), msg.GetVersion())
	switch r := msg.(type) {
	case *kmsg.JoinGroupResponse:
		if r.ErrorCode != 0 {
			return fmt.Sprintf("%s %s member=%q", name, errName(r.ErrorCode), r.MemberID)
		}
		s := fmt.Sprintf("%s OK gen=%d type=%s proto=%s leader=%s member=%s", name, r.Generation,
			deref(r.ProtocolType), deref(r.Protocol), r.LeaderID, r.MemberID)
		if r.SkipAssignment {
			s += " skip-assignment"
		}
		if len(r.Members) > 0 {
			var ms []string
			for _, m := range r.Members {
				id := m.MemberID
				if m.InstanceID != nil {
					id += "(" + *m.InstanceID + ")"
				}
				ms = append(ms, id+" "+fmtMetadata(m.ProtocolMetadata))
			}
			s += " members=[" + strings.Join(ms, "; ") + "]"
		}
		return s
	case *kmsg.SyncGroupResponse:
		if r.ErrorCode != 0 {
			return fmt.Sprintf("%s %s", name, errName(r.ErrorCode))
		}
		return fmt.Sprintf("%s OK type=%s proto=%s assignment=%s", name, deref(r.ProtocolType), deref(r.Protocol), fmtAssignment(r.MemberAssignment))
	case *kmsg.HeartbeatResponse:
		return fmt.Sprintf("%s %s", name, errName(r.ErrorCode))
	case *kmsg.LeaveGroupResponse:
		s := fmt.Sprintf("%s %s", name, errName(r.ErrorCode))
		if r.Version >= 3 {
			var ms []string
			for _, m := range r.Members {
				ms = append(ms, fmt.Sprintf("%q/%s=%s", m.MemberID, deref(m.InstanceID), errName(m.ErrorCode)))
			}
			s += " members=[" + strings.Join(ms, " ") + "]"
		}
		return s
	case *kmsg.OffsetCommitResponse:
		var ps []string
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				ps = append(ps, fmt.Sprintf("%s.%d=%s", t.Topic, p.Partition, errName(p.ErrorCode)))
			}
		}
		return name + " " + strings.Join(ps, " ")
	case *kmsg.OffsetFetchResponse:
		fmtParts := func(topic string, p int32, off int64, ep int32, md *string, code int16) string {
			s := fmt.Sprintf("%s.%d=%d(epoch=%d,md-len=%d)", topic, p, off, ep, len(deref(md)))
			if code != 0 {
				s += errName(code)
			}
			return s
		}
		if r.Version < 8 {
			var ps []string
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					ps = append(ps, fmtParts(t.Topic, p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode))
				}
			}
			return fmt.Sprintf("%s %s [%s]", name, errName(r.ErrorCode), strings.Join(ps, " "))
		}
		var gs []string
		for _, g := range r.Groups {
			var ps []string
			for _, t := range g.Topics {
				for _, p := range t.Partitions {
					ps = append(ps, fmtParts(t.Topic, p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode))
				}
			}
			gs = append(gs, fmt.Sprintf("%s %s [%s]", g.Group, errName(g.ErrorCode), strings.Join(ps, " ")))
		}
		return name + " " + strings.Join(gs, "; ")
	case *kmsg.DescribeGroupsResponse:
		s := name
		for _, g := range r.Groups {
			s += fmt.Sprintf("\n  %s %s state=%s type=%q proto=%q", g.Group, errName(g.ErrorCode), g.State, g.ProtocolType, g.Protocol)
			for _, m := range g.Members {
				s += fmt.Sprintf("\n    %s instance=%s client=%s host=%s", m.MemberID, deref(m.InstanceID), m.ClientID, m.ClientHost)
				if m.ProtocolMetadata != nil || m.MemberAssignment != nil {
					s += fmt.Sprintf(" %s assignment=%s", fmtMetadata(m.ProtocolMetadata), fmtAssignment(m.MemberAssignment))
				}
			}
		}
		return s
	case *kmsg.ListGroupsResponse:
		var gs []string
		for _, g := range r.Groups {
			gs = append(gs, fmt.Sprintf("%s(%s,%q,%s)", g.Group, g.GroupState, g.ProtocolType, g.GroupType))
		}
		return fmt.Sprintf("%s %s [%s]", name, errName(r.ErrorCode), strings.Join(gs, " "))
	case *kmsg.DeleteGroupsResponse:
		var gs []string
		for _, g := range r.Groups {
			gs = append(gs, fmt.Sprintf("%s=%s", g.Group, errName(g.ErrorCode)))
		}
		return name + " " + strings.Join(gs, " ")
	case *kmsg.ConsumerGroupHeartbeatResponse:
		if r.ErrorCode != 0 {
			return fmt.Sprintf("%s %s %q", name, errName(r.ErrorCode), deref(r.ErrorMessage))
		}
		s := fmt.Sprintf("%s OK member=%s epoch=%d interval=%d", name, deref(r.MemberID), r.MemberEpoch, r.HeartbeatIntervalMillis)
		if r.Assignment == nil {
			return s + " assignment=null"
		}
		var ts []string
		for _, at := range r.Assignment.Topics {
			ts = append(ts, fmt.Sprintf("%s%v", topicName(at.TopicID), at.Partitions))
		}
		return s + " assignment=" + strings.Join(ts, "+")
	case *kmsg.ConsumerGroupDescribeResponse:
		s := name
		for _, g := range r.Groups {
			if g.ErrorCode != 0 {
				s += fmt.Sprintf("\n  %s %s %q", g.Group, errName(g.ErrorCode), deref(g.ErrorMessage))
				continue
			}
			s += fmt.Sprintf("\n  %s state=%s epoch=%d assignment-epoch=%d assignor=%s", g.Group, g.State, g.Epoch, g.AssignmentEpoch, g.AssignorName)
			for _, m := range g.Members {
				var ts []string
				for _, tp := range m.Assignment.TopicPartitions {
					ts = append(ts, fmt.Sprintf("%s%v", tp.Topic, tp.Partitions))
				}
				s += fmt.Sprintf("\n    %s epoch=%d assignment=%s", m.MemberID, m.MemberEpoch, strings.Join(ts, "+"))
				if m.MemberType == 0 {
					s += " classic"
				}
			}
		}
		return s
	case *kmsg.OffsetDeleteResponse:
		var ps []string
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				ps = append(ps, fmt.Sprintf("%s.%d=%s", t.Topic, p.Partition, errName(p.ErrorCode)))
			}
		}
		return fmt.Sprintf("%s %s [%s]", name, errName(r.ErrorCode), strings.Join(ps, " "))
	}
	return fmt.Sprintf("%s %+v", name, msg)
}

func (h *harness) printState(id string) {
	g := h.m.groups[id]
	if g == nil {
		fmt.Fprintf(h.buf, "%s: absent\n", id)
		return
	}
	fmt.Fprintf(h.buf, "%s: state=%s prev=%s gen=%d type=%q proto=%q leader=%q state-ts=%d\n",
		id, g.state, g.prevState, g.generation, g.protocolType, g.protocol, g.leader, ms(g.stateTime))
	for _, m := range g.sortedMembers() {
		var flags []string
		if m.instanceID != "" {
			flags = append(flags, "instance="+m.instanceID)
		}
		if m.join != nil {
			flags = append(flags, fmt.Sprintf("awaiting-join=#%d", m.join.id))
		}
		if m.sync != nil {
			flags = append(flags, fmt.Sprintf("awaiting-sync=#%d", m.sync.id))
		}
		if m.isNew {
			flags = append(flags, "new")
		}
		if g.pendingSync[m.id] {
			flags = append(flags, "pending-sync")
		}
		var protos []string
		for _, p := range m.protocols {
			protos = append(protos, p.name)
		}
		line := fmt.Sprintf("  member %s session=%d rebalance=%d protocols=%v assignment=%s %s",
			m.id, m.session.Milliseconds(), m.rebalance.Milliseconds(), protos, fmtAssignment(m.assignment), strings.Join(flags, " "))
		fmt.Fprintln(h.buf, strings.TrimRight(line, " "))
	}
	if len(g.pending) > 0 {
		fmt.Fprintf(h.buf, "  pending %v\n", sortedKeys(g.pending))
	}
	if g.subscribedKnown {
		fmt.Fprintf(h.buf, "  subscribed %v\n", sortedKeys(g.subscribed))
	}
	for _, tp := range g.offsets.sorted() {
		v, _ := g.offsets.get(tp)
		fmt.Fprintf(h.buf, "  offset %s.%d=%d commit-ts=%d\n", tp.topic, tp.partition, v.offset, v.commitTime-epoch.UnixMilli())
	}
}

// fmtRebalance prints a rebalance record on one line, and with detail its
// waits, moves and storm on the lines after.
func fmtRebalance(r *inspect.Rebalance, detail bool) string {
	end := "-"
	if r.EndedAt != nil {
		end = strconv.FormatInt(ms(*r.EndedAt), 10)
	}
	who := "-"
	if r.Member != nil {
		who = r.Member.MemberID
		if r.Member.InstanceID != "" {
			who += "(" + r.Member.InstanceID + ")"
		}
	}
	s := fmt.Sprintf("#%d %s by %s gen=%d->%d %s @%d..%s %dms outcome=%s in=%v out=%v moved=%d",
		r.Seq, r.Trigger, who, r.GenerationBefore, r.GenerationAfter, r.Protocol, ms(r.StartedAt), end, r.DurationMs,
		r.Outcome, r.MembersIn, r.MembersOut, len(r.Moved))
	if r.Storm {
		s += " STORM"
	}
	if !detail {
		return s
	}
	if len(r.WaitedFor) > 0 {
		var ws []string
		for _, w := range r.WaitedFor {
			mark := ""
			if !w.Rejoined {
				mark = "(absent)"
			}
			ws = append(ws, fmt.Sprintf("%s=%dms%s", w.Member, w.WaitedMs, mark))
		}
		s += "\n  waited " + strings.Join(ws, " ")
	}
	for _, mv := range r.Moved {
		from, to, assigned := mv.From, mv.To, "-"
		if from == "" {
			from = "-"
		}
		if to == "" {
			to = "-"
		}
		if !mv.AssignedAt.IsZero() {
			assigned = strconv.FormatInt(ms(mv.AssignedAt), 10)
		}
		s += fmt.Sprintf("\n  move %s.%d %s->%s pause=%dms @%d..%s committed=%d", mv.Topic, mv.Partition, from, to, mv.PauseMs,
			ms(mv.ReleasedAt), assigned, mv.Committed)
	}
	if r.Storm {
		s += "\n  storm: " + r.StormCause
	}
	return s
}

// topicID is a topic's id in transcripts: its name, padded.
func topicID(name string) consumer.TopicID {
	var id consumer.TopicID
	copy(id[:], name)
	return id
}

func topicName(id consumer.TopicID) string { return strings.TrimRight(string(id[:]), "\x00") }

func fmtParts(ts []consumer.TopicPartitions) string {
	if len(ts) == 0 {
		return "-"
	}
	var parts []string
	for _, t := range ts {
		s := fmt.Sprintf("%s%v", topicName(t.TopicID), t.Partitions)
		if t.Epochs != nil {
			s += fmt.Sprintf("@%v", t.Epochs)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "+")
}

// fmtConsumerRecord prints a consumer group's record.
func fmtConsumerRecord(r Record) string {
	c := r.Consumer
	key := r.Type.String() + " " + c.Group
	if c.Member != "" {
		key += "/" + c.Member
	}
	if c.Tombstone() {
		return key + " tombstone"
	}
	switch {
	case c.GroupEpoch != nil:
		return fmt.Sprintf("%s epoch=%d", key, c.GroupEpoch.Epoch)
	case c.MemberMetadata != nil:
		v := c.MemberMetadata
		s := fmt.Sprintf("%s instance=%q client=%s topics=%v regex=%q assignor=%q", key, v.InstanceID, v.ClientID,
			v.SubscribedTopicNames, v.SubscribedTopicRegex, v.ServerAssignor)
		if c := v.Classic; c != nil {
			s += fmt.Sprintf(" classic(session=%d rebalance=%d", c.SessionTimeoutMs, v.RebalanceTimeoutMs)
			for _, p := range c.SupportedProtocols {
				s += fmt.Sprintf(" %s:%s", p.Name, fmtMetadata(p.Metadata))
			}
			s += ")"
		}
		return s
	case c.Target != nil:
		return fmt.Sprintf("%s %s", key, fmtParts(c.Target.Partitions))
	case c.TargetEpoch != nil:
		return fmt.Sprintf("%s epoch=%d", key, c.TargetEpoch.AssignmentEpoch)
	case c.Current != nil:
		v := c.Current
		return fmt.Sprintf("%s epoch=%d prev=%d state=%s assigned=%s pending=%s", key, v.MemberEpoch, v.PreviousMemberEpoch,
			v.State, fmtParts(v.Assigned), fmtParts(v.PendingRevocation))
	}
	return key + " ?"
}
