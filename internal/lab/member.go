package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// member is one incarnation of one group member: its own franz-go client,
// its poll loop, and the callbacks that report what it owns.
type member struct {
	name        string
	incarnation int
	run         *run
	cl          *kgo.Client
	dialer      *killDialer
	cancel      context.CancelFunc
	done        chan struct{}
	// abort is closed by kill: the poll in hand is dropped unfinished.
	abort chan struct{}

	mu sync.Mutex
	// uncommitted holds, per partition, the last record processed and
	// not yet committed (sync and on-revoke commit modes).
	uncommitted map[TP]*kgo.Record

	// stall is extra processing time for the member's next poll (the
	// slow-consumer scenario); stalling is closed when it begins.
	stall    atomic.Int64
	stalling chan struct{}
	stallOne sync.Once
}

func (m *member) owner() owner { return owner{m.name, m.incarnation} }

// startMember starts an incarnation of a member and its poll loop.
func (r *run) startMember(name string, incarnation int) (*member, error) {
	m := &member{name: name, incarnation: incarnation, run: r, dialer: &killDialer{}, done: make(chan struct{}), abort: make(chan struct{}), stalling: make(chan struct{}), uncommitted: map[TP]*kgo.Record{}}
	cfg := r.cfg
	opts := []kgo.Opt{
		kgo.SeedBrokers(splitList(cfg.Bootstrap)...),
		kgo.ClientID("lab-" + name),
		kgo.Dialer(m.dialer.DialContext),
		kgo.ConsumerGroup(r.group),
		kgo.ConsumeTopics(r.subscription()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		kgo.HeartbeatInterval(cfg.HeartbeatInterval),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.MetadataMinAge(250 * time.Millisecond),
		kgo.MetadataMaxAge(2 * time.Second),
		// Revocation waits until the poll in hand is processed, as in a
		// consumer whose rebalance runs inside poll: processing time
		// then counts in the rebalance, and no member commits for a
		// partition it no longer owns.
		kgo.BlockRebalanceOnPoll(),
		kgo.WithLogger(kgoLogger{r.log, name}),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, a map[string][]int32) {
			r.rec.event(name, incarnation, Assigned, generation(cl), flatten(a))
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, rv map[string][]int32) {
			r.rec.event(name, incarnation, Revoked, generation(cl), flatten(rv))
			if !m.dialer.isDead() {
				m.commit(ctx, "commit on revoke")
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, l map[string][]int32) {
			r.rec.event(name, incarnation, Lost, generation(cl), flatten(l))
		}),
	}
	switch cfg.CommitMode {
	case CommitAuto:
		// What is committed is what was processed: the poll loop
		// marks records once it is done with them.
		opts = append(opts, kgo.AutoCommitMarks(), kgo.AutoCommitInterval(cfg.AutoCommitInterval))
	default:
		opts = append(opts, kgo.DisableAutoCommit())
	}
	switch r.proto.Base {
	case Eager:
		opts = append(opts, kgo.Balancers(kgo.RangeBalancer()))
	case Cooperative:
		opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()))
	case Consumer:
		// franz-go runs KIP-848 with the cooperative-sticky balancer
		// as the server's uniform assignor; the run checked that the
		// broker serves it, since the client would quietly fall back
		// to the classic protocol otherwise.
		opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.ServerSideBalancer())
	}
	if r.proto.Static {
		opts = append(opts, kgo.InstanceID(r.group+"-"+name))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	m.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go m.poll(ctx)
	return m, nil
}

func generation(cl *kgo.Client) int32 {
	_, g := cl.GroupMetadata()
	return g
}

func flatten(m map[string][]int32) []TP {
	var out []TP
	for t, ps := range m {
		for _, p := range ps {
			out = append(out, TP{t, p})
		}
	}
	slices.SortFunc(out, compareTP)
	return out
}

// poll is the member's consume loop: it records every record as it is
// polled, processes the poll, marks it for commit, then lets a rebalance
// in.
func (m *member) poll(ctx context.Context) {
	defer close(m.done)
	cfg := m.run.cfg
	for {
		fs := m.cl.PollRecords(ctx, cfg.MaxPollRecords)
		if ctx.Err() != nil || fs.IsClientClosed() {
			m.cl.AllowRebalance()
			return
		}
		at := m.run.rec.now()
		var polled []*kgo.Record
		fs.EachRecord(func(rec *kgo.Record) {
			polled = append(polled, rec)
			key, producedAt, ok := decodeRecord(rec.Value)
			if !ok {
				m.run.log.Warn("a record the lab did not write", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset)
				return
			}
			m.run.rec.consumedRecord(Consumption{At: at, Member: m.name, TP: TP{rec.Topic, rec.Partition}, Offset: rec.Offset, Key: key, ProducedAt: m.run.rec.at(producedAt)})
		})
		work := cfg.Processing * time.Duration(len(polled))
		if len(polled) > 0 {
			if s := time.Duration(m.stall.Swap(0)); s > 0 {
				work += s
				m.stallOne.Do(func() { close(m.stalling) })
			}
		}
		if work > 0 {
			// A clean stop lets the poll in hand finish; a crash
			// drops it.
			t := time.NewTimer(work)
			select {
			case <-t.C:
			case <-m.abort:
				t.Stop()
				m.cl.AllowRebalance()
				return
			}
		}
		m.processed(polled)
		if cfg.CommitMode == CommitSync && len(polled) > 0 {
			m.commit(ctx, "commit after poll")
		}
		m.cl.AllowRebalance()
	}
}

// processed notes records the member is done with: under auto commit they
// are marked for the next autocommit; otherwise they are kept for the next
// explicit commit.
func (m *member) processed(recs []*kgo.Record) {
	if m.run.cfg.CommitMode == CommitAuto {
		m.cl.MarkCommitRecords(recs...)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		m.uncommitted[TP{r.Topic, r.Partition}] = r
	}
}

// commit commits what the member has processed and not yet committed.
func (m *member) commit(ctx context.Context, what string) {
	var err error
	if m.run.cfg.CommitMode == CommitAuto {
		err = m.cl.CommitMarkedOffsets(ctx)
	} else {
		m.mu.Lock()
		recs := make([]*kgo.Record, 0, len(m.uncommitted))
		for _, r := range m.uncommitted {
			recs = append(recs, r)
		}
		clear(m.uncommitted)
		m.mu.Unlock()
		if len(recs) > 0 {
			err = m.cl.CommitRecords(ctx, recs...)
		}
	}
	if err != nil && ctx.Err() == nil {
		m.run.log.Debug(what, "member", m.name, "err", err)
	}
}

// stop closes the member cleanly: its poll loop ends, its revoke callback
// commits, and it leaves the group (a static member of the classic
// protocol does not leave: its instance id holds its place for a restart).
func (m *member) stop() {
	m.cancel()
	<-m.done
	m.cl.Close()
	// A client gives up what it owns in its revoke callback as it
	// closes; should any be left, the closed client owns it no more.
	m.run.rec.event(m.name, m.incarnation, Closed, -1, nil)
}

// kill makes the member vanish: its processing stops, its connections are
// dropped and every later dial fails, so no leave reaches the broker.
func (m *member) kill() {
	m.dialer.kill()
	close(m.abort)
	m.cancel()
	<-m.done
	m.run.rec.event(m.name, m.incarnation, Crashed, -1, nil)
	// The client retries dials that will never succeed; it is closed in
	// the background and waited for, for a while, at the end of the run.
	closed := make(chan struct{})
	go func() { m.cl.Close(); close(closed) }()
	m.run.killed = append(m.run.killed, closed)
}

var errKilled = errors.New("killed by the lab")

// killDialer dials TCP and remembers every connection, so that kill can
// drop them all at once and refuse every later dial.
type killDialer struct {
	mu    sync.Mutex
	d     net.Dialer
	conns []net.Conn
	dead  bool
}

func (k *killDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if k.isDead() {
		return nil, errKilled
	}
	c, err := k.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		c.Close()
		return nil, errKilled
	}
	k.conns = append(k.conns, c)
	return c, nil
}

func (k *killDialer) isDead() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dead
}

func (k *killDialer) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dead = true
	for _, c := range k.conns {
		c.Close()
	}
	k.conns = nil
}

// A record's value starts with its key and the time the producer handed
// it over, so that a consumer can tell both without any shared state.
const recordHeader = 16

func encodeRecord(buf []byte, key uint64, at time.Time) []byte {
	binary.BigEndian.PutUint64(buf[0:8], key)
	binary.BigEndian.PutUint64(buf[8:16], uint64(at.UnixNano()))
	return buf
}

func decodeRecord(v []byte) (key uint64, at time.Time, ok bool) {
	if len(v) < recordHeader {
		return 0, time.Time{}, false
	}
	return binary.BigEndian.Uint64(v[0:8]), time.Unix(0, int64(binary.BigEndian.Uint64(v[8:16]))), true
}
