// Package replica is the pure state machine of one partition's replica on
// one node, as Kafka's replication protocol defines it (docs/cluster.md,
// "Replication" and "Liveness, and fencing").
//
// The machine has no goroutines, reads no clock, does no I/O and never lets
// map order leak out. The node runtime feeds it events with the time they
// happen, Step(now, event), and performs the effects it returns, in order.
// The runtime owns the partition log, etcd and the network; whatever it
// learns from them comes back as an event. Same events, same effects.
//
// # What the runtime gives the machine
//
//   - New: the node id, replica.lag.time.max, the lease safety margin, the
//     retry backoff, the local log's start offset, LEO and checkpointed HW,
//     and an EpochCache: a read-only view of the local leader-epoch cache,
//     answered synchronously (like raft's Storage). Writes to it are
//     effects (StartEpoch, Truncate).
//   - SetState: the partition state as etcd holds it (replicas, leader,
//     leader epoch, ISR, mod revision) and the topic's min.insync.replicas.
//     States older than the one the machine has (by revision) are ignored.
//     The role follows from it: leader if Leader is this node, follower if
//     this node is another replica of a partition that has a leader, none
//     otherwise. With it come the Registrations of the replicas (the etcd
//     revision each node's current process registered at): a replica
//     registered after the state was written, or not at all, is fenced
//     (Kafka's bounced broker). A state naming this node leader but fenced
//     for it makes it no leader: the leadership was given to an earlier
//     process, whose log this one may not have (a lost disk); the
//     controller elects it afresh, at a new leader epoch.
//   - Lease: this node's conservative lease deadline. The machine acts only
//     while now < deadline - margin ("the lease is live").
//   - Tick: lets time pass; NextDeadline says when one is due.
//   - Facts about the local log: Appended (new LEO), LogStart.
//
// # Leader
//
// Each follower's fetch (FollowerFetch) is checked (leader epoch, replica
// set, offset range) and answered in the same Step by a FetchAnswer
// carrying the HW. The fetch offset is the follower's LEO; the leader
// records it with the time the follower was last caught up (Kafka's
// Replica.updateFetchStateOrThrow, see peer.fetched), and the follower's
// log start offset the fetch gives. LowWatermark, the smallest log start
// over the leader and its registered followers (Kafka's
// lowWatermarkIfLeader), is what DeleteRecords waits for.
//
// The high watermark is the minimum LEO over the ISR, leader included, and
// never moves back. While an ISR change is being written, the ISR used is
// the union of the committed and the proposed one (KIP-497's "maximal
// ISR"): an added replica counts as soon as it is proposed, a removed one
// until its removal is written. So the HW never counts less than etcd does.
// Each advance is a SetHW effect.
//
// A produce is appended by the runtime, then reported as a Produce event
// with the end offset of its records. With acks=all it is acknowledged
// (Ack) once HW >= end; if by then the ISR is smaller than
// min.insync.replicas, the answer is NOT_ENOUGH_REPLICAS_AFTER_APPEND.
// CheckAppend refuses it before the append (NOT_ENOUGH_REPLICAS) when the
// committed ISR is already too small. A produce not answered by its
// deadline gets REQUEST_TIMED_OUT. Fencing: no Ack at all is released
// unless the lease is live; past it pending produces wait (or time out)
// and the runtime steps down. A leader whose lease is not live also
// refuses follower fetches (NOT_LEADER_OR_FOLLOWER), leaves its HW and
// ISR as they are, CheckAppend refuses appends, and ClientHW and
// CheckLeaderEpoch (which the runtime asks before it serves consumers and
// OffsetForLeaderEpoch) answer NOT_LEADER_OR_FOLLOWER: it may already have
// been replaced. A later Lease that makes it live lets it go on.
//
// ISR changes: an ISR follower not caught up for replica.lag.time.max,
// or fenced (a new process of its node, or none), is removed; only a
// registered follower is added; a follower outside the ISR whose LEO reaches the HW and the
// start offset of this leader epoch is added back. Each change is a
// WriteISR effect, a compare-and-swap on the partition's mod revision,
// with at most one in flight; its result comes back as ISRWritten or
// ISRWriteFailed (with the state etcd now holds, which is applied as a
// SetState). Any state at another leader epoch, from etcd's watch or from
// a refused write, answers the pending produces NOT_LEADER_OR_FOLLOWER,
// even if this node leads the new epoch too: they were accepted under an
// ISR the new epoch does not promise to keep.
//
// A new leader starts its epoch at its LEO (StartEpoch: the runtime
// records it in the leader-epoch cache). Its HW may be below that offset
// for a while; until it reaches it, ClientHW answers OFFSET_NOT_AVAILABLE
// so that clients never see the HW go back (KIP-207).
//
// # Follower
//
// On becoming a follower, or when the leader or leader epoch changes, the
// machine finds where its log diverges from the leader's (KIP-101, with
// KIP-279's fix for successive leader changes):
//
//  1. AskEpoch: OffsetForLeaderEpoch(my latest epoch) to the leader, whose
//     answer (EpochAnswer) is the largest epoch <= the one asked that the
//     leader has, and that epoch's end offset.
//  2. Truncate, per Kafka's AbstractFetcherThread.getOffsetTruncationState:
//     look up, in the local cache, the largest epoch <= the answer's epoch.
//     If it is the answer's epoch, truncate to min(its end, the answer's
//     end, LEO) and go on to fetch. If it is smaller (the leader knows an
//     epoch this replica never saw), truncate to its end and ask again:
//     the next question names a smaller epoch, so the loop ends. With no
//     epoch at all (an empty cache) the replica truncates to its HW without
//     asking; an answer without an end offset (the leader has no epoch that
//     old) also truncates to the HW.
//  3. Fetch from the leader at LEO with the leader epoch, one at a time.
//     Each Fetched sets HW = min(leader's HW, LEO), never lower than before.
//
// Errors follow Kafka's fetcher: FENCED_LEADER_EPOCH (this replica's epoch
// is old) waits for a newer SetState; UNKNOWN_LEADER_EPOCH (the leader has
// not learnt the epoch yet), NOT_LEADER_OR_FOLLOWER and anything else are
// retried after the retry backoff. OFFSET_OUT_OF_RANGE whose answer gives
// a leader log start above this replica's LEO (the leader's retention or
// DeleteRecords went past it while it was away or out of the ISR) empties
// the local log and restarts it at that log start (TruncateFully, Kafka's
// truncateFullyAndStartAt), then fetches from there. Any other
// OFFSET_OUT_OF_RANGE asks the leader
// where its log ends (OffsetForLeaderEpoch for its own epoch) and, if that
// is below this replica's LEO, truncates there, even below the HW, and
// fetches (AbstractFetcherThread.handleOutOfRangeError): a leader that
// lost its disk may end below the HW, which the truncation of step 2
// would otherwise fetch from forever. Answers sent under an older leader epoch
// are ignored (their LEO is still taken: it is a fact about the local log).
// A follower whose lease is not live sends nothing; it resumes where it
// was once a Lease makes it live again.
//
// # The runtime's side
//
// Step effects are performed in the order given. StartEpoch, Truncate,
// TruncateFully and SetHW touch the local log: Truncate and TruncateFully
// are done before any other event is stepped, and reported with Truncated. WriteISR, AskEpoch and Fetch go
// out over the network; each is answered by exactly one event (a lost or
// failed request too: ISRWriteFailed with the state read back from etcd,
// EpochAnswer or FetchFailed with an error). FetchAnswer and the queries
// (CheckAppend, ClientHW, CheckLeaderEpoch) are synchronous. Step a Tick
// at NextDeadline.
package replica
