package partition

import "testing"

// A leader answers OffsetForLeaderEpoch as Kafka's endOffsetFor: an epoch
// older than every cached one (the log start moved past it) gets itself
// and the first cached start, not the undefined answer, so that a
// follower asking it truncates to where the leader's log begins instead
// of falling back to its high watermark.
func TestLeaderAnswer(t *testing.T) {
	c := epochCache{entries: []epochEntry{{2, 10}, {5, 40}, {7, 90}}}
	for _, tc := range []struct {
		ask   int32
		epoch int32
		end   int64
	}{
		{-1, -1, -1}, // undefined
		{0, 0, 10},   // older than every cached epoch
		{2, 2, 40},   // the first
		{4, 2, 40},   // between: the floor and the next start
		{5, 5, 90},   // a middle one
		{6, 5, 90},   // between
		{7, 7, 120},  // the newest: the log end
		{8, -1, -1},  // newer than the newest
	} {
		epoch, end := c.leaderAnswer(tc.ask, 120)
		if epoch != tc.epoch || end != tc.end {
			t.Errorf("leaderAnswer(%d) = %d, %d; want %d, %d", tc.ask, epoch, end, tc.epoch, tc.end)
		}
	}
	var empty epochCache
	if epoch, end := empty.leaderAnswer(3, 0); epoch != -1 || end != -1 {
		t.Errorf("empty cache answers %d, %d", epoch, end)
	}
}
