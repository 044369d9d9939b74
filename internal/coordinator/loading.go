package coordinator

import (
	"context"
	"errors"
	"sync"

	"github.com/groupd/groupd/internal/store"
)

// loadFailures collects the errors of shards that cannot load at all.
type loadFailures struct {
	mu     sync.Mutex
	errs   []error
	failed chan struct{} // closed at the first
}

func newLoadFailures() *loadFailures {
	return &loadFailures{failed: make(chan struct{})}
}

func (f *loadFailures) add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) == 0 {
		close(f.failed)
	}
	f.errs = append(f.errs, err)
}

func (f *loadFailures) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

// undecodable reports whether a load failed on a stored record that does
// not decode, which no retry can fix.
func undecodable(err error) bool {
	var ue *store.UndecodableError
	return errors.As(err, &ue)
}

// attempted notes that the shard's first load attempt has ended. Only the
// loop calls it.
func (s *shard) attempted() {
	select {
	case <-s.tried:
	default:
		close(s.tried)
	}
}

// WaitLoad waits until every shard has loaded its records or failed its
// first attempt (or ctx ends), and returns the errors of the shards that
// cannot load at all because a stored record does not decode; each names
// the record's key. Such a shard has stopped. A shard whose load failed
// otherwise (the store could not be read) keeps retrying with backoff,
// logging each failure, and is not reported here.
func (c *Coordinator) WaitLoad(ctx context.Context) error {
	for _, s := range c.shards {
		select {
		case <-s.tried:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.failures.err()
}

// Failed is closed when a shard has stopped because a stored record does
// not decode, at start or when it reloaded; Err then says which.
func (c *Coordinator) Failed() <-chan struct{} { return c.failures.failed }

// Err returns the errors of the shards that stopped because a stored record
// does not decode, or nil.
func (c *Coordinator) Err() error { return c.failures.err() }
