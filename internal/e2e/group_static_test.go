package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recordedMember is a kgo consumer (eager range balancer) whose assignment
// callbacks are recorded.
type recordedMember struct {
	cl        *kgo.Client
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once

	mu     sync.Mutex
	events []string // "assigned gen N [..]" / "revoked ..." / "lost ..."
	owned  []int32
	gen    int32
}

func (s *recordedMember) snapshot() (events []string, owned []int32, gen int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events), slices.Clone(s.owned), s.gen
}

func startStaticMember(t *testing.T, addr, topic, group, instance string, consumed *keySet) *recordedMember {
	t.Helper()
	return startRecordedMember(t, addr, topic, group, instance, consumed, kgo.InstanceID(instance))
}

func startRecordedMember(t *testing.T, addr, topic, group, name string, consumed *keySet, extra ...kgo.Opt) *recordedMember {
	t.Helper()
	s := &recordedMember{done: make(chan struct{})}
	note := func(cl *kgo.Client, what string, ps []int32) {
		_, gen := cl.GroupMetadata()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.events = append(s.events, fmt.Sprintf("%s gen %d %v", what, gen, ps))
		switch what {
		case "assigned":
			s.owned = append(s.owned, ps...)
			slices.Sort(s.owned)
			s.gen = gen
		default:
			s.owned = slices.DeleteFunc(s.owned, func(p int32) bool { return slices.Contains(ps, p) })
		}
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ClientID(name),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.RangeBalancer()), // eager: any rebalance would revoke everything
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(groupSession),
		kgo.HeartbeatInterval(groupHeartbeat),
		kgo.AutoCommitInterval(300 * time.Millisecond),
		kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, a map[string][]int32) {
			note(cl, "assigned", topicParts(a, topic))
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, r map[string][]int32) {
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Logf("%s: commit on revoke: %v", name, err)
			}
			note(cl, "revoked", topicParts(r, topic))
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, l map[string][]int32) {
			note(cl, "lost", topicParts(l, topic))
		}),
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	s.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.done)
		for {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) { consumed.add(string(r.Key)) })
			if ctx.Err() != nil || fs.IsClientClosed() {
				return
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

// close stops polling and closes the client; a static member sends no
// LeaveGroup.
func (s *recordedMember) close() {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		s.cl.Close()
	})
}

type keySet struct {
	mu   sync.Mutex
	seen map[string]int
	dups int
}

func (k *keySet) add(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen == nil {
		k.seen = make(map[string]int)
	}
	k.seen[key]++
	if k.seen[key] > 1 {
		k.dups++
	}
}

func (k *keySet) has(n int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range n {
		if k.seen[strconv.Itoa(i)] == 0 {
			return false
		}
	}
	return true
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var why string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, why = cond(); ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not reached after %v: %s", what, d, why)
}

// describeGroup returns the group's state and its members by instance id
// (member id and assigned partitions of topic).
func describeGroup(t *testing.T, adm *kadm.Client, group, topic string) (string, map[string]string, map[string][]int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dg, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	g := dg[group]
	if g.Err != nil {
		t.Fatal(g.Err)
	}
	ids := make(map[string]string)
	parts := make(map[string][]int32)
	for _, m := range g.Members {
		inst := m.MemberID
		if m.InstanceID != nil {
			inst = *m.InstanceID
		}
		ids[inst] = m.MemberID
		if ca, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range ca.Topics {
				if tp.Topic == topic {
					ps := slices.Clone(tp.Partitions)
					slices.Sort(ps)
					parts[inst] = ps
				}
			}
		}
	}
	return g.State, ids, parts
}

// TestStaticMemberRestartKeepsGeneration restarts one of two static members
// (kgo with InstanceID) within its session timeout: the replacement gets the
// same partitions in the same generation, the other member sees no
// rebalance, and none follows when the old member id's session would have
// expired.
func TestStaticMemberRestartKeepsGeneration(t *testing.T) {
	a := startServer(t, t.TempDir(), fastGroups)
	addr := a.Addr()
	const topic, group = "static", "static-group"
	createTopic(t, addr, topic, 6)
	pc := newClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	adm := kadm.NewClient(newClient(t, addr))
	consumed := &keySet{}
	produceRange(t, pc, 0, 600)

	sa := startStaticMember(t, addr, topic, group, "static-a", consumed)
	sb := startStaticMember(t, addr, topic, group, "static-b", consumed)
	waitFor(t, 20*time.Second, "two static members stable", func() (bool, string) {
		_, oa, _ := sa.snapshot()
		_, ob, _ := sb.snapshot()
		if len(oa)+len(ob) != 6 || len(oa) == 0 || len(ob) == 0 {
			return false, fmt.Sprintf("a owns %v, b owns %v", oa, ob)
		}
		if !consumed.has(600) {
			return false, "first 600 records not all consumed"
		}
		st, ids, _ := describeGroup(t, adm, group, topic)
		return st == "Stable" && len(ids) == 2, fmt.Sprintf("group %s with %v", st, ids)
	})
	_, ownedA, genA := sa.snapshot()
	evB, ownedB, genB := sb.snapshot()
	memberB, genMetaB := sb.cl.GroupMetadata()
	_, idsBefore, partsBefore := describeGroup(t, adm, group, topic)
	if genA != genB {
		t.Fatalf("members disagree on the generation: a %d, b %d", genA, genB)
	}
	t.Logf("stable in generation %d: a %v (%s), b %v (%s)", genA, ownedA, idsBefore["static-a"], ownedB, idsBefore["static-b"])

	sa.close()
	// The static member is still in the group until its session expires.
	st, ids, _ := describeGroup(t, adm, group, topic)
	if st != "Stable" || ids["static-a"] != idsBefore["static-a"] {
		t.Fatalf("after the static member closed: group %s, members %v; want Stable with %s still in it", st, ids, idsBefore["static-a"])
	}

	sa2 := startStaticMember(t, addr, topic, group, "static-a", consumed)
	waitFor(t, 10*time.Second, "restarted static member assigned", func() (bool, string) {
		_, o, _ := sa2.snapshot()
		return len(o) > 0, "no assignment yet"
	})
	_, ownedA2, genA2 := sa2.snapshot()
	if genA2 != genA {
		t.Errorf("restarted static member joined generation %d, want the unchanged %d", genA2, genA)
	}
	if !slices.Equal(ownedA2, ownedA) {
		t.Errorf("restarted static member owns %v, want %v as before", ownedA2, ownedA)
	}
	st, ids, parts := describeGroup(t, adm, group, topic)
	if st != "Stable" || len(ids) != 2 || ids["static-b"] != idsBefore["static-b"] || ids["static-a"] == "" {
		t.Errorf("after the restart: group %s, members %v; want Stable with static-a and static-b (%s)", st, ids, idsBefore["static-b"])
	}
	if !slices.Equal(parts["static-a"], partsBefore["static-a"]) || !slices.Equal(parts["static-b"], partsBefore["static-b"]) {
		t.Errorf("assignments changed across the restart: %v, before %v", parts, partsBefore)
	}

	produceRange(t, pc, 600, 1200)
	waitFor(t, 20*time.Second, "records after the restart consumed", func() (bool, string) {
		return consumed.has(1200), "not all of 1200"
	})

	// Past the old member id's session timeout nothing may happen either.
	time.Sleep(groupSession + time.Second)
	evB2, _, _ := sb.snapshot()
	if !slices.Equal(evB2, evB) {
		t.Errorf("the other static member saw callbacks after the restart: %v (before: %v)", evB2[len(evB):], evB)
	}
	if m, g := sb.cl.GroupMetadata(); m != memberB || g != genMetaB {
		t.Errorf("other member: member %s generation %d, want %s generation %d", m, g, memberB, genMetaB)
	}
	if ev, _, g := sa2.snapshot(); len(ev) != 1 || g != genA {
		t.Errorf("restarted member callbacks: %v, want a single assignment in generation %d", ev, genA)
	}
	st, ids, _ = describeGroup(t, adm, group, topic)
	if st != "Stable" || len(ids) != 2 {
		t.Errorf("a session timeout later: group %s, members %v; want Stable with 2", st, ids)
	}
	consumed.mu.Lock()
	dups := consumed.dups
	consumed.mu.Unlock()
	if dups != 0 {
		t.Errorf("%d records consumed twice across a static restart", dups)
	}
}
