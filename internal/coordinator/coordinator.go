// Package coordinator is the runtime around the pure group state machine.
//
// Groups are spread over a fixed number of shards by store.ShardOf of the
// group id. Each shard is one goroutine that owns one group.Machine; nothing
// else touches it, so group state needs no locks. A shard takes events from
// its queue (requests, timer firings, the offset-retention tick), steps the
// machine with the clock's time, mirrors the machine's deadlines in a timer
// queue served by one clock callback, and gathers the records and replies
// of the events it stepped into a batch. A writer goroutine per shard makes
// one batch durable at a time with one store.Apply and then releases its
// replies (durable before visible). Like Kafka's coordinator runtime, the
// loop does not wait for that write: it goes on stepping later events into
// the next batch, whose replies wait until it too is durable, so every
// reply goes out in order and only after the records of all events before
// it. The exception is a classic heartbeat that writes nothing and
// acknowledges no change (no error, or REBALANCE_IN_PROGRESS): it is
// answered as soon as it is stepped, not behind another request's write.
// The next batch is written as soon as the writer is free, which is
// group commit under load.
//
// A shard's loop yields once each time it is woken, so that the callers
// ready to run submit their requests first and one wake-up steps them
// all: a thousand members heartbeating back to back otherwise cost a
// wake-up and two goroutine switches per heartbeat.
//
// If a write fails, none of the replies of that batch, nor of any event
// stepped after it, are released as successes: they become
// COORDINATOR_NOT_AVAILABLE, which clients retry, and the shard rebuilds its
// machine from the store. Until a shard has
// loaded its records, requests for its groups are answered with
// COORDINATOR_LOAD_IN_PROGRESS; a load that fails is retried with backoff,
// except on a stored record that does not decode, which stops the shard and
// is reported by WaitLoad and Failed.
//
// Handle splits requests that name groups of several shards (DescribeGroups,
// DeleteGroups, OffsetFetch v8+, ListGroups) and merges the answers.
//
// The coordinator is also an inspect.Source: read-only views of its groups
// and their rebalance histories, copied out on each shard's own loop. It
// completes every finished rebalance (commit gaps from the broker's high
// watermarks), logs it and tells the Observer before its record is written.
package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/group/consumer"
	"github.com/groupd/groupd/internal/group/core"
	"github.com/groupd/groupd/internal/store"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Config configures a Coordinator.
type Config struct {
	// Shards is the number of shards (default 8, or the store's own count
	// when the store reports one). It must match the store's.
	Shards int
	// Group configures the state machines.
	Group group.Config
	// Store holds the records; required. The coordinator does not close it.
	Store store.Store
	// Clock defaults to RealClock.
	Clock Clock
	// OffsetsRetentionCheckInterval is offsets.retention.check.interval.ms
	// (default 10 minutes).
	OffsetsRetentionCheckInterval time.Duration
	// Logger defaults to slog.Default.
	Logger *slog.Logger
	// Seed seeds member-id generation. It must differ per start so member
	// ids are not reused across restarts; 0 means the wall-clock time at
	// start.
	Seed uint64
	// HighWatermark looks up a partition's high watermark, for the lag
	// and commit gaps the inspect methods and rebalance records report.
	// It must be safe for concurrent use; nil leaves them unknown.
	HighWatermark func(topic string, partition int32) (int64, bool)
	// Observer, if set, is told of finished rebalances and store writes.
	Observer Observer
	// Topics returns the broker's topic metadata, for consumer groups'
	// subscriptions and assignments. It is read when a shard loads and on
	// every TopicsChanged call; it must be safe for concurrent use. Nil
	// means no topics.
	Topics func() []group.Topic
	// Hooks let a simulation pace and watch the runtime; see Hooks.
	Hooks Hooks
	// Owned makes every shard wait to be owned (Own) before it loads,
	// and unload when disowned (Disown): the shards of a cluster, each
	// served by the node that leads its partition. Without it every
	// shard is this node's from the start.
	Owned bool
	// ShardOf maps a group to its shard; store.ShardOf if nil. It must
	// be the store's mapping too.
	ShardOf func(groupID string, shards int) int
	// NodeID is this node, named as where an owned shard moved to.
	NodeID int32
}

// Coordinator serves the group APIs over sharded group machines.
type Coordinator struct {
	cfg       Config
	shards    []*shard
	failures  *loadFailures
	closeOnce sync.Once
	// topicsMu orders TopicsChanged calls, so that every shard gets the
	// snapshots in the order they were taken.
	topicsMu sync.Mutex
}

// New starts a coordinator: one goroutine per shard, each of which first
// loads its records from the store.
func New(cfg Config) *Coordinator {
	if cfg.Store == nil {
		panic("coordinator: Config.Store is required")
	}
	if sc, ok := cfg.Store.(interface{ Shards() int }); ok {
		if cfg.Shards == 0 {
			cfg.Shards = sc.Shards()
		} else if cfg.Shards != sc.Shards() {
			panic(fmt.Sprintf("coordinator: %d shards over a store routed by %d", cfg.Shards, sc.Shards()))
		}
	}
	if cfg.Shards <= 0 {
		cfg.Shards = 8
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock()
	}
	if cfg.OffsetsRetentionCheckInterval <= 0 {
		cfg.OffsetsRetentionCheckInterval = 10 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ShardOf == nil {
		cfg.ShardOf = store.ShardOf
	}
	if cfg.Seed == 0 {
		// Real time, not the configured clock: a virtual clock starts
		// at the same instant every run.
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	c := &Coordinator{cfg: cfg, failures: newLoadFailures()}
	shared, sharedConsumer := cfg.Group.NewMemberID, cfg.Group.Consumer.NewMemberID
	var sharedMu sync.Mutex
	for i := 0; i < cfg.Shards; i++ {
		gcfg := cfg.Group
		if shared == nil {
			gcfg.NewMemberID = group.SeededMemberIDs(core.Mix(cfg.Seed + uint64(i)))
		} else {
			// A caller-supplied generator is shared by all shard
			// goroutines.
			gcfg.NewMemberID = func(prefix string) string {
				sharedMu.Lock()
				defer sharedMu.Unlock()
				return shared(prefix)
			}
		}
		if sharedConsumer == nil {
			// Another stream than the classic ids': member ids of
			// ConsumerGroupHeartbeat v0.
			gcfg.Consumer.NewMemberID = consumer.SeededMemberIDs(core.Mix(^(cfg.Seed + uint64(i))))
		} else {
			gcfg.Consumer.NewMemberID = func() string {
				sharedMu.Lock()
				defer sharedMu.Unlock()
				return sharedConsumer()
			}
		}
		s := newShard(i, &cfg, gcfg)
		s.failures = c.failures
		if cfg.Owned {
			// No shard loads before it is owned, so WaitLoad has
			// nothing to wait for; a shard that cannot load its
			// records is reported by Failed.
			close(s.tried)
		}
		c.shards = append(c.shards, s)
	}
	for _, s := range c.shards {
		s.busy(1) // the loop, until it exits
		go s.run()
	}
	return c
}

func (c *Coordinator) shardOf(groupID string) *shard {
	return c.shards[c.cfg.ShardOf(groupID, len(c.shards))]
}

// Close stops the shards after the events already queued. Requests still
// parked (a JoinGroup waiting for its rebalance) are answered with
// NOT_COORDINATOR, and later calls get NOT_COORDINATOR at once. Close waits
// for the shard goroutines; a shard blocked in store.Load keeps it waiting.
func (c *Coordinator) Close() error {
	c.closeOnce.Do(func() {
		for _, s := range c.shards {
			s.close()
		}
		for _, s := range c.shards {
			<-s.done
		}
	})
	return nil
}

// barrier waits until every shard has released the replies of all events
// queued before it. Tests use it after moving the clock.
func (c *Coordinator) barrier() {
	for _, s := range c.shards {
		s.runFunc(func(*group.Machine) {})
	}
}

// Handle serves one group request. It blocks until the reply is released,
// which for a parked JoinGroup can take as long as a rebalance; if ctx ends
// first it returns ctx.Err() (the shard still completes the request, and
// its reply is dropped).
func (c *Coordinator) Handle(ctx context.Context, clientID, clientHost string, req kmsg.Request) (kmsg.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		return c.single(ctx, r.Group, clientID, clientHost, req)
	case *kmsg.SyncGroupRequest:
		return c.single(ctx, r.Group, clientID, clientHost, req)
	case *kmsg.HeartbeatRequest:
		return c.single(ctx, r.Group, clientID, clientHost, req)
	case *kmsg.LeaveGroupRequest:
		return c.single(ctx, r.Group, clientID, clientHost, req)
	case *kmsg.OffsetCommitRequest:
		return c.single(ctx, r.Group, clientID, clientHost, req)
	case *kmsg.OffsetDeleteRequest:
		return c.single(ctx, r.Group, clientID, clientHost, req)
	case *kmsg.OffsetFetchRequest:
		if r.Version < 8 {
			return c.single(ctx, r.Group, clientID, clientHost, req)
		}
		return c.offsetFetchGroups(ctx, clientID, clientHost, r)
	case *kmsg.ConsumerGroupHeartbeatRequest:
		return c.single(ctx, r.Group, clientID, clientHost, req)
	case *kmsg.ConsumerGroupDescribeRequest:
		return c.consumerGroupDescribe(ctx, clientID, clientHost, r)
	case *kmsg.DescribeGroupsRequest:
		return c.describeGroups(ctx, clientID, clientHost, r)
	case *kmsg.DeleteGroupsRequest:
		return c.deleteGroups(ctx, clientID, clientHost, r)
	case *kmsg.ListGroupsRequest:
		return c.listGroups(ctx, clientID, clientHost, r)
	}
	return nil, fmt.Errorf("coordinator: unsupported request %T", req)
}

func (c *Coordinator) single(ctx context.Context, groupID, clientID, clientHost string, req kmsg.Request) (kmsg.Response, error) {
	return c.shardOf(groupID).do(clientID, clientHost, req).Wait(ctx)
}

// Wait waits for the reply to a submitted request, or for ctx to end.
type Wait func(ctx context.Context) (kmsg.Response, error)

// Submit queues a request on its shard before it returns, and returns the
// wait for its reply. Requests a caller submits one after another reach
// their shard in that order, but their waits may overlap: a connection's
// pipelined commits then share one durable write instead of each waiting
// for its own. Requests naming several groups are answered before Submit
// returns.
func (c *Coordinator) Submit(ctx context.Context, clientID, clientHost string, req kmsg.Request) Wait {
	p := new(Pending)
	c.Start(ctx, clientID, clientHost, req, p)
	return p.Wait
}

// Start is Submit with the reply to come kept in p, a zero Pending the
// caller may hold inside its own value: a group request then costs its
// caller no allocation of the coordinator's.
func (c *Coordinator) Start(ctx context.Context, clientID, clientHost string, req kmsg.Request, p *Pending) {
	groupID, ok := GroupOf(req)
	if !ok {
		p.resp, p.err = c.Handle(ctx, clientID, clientHost, req)
		return
	}
	c.shardOf(groupID).start(clientID, clientHost, req, p)
}

// GroupOf returns the one group a request names, and false for a request
// that names several (or none): those are split across shards by Handle.
func GroupOf(req kmsg.Request) (string, bool) {
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		return r.Group, true
	case *kmsg.SyncGroupRequest:
		return r.Group, true
	case *kmsg.HeartbeatRequest:
		return r.Group, true
	case *kmsg.LeaveGroupRequest:
		return r.Group, true
	case *kmsg.OffsetCommitRequest:
		return r.Group, true
	case *kmsg.OffsetDeleteRequest:
		return r.Group, true
	case *kmsg.ConsumerGroupHeartbeatRequest:
		return r.Group, true
	case *kmsg.OffsetFetchRequest:
		if r.Version < 8 {
			return r.Group, true
		}
	}
	return "", false
}

// Pending is the reply to a submitted request, which its shard releases
// once it is durable.
type Pending struct {
	call
	// resp and err are the answer once known: at once, or once Wait
	// has taken it.
	resp kmsg.Response
	err  error
}

// Answer makes resp the reply of a request that was not started: a caller
// that answers it itself (a group another node coordinates) hands it on
// like any other.
func (p *Pending) Answer(resp kmsg.Response) {
	p.call, p.resp, p.err = call{}, resp, nil
}

// replyChans recycles the reply channels of calls whose reply was taken:
// each carries exactly one reply, so once it is taken nothing sends on it
// again.
var replyChans = sync.Pool{New: func() any { return make(chan kmsg.Response, 1) }}

// Wait waits for the reply, or for ctx to end. A reply already released
// wins over a context that ended, so a caller polling with an ended
// context sees every reply.
func (p *Pending) Wait(ctx context.Context) (kmsg.Response, error) {
	if p.reply == nil {
		return p.resp, p.err
	}
	var resp kmsg.Response
	select {
	case resp = <-p.reply:
	default:
		select {
		case resp = <-p.reply:
		case <-ctx.Done():
			// The shard may still send: the channel is not reused.
			return nil, ctx.Err()
		}
	}
	replyChans.Put(p.reply)
	p.call, p.resp = call{}, resp
	return resp, nil
}

// OnDone arranges for fn to be called once Wait would not block, and
// reports true; if that is so already it reports false and does not call
// fn. fn runs on the goroutine that releases the reply (a shard's loop or
// its store writer) right after, so it must be quick, must not block and
// must not call into the coordinator; it may call Wait. OnDone may be
// called once per Start, and not once Wait was called.
func (p *Pending) OnDone(fn func()) bool {
	if p.reply == nil {
		return false
	}
	p.notify = fn
	return atomic.CompareAndSwapUint32(&p.notified, callWaiting, callNotify)
}

// start queues req on the shard with p as its reply to come.
func (s *shard) start(clientID, clientHost string, req kmsg.Request, p *Pending) {
	p.call = call{req: req, clientID: clientID, clientHost: clientHost, reply: replyChans.Get().(chan kmsg.Response)}
	if resp := s.submit(&p.call); resp != nil {
		replyChans.Put(p.reply)
		p.call, p.resp = call{}, resp
	}
}

// do queues req on the shard and returns its reply to come.
func (s *shard) do(clientID, clientHost string, req kmsg.Request) *Pending {
	p := new(Pending)
	s.start(clientID, clientHost, req, p)
	return p
}

// part is the slice of a multi-group request that one shard serves: idx are
// the positions, in the original request, of the groups it names.
type part struct {
	shard *shard
	idx   []int
	req   kmsg.Request
	resp  kmsg.Response
}

// split groups the positions of ids by shard, in shard order.
func (c *Coordinator) split(ids []string) []*part {
	byShard := map[int]*part{}
	for i, id := range ids {
		n := c.cfg.ShardOf(id, len(c.shards))
		p := byShard[n]
		if p == nil {
			p = &part{shard: c.shards[n]}
			byShard[n] = p
		}
		p.idx = append(p.idx, i)
	}
	keys := make([]int, 0, len(byShard))
	for n := range byShard {
		keys = append(keys, n)
	}
	sort.Ints(keys)
	parts := make([]*part, len(keys))
	for i, n := range keys {
		parts[i] = byShard[n]
	}
	return parts
}

// gather sends every part to its shard concurrently and waits for all.
func gather(ctx context.Context, clientID, clientHost string, parts []*part) error {
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.resp, errs[i] = p.shard.do(clientID, clientHost, p.req).Wait(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// mismatch reports a shard answer that does not line up with its part; the
// machine answers one entry per group asked, so this is a bug.
func mismatch(kind string, want, got int) error {
	return fmt.Errorf("coordinator: %s shard answered %d groups for %d asked", kind, got, want)
}

// scatter serves a request that names several groups: it asks each shard
// for its groups, with the request rebuilt by ask, and puts the per-group
// answers (taken from each shard's response by answers) back in request
// order. With one shard involved, that shard's response is returned as it
// is, in single.
func scatter[G, A any](ctx context.Context, c *Coordinator, clientID, clientHost string, r kmsg.Request, groups []G, id func(G) string,
	ask func([]G) kmsg.Request, answers func(kmsg.Response) []A,
) (single kmsg.Response, merged []A, err error) {
	ids := make([]string, len(groups))
	for i, g := range groups {
		ids[i] = id(g)
	}
	parts := c.split(ids)
	switch len(parts) {
	case 0:
		return ErrorResponse(r, 0), nil, nil
	case 1:
		single, err = parts[0].shard.do(clientID, clientHost, r).Wait(ctx)
		return single, nil, err
	}
	for _, p := range parts {
		sub := make([]G, len(p.idx))
		for j, i := range p.idx {
			sub[j] = groups[i]
		}
		p.req = ask(sub)
	}
	if err := gather(ctx, clientID, clientHost, parts); err != nil {
		return nil, nil, err
	}
	merged = make([]A, len(groups))
	for _, p := range parts {
		got := answers(p.resp)
		if len(got) != len(p.idx) {
			return nil, nil, mismatch(kmsg.NameForKey(r.Key()), len(p.idx), len(got))
		}
		for j, i := range p.idx {
			merged[i] = got[j]
		}
	}
	return nil, merged, nil
}

func self(s string) string { return s }

func (c *Coordinator) describeGroups(ctx context.Context, clientID, clientHost string, r *kmsg.DescribeGroupsRequest) (kmsg.Response, error) {
	single, merged, err := scatter(ctx, c, clientID, clientHost, r, r.Groups, self,
		func(gs []string) kmsg.Request { sub := *r; sub.Groups = gs; return &sub },
		func(resp kmsg.Response) []kmsg.DescribeGroupsResponseGroup {
			return resp.(*kmsg.DescribeGroupsResponse).Groups
		})
	if single != nil || err != nil {
		return single, err
	}
	out := kmsg.NewPtrDescribeGroupsResponse()
	out.Version, out.Groups = r.Version, merged
	return out, nil
}

func (c *Coordinator) consumerGroupDescribe(ctx context.Context, clientID, clientHost string, r *kmsg.ConsumerGroupDescribeRequest) (kmsg.Response, error) {
	single, merged, err := scatter(ctx, c, clientID, clientHost, r, r.Groups, self,
		func(gs []string) kmsg.Request { sub := *r; sub.Groups = gs; return &sub },
		func(resp kmsg.Response) []kmsg.ConsumerGroupDescribeResponseGroup {
			return resp.(*kmsg.ConsumerGroupDescribeResponse).Groups
		})
	if single != nil || err != nil {
		return single, err
	}
	out := kmsg.NewPtrConsumerGroupDescribeResponse()
	out.Version, out.Groups = r.Version, merged
	return out, nil
}

// TopicsChanged tells every shard the broker's topic metadata as it is
// now (Config.Topics), after a topic was created, deleted or gained
// partitions: consumer groups subscribed to it move to a new epoch without
// waiting for a member to notice. It does not wait for the shards, so a
// caller holding its own locks may call it, as long as Config.Topics does
// not need them.
func (c *Coordinator) TopicsChanged() {
	if c.cfg.Topics == nil {
		return
	}
	c.topicsMu.Lock()
	defer c.topicsMu.Unlock()
	ts := c.cfg.Topics()
	for _, s := range c.shards {
		s.enqueue(event{kind: evTopics, topics: ts})
	}
}

func (c *Coordinator) deleteGroups(ctx context.Context, clientID, clientHost string, r *kmsg.DeleteGroupsRequest) (kmsg.Response, error) {
	single, merged, err := scatter(ctx, c, clientID, clientHost, r, r.Groups, self,
		func(gs []string) kmsg.Request { sub := *r; sub.Groups = gs; return &sub },
		func(resp kmsg.Response) []kmsg.DeleteGroupsResponseGroup {
			return resp.(*kmsg.DeleteGroupsResponse).Groups
		})
	if single != nil || err != nil {
		return single, err
	}
	out := kmsg.NewPtrDeleteGroupsResponse()
	out.Version, out.Groups = r.Version, merged
	return out, nil
}

func (c *Coordinator) offsetFetchGroups(ctx context.Context, clientID, clientHost string, r *kmsg.OffsetFetchRequest) (kmsg.Response, error) {
	single, merged, err := scatter(ctx, c, clientID, clientHost, r, r.Groups,
		func(g kmsg.OffsetFetchRequestGroup) string { return g.Group },
		func(gs []kmsg.OffsetFetchRequestGroup) kmsg.Request { sub := *r; sub.Groups = gs; return &sub },
		func(resp kmsg.Response) []kmsg.OffsetFetchResponseGroup {
			return resp.(*kmsg.OffsetFetchResponse).Groups
		})
	if single != nil || err != nil {
		return single, err
	}
	out := kmsg.NewPtrOffsetFetchResponse()
	out.Version, out.Groups = r.Version, merged
	return out, nil
}

// listGroups asks every shard. Groups come back sorted by id; a shard that
// is still loading makes the whole answer COORDINATOR_LOAD_IN_PROGRESS
// alongside the groups the other shards know, as Kafka does.
func (c *Coordinator) listGroups(ctx context.Context, clientID, clientHost string, r *kmsg.ListGroupsRequest) (kmsg.Response, error) {
	parts := make([]*part, len(c.shards))
	for i, s := range c.shards {
		parts[i] = &part{shard: s, req: r}
	}
	if err := gather(ctx, clientID, clientHost, parts); err != nil {
		return nil, err
	}
	out := kmsg.NewPtrListGroupsResponse()
	out.Version = r.Version
	for _, p := range parts {
		got := p.resp.(*kmsg.ListGroupsResponse)
		if got.ErrorCode == kerr.NotCoordinator.Code {
			continue // another node's shard: it lists its groups
		}
		if out.ErrorCode == 0 {
			out.ErrorCode = got.ErrorCode
		}
		out.Groups = append(out.Groups, got.Groups...)
	}
	sort.Slice(out.Groups, func(i, j int) bool { return out.Groups[i].Group < out.Groups[j].Group })
	return out, nil
}
