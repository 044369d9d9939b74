package group

import (
	"fmt"
	"testing"

	"github.com/groupd/groupd/internal/group/core"
)

// TestSeededMemberIDs checks the ids' form: the prefix, a dash and the
// stream's next two numbers as 32 lower-case hex digits.
func TestSeededMemberIDs(t *testing.T) {
	for _, seed := range []uint64{0, 42, 1 << 63} {
		ids, next := SeededMemberIDs(seed), core.SplitMix64(seed)
		for i, prefix := range []string{"", "c", "consumer-1", "rdkafka"} {
			a, b := next(), next()
			if got, want := ids(prefix), fmt.Sprintf("%s-%016x%016x", prefix, a, b); got != want {
				t.Fatalf("seed %d id %d: %q, want %q", seed, i, got, want)
			}
		}
	}
}
