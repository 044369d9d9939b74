// Package etcdkv implements kv.KV over etcd's v3 client.
//
// It uses only what etcd 3.4 servers have (range, txn with compares on
// create and mod revisions, delete-range, watch with a start revision,
// lease grant, keep-alive and revoke), so it runs on the etcd that Debian
// and most distributions ship as well as on current releases.
package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/groupd/groupd/internal/cluster/kv"
)

// KV is kv.KV over an etcd client.
type KV struct {
	cli   *clientv3.Client
	clock kv.Clock
}

var _ kv.KV = (*KV)(nil)

// New returns a KV over cli. Leases keep alive and compute their deadlines
// on clock (nil: the wall clock). The caller owns cli and closes it after
// it is done with the KV.
func New(cli *clientv3.Client, clock kv.Clock) *KV {
	if clock == nil {
		clock = kv.RealClock()
	}
	return &KV{cli: cli, clock: clock}
}

// mapErr gives etcd's errors the meaning package kv names.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("%w: %v", kv.ErrLeaseNotFound, err)
	case errors.Is(err, rpctypes.ErrDuplicateKey):
		return fmt.Errorf("%w: %v", kv.ErrDuplicateKey, err)
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return fmt.Errorf("%w: %v", kv.ErrTooManyOps, err)
	case errors.Is(err, rpctypes.ErrEmptyKey):
		return fmt.Errorf("%w: %v", kv.ErrEmptyKey, err)
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%w: %v", kv.ErrCompacted, err)
	}
	return fmt.Errorf("%w: %v", kv.ErrUnavailable, err)
}

func value(k *mvccpb.KeyValue) kv.Value {
	return kv.Value{
		Key:            string(k.Key),
		Data:           k.Value,
		CreateRevision: k.CreateRevision,
		ModRevision:    k.ModRevision,
		Lease:          kv.LeaseID(k.Lease),
	}
}

// Get implements kv.KV.
func (s *KV) Get(ctx context.Context, key string) (kv.Value, bool, error) {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return kv.Value{}, false, mapErr(err)
	}
	if len(resp.Kvs) == 0 {
		return kv.Value{}, false, nil
	}
	return value(resp.Kvs[0]), true, nil
}

// List implements kv.KV.
func (s *KV) List(ctx context.Context, prefix string) ([]kv.Value, int64, error) {
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, mapErr(err)
	}
	vs := make([]kv.Value, len(resp.Kvs))
	for i, k := range resp.Kvs {
		vs[i] = value(k)
	}
	return vs, resp.Header.Revision, nil
}

// Txn implements kv.KV.
func (s *KV) Txn(ctx context.Context, conds []kv.Cond, ops []kv.Op) (bool, int64, error) {
	if err := kv.CheckTxn(conds, ops); err != nil {
		return false, 0, err
	}
	cmps := make([]clientv3.Cmp, len(conds))
	for i, c := range conds {
		switch c.Target {
		case kv.ModRevision:
			cmps[i] = clientv3.Compare(clientv3.ModRevision(c.Key), "=", c.Revision)
		case kv.CreateRevision:
			cmps[i] = clientv3.Compare(clientv3.CreateRevision(c.Key), "=", c.Revision)
		}
	}
	eops := make([]clientv3.Op, len(ops))
	for i, op := range ops {
		switch op.Type {
		case kv.OpPut:
			var opts []clientv3.OpOption
			if op.Lease != 0 {
				opts = append(opts, clientv3.WithLease(clientv3.LeaseID(op.Lease)))
			}
			eops[i] = clientv3.OpPut(op.Key, string(op.Data), opts...)
		case kv.OpDelete:
			eops[i] = clientv3.OpDelete(op.Key)
		case kv.OpDeletePrefix:
			eops[i] = clientv3.OpDelete(op.Key, clientv3.WithPrefix())
		}
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(eops...).Commit()
	if err != nil {
		return false, 0, mapErr(err)
	}
	return resp.Succeeded, resp.Header.Revision, nil
}

// Watch implements kv.KV. It asks etcd to cancel the watch when its member
// loses the cluster's leader (a member cut off from the others would
// otherwise keep a watch open that hears nothing); the watch then breaks
// with kv.ErrWatchBroken.
func (s *KV) Watch(ctx context.Context, prefix string, fromRevision int64) <-chan kv.WatchEvent {
	out := make(chan kv.WatchEvent, 64)
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if fromRevision > 0 {
		opts = append(opts, clientv3.WithRev(fromRevision))
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := s.cli.Watch(wctx, prefix, opts...)
	go func() {
		defer close(out)
		defer cancel()
		send := func(ev kv.WatchEvent) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for resp := range wch {
			if ctx.Err() != nil {
				return
			}
			if err := resp.Err(); err != nil || resp.Canceled {
				if errors.Is(err, rpctypes.ErrCompacted) {
					err = fmt.Errorf("%w: watch from %d, compacted at %d", kv.ErrCompacted, fromRevision, resp.CompactRevision)
				} else {
					err = fmt.Errorf("%w: %v", kv.ErrWatchBroken, err)
				}
				send(kv.WatchEvent{Err: err})
				return
			}
			// etcd sends a revision's events in one response (without
			// WithFragment, which we do not ask for): group them.
			var ev kv.WatchEvent
			for _, e := range resp.Events {
				if ev.Revision != 0 && e.Kv.ModRevision != ev.Revision {
					if !send(ev) {
						return
					}
					ev = kv.WatchEvent{}
				}
				ev.Revision = e.Kv.ModRevision
				c := kv.Change{Type: kv.ChangePut, Value: value(e.Kv)}
				if e.Type == clientv3.EventTypeDelete {
					c = kv.Change{Type: kv.ChangeDelete, Value: kv.Value{Key: string(e.Kv.Key), ModRevision: e.Kv.ModRevision}}
				}
				ev.Changes = append(ev.Changes, c)
			}
			if ev.Revision != 0 && !send(ev) {
				return
			}
			if len(resp.Events) > 0 {
				fromRevision = resp.Events[len(resp.Events)-1].Kv.ModRevision + 1
			}
		}
		if ctx.Err() == nil {
			send(kv.WatchEvent{Err: fmt.Errorf("%w: the client closed the watch", kv.ErrWatchBroken)})
		}
	}()
	return out
}

// Grant implements kv.KV. etcd counts TTLs in whole seconds: ttl is rounded
// up, and etcd raises it to its minimum (1.5 election timeouts, 2s with
// etcd's defaults).
func (s *KV) Grant(ctx context.Context, ttl time.Duration) (kv.Lease, error) {
	secs := int64(math.Ceil(ttl.Seconds()))
	if secs < 1 {
		secs = 1
	}
	sent := s.clock.Now()
	resp, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return nil, mapErr(err)
	}
	if resp.Error != "" {
		return nil, fmt.Errorf("kv: grant: %s", resp.Error)
	}
	granted := time.Duration(resp.TTL) * time.Second
	return kv.NewLease(s.clock, kv.LeaseID(resp.ID), granted, sent, &leaseConn{s: s, id: resp.ID, ttl: granted}), nil
}

// Compact compacts etcd's history before rev and waits until it is done.
// groupd leaves compaction to etcd's --auto-compaction settings; this is
// for tests and operators.
func (s *KV) Compact(ctx context.Context, rev int64) error {
	_, err := s.cli.Compact(ctx, rev, clientv3.WithCompactPhysical())
	return mapErr(err)
}

type leaseConn struct {
	s   *KV
	id  clientv3.LeaseID
	ttl time.Duration
}

// KeepAlive sends one keep-alive on a stream of its own, so that the
// answer is known to be this request's (etcd's client multiplexes its own
// keep-alives and does not say which request an answer is for). The
// request gives up after ttl/3, when the next one is due.
func (lc *leaseConn) KeepAlive(reply func(time.Duration, error)) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), lc.ttl/3)
		defer cancel()
		resp, err := lc.s.cli.KeepAliveOnce(ctx, lc.id)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("%w: keep-alive unanswered: %v", kv.ErrUnavailable, err)
			}
			reply(0, mapErr(err))
			return
		}
		reply(time.Duration(resp.TTL)*time.Second, nil)
	}()
}

func (lc *leaseConn) Revoke(ctx context.Context) error {
	_, err := lc.s.cli.Revoke(ctx, lc.id)
	return mapErr(err)
}
