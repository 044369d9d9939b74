// Package consumer is the pure state machine of KIP-848 consumer groups:
// the "consumer" rebalance protocol, in which the coordinator computes
// assignments itself and each member reconciles on its own through
// ConsumerGroupHeartbeat, so no rebalance stops the whole group.
//
// A Machine holds the consumer groups of one coordinator shard. Like the
// classic machine in internal/group it is stepped with (now, event) and
// returns an Output: replies, records to make durable, and changes to keyed
// deadlines. It starts no goroutines, reads no clock, does no I/O, draws no
// global randomness and never depends on map iteration order.
//
// Each group has a group epoch (bumped when a member joins, leaves, is
// fenced or changes its subscription, and when a subscribed topic is
// created, deleted or grown), a target assignment computed by a server-side
// assignor from the assign package at a target epoch, and per member a
// current assignment at a member epoch. A member moves to the target epoch
// only after it has revoked what it must give up, and is never given a
// partition another member still holds (Kafka's CurrentAssignmentBuilder).
//
// State changes only through records, the same ones Replay reads back:
// per-member records after Kafka's design, so a change to one member of a
// large group writes that member's records only. Durable before visible:
// the replies of an Output must be released only after its records (and
// those of every earlier Output) are durable.
//
// Members that speak the classic protocol belong to a consumer group too,
// after an online upgrade of a classic group or by joining one: their
// JoinGroup, SyncGroup, Heartbeat and LeaveGroup are served here, the
// server-side assignor computes their assignments like anyone's, and when
// the last consumer-protocol member leaves the group goes back to package
// group as a classic group (Downgrade). See classic.go.
//
// Topic metadata is an input (TopicsChanged), not something the machine
// looks up. The behaviour follows Apache Kafka 4.3's group coordinator
// (GroupMetadataManager, ConsumerGroup, CurrentAssignmentBuilder,
// TargetAssignmentBuilder); where this package deliberately differs, the
// code says so.
package consumer
