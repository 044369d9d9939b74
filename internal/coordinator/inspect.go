package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/inspect"
)

// Observer is told about what the coordinator does, for metrics; methods
// must be cheap and safe for concurrent use. Config.Observer nil means
// none.
type Observer interface {
	// RebalanceEnded is called once for every finished rebalance, with
	// its commit gaps filled in, before its record is made durable.
	RebalanceEnded(r inspect.Rebalance)
	// StoreWrite is called after every write of a batch of records.
	StoreWrite(took time.Duration, records int, err error)
	// ShardPanic is called when a shard's machine panicked and the panic
	// was contained: the shard is being rebuilt from the store (down
	// false), or it panicked again while being rebuilt and stays
	// unavailable until a restart (down true).
	ShardPanic(shard int, down bool)
}

// LoadObserver is an Observer that is also told of every load of an
// owned shard (Config.Owned): a coordinator move to this node.
type LoadObserver interface {
	ShardLoaded(shard int, move inspect.CoordinatorMove)
}

// lastWriter is a store that knows which node last wrote a shard's
// records, as of its last Load (coordlog).
type lastWriter interface {
	LastWriter(shard int) (node int32, ok bool)
}

// ErrNotServing is returned by the inspect methods for a group whose shard
// is loading or closed. It matches inspect.ErrUnavailable, so that readers
// of an inspect.Source know to try again.
var ErrNotServing = fmt.Errorf("coordinator: shard not serving (loading or closed): %w", inspect.ErrUnavailable)

var _ inspect.Source = (*Coordinator)(nil)

// view runs fn on the shard's loop like runFunc, but gives up when ctx
// ends. fn must only write to memory the caller reads after a nil error.
func (s *shard) view(ctx context.Context, fn func(*group.Machine)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ran := make(chan bool, 1)
	go func() { ran <- s.runFunc(fn) }()
	select {
	case ok := <-ran:
		if !ok {
			return ErrNotServing
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Groups lists every group, sorted by id. If a shard is not serving, the
// groups of the others are returned with ErrNotServing.
func (c *Coordinator) Groups(ctx context.Context) ([]inspect.GroupSummary, error) {
	parts := make([][]inspect.GroupSummary, len(c.shards))
	errs := make([]error, len(c.shards))
	hwm := group.HighWatermarks(c.cfg.HighWatermark)
	var wg sync.WaitGroup
	for i, s := range c.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !s.isOwned() {
				return // another node's groups
			}
			var got []inspect.GroupSummary
			errs[i] = s.view(ctx, func(m *group.Machine) {
				got = m.Summaries(s.clock.Now(), hwm)
				for j := range got {
					got[j].CoordinatorMove = s.move
				}
			})
			if errs[i] == nil {
				parts[i] = got
			}
		}()
	}
	wg.Wait()
	var out []inspect.GroupSummary
	for _, p := range parts {
		out = append(out, p...)
	}
	slices.SortFunc(out, func(a, b inspect.GroupSummary) int { return strings.Compare(a.Group, b.Group) })
	if out == nil {
		out = []inspect.GroupSummary{}
	}
	var err error
	for _, e := range errs {
		if e != nil && (err == nil || errors.Is(err, ErrNotServing)) {
			err = e
		}
	}
	return out, err
}

// Group describes one group, with the high watermark and lag of every
// partition it committed.
func (c *Coordinator) Group(ctx context.Context, groupID string) (inspect.Group, bool, error) {
	s := c.shardOf(groupID)
	if !s.isOwned() {
		return inspect.Group{}, false, nil // another node coordinates it
	}
	var g inspect.Group
	var ok bool
	if err := s.view(ctx, func(m *group.Machine) {
		g, ok = m.Describe(groupID, s.clock.Now())
		g.CoordinatorMove = s.move
	}); err != nil || !ok {
		return inspect.Group{}, false, err
	}
	// Off the shard's loop: the broker is asked once per partition.
	if hwm := c.cfg.HighWatermark; hwm != nil {
		g.Lag = 0
		for i := range g.Offsets {
			o := &g.Offsets[i]
			if hw, known := hwm(o.Topic, o.Partition); known {
				o.HighWatermark, o.Lag = hw, max(hw-o.Committed, 0)
				g.Lag += o.Lag
			}
		}
	}
	return g, true, nil
}

// Rebalances returns a group's rebalance history, oldest first, with the
// rebalance in progress (if any) last.
func (c *Coordinator) Rebalances(ctx context.Context, groupID string) ([]inspect.Rebalance, bool, error) {
	s := c.shardOf(groupID)
	if !s.isOwned() {
		return nil, false, nil
	}
	var rs []inspect.Rebalance
	var ok bool
	if err := s.view(ctx, func(m *group.Machine) { rs, ok = m.Rebalances(groupID, s.clock.Now()) }); err != nil {
		return nil, false, err
	}
	return rs, ok, nil
}

// finishRebalances completes the rebalances a step finished before their
// records are written: it fills in the commit gaps from the high
// watermarks, logs each, and tells the observer.
func (s *shard) finishRebalances(rs []*inspect.Rebalance) {
	hwm := s.cfg.HighWatermark
	for _, r := range rs {
		if hwm != nil {
			for i := range r.Moved {
				mv := &r.Moved[i]
				if hw, ok := hwm(mv.Topic, mv.Partition); ok && mv.Committed >= 0 {
					mv.CommitGap = max(hw-mv.Committed, 0)
				}
			}
		}
		s.logRebalance(r)
		if o := s.cfg.Observer; o != nil {
			o.RebalanceEnded(*r)
		}
	}
}

// logRebalance writes the one line per finished rebalance.
func (s *shard) logRebalance(r *inspect.Rebalance) {
	if !s.log.Enabled(context.Background(), slog.LevelInfo) {
		return // its attributes walk every moved partition
	}
	member, client := "", ""
	if r.Member != nil {
		member, client = r.Member.MemberID, r.Member.ClientID
		if r.Member.InstanceID != "" {
			client = r.Member.InstanceID
		}
	}
	args := []any{
		"group", r.Group,
		"protocol", r.Protocol,
		"trigger", r.Trigger,
		"member", member,
		"client", client,
		"duration", time.Duration(r.DurationMs) * time.Millisecond,
		"generation", r.GenerationAfter,
		"outcome", r.Outcome,
		"moved", r.Changed(),
		"paused", len(r.Moved),
		"max_pause", r.MaxPause(),
		"storm", r.Storm,
	}
	if r.Storm {
		args = append(args, "storm_cause", r.StormCause)
	}
	s.log.Info("rebalance", args...)
}

// observeWrite reports a store write to the observer, if any.
func (s *shard) observeWrite(start time.Time, records int, err error) {
	if o := s.cfg.Observer; o != nil {
		o.StoreWrite(time.Since(start), records, err)
	}
}
