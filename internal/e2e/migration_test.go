package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The rolling upgrade with real clients: a group of four classic
// cooperative-sticky members is replaced, one member at a time, by members
// of the consumer protocol while a producer writes, and then rolled back
// the same way. The group is upgraded when the first consumer-protocol
// member joins it and downgraded when the last one leaves (the default
// bidirectional migration policy).
//
// Members commit as the clients do by default: franz-go autocommits what
// was polled every 300 ms and commits everything polled in its revoke
// callback; the confluent-kafka-go child stores an offset once the record
// was reported, autocommits every 300 ms and commits in its revoke
// callback. Every move in the roll is a clean one (the old owner revokes,
// and so commits, before the new owner is given the partition), so the
// uncommitted poll a move may redeliver is empty: the tracker fails the
// test on the first record consumed twice.

// startConfluentClassicMember starts a confluent-kafka-go member of the
// classic protocol with cooperative-sticky. It is set by the file built
// with cgo; nil without it.
var startConfluentClassicMember func(t *testing.T, addr, topic, group, member string, tr *ownershipTracker) groupMember

// migrationClients names how the roll starts its two kinds of members.
type migrationClients struct {
	name      string
	confluent bool
	// eager is set when the classic members rebalance eagerly: they give
	// up everything on each rejoin, so the tracker cannot hold them to the
	// cooperative rule that a revoked partition never comes back.
	eager    bool
	classic  func(t *testing.T, addr, topic, group, member string, tr *ownershipTracker) groupMember
	consumer func(t *testing.T, addr, topic, group, member string, tr *ownershipTracker) groupMember
	// overlapOnEven says which steps start the new member before the old
	// one leaves: the first and third of each direction when set, the
	// second and fourth otherwise; the other steps stop the old member
	// first. Between the runs this covers the upgrade and the downgrade
	// in both orders: cooperative franz-go upgrades a full classic group
	// and downgrades when the last consumer-protocol member leaves three
	// classic ones; eager franz-go and librdkafka upgrade a classic group
	// still rebalancing after a leave, and downgrade with four classic
	// members.
	overlapOnEven bool
}

// TestRollingMigration rolls a group of four classic cooperative-sticky
// members over 12 partitions to the consumer protocol and back, one member
// at a time, with franz-go and with confluent-kafka-go, and once more with
// eager (range) franz-go classic members: no partition held
// by two members at once, no member losing its partitions, every record
// consumed exactly once, and ListGroups giving the group's type after every
// step.
func TestRollingMigration(t *testing.T) {
	kgoClassic := func(t *testing.T, addr, topic, group, m string, tr *ownershipTracker) groupMember {
		return startKgoMember(t, addr, topic, group, m, tr, kgo.Balancers(kgo.CooperativeStickyBalancer()))
	}
	kgoEager := func(t *testing.T, addr, topic, group, m string, tr *ownershipTracker) groupMember {
		return startKgoMember(t, addr, topic, group, m, tr, kgo.Balancers(kgo.RangeBalancer()))
	}
	confluentConsumer := func(t *testing.T, addr, topic, group, m string, tr *ownershipTracker) groupMember {
		return startConfluentMember(t, addr, topic, group, m, "", tr)
	}
	confluentClassic := func(t *testing.T, addr, topic, group, m string, tr *ownershipTracker) groupMember {
		return startConfluentClassicMember(t, addr, topic, group, m, tr)
	}
	for _, c := range []migrationClients{
		{name: "kgo-cooperative", classic: kgoClassic, consumer: startKgo848Member(kgo.StickyBalancer), overlapOnEven: true},
		{name: "kgo-eager", eager: true, classic: kgoEager, consumer: startKgo848Member(kgo.StickyBalancer)},
		{name: "confluent", confluent: true, classic: confluentClassic, consumer: confluentConsumer},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.confluent {
				needConfluent(t)
			}
			t.Parallel()
			runRollingMigration(t, c)
		})
	}
}

// Group types as ListGroups v5 reports them.
const (
	groupTypeClassic  = "classic"
	groupTypeConsumer = "consumer"
)

// migrationRoll is the state of one rolling-migration run.
type migrationRoll struct {
	t        *testing.T
	c        migrationClients
	addr     string
	adm      *kadm.Client
	producer *kgo.Client
	tr       *ownershipTracker
	begin    time.Time

	members  map[string]groupMember
	consumer map[string]bool // member -> speaks the consumer protocol
	live     []string
	produced int // keys 0..produced-1 were written
}

const (
	migrationTopic = "mig"
	migrationGroup = "mig-group"
	// migrationChunk records are written, over about a second, while
	// each membership change happens.
	migrationChunk = 480
)

func runRollingMigration(t *testing.T, c migrationClients) {
	a := startServer(t, t.TempDir(), fastGroups, fastConsumerGroups)
	r := &migrationRoll{
		t:        t,
		c:        c,
		addr:     a.Addr(),
		tr:       newOwnershipTracker(t, !c.eager),
		begin:    time.Now(),
		members:  map[string]groupMember{},
		consumer: map[string]bool{},
	}
	createTopic(t, r.addr, migrationTopic, groupPartitions)
	r.producer = newClient(t, r.addr, kgo.DefaultProduceTopic(migrationTopic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	r.adm = kadm.NewClient(newClient(t, r.addr))
	defer func() {
		if t.Failed() {
			t.Logf("callback log:\n%s", r.tr.dump())
		}
	}()

	r.settle("four classic members", func() {
		for i := 1; i <= 4; i++ {
			r.start(fmt.Sprintf("c%d", i), false)
		}
	})
	for i := range 4 {
		r.replace(fmt.Sprintf("upgrade step %d", i+1), fmt.Sprintf("c%d", i+1), fmt.Sprintf("n%d", i+1), true, r.overlap(i))
	}
	for i := range 4 {
		r.replace(fmt.Sprintf("roll-back step %d", i+1), fmt.Sprintf("n%d", i+1), fmt.Sprintf("r%d", i+1), false, r.overlap(i))
	}

	r.tr.mu.Lock()
	distinct, dups := r.tr.distinctLocked(), r.tr.dups
	r.tr.mu.Unlock()
	if distinct != r.produced || dups != 0 {
		t.Errorf("%d distinct keys consumed (%d twice), want all %d once", distinct, dups, r.produced)
	}
	for _, m := range slices.Clone(r.live) {
		r.stop(m)
	}
	t.Logf("%d records consumed once each; wall time %v", r.produced, time.Since(r.begin).Round(time.Millisecond))
}

func (r *migrationRoll) overlap(step int) bool { return (step%2 == 0) == r.c.overlapOnEven }

// replace swaps member old for member next (of the consumer protocol when
// toConsumer, else classic). With overlap next joins and the
// group settles with both before old leaves: a mixed group when the two
// speak different protocols. Without it old leaves first.
func (r *migrationRoll) replace(step, old, next string, toConsumer, overlap bool) {
	if overlap {
		r.settle(fmt.Sprintf("%s: %s joins beside %s", step, next, old), func() { r.start(next, toConsumer) })
		r.settle(fmt.Sprintf("%s: %s leaves", step, old), func() { r.stop(old) })
		return
	}
	r.settle(fmt.Sprintf("%s: %s leaves, then %s joins", step, old, next), func() {
		r.stop(old)
		// The leave alone may convert the group (the last
		// consumer-protocol member leaving downgrades it).
		r.waitType(step + ": after " + old + " left")
		r.start(next, toConsumer)
	})
}

func (r *migrationRoll) start(m string, consumerProtocol bool) {
	start := r.c.classic
	if consumerProtocol {
		start = r.c.consumer
	}
	r.members[m] = start(r.t, r.addr, migrationTopic, migrationGroup, m, r.tr)
	r.consumer[m] = consumerProtocol
	r.live = append(r.live, m)
}

// stop stops m cleanly: it commits, revokes everything and leaves.
func (r *migrationRoll) stop(m string) {
	r.tr.startLeaving(m)
	r.members[m].stop()
	r.tr.left(m)
	r.live = slices.DeleteFunc(r.live, func(s string) bool { return s == m })
}

// wantType is the group type the live members call for: consumer while
// any of them speaks the consumer protocol, classic otherwise.
func (r *migrationRoll) wantType() string {
	for _, m := range r.live {
		if r.consumer[m] {
			return groupTypeConsumer
		}
	}
	return groupTypeClassic
}

// settle writes the next chunk of records while change happens, then waits
// until the group has the type the live members call for, is Stable with
// exactly them, every partition is held by one of them, and every record
// written so far was consumed.
func (r *migrationRoll) settle(what string, change func()) {
	r.t.Helper()
	from, to := r.produced, r.produced+migrationChunk
	produced := make(chan error, 1)
	go func() { produced <- produceSpread(r.producer, from, to, time.Second) }()
	time.Sleep(200 * time.Millisecond)
	change()
	if err := <-produced; err != nil {
		r.t.Fatalf("%s: produce: %v", what, err)
	}
	r.produced = to
	want := r.wantType()
	waitGroupSettled(r.t, r.tr, r.live, r.produced, what, func(ctx context.Context) (string, int, error) {
		typ, err := listGroupType(ctx, r.adm, migrationGroup)
		switch {
		case err != nil:
			return "", 0, err
		case typ != want:
			return "", 0, fmt.Errorf("ListGroups says the group is %s, want %s", typ, want)
		case typ == groupTypeConsumer:
			return describeConsumerGroup(ctx, r.adm, migrationGroup)
		default:
			return describeClassicGroup(ctx, r.adm, migrationGroup)
		}
	})
	r.t.Logf("%s: %s group settled with %v after %v", what, want, r.live, time.Since(r.begin).Round(time.Millisecond))
}

// waitType waits until ListGroups reports the type the live members call
// for.
func (r *migrationRoll) waitType(what string) {
	r.t.Helper()
	want := r.wantType()
	waitFor(r.t, 10*time.Second, what, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		typ, err := listGroupType(ctx, r.adm, migrationGroup)
		if err != nil {
			return false, err.Error()
		}
		return typ == want, "ListGroups says the group is " + strconv.Quote(typ) + ", want " + want
	})
}

// listGroupType is the type ListGroups reports for group, asking with each
// type as filter: the group must be listed under exactly one, and that
// must be the type the unfiltered listing gives.
func listGroupType(ctx context.Context, adm *kadm.Client, group string) (string, error) {
	all, err := adm.ListGroups(ctx)
	if err != nil {
		return "", err
	}
	g, ok := all[group]
	if !ok {
		return "", fmt.Errorf("ListGroups does not list %s", group)
	}
	var under []string
	for _, typ := range []string{groupTypeClassic, groupTypeConsumer} {
		ls, err := adm.ListGroupsByType(ctx, []string{typ})
		if err != nil {
			return "", err
		}
		if _, ok := ls[group]; ok {
			under = append(under, typ)
		}
	}
	if len(under) != 1 || under[0] != g.GroupType {
		return "", fmt.Errorf("ListGroups gives %s type %q but the type filters list it under %v", group, g.GroupType, under)
	}
	return g.GroupType, nil
}
