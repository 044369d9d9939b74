package coordinator

import (
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/store"
)

func owned(c *Config) { c.Owned = true }

// waitServing waits until shard has loaded for its ownership.
func (e *env) waitServing(shard int) {
	e.t.Helper()
	s := e.c.shards[shard]
	deadline := time.Now().Add(hangGuard)
	for {
		s.mu.Lock()
		loaded := s.loaded
		s.mu.Unlock()
		if loaded {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("shard %d never served (hang guard)", shard)
		}
		runtime.Gosched()
	}
}

func heartbeatCode(e *env, groupID, member string, gen int32) int16 {
	return e.do(heartbeatReq(groupID, member, gen)).(*kmsg.HeartbeatResponse).ErrorCode
}

func fetchedOffset(e *env, groupID string) int64 {
	return e.do(fetchReq(groupID)).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset
}

func TestOwnedShardServesOnlyWhileOwned(t *testing.T) {
	e := newEnvLoading(t, store.NewMemoryShards(testShards), owned)
	g := groupOn(1)
	code(t, "heartbeat before Own", heartbeatCode(e, g, "m", 1), kerr.NotCoordinator.Code)
	code(t, "commit before Own", commitCode(e.do(commitReq(g, 5))), kerr.NotCoordinator.Code)

	e.c.Own(1)
	e.waitServing(1)
	member, gen := stableGroup(e, g)
	code(t, "commit", commitCode(e.do(commitReqAs(g, member, gen, 5))), 0)
	code(t, "unowned shard", heartbeatCode(e, groupOn(2), "m", 1), kerr.NotCoordinator.Code)
	lg := e.do(kmsg.NewPtrListGroupsRequest()).(*kmsg.ListGroupsResponse)
	if lg.ErrorCode != 0 || len(lg.Groups) != 1 || lg.Groups[0].Group != g {
		t.Fatalf("ListGroups with one shard owned: error %d, %+v", lg.ErrorCode, lg.Groups)
	}

	e.c.Disown(1)
	code(t, "heartbeat after Disown", heartbeatCode(e, g, member, gen), kerr.NotCoordinator.Code)
	if gs, err := e.c.Groups(t.Context()); err != nil || len(gs) != 0 {
		t.Fatalf("Groups after Disown = %v, %v; want none and no error", gs, err)
	}

	// Owned again, the shard loads what it wrote: the group is Stable at
	// the same generation and its member's heartbeat is good.
	e.c.Own(1)
	e.waitServing(1)
	code(t, "heartbeat after Own again", heartbeatCode(e, g, member, gen), 0)
	if got := fetchedOffset(e, g); got != 5 {
		t.Fatalf("offset after Own again = %d, want 5", got)
	}
	if d := describe(e, g)[0]; d.State != "Stable" {
		t.Fatalf("after Own again: %s", d.State)
	}
}

func TestDisownAnswersParkedJoin(t *testing.T) {
	e := newEnvLoading(t, store.NewMemoryShards(testShards), owned)
	g := groupOn(3)
	e.c.Own(3)
	e.waitServing(3)
	first := e.do(joinReq(g, "")).(*kmsg.JoinGroupResponse)
	joined := e.start(joinReq(g, first.MemberID))
	e.waitParked(1)
	e.c.Disown(3)
	code(t, "parked join", e.wait(joined).(*kmsg.JoinGroupResponse).ErrorCode, kerr.NotCoordinator.Code)
}

// heldStore blocks every Apply until released with the error it is to
// return (nil: it writes).
type heldStore struct {
	*store.Memory
	entered chan struct{}
	release chan error
}

func (h *heldStore) Apply(recs []group.Record) error {
	h.entered <- struct{}{}
	if err := <-h.release; err != nil {
		return err
	}
	return h.Memory.Apply(recs)
}

func TestDisownWaitsForTheWriteInFlight(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int16
	}{
		{"the write lands", nil, 0},
		// The append could not reach the ISR at this node's epoch.
		{"the write fails", kerr.NotLeaderForPartition, kerr.NotCoordinator.Code},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := &heldStore{Memory: store.NewMemoryShards(1), entered: make(chan struct{}), release: make(chan error)}
			e := newEnvLoading(t, hs, owned, func(c *Config) { c.Shards = 1 })
			e.c.Own(0)
			e.waitServing(0)
			commit := e.start(commitReq("g", 9))
			<-hs.entered
			e.c.Disown(0)
			hs.release <- tc.err
			code(t, "commit in flight", e.wait(commit).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, tc.want)
			// Whatever the write did, the shard is unloaded and answers
			// NOT_COORDINATOR without writing.
			code(t, "commit after Disown", commitCode(e.do(commitReq("g", 10))), kerr.NotCoordinator.Code)
		})
	}
}

// TestShardMovesBetweenCoordinators is a coordinator move over a shared
// store, as two nodes share a replicated partition: a Stable group keeps
// its generation and member, its commits, and its member's session is
// fresh at the new owner; the old owner, owned again, reloads rather
// than serve what it had.
func TestShardMovesBetweenCoordinators(t *testing.T) {
	st := store.NewMemoryShards(testShards)
	a := newEnvLoading(t, st, owned)
	b := newEnvLoading(t, st, owned)
	g := groupOn(2)
	a.c.Own(2)
	a.waitServing(2)
	member, gen := stableGroup(a, g)
	code(t, "commit at a", commitCode(a.do(commitReqAs(g, member, gen, 5))), 0)
	a.clock.Advance(9 * time.Second) // most of the member's 10 s session

	a.c.Disown(2)
	b.c.Own(2)
	b.waitServing(2)
	code(t, "heartbeat at b", heartbeatCode(b, g, member, gen), 0)
	if d := describe(b, g)[0]; d.State != "Stable" || len(d.Members) != 1 || d.Members[0].MemberID != member {
		t.Fatalf("at b: %s %+v", d.State, d.Members)
	}
	if got := fetchedOffset(b, g); got != 5 {
		t.Fatalf("offset at b = %d, want 5", got)
	}
	code(t, "commit at b", commitCode(b.do(commitReqAs(g, member, gen, 7))), 0)
	b.clock.Advance(9 * time.Second)
	if d := describe(b, g)[0]; d.State != "Stable" {
		t.Fatalf("b's session for the member did not start at load: %s", d.State)
	}

	b.c.Disown(2)
	a.c.Own(2)
	a.waitServing(2)
	if got := fetchedOffset(a, g); got != 7 {
		t.Fatalf("offset back at a = %d, want b's 7", got)
	}
	code(t, "heartbeat back at a", heartbeatCode(a, g, member, gen), 0)
}

// TestOwnAgainReloads: a second Own while serving (a new leader epoch
// of the same node) drops the machine and loads the store again.
func TestOwnAgainReloads(t *testing.T) {
	st := store.NewMemoryShards(testShards)
	e := newEnvLoading(t, st, owned)
	g := groupOn(0)
	e.c.Own(0)
	e.waitServing(0)
	code(t, "commit", commitCode(e.do(commitReq(g, 3))), 0)
	// A record that reached the store without this machine's knowing.
	other := newEnvLoading(t, st, owned)
	other.c.Own(0)
	other.waitServing(0)
	code(t, "commit by another", commitCode(other.do(commitReq(g, 4))), 0)
	other.c.Disown(0)

	e.c.Own(0)
	e.waitServing(0)
	if got := fetchedOffset(e, g); got != 4 {
		t.Fatalf("offset after Own again = %d, want the store's 4", got)
	}
}

func TestDisownWhileLoadRetries(t *testing.T) {
	fs := &flakyLoadStore{Memory: store.NewMemoryShards(testShards), failed: map[int]bool{}}
	e := newEnvLoading(t, fs, owned)
	e.c.Own(1)
	// The first load fails; the shard waits minRetry to try again.
	deadline := time.Now().Add(hangGuard)
	for e.clock.Pending() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no retry scheduled")
		}
		runtime.Gosched()
	}
	code(t, "while retrying", heartbeatCode(e, groupOn(1), "m", 1), kerr.CoordinatorLoadInProgress.Code)
	e.c.Disown(1)
	code(t, "disowned while retrying", heartbeatCode(e, groupOn(1), "m", 1), kerr.NotCoordinator.Code)
	e.c.Own(1)
	e.waitServing(1)
	code(t, "owned again", heartbeatCode(e, groupOn(1), "m", 1), kerr.UnknownMemberID.Code)
}
