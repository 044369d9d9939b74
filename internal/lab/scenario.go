package lab

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// act disturbs the group as the scenario says and waits for it to settle
// after each step. It returns when ownership last changed.
func (r *run) act(ctx context.Context) (time.Duration, error) {
	switch r.scenario {
	case ScaleOut:
		var names []string
		for i := range r.cfg.Change {
			names = append(names, fmt.Sprintf("m%d", r.cfg.Members+i+1))
		}
		r.rec.action("join", strings.Join(names, ","))
		if err := r.add(names...); err != nil {
			return 0, err
		}
		return r.settle(ctx, "scale-out")

	case ScaleIn:
		names := r.pick(r.cfg.Change)
		r.rec.action("leave", strings.Join(names, ","))
		var wg sync.WaitGroup
		for _, name := range names {
			m := r.remove(name)
			wg.Go(m.stop)
		}
		wg.Wait()
		return r.settle(ctx, "scale-in")

	case RollingRestart:
		var last time.Duration
		for _, name := range r.liveNames() {
			r.rec.action("restart", name)
			old := r.member(name)
			old.stop()
			if err := sleep(ctx, r.cfg.RestartDelay); err != nil {
				return 0, err
			}
			m, err := r.startMember(name, old.incarnation+1)
			if err != nil {
				return 0, err
			}
			r.mu.Lock()
			r.members[name] = m
			r.mu.Unlock()
			if last, err = r.settle(ctx, "restart of "+name); err != nil {
				return 0, err
			}
		}
		return last, nil

	case Crash:
		name := r.pick(1)[0]
		r.rec.action("crash", name)
		r.remove(name).kill()
		return r.settle(ctx, "crash of "+name)

	case SlowConsumer:
		name := r.pick(1)[0]
		m := r.member(name)
		// The member's next poll takes half as long again as the
		// rebalance timeout: whatever waits for it gives up first.
		m.stall.Store(int64(r.cfg.RebalanceTimeout + r.cfg.RebalanceTimeout/2))
		select {
		case <-m.stalling:
		case <-time.After(r.cfg.SettleTimeout):
			return 0, fmt.Errorf("slow-consumer: %s polled nothing to stall on within %v", name, r.cfg.SettleTimeout)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		r.rec.action("stall", name)
		joiner := fmt.Sprintf("m%d", r.cfg.Members+1)
		r.rec.action("join", joiner)
		if err := r.add(joiner); err != nil {
			return 0, err
		}
		return r.settle(ctx, "slow-consumer")

	case PartitionsAdded:
		add := max(r.cfg.Partitions/2, 1)
		r.rec.action("add-partitions", "")
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		resp, err := r.adm.CreatePartitions(cctx, add, r.topic)
		cancel()
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return 0, fmt.Errorf("adding %d partitions to %s: %w", add, r.topic, err)
		}
		r.mu.Lock()
		r.want = partitionsOf(r.topic, r.cfg.Partitions+add)
		r.mu.Unlock()
		return r.settle(ctx, "partitions-added")

	case SubscriptionChange:
		r.rec.action("subscribe", r.topic2)
		r.mu.Lock()
		r.sub = append(r.sub, r.topic2)
		r.want = append(r.want, partitionsOf(r.topic2, r.cfg.Partitions)...)
		ms := make([]*member, 0, len(r.members))
		for _, name := range r.order {
			ms = append(ms, r.members[name])
		}
		r.mu.Unlock()
		r.producer.addTopic(r.topic2)
		for _, m := range ms {
			m.cl.AddConsumeTopics(r.topic2)
		}
		return r.settle(ctx, "subscription-change")
	}
	return 0, fmt.Errorf("unknown scenario %q", r.scenario)
}

func (r *run) liveNames() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}
