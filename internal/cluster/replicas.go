package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/cluster/kv"
	"github.com/groupd/groupd/internal/cluster/meta"
	"github.com/groupd/groupd/internal/cluster/view"
	"github.com/groupd/groupd/internal/replica"
)

// ReplicaLog is the local log of one partition replica: partition.Log in a
// running groupd. The leader appends through the API layer; the machine
// (replica.Machine) hears of it through Replicas.Produce.
type ReplicaLog interface {
	replica.EpochCache
	LogStartOffset() int64
	LogEndOffset() int64
	HighWatermark() int64
	// SetHighWatermark publishes a new high watermark: consumers read
	// below it only.
	SetHighWatermark(hw int64)
	// AssignEpoch records in the leader-epoch cache that epoch starts at
	// offset; the log stamps it in the batches it appends as leader.
	AssignEpoch(epoch int32, offset int64) error
	// TruncateTo drops every offset >= offset, and every epoch of the
	// cache that starts at or after it.
	TruncateTo(offset int64) error
	// TruncateFullyAndStartAt drops every record and restarts the log
	// empty at offset, its new log start, end and high watermark, with
	// an empty epoch cache.
	TruncateFullyAndStartAt(offset int64) error
	// AppendReplicated appends record batches as the leader stored them,
	// at their offsets, which must start at the log end; it returns the
	// new log end offset.
	AppendReplicated(batches []byte) (int64, error)
	// DeleteRecords moves the log start up to offset (at most the high
	// watermark), as a follower does when the leader's has moved.
	DeleteRecords(offset int64) (int64, error)
}

// Logs opens the local logs of the replicas this node holds.
type Logs interface {
	// Replica returns the log of a partition this node is a replica of,
	// creating it (empty) if it does not exist.
	Replica(t meta.Topic, partition int32) (ReplicaLog, error)
	// Drop deletes the log of a replica this node no longer holds: its
	// topic was deleted, or the replica was moved away.
	Drop(topic meta.ID, partition int32) error
}

// Transport carries a follower's requests to the leader.
type Transport interface {
	// Fetch asks leader for the records of the partitions in want, from
	// their offsets; each answer is either an error or the leader's HW
	// and the batches (possibly none).
	Fetch(ctx context.Context, leader int32, want []FetchWant) ([]FetchResult, error)
	// EpochEnd asks leader OffsetForLeaderEpoch for each question.
	EpochEnd(ctx context.Context, leader int32, asks []EpochAsk) ([]EpochAnswer, error)
}

// FetchWant is one partition of a follower's fetch. LogStart is the
// follower's log start offset, which the leader keeps for DeleteRecords.
type FetchWant struct {
	TP          view.TP
	LeaderEpoch int32
	Offset      int64
	LogStart    int64
}

// FetchResult is the leader's answer for one partition.
type FetchResult struct {
	TP      view.TP
	Err     error
	HW      int64
	Batches []byte
	// LogStart is the leader's log start offset: a follower's follows
	// it (retention and DeleteRecords at the leader). It comes with an
	// OFFSET_OUT_OF_RANGE answer too: a follower whose log end it has
	// passed restarts its log there.
	LogStart int64
}

// EpochAsk is one partition of an OffsetForLeaderEpoch question.
type EpochAsk struct {
	TP          view.TP
	LeaderEpoch int32
	Epoch       int32
}

// EpochAnswer is the leader's answer for one partition.
type EpochAnswer struct {
	TP    view.TP
	Err   error
	Epoch int32
	End   int64
}

// ReplicasConfig configures Replicas.
type ReplicasConfig struct {
	Node      *Node
	Logs      Logs
	Transport Transport
	Logger    *slog.Logger
	// MinInsync is the broker's min.insync.replicas default; a topic's
	// config overrides it.
	MinInsync int
	// LagTimeMax is replica.lag.time.max.
	LagTimeMax time.Duration
	// FetchWait is how long a follower's fetch waits at the leader for
	// records (replica.fetch.wait.max.ms).
	FetchWait time.Duration
	// Leadership, if set, is told whenever this node starts or stops
	// leading a partition, or leads it at a new leader epoch (epoch is
	// -1 when it stops). It is called under the replica's lock, after
	// the step that changed it: it must not block nor call the replica.
	Leadership func(tp view.TP, leading bool, epoch int32)
}

// Replicas runs the replicas this node holds: one replica.Machine per
// partition, stepped under the partition's lock, whose effects it
// performs: the log's epochs, high watermark and truncation, the ISR's
// compare-and-swap in etcd, the acknowledgement of produces, and, for
// followers, fetches from the leader by one fetcher per leader node.
type Replicas struct {
	cfg  ReplicasConfig
	node *Node
	log  *slog.Logger

	mu       sync.Mutex
	slots    map[view.TP]*slot
	fetchers map[int32]*fetcher
	// dropping holds the replicas whose logs are being deleted in the
	// background (dropGone): one placed here again is opened only once
	// its old log is gone.
	dropping map[view.TP]bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewReplicas starts following the node's view: a replica for every
// partition this node is assigned.
func NewReplicas(cfg ReplicasConfig) *Replicas {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinInsync <= 0 {
		cfg.MinInsync = 1
	}
	if cfg.FetchWait <= 0 {
		cfg.FetchWait = 500 * time.Millisecond
	}
	r := &Replicas{cfg: cfg, node: cfg.Node, log: cfg.Logger, slots: map[view.TP]*slot{}, fetchers: map[int32]*fetcher{},
		dropping: map[view.TP]bool{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.wg.Go(r.follow)
	return r
}

// Close stops the fetchers and the replicas' timers.
func (r *Replicas) Close() {
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	slots := make([]*slot, 0, len(r.slots))
	for _, s := range r.slots {
		slots = append(slots, s)
	}
	r.mu.Unlock()
	// Outside r.mu: a slot's step takes r.mu under its own lock.
	for _, s := range slots {
		s.stop()
	}
}

// follow applies every new view and lease deadline to the replicas.
func (r *Replicas) follow() {
	changed := r.node.Subscribe()
	// The lease deadline moves with every keep-alive, which the view does
	// not show: look often enough that a machine's margin is never eaten
	// by the wait.
	tick := max(r.node.cfg.SessionTimeout/20, 50*time.Millisecond)
	for {
		deadline, registered := r.node.Registration()
		r.apply(r.node.View(), deadline, registered)
		t := make(chan struct{})
		stop := r.node.Clock().AfterFunc(tick, func() { close(t) })
		select {
		case <-changed:
		case <-t:
		case <-r.ctx.Done():
			stop()
			return
		}
		stop()
	}
}

// apply gives every replica its state in v, creating the replicas this
// node has been assigned, and the lease deadline. Each state goes with
// the replicas' registrations (registered is this node's, under its
// lease; 0 without one), so that a restarted node does not take its old
// leaderships from the listing.
func (r *Replicas) apply(v *view.View, deadline time.Time, registered int64) {
	me := r.node.ID()
	r.dropGone(v)
	for _, t := range v.SortedTopics() {
		minInsync := r.cfg.MinInsync
		if s, ok := t.Configs["min.insync.replicas"]; ok {
			if n, err := strconv.Atoi(s); err == nil && n > 0 {
				minInsync = n
			}
		}
		for p, replicas := range t.Partitions {
			tp := view.TP{Topic: t.ID, Partition: int32(p)}
			st, ok := v.States[tp]
			if !ok {
				continue
			}
			s := r.slot(tp)
			if s == nil {
				if !slices.Contains(replicas, me) || r.isDropping(tp) {
					continue
				}
				var err error
				if s, err = r.open(t.Topic, tp); err != nil {
					r.log.Error("opening a replica's log", "topic", t.Name, "partition", p, "err", err)
					continue
				}
			}
			s.step(replica.SetState{State: replica.Partition{Replicas: replicas, Leader: st.Leader, LeaderEpoch: st.LeaderEpoch,
				ISR: st.ISR, Revision: st.Revision, MinInsync: minInsync, Registrations: v.RegistrationsFor(me, registered, replicas)}})
		}
	}
	r.mu.Lock()
	slots := make([]*slot, 0, len(r.slots))
	for _, s := range r.slots {
		slots = append(slots, s)
	}
	r.mu.Unlock()
	for _, s := range slots {
		s.step(replica.Lease{Deadline: deadline})
	}
}

// dropGone stops the replicas that v no longer places on this node, and
// deletes their logs: a deleted topic's, or one moved away. Left running,
// a deleted partition's leader would go on proposing ISR changes that
// etcd refuses, for ever.
func (r *Replicas) dropGone(v *view.View) {
	me := r.node.ID()
	r.mu.Lock()
	var gone []*slot
	for tp, s := range r.slots {
		if !slices.Contains(v.Replicas(tp), me) {
			gone = append(gone, s)
			delete(r.slots, tp)
		}
	}
	for _, s := range gone {
		r.dropping[s.tp] = true
	}
	r.mu.Unlock()
	// Outside r.mu: a slot's step takes r.mu under its own lock.
	for _, s := range gone {
		s.stop()
	}
	if len(gone) == 0 {
		return
	}
	// The logs are deleted off the loop that applies views and renews
	// the replicas' leases: deleting a thousand partitions' logs takes
	// seconds, and the leaderships this node keeps must not lapse
	// meanwhile.
	r.wg.Go(func() {
		for _, s := range gone {
			err := r.cfg.Logs.Drop(s.tp.Topic, s.tp.Partition)
			r.mu.Lock()
			delete(r.dropping, s.tp)
			r.mu.Unlock()
			if err != nil {
				r.log.Warn("deleting the log of a replica this node no longer holds", "tp", s.tp, "err", err)
				continue
			}
			r.log.Info("deleted the log of a replica this node no longer holds", "tp", s.tp)
		}
	})
}

// isDropping reports whether the log of tp is still being deleted.
func (r *Replicas) isDropping(tp view.TP) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropping[tp]
}

func (r *Replicas) slot(tp view.TP) *slot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.slots[tp]
}

func (r *Replicas) open(t meta.Topic, tp view.TP) (*slot, error) {
	l, err := r.cfg.Logs.Replica(t, tp.Partition)
	if err != nil {
		return nil, err
	}
	s := &slot{r: r, tp: tp, log: l, acks: map[replica.RequestID]chan error{}, stepped: make(chan struct{}), toldStart: l.LogStartOffset(), ledAt: -1}
	s.m = replica.New(replica.Config{Node: r.node.ID(), LagTimeMax: r.cfg.LagTimeMax,
		LeaseMargin: r.node.cfg.SessionTimeout / 10, Epochs: l},
		replica.Local{LogStart: l.LogStartOffset(), LEO: l.LogEndOffset(), HW: l.HighWatermark()})
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.slots[tp]; old != nil {
		return old, nil
	}
	r.slots[tp] = s
	return s, nil
}

// Replica returns the replica of tp if this node holds one.
func (r *Replicas) Replica(tp view.TP) (*Slot, bool) {
	s := r.slot(tp)
	if s == nil {
		return nil, false
	}
	return &Slot{s}, true
}

// MaxLag is the largest lag, in records, of a follower behind this node
// as leader: over the partitions it leads, its log end offset less each
// follower's last fetch offset (replica.Follower), in the ISR or not. A
// follower that has not fetched from this leadership yet, or whose node
// went away or restarted since, counts for nothing: how far behind it is
// cannot be told (the partition shows as under-replicated once it is out
// of the ISR). 0 when this node leads nothing.
func (r *Replicas) MaxLag() int64 {
	r.mu.Lock()
	slots := make([]*slot, 0, len(r.slots))
	for _, s := range r.slots {
		slots = append(slots, s)
	}
	r.mu.Unlock()
	var lag int64
	for _, s := range slots {
		s.mu.Lock()
		for _, f := range s.m.Followers() {
			lag = max(lag, f.Lag)
		}
		s.mu.Unlock()
	}
	return lag
}

// slot is one partition's replica.
type slot struct {
	r   *Replicas
	tp  view.TP
	log ReplicaLog

	mu      sync.Mutex
	m       *replica.Machine
	acks    map[replica.RequestID]chan error
	nextID  replica.RequestID
	timer   func() bool
	timerAt time.Time
	stopped bool
	// stepped is closed, and replaced, by every step: what the machine
	// knows may have changed (WaitLowWatermark).
	stepped chan struct{}
	// toldStart is the log start offset the machine last heard of.
	toldStart int64
	// ledAt is the leader epoch ReplicasConfig.Leadership was last told
	// this node leads at, -1 if none.
	ledAt int32
}

// step steps the machine with ev and performs its effects.
func (s *slot) step(ev replica.Event) *replica.FetchAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stepLocked(ev)
}

func (s *slot) stepLocked(ev replica.Event) *replica.FetchAnswer {
	if s.stopped {
		return nil
	}
	now := s.r.node.Clock().Now()
	var answer *replica.FetchAnswer
	pending := []replica.Event{ev}
	for len(pending) > 0 {
		ev := pending[0]
		pending = pending[1:]
		for _, e := range s.m.Step(now, ev) {
			switch e := e.(type) {
			case replica.StartEpoch:
				if err := s.log.AssignEpoch(e.Epoch, e.Offset); err != nil {
					s.r.log.Error("recording a leader epoch", "tp", s.tp, "epoch", e.Epoch, "err", err)
				}
			case replica.SetHW:
				s.log.SetHighWatermark(e.HW)
			case replica.Ack:
				if ch, ok := s.acks[e.ID]; ok {
					delete(s.acks, e.ID)
					ch <- e.Err
				}
			case replica.WriteISR:
				s.r.wg.Go(func() { s.writeISR(e) })
			case replica.FetchAnswer:
				answer = &e
			case replica.AskEpoch:
				s.r.fetcher(e.Leader).ask(EpochAsk{TP: s.tp, LeaderEpoch: e.LeaderEpoch, Epoch: e.Epoch})
			case replica.Truncate:
				if err := s.log.TruncateTo(e.To); err != nil {
					s.r.log.Error("truncating a replica's log", "tp", s.tp, "to", e.To, "err", err)
				}
				pending = append(pending, replica.Truncated{LEO: s.log.LogEndOffset()})
			case replica.TruncateFully:
				err := s.log.TruncateFullyAndStartAt(e.Offset)
				s.toldStart = s.log.LogStartOffset() // the machine takes it with Truncated
				if err != nil {
					s.r.log.Error("restarting a replica's log at the leader's log start", "tp", s.tp, "offset", e.Offset, "err", err)
				} else {
					s.r.log.Info("the leader's log start passed this replica's log end: restarted the log there", "tp", s.tp, "offset", e.Offset)
				}
				pending = append(pending, replica.Truncated{LEO: s.log.LogEndOffset()})
			case replica.Fetch:
				s.r.fetcher(e.Leader).want(FetchWant{TP: s.tp, LeaderEpoch: e.LeaderEpoch, Offset: e.Offset, LogStart: e.LogStart})
			}
		}
	}
	s.tellLeadership()
	s.schedule(now)
	close(s.stepped)
	s.stepped = make(chan struct{})
	return answer
}

// schedule arms the timer for the machine's next deadline.
func (s *slot) schedule(now time.Time) {
	at, ok := s.m.NextDeadline()
	if !ok || (s.timer != nil && s.timerAt.Equal(at)) {
		return
	}
	if s.timer != nil {
		s.timer()
	}
	s.timerAt = at
	s.timer = s.r.node.Clock().AfterFunc(max(at.Sub(now), 0), func() { s.step(replica.Tick{}) })
}

// tellLeadership tells ReplicasConfig.Leadership of a change of role or
// epoch, under s.mu.
func (s *slot) tellLeadership() {
	at := int32(-1)
	if !s.stopped && s.m.Role() == replica.RoleLeader {
		at = s.m.LeaderEpoch()
	}
	if at == s.ledAt {
		return
	}
	s.ledAt = at
	if f := s.r.cfg.Leadership; f != nil {
		f(s.tp, at >= 0, at)
	}
}

func (s *slot) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.tellLeadership()
	close(s.stepped) // a WaitLowWatermark sees it stopped
	s.stepped = make(chan struct{})
	if s.timer != nil {
		s.timer()
	}
	for id, ch := range s.acks {
		delete(s.acks, id)
		ch <- kerr.NotLeaderForPartition
	}
}

// writeISR performs a WriteISR and steps its outcome.
func (s *slot) writeISR(w replica.WriteISR) {
	n := s.r.node
	key := n.keys.Partition(s.tp.Topic, s.tp.Partition)
	ctx, cancel := context.WithTimeout(s.r.ctx, n.cfg.SessionTimeout)
	defer cancel()
	v := n.View()
	cur := v.States[s.tp]
	st := meta.PartitionState{Leader: cur.Leader, LeaderEpoch: w.LeaderEpoch, ISR: w.ISR,
		PartitionEpoch: cur.PartitionEpoch + 1, ControllerEpoch: cur.ControllerEpoch}
	var (
		ok  bool
		rev int64
		err error
	)
	_, registered := n.Registration()
	if cur.Revision == w.ExpectRevision && cur.Leader == n.ID() && registered != 0 {
		var data []byte
		if data, err = st.Encode(); err == nil {
			// The write holds only while this process and the members
			// it keeps are registered as they were: a bounced member
			// is for the controller to take out (KIP-903).
			conds := append([]kv.Cond{kv.ModRevisionIs(key, w.ExpectRevision)},
				v.RegistrationConds(n.keys, n.ID(), registered, n.ID(), w.ISR)...)
			ok, rev, err = n.cfg.KV.Txn(ctx, conds, []kv.Op{kv.Put(key, data, 0)})
		}
	}
	if err == nil && ok {
		s.r.log.Info("ISR changed", "topic", s.tp.Topic.String(), "partition", s.tp.Partition, "isr", w.ISR, "leader_epoch", w.LeaderEpoch)
		s.step(replica.ISRWritten{Revision: rev})
		return
	}
	if s.r.ctx.Err() != nil {
		// The replicas are closing: an answer would only have the
		// machine propose again, write after write, until it stops.
		return
	}
	if err != nil {
		s.r.log.Warn("writing the ISR", "tp", s.tp, "err", err)
	}
	// Refused, or not known: the state as etcd holds it now decides.
	current, found, gerr := s.readState(ctx)
	if gerr != nil || !found {
		s.r.log.Warn("reading a partition's state after a refused ISR change", "tp", s.tp, "err", gerr)
		current = s.machineState(cur)
	}
	s.step(replica.ISRWriteFailed{Current: current})
}

// readState reads the partition's state from etcd.
func (s *slot) readState(ctx context.Context) (replica.Partition, bool, error) {
	n := s.r.node
	key := n.keys.Partition(s.tp.Topic, s.tp.Partition)
	v, found, err := n.cfg.KV.Get(ctx, key)
	if err != nil || !found {
		return replica.Partition{}, found, err
	}
	st, err := meta.DecodePartitionState(key, v.Data)
	if err != nil {
		return replica.Partition{}, false, err
	}
	return s.machineState(view.State{PartitionState: st, Revision: v.ModRevision}), true, nil
}

func (s *slot) machineState(st view.State) replica.Partition {
	v := s.r.node.View()
	minInsync := s.r.cfg.MinInsync
	if t, ok := v.TopicByID(s.tp.Topic); ok {
		if m, err := strconv.Atoi(t.Configs["min.insync.replicas"]); err == nil && m > 0 {
			minInsync = m
		}
	}
	replicas := v.Replicas(s.tp)
	_, registered := s.r.node.Registration()
	return replica.Partition{Replicas: replicas, Leader: st.Leader, LeaderEpoch: st.LeaderEpoch, ISR: st.ISR,
		Revision: st.Revision, MinInsync: minInsync, Registrations: v.RegistrationsFor(s.r.node.ID(), registered, replicas)}
}

// Slot is a replica as the API layer uses it.
type Slot struct{ s *slot }

// Role is the replica's role.
func (sl *Slot) Role() replica.Role {
	sl.s.mu.Lock()
	defer sl.s.mu.Unlock()
	return sl.s.m.Role()
}

// Log is the replica's log.
func (sl *Slot) Log() ReplicaLog { return sl.s.log }

// CheckAppend says whether this node may append to the partition as its
// leader now, for a produce with acks=all or not.
func (sl *Slot) CheckAppend(acksAll bool) error {
	sl.s.mu.Lock()
	defer sl.s.mu.Unlock()
	return sl.s.m.CheckAppend(sl.s.r.node.Clock().Now(), acksAll)
}

// CheckLeaderEpoch checks a request's current leader epoch (-1: not
// given) against the replica's: nil only at the leader's epoch, while
// this node leads it under a live lease (ask it before answering
// OffsetForLeaderEpoch, Fetch or ListOffsets as leader).
func (sl *Slot) CheckLeaderEpoch(epoch int32) error {
	sl.s.mu.Lock()
	defer sl.s.mu.Unlock()
	return sl.s.m.CheckLeaderEpoch(sl.s.r.node.Clock().Now(), epoch)
}

// ClientHW is the high watermark consumers may be told, or
// OFFSET_NOT_AVAILABLE while a new leader's is below its epoch's start,
// or NOT_LEADER_OR_FOLLOWER unless this node leads under a live lease.
func (sl *Slot) ClientHW() (int64, error) {
	sl.s.mu.Lock()
	defer sl.s.mu.Unlock()
	return sl.s.m.ClientHW(sl.s.r.node.Clock().Now())
}

// Produced reports records appended as leader up to end (exclusive) and
// returns the channel their acknowledgement comes on: nil, or the error to
// answer the produce with. acksAll waits for the ISR; otherwise only the
// lease is checked.
func (sl *Slot) Produced(end int64, acksAll bool, deadline time.Time) <-chan error {
	s := sl.s
	ch := make(chan error, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		ch <- kerr.NotLeaderForPartition
		return ch
	}
	s.nextID++
	id := s.nextID
	s.acks[id] = ch
	s.stepLocked(replica.Produce{ID: id, End: end, Deadline: deadline, LeaderOnly: !acksAll})
	return ch
}

// Appended reports records appended as leader that no produce waits for.
func (sl *Slot) Appended(leo int64) { sl.s.step(replica.Appended{LEO: leo}) }

// FollowerFetch records a follower's fetch (its log end offset, and its
// log start offset, -1 if not given) and says whether to answer it with
// records from offset, and with which HW.
func (sl *Slot) FollowerFetch(node, leaderEpoch int32, offset, logStart int64) (hw int64, err error) {
	s := sl.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if start := s.log.LogStartOffset(); start != s.toldStart {
		// Retention moved it since the machine last heard: the range
		// a follower may fetch starts there.
		s.toldStart = start
		s.stepLocked(replica.LogStart{Offset: start})
	}
	a := s.stepLocked(replica.FollowerFetch{Node: node, LeaderEpoch: leaderEpoch, Offset: offset, LogStart: logStart})
	if a == nil {
		return 0, kerr.NotLeaderForPartition
	}
	return a.HW, a.Err
}

// LogStartMoved tells the machine that the log start moved (DeleteRecords
// or retention at the leader).
func (sl *Slot) LogStartMoved() {
	s := sl.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.toldStart = s.log.LogStartOffset()
	s.stepLocked(replica.LogStart{Offset: s.toldStart})
}

// WaitLowWatermark waits until the partition's low watermark as its leader
// knows it (replica.Machine.LowWatermark: the smallest log start over the
// leader and its registered followers) reaches offset, and returns it;
// or returns the error that stops the wait: NOT_LEADER_OR_FOLLOWER, or
// REQUEST_TIMED_OUT once timeout has passed on the node's clock.
func (sl *Slot) WaitLowWatermark(ctx context.Context, offset int64, timeout time.Duration) (int64, error) {
	s := sl.s
	expired := make(chan struct{})
	stop := s.r.node.Clock().AfterFunc(timeout, func() { close(expired) })
	defer stop()
	for {
		s.mu.Lock()
		low, err := s.m.LowWatermark(s.r.node.Clock().Now())
		stepped, stopped := s.stepped, s.stopped
		s.mu.Unlock()
		switch {
		case stopped:
			return low, kerr.NotLeaderForPartition
		case err != nil || low >= offset:
			return low, err
		}
		select {
		case <-stepped:
		case <-expired:
			return low, kerr.RequestTimedOut
		case <-ctx.Done():
			return low, kerr.RequestTimedOut
		}
	}
}

// fetcher returns the fetcher of leader, starting it if needed.
func (r *Replicas) fetcher(leader int32) *fetcher {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.fetchers[leader]
	if f == nil {
		f = &fetcher{r: r, leader: leader, wants: map[view.TP]FetchWant{}, asks: map[view.TP]EpochAsk{}, wake: make(chan struct{}, 1)}
		r.fetchers[leader] = f
		r.wg.Go(f.run)
	}
	return f
}

// fetcher sends a follower's requests to one leader node: its
// OffsetForLeaderEpoch questions and one Fetch for every partition that
// waits for records, and steps the answers into the replicas.
type fetcher struct {
	r      *Replicas
	leader int32

	mu    sync.Mutex
	wants map[view.TP]FetchWant
	asks  map[view.TP]EpochAsk
	wake  chan struct{}
}

func (f *fetcher) want(w FetchWant) {
	f.mu.Lock()
	f.wants[w.TP] = w
	f.mu.Unlock()
	f.signal()
}

func (f *fetcher) ask(a EpochAsk) {
	f.mu.Lock()
	f.asks[a.TP] = a
	f.mu.Unlock()
	f.signal()
}

func (f *fetcher) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *fetcher) take() ([]FetchWant, []EpochAsk) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ws []FetchWant
	for _, w := range f.wants {
		ws = append(ws, w)
	}
	var as []EpochAsk
	for _, a := range f.asks {
		as = append(as, a)
	}
	clear(f.wants)
	clear(f.asks)
	return ws, as
}

func (f *fetcher) run() {
	for {
		select {
		case <-f.wake:
		case <-f.r.ctx.Done():
			return
		}
		wants, asks := f.take()
		if len(asks) > 0 {
			f.doAsks(asks)
		}
		if len(wants) > 0 {
			f.doFetch(wants)
		}
	}
}

func (f *fetcher) doAsks(asks []EpochAsk) {
	ctx, cancel := context.WithTimeout(f.r.ctx, f.r.node.cfg.SessionTimeout)
	defer cancel()
	answers, err := f.r.cfg.Transport.EpochEnd(ctx, f.leader, asks)
	got := map[view.TP]EpochAnswer{}
	for _, a := range answers {
		got[a.TP] = a
	}
	for _, q := range asks {
		s := f.r.slot(q.TP)
		if s == nil {
			continue
		}
		a, ok := got[q.TP]
		if err != nil || !ok {
			a = EpochAnswer{Err: fmt.Errorf("asking node %d: %w", f.leader, errOr(err, errors.New("no answer")))}
		}
		s.step(replica.EpochAnswer{LeaderEpoch: q.LeaderEpoch, Err: a.Err, Epoch: a.Epoch, End: a.End})
	}
}

func (f *fetcher) doFetch(wants []FetchWant) {
	ctx, cancel := context.WithTimeout(f.r.ctx, f.r.cfg.FetchWait+f.r.node.cfg.SessionTimeout)
	defer cancel()
	results, err := f.r.cfg.Transport.Fetch(ctx, f.leader, wants)
	got := map[view.TP]FetchResult{}
	for _, res := range results {
		got[res.TP] = res
	}
	for _, w := range wants {
		s := f.r.slot(w.TP)
		if s == nil {
			continue
		}
		res, ok := got[w.TP]
		if err != nil || !ok {
			s.step(replica.FetchFailed{LeaderEpoch: w.LeaderEpoch, Err: fmt.Errorf("fetching from node %d: %w", f.leader, errOr(err, errors.New("no answer")))})
			continue
		}
		if res.Err != nil {
			s.step(replica.FetchFailed{LeaderEpoch: w.LeaderEpoch, Err: res.Err, LeaderLogStart: res.LogStart})
			continue
		}
		s.appendFetched(w, res)
	}
}

// appendFetched appends a fetch's records at the leader's offsets and
// steps the outcome, under the replica's lock so that no truncation runs
// between the two.
func (s *slot) appendFetched(w FetchWant, res FetchResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.m.AwaitsFetch(w.LeaderEpoch, w.Offset) {
		return // a stale answer: the machine has moved on
	}
	leo := s.log.LogEndOffset()
	if len(res.Batches) > 0 {
		if leo != w.Offset {
			// The log moved since the fetch was asked (truncated):
			// the machine asks again from where it is.
			s.stepLocked(replica.FetchFailed{LeaderEpoch: w.LeaderEpoch, Err: kerr.OffsetOutOfRange})
			return
		}
		var err error
		if leo, err = s.log.AppendReplicated(res.Batches); err != nil {
			s.r.log.Error("appending fetched records", "tp", s.tp, "offset", w.Offset, "err", err)
			s.stepLocked(replica.FetchFailed{LeaderEpoch: w.LeaderEpoch, Err: err})
			return
		}
	}
	s.stepLocked(replica.Fetched{LeaderEpoch: w.LeaderEpoch, LEO: leo, HW: res.HW})
	if start := min(res.LogStart, s.log.HighWatermark()); start > s.log.LogStartOffset() {
		if _, err := s.log.DeleteRecords(start); err != nil {
			s.r.log.Warn("moving a follower's log start to the leader's", "tp", s.tp, "offset", start, "err", err)
		} else {
			s.toldStart = s.log.LogStartOffset()
			s.stepLocked(replica.LogStart{Offset: s.toldStart})
		}
	}
}

func errOr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}
