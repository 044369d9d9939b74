// Package assign holds groupd's partition assignors and the Kafka consumer
// protocol codecs they read and write.
//
// Every assignor is a pure function: no I/O, no clock, no randomness, and no
// dependence on map iteration or on the order of the members slice. The
// same members and topics always give the same [Assignment], which is what
// lets the coordinator replay a rebalance and lets tests pin behaviour.
//
// Client-side (classic group) assignors, named as Kafka names them:
//
//   - [Range]: Kafka's RangeAssignor.
//   - [RoundRobin]: Kafka's RoundRobinAssignor.
//   - [Sticky]: Kafka's StickyAssignor, including the KIP-341 generation fix.
//   - [CooperativeSticky]: KIP-429 cooperative-sticky; a partition that changes
//     owner is withheld for one round so its old owner can revoke it first.
//
// Server-side (KIP-848) assignors, where [Member.Owned] carries the member's
// current target assignment:
//
//   - [Uniform]: balance first (sizes differ by at most one for identical
//     subscriptions), then stickiness.
//   - [ServerRange]: co-partitioned ranges, sticky to the previous target.
//
// A coordinator runs one of them on every group epoch bump. [Target] keeps a
// group's target assignment between bumps and, told what changed, computes
// the next one from the previous with exactly the result of Uniform or
// ServerRange, without a pass over every partition or rebuilding every
// member's target.
//
// [DecodeMetadata], [Metadata.Encode], [DecodeAssignment] and
// [EncodeAssignment] read and write ConsumerProtocolSubscription and
// ConsumerProtocolAssignment (versions 0–3). Decoding is lenient the way real
// clients need: a blob that ends early simply lacks the trailing fields.
//
// [Balancer] adapts any classic assignor to franz-go's kgo.GroupBalancer so a
// Go application can run groupd's assignors from its own group leader.
//
// Internally every assignor interns topic names once, sorts them, and works
// on dense integer partition indexes (topic base + partition number); hot
// loops touch only int32 slices, and results are carved from a few shared
// backing arrays so the allocation count does not grow with partitions.
package assign
