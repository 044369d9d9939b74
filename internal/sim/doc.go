// Package sim is a deterministic simulation of consumer groups under
// faults, run over the real group state machine (internal/group), the real
// in-memory store (internal/store) and the real assignors (assign).
//
// One seed fixes everything: the topics and groups, the simulated clients
// (eager and cooperative protocols, static and dynamic members, old and new
// request versions), the network's delays and losses, and the faults
// (member crashes and pauses, lost responses and retries, static restarts
// and shared instance ids, coordinator crashes before and after a write is
// durable, failed store writes). The whole run happens in one goroutine on a
// virtual clock driven by a priority queue of events ordered by (time,
// sequence number); all randomness comes from one PCG stream seeded from the
// seed, and maps are iterated in sorted order wherever the order could leak
// into the run. The same seed therefore always produces the same trace.
//
// By default the coordinator is a model that follows internal/coordinator's
// contract rather than running it: step the machine, mirror its deadlines,
// make its records durable with store.Apply, and only then release its
// replies. A failed write rebuilds the machine from the store with Replay and
// fails the held and parked requests with COORDINATOR_NOT_AVAILABLE. A crash
// keeps only what the store made durable (store.Memory.Crash), loses
// everything in flight, and restarts by replaying the survivor.
//
// With Options.Runtime the coordinator is the real one instead: the shard of
// internal/coordinator (batching, pipelined writes, held replies, reload
// after a failed write) over the pebble store on pebble's crashable
// in-memory filesystem, with WAL writes and fsyncs failed on purpose, crash
// clones for crashes, and the runtime's goroutines paced so that a seed
// still replays exactly (runtime.go).
//
// Checkers run after every step and delivery (see check.go): legal state
// transitions, monotonic generations across restarts, disjoint and complete
// assignments, the cooperative hand-over rule, one live member per static
// instance id, fencing errors for stale and unknown members, durability of
// acknowledged offset commits, offsets that never move backward, a Stable
// group staying Stable across a restart, and liveness once faults stop.
//
// Options.Mix adds consumer-protocol (KIP-848) groups (consumer.go): their
// processes speak ConsumerGroupHeartbeat and reconcile as the Java and
// franz-go clients do, the broker's topics grow and new ones appear
// (TopicsChanged), and members change their subscriptions by names and by
// regular expression. Their checkers (ccheck.go) watch that no partition
// is held by two members, on the coordinator's books and among the
// clients; that group, target and member epochs never go back, nor any
// epoch a member was told, across crashes too; that a restart restores
// exactly the durable records; and that every subscribed partition is
// owned once the group is quiet. The classic mix replays the traces the
// simulator had before consumer groups.
//
// Migrating groups (migrate.go; in the both mix and alone with MixMigrate)
// are rolled between the protocols while they run: a roller replaces
// classic processes one at a time by consumer-protocol ones, so the
// coordinator upgrades the group online, and may roll it back, so it
// downgrades. Their checkers follow the group's type and hold across
// conversions: one view of who holds each partition whatever protocol its
// process speaks, type changes only as the migration rules allow, epochs
// carried over an online conversion, the durable type after a restart.
//
// Harness switches (Bugs) deliberately break the runtime contract so tests
// can show that each checker actually fires.
package sim
