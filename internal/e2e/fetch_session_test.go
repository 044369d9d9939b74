package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kafka "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/app"
)

// sessionFetch is a fetch of the given partitions of one topic at
// version v, by name below v13 and by id from v13.
func sessionFetch(v int16, topic string, id [16]byte, session, epoch int32, offsets map[int32]int64) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.SessionID, req.SessionEpoch = v, session, epoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 0, 1<<20
	if len(offsets) == 0 {
		return req
	}
	rt := kmsg.NewFetchRequestTopic()
	if v >= 13 {
		rt.TopicID = id
	} else {
		rt.Topic = topic
	}
	for p := range int32(len(offsets) + 64) { // in partition order
		off, ok := offsets[p]
		if !ok {
			continue
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, off, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// answered lists the partitions a fetch reply carries, with their record
// bytes and error: "p=bytes" or "p:ERROR".
func answered(resp *kmsg.FetchResponse) []string {
	var out []string
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				out = append(out, fmt.Sprintf("%d:%s", p.Partition, kerr.ErrorForCode(p.ErrorCode).(*kerr.Error).Message))
				continue
			}
			out = append(out, fmt.Sprintf("%d=%d", p.Partition, len(p.RecordBatches)))
		}
	}
	return out
}

func topicID(t *testing.T, addr, topic string) [16]byte {
	t.Helper()
	adm := kadm.NewClient(newClient(t, addr))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil || td[topic].Err != nil {
		t.Fatalf("metadata of %s: %v %v", topic, err, td[topic].Err)
	}
	return td[topic].ID
}

// TestFetchSessionsOverTCP walks one session through its epochs over a
// real connection, by name (v12) and by topic id (v13 and v18): it is
// opened, read incrementally with only changed partitions in the replies,
// refused at a stale epoch, and freed when its connection closes.
func TestFetchSessionsOverTCP(t *testing.T) {
	a := startServer(t, t.TempDir(), func(c *app.Config) { c.HTTPListen = "127.0.0.1:0" })
	createTopic(t, a.Addr(), "s", 4)
	id := topicID(t, a.Addr(), "s")
	cl := newClient(t, a.Addr(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(p int32) {
		t.Helper()
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "s", Partition: p, Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []int16{12, 13, 18} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			before := a.FetchSessions()
			rc := dialRaw(t, a.Addr())
			do := func(req *kmsg.FetchRequest) *kmsg.FetchResponse {
				t.Helper()
				resp, err := rc.do(req)
				if err != nil {
					t.Fatal(err)
				}
				return resp.(*kmsg.FetchResponse)
			}
			hw := map[int32]int64{}
			for p := range int32(4) {
				hw[p] = 0
			}
			// Epoch -1: every partition, no session.
			r := do(sessionFetch(v, "s", id, 0, -1, hw))
			if r.SessionID != 0 || len(answered(r)) != 4 {
				t.Fatalf("sessionless fetch: session %d, partitions %v", r.SessionID, answered(r))
			}
			// Epoch 0 opens a session.
			r = do(sessionFetch(v, "s", id, 0, 0, hw))
			sid := r.SessionID
			if r.ErrorCode != 0 || sid <= 0 || len(answered(r)) != 4 {
				t.Fatalf("full fetch: error %d session %d partitions %v", r.ErrorCode, sid, answered(r))
			}
			for _, tp := range r.Topics {
				for _, p := range tp.Partitions {
					hw[p.Partition] = p.HighWatermark
				}
			}
			// Caught up: an incremental fetch naming the new positions gets
			// no partition back.
			r = do(sessionFetch(v, "s", id, sid, 1, hw))
			if r.ErrorCode != 0 || r.SessionID != sid || len(answered(r)) != 0 {
				t.Fatalf("epoch 1: error %d session %d partitions %v", r.ErrorCode, r.SessionID, answered(r))
			}
			produce(2)
			r = do(sessionFetch(v, "s", id, sid, 2, nil))
			if got := answered(r); r.ErrorCode != 0 || len(got) != 1 || got[0][:2] != "2=" || got[0] == "2=0" {
				t.Fatalf("epoch 2 after a produce to partition 2: error %d partitions %v", r.ErrorCode, got)
			}
			// The same epoch again.
			r = do(sessionFetch(v, "s", id, sid, 2, nil))
			if r.ErrorCode != kerr.InvalidFetchSessionEpoch.Code || len(r.Topics) != 0 {
				t.Fatalf("repeated epoch 2: error %d partitions %v", r.ErrorCode, answered(r))
			}
			// A request by name on a session by id, or the other way round.
			other := int16(13)
			if v >= 13 {
				other = 12
			}
			r = do(sessionFetch(other, "s", id, sid, 3, nil))
			if r.ErrorCode != kerr.FetchSessionTopicIDError.Code {
				t.Fatalf("v%d fetch on a v%d session: error %d", other, v, r.ErrorCode)
			}
			if st := a.FetchSessions(); st.Created != before.Created+1 || st.IncrementalFetches != before.IncrementalFetches+2 || st.Sessions != before.Sessions+1 {
				t.Fatalf("counters %+v after %+v", st, before)
			}
			// The connection closes: the session is freed, and naming it on
			// another connection finds nothing.
			rc.c.Close()
			deadline := time.Now().Add(10 * time.Second)
			for a.FetchSessions().Dropped == before.Dropped && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if st := a.FetchSessions(); st.Dropped != before.Dropped+1 || st.Sessions != before.Sessions {
				t.Fatalf("after the connection closed: %+v", st)
			}
			rc = dialRaw(t, a.Addr())
			r = do(sessionFetch(v, "s", id, sid, 3, nil))
			if r.ErrorCode != kerr.FetchSessionIDNotFound.Code {
				t.Fatalf("session of a closed connection: error %d", r.ErrorCode)
			}
		})
	}
	// The cache's counters are on /metrics.
	resp, err := http.Get("http://" + a.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"\ngroupd_fetch_sessions 0\n", "\ngroupd_fetch_sessions_created_total 3\n", "\ngroupd_fetch_session_evictions_total 0\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}
}

// TestFetchSessionCacheSlots: with the cache full of sessions too young
// to evict, a full fetch gets session id 0 and is served all the same;
// with no slots, no session is made.
func TestFetchSessionCacheSlots(t *testing.T) {
	for _, slots := range []int{1, -1} {
		t.Run(strconv.Itoa(slots), func(t *testing.T) {
			a := startServer(t, t.TempDir(), func(c *app.Config) { c.FetchSessionCacheSlots = slots })
			createTopic(t, a.Addr(), "s", 1)
			var ids []int32
			for range 2 {
				resp, err := dialRaw(t, a.Addr()).do(sessionFetch(12, "s", [16]byte{}, 0, 0, map[int32]int64{0: 0}))
				if err != nil {
					t.Fatal(err)
				}
				r := resp.(*kmsg.FetchResponse)
				if len(answered(r)) != 1 {
					t.Fatalf("full fetch answered %v", answered(r))
				}
				ids = append(ids, r.SessionID)
			}
			want := []int32{ids[0], 0}
			if slots < 0 {
				want[0] = 0
			}
			if ids[1] != 0 || (ids[0] == 0) != (slots < 0) {
				t.Fatalf("session ids %v, want %v (any non-zero first id with a slot)", ids, want)
			}
		})
	}
}

// TestKafkaGoClientFetch: kafka-go's Client.Fetch sends session id 0 with
// epoch -1 (a fetch outside any session), which must be served.
func TestKafkaGoClientFetch(t *testing.T) {
	a := startServer(t, t.TempDir())
	createTopic(t, a.Addr(), "kgo-client", 1)
	produceKeyed(t, newClient(t, a.Addr()), "kgo-client", 50)
	addr, err := net.ResolveTCPAddr("tcp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c := &kafka.Client{Addr: addr, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := 0
	for offset := int64(0); offset < 50; {
		resp, err := c.Fetch(ctx, &kafka.FetchRequest{Topic: "kgo-client", Partition: 0, Offset: offset, MaxBytes: 1 << 20, MaxWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Error != nil {
			t.Fatalf("fetch at %d: %v", offset, resp.Error)
		}
		if resp.HighWatermark != 50 {
			t.Fatalf("high watermark %d, want 50", resp.HighWatermark)
		}
		for {
			r, err := resp.Records.ReadRecord()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Offset != offset {
				t.Fatalf("record at %d, want %d", r.Offset, offset)
			}
			offset++
			got++
		}

	}
	if st := a.FetchSessions(); st.SessionlessFetches == 0 || st.Created != 0 {
		t.Fatalf("kafka-go's fetches: %+v", st)
	}
}

// consumed collects what a franz-go consumer reads, per topic and
// partition, and checks that each partition is read in order with no gap
// and no repeat.
type consumed struct {
	mu   sync.Mutex
	next map[string]int64 // "topic/partition" -> next offset expected
	n    map[string]int   // per topic
	err  error
}

func (c *consumed) add(fs kgo.Fetches) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fs.EachRecord(func(r *kgo.Record) {
		k := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
		if want := c.next[k]; r.Offset != want && c.err == nil {
			c.err = fmt.Errorf("%s: record at offset %d, want %d", k, r.Offset, want)
		}
		c.next[k] = r.Offset + 1
		c.n[r.Topic]++
	})
}

func (c *consumed) count(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[topic]
}

// resetTopic forgets a deleted topic's positions: a topic created again
// under its name is a new log from offset 0.
func (c *consumed) resetTopic(topic string, partitions int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range partitions {
		delete(c.next, fmt.Sprintf("%s/%d", topic, p))
	}
	c.n[topic] = 0
}

// TestFetchSessionsFranzGo runs a franz-go consumer of two topics of 50
// partitions against groupd and checks that it fetches through a session
// and reads every record, in order, with none missing or repeated, across
// a topic deleted and created again under the same name (a new topic id
// and a log that starts again at offset 0, which on this one-broker
// cluster is what a leader epoch change amounts to for a reader: its
// position in the old log means nothing in the new one), and across a
// restart of groupd, which loses every session.
func TestFetchSessionsFranzGo(t *testing.T) {
	dir := t.TempDir()
	a := startServer(t, dir)
	addr := a.Addr()
	const parts = 50
	createTopic(t, addr, "keep", parts)
	createTopic(t, addr, "gone", parts)
	prod := newClient(t, addr)
	got := &consumed{next: map[string]int64{}, n: map[string]int{}}
	cons := newClient(t, addr, kgo.ConsumeTopics("keep", "gone"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(500*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			got.add(cons.PollFetches(ctx))
		}
	}()
	waitFor := func(what string, topic string, n int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for got.count(topic) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: read %d of %d records of %s (%+v)", what, got.count(topic), n, topic, a.FetchSessions())
			}
			time.Sleep(20 * time.Millisecond)
		}
		got.mu.Lock()
		defer got.mu.Unlock()
		if got.err != nil {
			t.Fatalf("%s: %v", what, got.err)
		}
		if got.n[topic] != n {
			t.Fatalf("%s: read %d records of %s, want %d", what, got.n[topic], topic, n)
		}
	}

	produceKeyed(t, prod, "keep", 500)
	produceKeyed(t, prod, "gone", 500)
	waitFor("first records", "keep", 500)
	waitFor("first records", "gone", 500)
	st := a.FetchSessions()
	if st.Created == 0 || st.IncrementalFetches == 0 {
		t.Fatalf("franz-go did not fetch through a session: %+v", st)
	}
	t.Logf("after the first records: %+v", st)

	// A topic is deleted while the consumer reads it, and made again.
	adm := kadm.NewClient(newClient(t, addr))
	if _, err := adm.DeleteTopics(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	produceKeyed(t, prod, "keep", 500)
	waitFor("after the deletion", "keep", 1000)
	// The consumer's session still holds the deleted topic's partitions,
	// which answer UNKNOWN_TOPIC_ID; they must not cut its long polls
	// short (FetchMaxWait is 200 ms: about 5 fetches a second, against
	// hundreds if every fetch were answered at once).
	before := a.FetchSessions()
	time.Sleep(time.Second)
	if st := a.FetchSessions(); st.IncrementalFetches-before.IncrementalFetches > 50 {
		t.Fatalf("%d incremental fetches in a second with a deleted topic in the session", st.IncrementalFetches-before.IncrementalFetches)
	}
	got.resetTopic("gone", parts)
	createTopic(t, addr, "gone", parts)
	// franz-go does not adopt the new id of a topic created again under
	// its name (it cannot check the new log against its position): the
	// application purges the topic and adds it back, and a new producer
	// writes to it.
	cons.PurgeTopicsFromClient("gone")
	cons.AddConsumeTopics("gone")
	prod = newClient(t, addr)
	produceKeyed(t, prod, "gone", 300)
	waitFor("the topic created again", "gone", 300)
	t.Logf("after the topic came back: %+v", a.FetchSessions())

	// groupd restarts on the same data and address: every session is gone.
	stopServer(t, a)
	a = startServer(t, dir, func(c *app.Config) { c.Listen = addr })
	produceKeyed(t, prod, "keep", 500)
	produceKeyed(t, prod, "gone", 200)
	waitFor("after the restart", "keep", 1500)
	waitFor("after the restart", "gone", 500)
	if st := a.FetchSessions(); st.Created == 0 || st.IncrementalFetches == 0 {
		t.Fatalf("no session after the restart: %+v", st)
	}
	t.Logf("after the restart: %+v", a.FetchSessions())
	cancel()
	<-polled
}

// TestFetchSessionsConsumerRestart: a franz-go group member reads part of
// a topic through a session and commits, and is replaced by a new member;
// the old session is closed (franz-go closes it with epoch -1, or the
// connection's end frees it), the new member opens its own, and every
// record is read.
func TestFetchSessionsConsumerRestart(t *testing.T) {
	a := startServer(t, t.TempDir(), fastGroups)
	const parts, n = 40, 2000
	createTopic(t, a.Addr(), "restart", parts)
	produceKeyed(t, newClient(t, a.Addr()), "restart", n)
	seen := map[string]bool{}
	read := func(limit int) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(a.Addr()), kgo.ConsumerGroup("restart-group"), kgo.ConsumeTopics("restart"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.FetchMaxPartitionBytes(512))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for len(seen) < limit {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("read %d of %d records: %v", len(seen), limit, a.FetchSessions())
			}
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Key)] = true })
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatal(err)
			}
		}
		cl.Close()
	}
	read(n / 2)
	first := a.FetchSessions()
	read(n)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := a.FetchSessions()
		if st.Created >= first.Created+1 && st.Sessions == 0 && st.Closed+st.Dropped >= 2 {
			t.Logf("sessions: %+v", st)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions after two members: %+v (after the first: %+v)", st, first)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(seen) != n {
		t.Fatalf("read %d distinct records, want %d", len(seen), n)
	}
}

// TestFetchLibrdkafka: librdkafka does not implement fetch sessions
// (KIP-227 is "not supported" in its INTRODUCTION.md; it sends session id
// 0 and epoch -1), so every fetch it sends is served outside a session. A
// confluent-kafka group consumer reads half the records of two topics and
// commits; one topic is deleted and the other gets more records; a new
// consumer in the group reads the rest of it. Every record is read once,
// and groupd opened no session.
func TestFetchLibrdkafka(t *testing.T) {
	py := pythonWithClients()
	requireTool(t, py, "-c", "import confluent_kafka")
	a := startServer(t, t.TempDir(), fastGroups)
	const parts, n = 20, 1000
	createTopic(t, a.Addr(), "rd", parts)
	createTopic(t, a.Addr(), "rd-gone", parts)
	prod := newClient(t, a.Addr())
	produceKeyed(t, prod, "rd", n)
	produceKeyed(t, prod, "rd-gone", n)
	seen := map[string]int{}
	run := func(want int, drain string, topics ...string) int {
		args := append([]string{filepath.Join("testdata", "interop", "librdkafka_fetch.py"), a.Addr(), "rd-group", strconv.Itoa(want), drain}, topics...)
		out := runClient(t, nil, py, args...)
		got := 0
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "record" {
				seen[f[1]+"/"+f[2]]++
				if f[1] == "rd" {
					got++
				}
			}
		}
		return got
	}
	first := run(n, "nodrain", "rd", "rd-gone") // n of the 2n records
	adm := kadm.NewClient(newClient(t, a.Addr()))
	if _, err := adm.DeleteTopics(context.Background(), "rd-gone"); err != nil {
		t.Fatal(err)
	}
	// How the first member's n records split between the two topics is
	// librdkafka's choice (it may read all of rd first), so rd gets n more
	// records now: the second member always has to resume from what the
	// first committed.
	more := make([]*kgo.Record, n)
	for i := range more {
		k := strconv.Itoa(n + i)
		more[i] = &kgo.Record{Topic: "rd", Key: []byte(k), Value: []byte("rd-" + k)}
	}
	if err := prod.ProduceSync(context.Background(), more...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	run(2*n-first, "drain", "rd", "rd-gone")
	for i := range 2 * n {
		if k := "rd/" + strconv.Itoa(i); seen[k] != 1 {
			t.Fatalf("record %s read %d times", k, seen[k])
		}
	}
	st := a.FetchSessions()
	if st.SessionlessFetches == 0 || st.Created != 0 || st.FullFetches != 0 {
		t.Fatalf("librdkafka's fetches: %+v", st)
	}
	t.Logf("librdkafka: first member read %d of the first %d records of rd; fetches %+v", first, n, st)
}

// TestNodeID: the id given with --node-id is the broker, leader,
// controller and coordinator every response names, and clients work
// with it.
func TestNodeID(t *testing.T) {
	a := startServer(t, t.TempDir(), fastGroups, func(c *app.Config) { c.NodeID = 7 })
	createTopic(t, a.Addr(), "node", 2)
	cl := newClient(t, a.Addr())
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md, err := adm.Metadata(ctx, "node")
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].NodeID != 7 || md.Controller != 7 {
		t.Fatalf("metadata brokers %+v controller %d", md.Brokers, md.Controller)
	}
	for _, p := range md.Topics["node"].Partitions {
		if p.Leader != 7 || len(p.Replicas) != 1 || p.Replicas[0] != 7 || len(p.ISR) != 1 || p.ISR[0] != 7 {
			t.Fatalf("partition %+v", p)
		}
	}
	dc := kmsg.NewPtrDescribeClusterRequest()
	resp, err := dc.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != 0 || resp.ControllerID != 7 || len(resp.Brokers) != 1 || resp.Brokers[0].NodeID != 7 || resp.Brokers[0].Host+":"+strconv.Itoa(int(resp.Brokers[0].Port)) != a.Advertised() {
		t.Fatalf("DescribeCluster: %+v", resp)
	}
	dc.EndpointType = 2 // a controller's
	if resp, err := dc.RequestWith(ctx, cl); err != nil || resp.ErrorCode != kerr.MismatchedEndpointType.Code {
		t.Fatalf("DescribeCluster to a controller endpoint: %v %+v", err, resp)
	}
	// A group member finds its coordinator by the id and reads its records.
	produceKeyed(t, cl, "node", 20)
	member := newClient(t, a.Addr(), kgo.ConsumerGroup("node-group"), kgo.ConsumeTopics("node"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	n := 0
	for n < 20 {
		fs := member.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of 20 records", n)
		}
		n += fs.NumRecords()
	}
	groups, err := adm.DescribeGroups(ctx, "node-group")
	if err != nil || groups["node-group"].Coordinator.NodeID != 7 {
		t.Fatalf("coordinator of node-group: %+v %v", groups["node-group"].Coordinator, err)
	}
}
