package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/groupd/groupd/internal/app"
)

// fastGroups shortens the initial rebalance delay so that group tests with
// real clients do not wait the 3 s default.
func fastGroups(c *app.Config) { c.Group.InitialRebalanceDelay = 100 * time.Millisecond }

func TestGroupConsumeCommitResume(t *testing.T) {
	dir := t.TempDir()
	a := startServer(t, dir, fastGroups)
	createTopic(t, a.Addr(), "g", 4)
	produceKeyed(t, newClient(t, a.Addr()), "g", 1000)

	consume := func(addr string, want int) {
		t.Helper()
		cl := newClient(t, addr, kgo.ConsumerGroup("grp"), kgo.ConsumeTopics("g"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for n := 0; n < want; {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d", n, want)
			}
			fs.EachError(func(_ string, _ int32, err error) { t.Fatal(err) })
			n += fs.NumRecords()
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
		cl.Close()
	}
	consume(a.Addr(), 1000)

	stopServer(t, a)
	a = startServer(t, dir, fastGroups)
	lag, err := kadm.NewClient(newClient(t, a.Addr())).FetchOffsets(context.Background(), "grp")
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	lag.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != 1000 {
		t.Fatalf("committed offsets sum to %d after restart, want 1000", total)
	}
}
