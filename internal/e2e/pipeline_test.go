package e2e

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/app"
)

// TestReplyNotHeldBehindParkedJoin pipelines, on one connection, a commit,
// a JoinGroup that stays parked (the initial rebalance delay is an hour)
// and a heartbeat behind it. The commit's reply must arrive while the join
// is parked: replies go out in request order, but nothing may hold an
// answered request back until a later one is answered.
func TestReplyNotHeldBehindParkedJoin(t *testing.T) {
	a := startServer(t, t.TempDir(), func(c *app.Config) { c.Group.InitialRebalanceDelay = time.Hour })
	rc := dialRaw(t, a.Addr())
	waitCoordinatorLoaded(t, rc, "simple")
	waitCoordinatorLoaded(t, rc, "parked")

	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version = 8
	commit.Group, commit.Generation = "simple", -1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = "t"
	cp := kmsg.NewOffsetCommitRequestTopicPartition()
	cp.Partition, cp.Offset = 0, 42
	ct.Partitions = append(ct.Partitions, cp)
	commit.Topics = append(commit.Topics, ct)

	join := kmsg.NewPtrJoinGroupRequest()
	join.Version = 3 // before KIP-394: the member joins at once and parks
	join.Group = "parked"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 30000, 60000
	join.ProtocolType = "consumer"
	jp := kmsg.NewJoinGroupRequestProtocol()
	jp.Name, jp.Metadata = "range", benchSubscription
	join.Protocols = append(join.Protocols, jp)

	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version = 3
	hb.Group, hb.MemberID, hb.Generation = "parked", "nobody", 0

	var frames []byte
	first := rc.corr + 1
	for _, req := range []kmsg.Request{commit, join, hb} {
		rc.corr++
		frames = append(frames, requestFrame(req, rc.corr)...)
	}
	rc.write(frames)
	corr, body, err := rc.readFrame()
	if err != nil {
		t.Fatalf("no reply to the commit while the join is parked: %v", err)
	}
	if corr != first {
		t.Fatalf("first reply has correlation id %d, want %d (the commit)", corr, first)
	}
	resp := commit.ResponseKind()
	if err := resp.ReadFrom(body[1:]); err != nil { // after the flexible header's tags
		t.Fatal(err)
	}
	if ec := resp.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; ec != 0 {
		t.Fatalf("commit: error %d", ec)
	}
}

// waitCoordinatorLoaded retries, as a client would, until the coordinator
// of a group no longer answers COORDINATOR_LOAD_IN_PROGRESS.
func waitCoordinatorLoaded(t *testing.T, rc *rawConn, group string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version = 7
		req.Group = group
		resp, err := rc.do(req)
		if err != nil {
			t.Fatal(err)
		}
		ec := resp.(*kmsg.OffsetFetchResponse).ErrorCode
		if ec != kerr.CoordinatorLoadInProgress.Code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("coordinator of %s still loading", group)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
