package coordinator

import (
	"context"
	"fmt"

	"github.com/groupd/groupd/internal/group"
)

// DeleteTopicOffsets removes the committed offsets of the named topics
// from every group of every shard, durably, as Kafka does when topics are
// deleted. It waits for shards still loading, and returns an error if a
// shard is not serving or its records could not be written (the shard then
// reloads from its store, where the offsets still are); the call can be
// repeated.
func (c *Coordinator) DeleteTopicOffsets(ctx context.Context, topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	for _, s := range c.shards {
		if !s.isOwned() {
			continue // the node that owns it removes them there
		}
		select {
		case <-s.ready:
		case <-s.done:
			return fmt.Errorf("coordinator shard %d stopped", s.id)
		case <-ctx.Done():
			return ctx.Err()
		}
		// The tombstones go into the batch that the function's completion
		// waits for, so it returns once they are durable.
		ran := s.runFunc(func(m *group.Machine) {
			s.collect(m.DeleteTopicOffsets(s.clock.Now(), topics))
		})
		left := false
		if ran {
			ran = s.runFunc(func(m *group.Machine) { left = m.HasTopicOffsets(topics) })
		}
		switch {
		case !ran:
			return fmt.Errorf("coordinator shard %d is not serving", s.id)
		case left:
			return fmt.Errorf("coordinator shard %d could not make the removal of the offsets of %v durable", s.id, topics)
		}
	}
	return nil
}
