package e2e

import (
	"fmt"
	"maps"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBinaryRestartKeepsConsumerGroup stops the real binary, cleanly
// (SIGTERM) and with kill -9, under a consumer-protocol group of three
// franz-go members that keep running, and starts it again on the same
// address and data dir. The group must come back at the same group epoch
// with the same members, member epochs and assignments, the members must
// see no assign or revoke callback, and fetching and committing go on.
func TestBinaryRestartKeepsConsumerGroup(t *testing.T) {
	for _, c := range []struct {
		name string
		sig  syscall.Signal
	}{{"sigterm", syscall.SIGTERM}, {"kill9", syscall.SIGKILL}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testBinaryRestartConsumerGroup(t, c.sig)
		})
	}
}

func testBinaryRestartConsumerGroup(t *testing.T, sig syscall.Signal) {
	dir := t.TempDir()
	var begin time.Time
	// Heartbeats every half second, so that the members talk to the
	// restarted process many times before the test looks; sessions long
	// enough to outlast the restart.
	flags := []string{
		"--group-consumer-min-heartbeat-interval", "500ms", "--group-consumer-heartbeat-interval", "500ms",
		"--group-consumer-min-session-timeout", "6s", "--group-consumer-session-timeout", "15s",
	}
	p := startGroupd(t, dir, "127.0.0.1:0", flags...)
	addr := p.addr
	begin = time.Now() // the binary is built
	const topic, group = "restart848", "restart848-group"
	createTopic(t, addr, topic, 6)
	pc := newClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	adm := kadm.NewClient(newClient(t, addr))
	produceRange(t, pc, 0, 300)

	consumed := &keySet{}
	var ms []*recordedMember
	for i := range 3 {
		ms = append(ms, startRecordedMember(t, addr, topic, group, fmt.Sprintf("r%d", i), consumed, kgo.ServerSideBalancer()))
	}
	var before consumerGroupView
	waitFor(t, 30*time.Second, "three members stable", func() (bool, string) {
		if ok, why := allHeldAndConsumed(ms, 6, consumed, 300); !ok {
			return false, why
		}
		before = describeConsumer(t, adm, group, topic)
		return before.state == "Stable" && len(before.ids) == 3, fmt.Sprintf("group %s with %d members", before.state, len(before.ids))
	})
	events := func() [][]string {
		var out [][]string
		for _, m := range ms {
			ev, _, _ := m.snapshot()
			out = append(out, ev)
		}
		return out
	}
	eventsBefore := events()
	t.Logf("stable at epoch %d %v after the binary started: %v", before.epoch, time.Since(begin).Round(time.Millisecond), before.parts)

	if sig == syscall.SIGTERM {
		p.stop(t)
	} else {
		p.signal(sig)
		<-p.exited
	}
	p = startGroupd(t, dir, addr, flags...)
	restarted := time.Now()

	produceRange(t, pc, 300, 600)
	waitFor(t, 30*time.Second, "records after the restart consumed", func() (bool, string) {
		return consumed.has(600), "not all of 600"
	})
	t.Logf("records after the restart consumed %v after it", time.Since(restarted).Round(time.Millisecond))
	// Every member heartbeats several times against the new process.
	time.Sleep(time.Until(restarted.Add(3 * time.Second)))

	after := describeConsumer(t, adm, group, topic)
	if after.state != "Stable" || after.epoch != before.epoch {
		t.Errorf("group %s at epoch %d after the restart, want Stable at %d", after.state, after.epoch, before.epoch)
	}
	if !maps.Equal(after.ids, before.ids) || !maps.Equal(after.epochs, before.epochs) {
		t.Errorf("members after the restart %v at epochs %v, before %v at %v", after.ids, after.epochs, before.ids, before.epochs)
	}
	if !maps.EqualFunc(after.parts, before.parts, slices.Equal) {
		t.Errorf("assignments after the restart %v, before %v", after.parts, before.parts)
	}
	for i, ev := range events() {
		if !slices.Equal(ev, eventsBefore[i]) {
			t.Errorf("member r%d saw callbacks across the restart: %v", i, ev[len(eventsBefore[i]):])
		}
	}
	consumed.mu.Lock()
	dups := consumed.dups
	consumed.mu.Unlock()
	if dups != 0 {
		t.Errorf("%d records consumed twice across the restart", dups)
	}
}

// allHeldAndConsumed says whether every member holds something, together
// partitions partitions, and keys 0..want-1 were consumed.
func allHeldAndConsumed(ms []*recordedMember, partitions int, consumed *keySet, want int) (bool, string) {
	n := 0
	for _, m := range ms {
		_, o, _ := m.snapshot()
		if len(o) == 0 {
			return false, "a member holds nothing"
		}
		n += len(o)
	}
	if n != partitions {
		return false, fmt.Sprintf("%d partitions held", n)
	}
	if !consumed.has(want) {
		return false, fmt.Sprintf("first %d records not all consumed", want)
	}
	return true, ""
}
