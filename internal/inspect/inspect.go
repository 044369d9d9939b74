// Package inspect holds the read-only views of groups and their rebalances
// that the coordinator hands out to everything that shows them: the admin
// JSON API, the status page, the Prometheus metrics and the rebalance log
// line. They are plain values, copied out of the shard that owns the group,
// so a reader can keep them as long as it likes without touching group
// state. The slices of a finished Rebalance are shared by every reader of
// it (a finished record never changes), so readers must not modify them.
//
// The JSON field names are the admin API's (GET /api/v1/groups...); they are
// snake_case and stable, since scripts and the groups CLI read them.
package inspect

import (
	"context"
	"errors"
	"time"
)

// Group types, as ListGroups reports them (KIP-848).
const (
	TypeClassic  = "classic"
	TypeConsumer = "consumer"
)

// Rebalance protocols, as a rebalance record names them.
const (
	ProtocolEager       = "eager"
	ProtocolCooperative = "cooperative"
	ProtocolConsumer    = "consumer"
)

// Rebalance triggers. A trigger names what the coordinator saw start the
// rebalance; Rebalance.Member names who did it, when a member did.
const (
	TriggerMemberJoined         = "member-joined"
	TriggerMemberLeft           = "member-left"
	TriggerSessionTimeout       = "session-timeout"
	TriggerRebalanceTimeout     = "rebalance-timeout"
	TriggerSubscriptionChanged  = "subscription-changed"
	TriggerLeaderRejoined       = "leader-rejoined"
	TriggerStaticReplaced       = "static-replaced"
	TriggerTopicMetadataChanged = "topic-metadata-changed"
	TriggerAdminRemoved         = "admin-removed"
	TriggerCoordinatorLoaded    = "coordinator-loaded"
	// TriggerCoordinatorMoved is coordinator-loaded in a cluster, where
	// a shard is loaded because its coordinator moved to this node.
	TriggerCoordinatorMoved   = "coordinator-moved"
	TriggerPendingSyncTimeout = "pending-sync-timeout"
	TriggerGroupOversized     = "group-oversized"
	// TriggerCooperativeFollowUp is a cooperative member rejoining after
	// it revoked the partitions the previous rebalance took from it, so
	// that they can be handed to their new owners.
	TriggerCooperativeFollowUp = "cooperative-follow-up"
)

// GroupSummary is one line of the group list.
type GroupSummary struct {
	Group string `json:"group"`
	// Type is TypeClassic or TypeConsumer.
	Type string `json:"type"`
	// State is Kafka's name for the group state (Empty, PreparingRebalance,
	// CompletingRebalance, Stable, Dead; for consumer groups Assigning and
	// Reconciling too).
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"`
	// Protocol is the chosen assignor (classic) or server assignor
	// (consumer); empty while none is chosen.
	Protocol string `json:"protocol"`
	// Generation is the classic generation or the consumer group epoch.
	Generation int32 `json:"generation"`
	// MemberCount is how many members the group has; the group's whole
	// view lists them in Group.Members.
	MemberCount int `json:"member_count"`
	// Lag is the sum over the group's committed partitions of high
	// watermark minus committed offset; -1 when unknown.
	Lag int64 `json:"lag"`
	// Rebalances counts the rebalances kept in the group's history.
	Rebalances int `json:"rebalances"`
	// CoordinatorMove is how the group came to its coordinator, in a
	// cluster: the load of its shard on this node. Nil on a single node.
	CoordinatorMove *CoordinatorMove `json:"coordinator_move,omitempty"`
	// LastRebalance is the newest rebalance, finished or not, without
	// its lists (the group's history has them); nil if the group has
	// none.
	LastRebalance *RebalanceSummary `json:"last_rebalance,omitempty"`
}

// CoordinatorMove is the load of a group's shard by the node that
// coordinates it now, in a cluster: the shard is a partition of
// __consumer_offsets, loaded when this node became its leader.
type CoordinatorMove struct {
	// From is the node that last wrote the shard's records before the
	// load, -1 if none did (a new partition). It is this node itself
	// after a restart that kept the leadership.
	From int32 `json:"from_node"`
	// To is this node.
	To int32 `json:"to_node"`
	// At is when the load finished; LoadMs is how long it took.
	At     time.Time `json:"at"`
	LoadMs int64     `json:"load_ms"`
}

// Group is a group's whole view.
type Group struct {
	GroupSummary
	Members []Member `json:"members"`
	// Offsets are the committed offsets, sorted by topic then partition.
	Offsets []PartitionOffset `json:"offsets"`
}

// Member is one group member.
type Member struct {
	MemberID   string `json:"member_id"`
	InstanceID string `json:"instance_id,omitempty"`
	ClientID   string `json:"client_id"`
	ClientHost string `json:"client_host"`
	// Assignment is what the member was last given, sorted by topic.
	Assignment []TopicPartitions `json:"assignment"`
	// LastHeartbeat is when the coordinator last heard from the member.
	LastHeartbeat      time.Time `json:"last_heartbeat"`
	SessionTimeoutMs   int64     `json:"session_timeout_ms"`
	RebalanceTimeoutMs int64     `json:"rebalance_timeout_ms"`
	// Protocol is the group protocol the member speaks (TypeClassic or
	// TypeConsumer), set in consumer groups only: while a group migrates
	// between the protocols its classic members sit beside
	// consumer-protocol ones. Every member of a classic group is classic.
	Protocol string `json:"protocol,omitempty"`
}

// TopicPartitions is a set of partitions of one topic.
type TopicPartitions struct {
	Topic      string  `json:"topic"`
	Partitions []int32 `json:"partitions"`
}

// PartitionOffset is a group's position on one partition.
type PartitionOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed int64  `json:"committed"`
	// HighWatermark is -1 when the partition does not exist (any more).
	HighWatermark int64 `json:"high_watermark"`
	// Lag is HighWatermark minus Committed, never below 0; -1 when the
	// high watermark is unknown.
	Lag int64 `json:"lag"`
	// Owner is the member currently assigned the partition, if any.
	Owner string `json:"owner,omitempty"`
}

// Rebalance is the record of one rebalance: why it started, who it waited
// for, and what it cost each partition that changed owner.
type Rebalance struct {
	Group string `json:"group"`
	// Seq numbers the group's rebalances from 1, in order.
	Seq uint64 `json:"seq"`
	// Protocol is ProtocolEager, ProtocolCooperative or ProtocolConsumer.
	Protocol string `json:"protocol"`
	// GenerationBefore and GenerationAfter are classic generations or
	// consumer group epochs.
	GenerationBefore int32     `json:"generation_before"`
	GenerationAfter  int32     `json:"generation_after"`
	StartedAt        time.Time `json:"started_at"`
	// EndedAt is when every member had its new assignment; nil while the
	// rebalance is in progress.
	EndedAt    *time.Time `json:"ended_at"`
	DurationMs int64      `json:"duration_ms"`
	// Trigger is one of the Trigger constants.
	Trigger string `json:"trigger"`
	// Member is who caused the rebalance, when a member did.
	Member *MemberRef `json:"member"`
	// MembersIn and MembersOut compare the member ids at the start and
	// the end.
	MembersIn  []string `json:"members_in"`
	MembersOut []string `json:"members_out"`
	// WaitedFor lists the members the join phase waited for, the longest
	// wait first: the first is the straggler that held the rebalance. It
	// holds at most MaxWaits entries.
	WaitedFor []Wait `json:"waited_for"`
	// Moved lists every partition that changed owner, sorted by topic and
	// partition. Under the eager protocol every member gives up all its
	// partitions when it rejoins, so every assigned partition was paused:
	// Moved then also lists those handed back to their owner (From ==
	// To).
	Moved []Move `json:"moved"`
	// Outcome is "stable", "empty", "restarted" (a new rebalance began
	// before this one ended) or "" while in progress.
	Outcome string `json:"outcome"`
	// Storm is set when the same trigger from the same member repeated
	// within the storm window; StormCause names the likely cause.
	Storm      bool   `json:"storm"`
	StormCause string `json:"storm_cause,omitempty"`
}

// MemberRef names a member as a rebalance record keeps it.
type MemberRef struct {
	MemberID   string `json:"member_id"`
	InstanceID string `json:"instance_id,omitempty"`
	ClientID   string `json:"client_id"`
	ClientHost string `json:"client_host"`
}

// MaxWaits bounds Rebalance.WaitedFor: a rebalance of thousands of members
// keeps only its longest waits.
const MaxWaits = 16

// Wait is how long a rebalance waited for one member: from the rebalance's
// start to the member's JoinGroup.
type Wait struct {
	Member   string `json:"member"`
	WaitedMs int64  `json:"waited_ms"`
	// Rejoined is false for a member that had not sent JoinGroup when
	// the join phase ended (it was removed, unless static): its wait is
	// the whole join phase.
	Rejoined bool `json:"rejoined"`
}

// Move is one partition that changed owner in a rebalance.
type Move struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// From and To are member ids; empty when nobody owned it before, or
	// nobody owns it after.
	From string `json:"from"`
	To   string `json:"to"`
	// PauseMs runs from when the previous owner gave the partition up
	// (or was last heard from, if it died) until the new owner received
	// it: from ReleasedAt to AssignedAt.
	PauseMs int64 `json:"pause_ms"`
	// ReleasedAt is when the partition was given up, which can be before
	// the rebalance started (a member that died was last heard from
	// then); AssignedAt is when the new owner received it. AssignedAt is
	// zero for a partition nobody took.
	ReleasedAt time.Time `json:"released_at"`
	AssignedAt time.Time `json:"assigned_at"`
	// Committed is the group's committed offset for the partition when
	// the new owner received it; -1 when there was none.
	Committed int64 `json:"committed"`
	// CommitGap is the high watermark minus the group's committed offset
	// at hand-off: records the new owner may read again that the old one
	// may already have processed. -1 when unknown.
	CommitGap int64 `json:"commit_gap"`
}

// Changed counts the moves whose owner changed (From != To).
func (r *Rebalance) Changed() int {
	n := 0
	for _, m := range r.Moved {
		if m.From != m.To {
			n++
		}
	}
	return n
}

// MaxPause is the longest pause of any partition the rebalance moved.
func (r *Rebalance) MaxPause() time.Duration {
	var longest int64
	for _, m := range r.Moved {
		longest = max(longest, m.PauseMs)
	}
	return time.Duration(longest) * time.Millisecond
}

// RebalanceSummary is a rebalance as the group list shows it: a
// Rebalance's scalars and the counts of its lists, so that a list of many
// groups does not carry every moved partition of each.
type RebalanceSummary struct {
	Seq              uint64     `json:"seq"`
	Protocol         string     `json:"protocol"`
	GenerationBefore int32      `json:"generation_before"`
	GenerationAfter  int32      `json:"generation_after"`
	StartedAt        time.Time  `json:"started_at"`
	EndedAt          *time.Time `json:"ended_at"`
	DurationMs       int64      `json:"duration_ms"`
	Trigger          string     `json:"trigger"`
	Member           *MemberRef `json:"member"`
	MembersInCount   int        `json:"members_in_count"`
	MembersOutCount  int        `json:"members_out_count"`
	// Straggler is the member the join phase waited for longest
	// (Rebalance.WaitedFor's first), if any.
	Straggler *Wait `json:"straggler,omitempty"`
	// MovedCount is len(Rebalance.Moved): the partitions paused.
	// ChangedCount counts those whose owner changed (Rebalance.Changed).
	MovedCount   int   `json:"moved_count"`
	ChangedCount int   `json:"changed_count"`
	MaxPauseMs   int64 `json:"max_pause_ms"`
	// CommitGap sums the known commit gaps of the moved partitions.
	CommitGap  int64  `json:"commit_gap"`
	Outcome    string `json:"outcome"`
	Storm      bool   `json:"storm"`
	StormCause string `json:"storm_cause,omitempty"`
}

// Summary is the rebalance as the group list shows it.
func (r *Rebalance) Summary() *RebalanceSummary {
	s := &RebalanceSummary{
		Seq:              r.Seq,
		Protocol:         r.Protocol,
		GenerationBefore: r.GenerationBefore,
		GenerationAfter:  r.GenerationAfter,
		StartedAt:        r.StartedAt,
		EndedAt:          r.EndedAt,
		DurationMs:       r.DurationMs,
		Trigger:          r.Trigger,
		Member:           r.Member,
		MembersInCount:   len(r.MembersIn),
		MembersOutCount:  len(r.MembersOut),
		MovedCount:       len(r.Moved),
		ChangedCount:     r.Changed(),
		MaxPauseMs:       r.MaxPause().Milliseconds(),
		Outcome:          r.Outcome,
		Storm:            r.Storm,
		StormCause:       r.StormCause,
	}
	if len(r.WaitedFor) > 0 {
		w := r.WaitedFor[0]
		s.Straggler = &w
	}
	for _, m := range r.Moved {
		s.CommitGap += max(m.CommitGap, 0)
	}
	return s
}

// ErrUnavailable is what a Source's errors match (errors.Is) when it
// cannot answer now but will soon: the coordinator is loading its groups
// after a start, or is shutting down. The admin API answers it with 503
// and Retry-After.
var ErrUnavailable = errors.New("the group coordinator is not available")

// Source is what the admin API, the status page and the metrics read. The
// coordinator implements it, with the broker's high watermarks filled in.
// ok is false for a group that does not exist. An error that matches
// ErrUnavailable means: try again shortly.
type Source interface {
	Groups(ctx context.Context) ([]GroupSummary, error)
	Group(ctx context.Context, group string) (g Group, ok bool, err error)
	Rebalances(ctx context.Context, group string) (rs []Rebalance, ok bool, err error)
}
