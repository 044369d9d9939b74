// Package group is the pure classic consumer-group state machine.
//
// A Machine holds the classic groups of one coordinator shard, and through
// package consumer its consumer (KIP-848) groups; it converts a group
// between the two while it runs, as group.consumer.migration.policy allows
// (consumer.go). It is stepped
// with (now, event) and returns an Output: replies to requests, records to
// make durable, and changes to keyed deadlines. It starts no goroutines, reads
// no clock, does no I/O and never depends on map iteration order, so the same
// inputs always give the same outputs and a whole rebalance can be replayed in
// a unit test.
//
// Requests that must wait (a JoinGroup parked until the join phase completes,
// a follower's SyncGroup parked until the leader's assignment arrives) are
// state in the machine; their replies come out of a later Step, addressed by
// the RequestID the caller passed in.
//
// Durable before visible: every reply in an Output must be released only after
// the records of that same Output (and of every earlier Output) are durable.
// If a write fails, the caller drops the machine, rebuilds it with Replay from
// what the store holds, and fails the held replies.
//
// The behaviour follows Apache Kafka's group coordinator
// (GroupMetadataManager, ClassicGroup, OffsetMetadataManager); where this
// package deliberately differs, the code says so.
package group
