package fetchsession

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestTranscripts drives the cache from testdata/*: each file is a
// conversation of fetches against a few simulated partition logs, with
// the cache's answers. Rewrite expectations with
// `go test ./internal/fetchsession -run TestTranscripts -rewrite` and
// review the diff.
//
//	config max=N age=DUR            a new cache (sequential session ids)
//	log T P hw=H [start=S] [gone]   set a partition's log (gone: deleted)
//	advance DUR                     move the clock on
//	fetch conn=C session=S epoch=E [ids] [as=NAME] [begin]
//	T P OFFSET                      a partition named by the request
//	forget T P                      a partition the request forgets
//	finish NAME                     finish a fetch begun with `begin`
//	close conn=C                    the connection closed
//	stats                           the cache's counters
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{logs: map[string]*plog{}, pending: map[string]*Fetch{}, now: time.Unix(1_700_000_000, 0)}
		h.cache = New(Config{NewID: SequentialIDs()})
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := h.run(d)
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			return out
		})
	})
}

// plog is a simulated partition: offsets [start, hw); a fetch at offset o
// returns hw-o record bytes.
type plog struct {
	hw, start int64
	gone      bool
}

type harness struct {
	cache   *Cache
	now     time.Time
	logs    map[string]*plog // "topic/partition"
	pending map[string]*Fetch
}

func (h *harness) run(d *datadriven.TestData) (string, error) {
	args := map[string]string{}
	flags := map[string]bool{}
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 {
			flags[a.Key] = true
			continue
		}
		args[a.Key] = a.Vals[0]
	}
	num := func(k string) int64 {
		v, _ := strconv.ParseInt(args[k], 10, 64)
		return v
	}
	switch d.Cmd {
	case "config":
		age, _ := time.ParseDuration(args["age"])
		h.cache = New(Config{MaxSessions: int(num("max")), EvictionAge: age, NewID: SequentialIDs()})
		return "", nil
	case "log":
		f := strings.Fields(d.CmdArgs[0].Key + " " + d.CmdArgs[1].Key)
		l := &plog{hw: num("hw"), start: num("start"), gone: flags["gone"]}
		h.logs[f[0]+"/"+f[1]] = l
		return "", nil
	case "advance":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			return "", err
		}
		h.now = h.now.Add(dur)
		return "", nil
	case "fetch":
		req := Request{Conn: uint64(num("conn")), SessionID: int32(num("session")), Epoch: int32(num("epoch")), TopicIDs: flags["ids"]}
		for _, line := range strings.Split(d.Input, "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 0:
			case f[0] == "forget" && len(f) == 3:
				req.Forgotten = append(req.Forgotten, h.key(f[1], f[2], req.TopicIDs))
			case len(f) == 3:
				off, err := strconv.ParseInt(f[2], 10, 64)
				if err != nil {
					return "", err
				}
				req.Parts = append(req.Parts, Part{h.key(f[0], f[1], req.TopicIDs), Params{FetchOffset: off, MaxBytes: 1 << 20}})
			default:
				return "", fmt.Errorf("bad partition line %q", line)
			}
		}
		f := h.cache.Begin(h.now, req)
		var b strings.Builder
		fmt.Fprintf(&b, "%s", f.Kind)
		if f.Kind == Failed {
			fmt.Fprintf(&b, " %s", errName(f.ErrorCode))
		}
		if len(f.Parts) > 0 {
			fmt.Fprintf(&b, ": reads")
			for _, p := range f.Parts {
				fmt.Fprintf(&b, " %s@%d", keyName(p.Key), p.Params.FetchOffset)
			}
		}
		b.WriteString("\n")
		if flags["begin"] {
			h.pending[args["as"]] = f
			return b.String(), nil
		}
		b.WriteString(h.finish(f))
		return b.String(), nil
	case "finish":
		f := h.pending[d.CmdArgs[0].Key]
		if f == nil {
			return "", fmt.Errorf("no fetch begun as %q", d.CmdArgs[0].Key)
		}
		delete(h.pending, d.CmdArgs[0].Key)
		return h.finish(f), nil
	case "close":
		h.cache.ConnClosed(uint64(num("conn")))
		return h.stats(), nil
	case "stats":
		return h.stats(), nil
	}
	return "", fmt.Errorf("unknown command %q", d.Cmd)
}

// key names topic T partition P; with ids the topic is named by an id
// spelled from its name, as Fetch v13 does.
func (h *harness) key(topic, part string, ids bool) Key {
	p, _ := strconv.Atoi(part)
	k := Key{Partition: int32(p)}
	if ids {
		copy(k.TopicID[:], topic)
	} else {
		k.Topic = topic
	}
	return k
}

func keyName(k Key) string {
	if k.Topic != "" {
		return fmt.Sprintf("%s/%d", k.Topic, k.Partition)
	}
	return fmt.Sprintf("id:%s/%d", strings.TrimRight(string(k.TopicID[:]), "\x00"), k.Partition)
}

func (h *harness) log(k Key) *plog {
	name := k.Topic
	if name == "" {
		name = strings.TrimRight(string(k.TopicID[:]), "\x00")
	}
	return h.logs[fmt.Sprintf("%s/%d", name, k.Partition)]
}

func (h *harness) read(k Key, p Params) Result {
	l := h.log(k)
	switch {
	case l == nil || l.gone:
		code := kerr.UnknownTopicOrPartition.Code
		if k.Topic == "" {
			code = kerr.UnknownTopicID.Code
		}
		return Result{ErrorCode: code, HighWatermark: -1, LogStartOffset: -1}
	case p.FetchOffset < l.start || p.FetchOffset > l.hw:
		return Result{ErrorCode: kerr.OffsetOutOfRange.Code, HighWatermark: l.hw, LogStartOffset: l.start}
	}
	return Result{HighWatermark: l.hw, LogStartOffset: l.start, RecordBytes: int(l.hw - p.FetchOffset)}
}

func (h *harness) finish(f *Fetch) string {
	results := make([]Result, len(f.Parts))
	for i, p := range f.Parts {
		// As the broker does: a partition Quiet for its log now is not
		// read, and must be left out of the reply all the same.
		if l := h.log(p.Key); l != nil && !l.gone && f.Quiet(i, l.hw, l.start) {
			results[i] = Result{Unread: true}
			continue
		}
		results[i] = h.read(p.Key, p.Params)
	}
	id, code, keep := h.cache.Finish(h.now, f, results)
	var b strings.Builder
	fmt.Fprintf(&b, "reply session=%d error=%s\n", id, errName(code))
	if code != 0 {
		return b.String()
	}
	for i, p := range f.Parts {
		if keep != nil && !keep[i] {
			continue
		}
		r := results[i]
		fmt.Fprintf(&b, "  %s", keyName(p.Key))
		if r.ErrorCode != 0 {
			fmt.Fprintf(&b, " %s", errName(r.ErrorCode))
		}
		fmt.Fprintf(&b, " hw=%d start=%d records=%d\n", r.HighWatermark, r.LogStartOffset, r.RecordBytes)
	}
	return b.String()
}

func (h *harness) stats() string {
	st := h.cache.Stats()
	ids := make([]int, 0, len(h.cache.sessions))
	for id := range h.cache.sessions {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	var b strings.Builder
	fmt.Fprintf(&b, "sessions=%d partitions=%d created=%d not-created=%d evicted=%d closed=%d dropped=%d\n",
		st.Sessions, st.Partitions, st.Created, st.NotCreated, st.Evicted, st.Closed, st.Dropped)
	fmt.Fprintf(&b, "fetches: sessionless=%d full=%d incremental=%d failed=%d\n",
		st.SessionlessFetches, st.FullFetches, st.IncrementalFetches, st.FailedFetches)
	for _, id := range ids {
		s := h.cache.sessions[int32(id)]
		fmt.Fprintf(&b, "session %d conn=%d epoch=%d size=%d evictable=%t parts:", s.id, s.conn, s.epoch, len(s.parts), s.evictable)
		for e := s.order.next; e != &s.order; e = e.next {
			fmt.Fprintf(&b, " %s", keyName(e.key))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func errName(code int16) string {
	if code == 0 {
		return "NONE"
	}
	return kerr.ErrorForCode(code).(*kerr.Error).Message
}
