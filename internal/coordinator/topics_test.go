package coordinator

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/store"
)

// TestDeleteTopicOffsets: the offsets of a deleted topic leave every group
// of every shard, durably; the other topics' stay, and a group left with
// nothing is gone.
func TestDeleteTopicOffsets(t *testing.T) {
	st := store.NewMemoryShards(testShards)
	e := newEnv(t, st)
	groups := []string{"g1", "g2", "g3", "g4", "g5", "g6"}
	for _, g := range groups {
		code(t, "commit", e.do(commitReq(g, 7)).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, 0)
	}
	other := commitReq("g1", 9)
	other.Topics[0].Topic = "payments"
	code(t, "commit payments", e.do(other).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, 0)

	if err := e.c.DeleteTopicOffsets(context.Background(), []string{"orders"}); err != nil {
		t.Fatal(err)
	}
	check := func(e *env) {
		t.Helper()
		for _, g := range groups {
			if got := e.do(fetchReq(g)).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset; got != -1 {
				t.Fatalf("%s: orders offset %d after the topic was deleted", g, got)
			}
		}
		f := fetchReq("g1")
		f.Topics[0].Topic = "payments"
		if got := e.do(f).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset; got != 9 {
			t.Fatalf("payments offset %d, want 9", got)
		}
		if ds := describe(e, "g2"); ds[0].State != "Dead" {
			t.Fatalf("g2, left with no offsets, is %s", ds[0].State)
		}
	}
	check(e)
	check(newEnv(t, st.Crash()))
}

// TestDeleteTopicOffsetsWriteFails: a failed write is reported, and the
// offsets are still there for a retry.
func TestDeleteTopicOffsetsWriteFails(t *testing.T) {
	st := store.NewMemoryShards(testShards)
	e := newEnv(t, st)
	code(t, "commit", e.do(commitReq("g", 7)).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, 0)
	st.FailNext(errors.New("disk full"))
	// Shards without offsets of the topic write nothing, so the failing
	// write is g's shard's.
	if err := e.c.DeleteTopicOffsets(context.Background(), []string{"orders"}); err == nil {
		t.Fatal("a failed write went unreported")
	}
	if got := e.do(fetchReq("g")).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset; got != 7 {
		t.Fatalf("after the failed removal: offset %d, want 7", got)
	}
	if err := e.c.DeleteTopicOffsets(context.Background(), []string{"orders"}); err != nil {
		t.Fatal(err)
	}
	if got := e.do(fetchReq("g")).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset; got != -1 {
		t.Fatalf("after the retry: offset %d", got)
	}
}
