package cli

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

type resetKind int

const (
	toEarliest resetKind = iota
	toLatest
	toOffset
	toTime // --to-datetime and --by-duration
	shiftBy
)

// resetTarget is where --to-... or --shift-by moves each partition.
type resetTarget struct {
	kind   resetKind
	offset int64     // toOffset
	shift  int64     // shiftBy
	at     time.Time // toTime
}

// partitionState is what the plan needs to know of one partition.
type partitionState struct {
	topic     string
	partition int32
	start     int64 // log start offset
	end       int64 // log end offset (high watermark)
	committed int64 // -1 when the group has committed nothing
	// atTime is the first offset at or after the target time; only for
	// toTime, where kadm already answers the log end for a time past the
	// newest record.
	atTime int64
}

// resetRow is one line of a reset plan.
type resetRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Current is the committed offset before the reset; -1 for none.
	Current   int64 `json:"current_offset"`
	NewOffset int64 `json:"new_offset"`
}

// planReset computes the new offset of every partition. Like
// kafka-consumer-groups.sh, a target outside [log start, log end] is
// clamped into it, with a warning. The plan is sorted by topic and
// partition.
func planReset(target resetTarget, parts []partitionState) (plan []resetRow, warnings []string, err error) {
	for _, p := range parts {
		var off int64
		switch target.kind {
		case toEarliest:
			off = p.start
		case toLatest:
			off = p.end
		case toOffset:
			off = target.offset
		case toTime:
			off = p.atTime
		case shiftBy:
			if p.committed < 0 {
				return nil, nil, fmt.Errorf("%s/%d has no committed offset to shift from; reset it with --to-earliest, --to-latest or --to-offset instead", p.topic, p.partition)
			}
			off = p.committed + target.shift
			// A shift past either end of int64 saturates; it is clamped below.
			if target.shift > 0 && off < p.committed {
				off = p.end
			} else if target.shift < 0 && off > p.committed {
				off = p.start
			}
		}
		switch {
		case off > p.end:
			warnings = append(warnings, fmt.Sprintf("new offset %d of %s/%d is past the log end; it is set to the log end, %d", off, p.topic, p.partition, p.end))
			off = p.end
		case off < p.start:
			warnings = append(warnings, fmt.Sprintf("new offset %d of %s/%d is before the log start; it is set to the log start, %d", off, p.topic, p.partition, p.start))
			off = p.start
		}
		plan = append(plan, resetRow{Topic: p.topic, Partition: p.partition, Current: p.committed, NewOffset: off})
	}
	slices.SortFunc(plan, func(a, b resetRow) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return plan, warnings, nil
}

func resetOffsetsCmd(o *options) *cobra.Command {
	var (
		toEarliestF, toLatestF, allTopics, execute, dryRun bool
		toOffsetF, shiftByF                                int64
		toDatetime, byDuration                             string
		topics                                             []string
	)
	cmd := &cobra.Command{
		Use:   "reset-offsets GROUP",
		Short: "Move a group's committed offsets (a dry run unless --execute)",
		Long: `Move the committed offsets of an inactive group.

Without --execute the command only prints the plan: the new offset of each
partition. With --execute it commits exactly that plan. As with
kafka-consumer-groups.sh, the group must have no active members (state Empty,
or no group at all, which the reset creates); a target outside a partition's
[log start, log end] is clamped into it, with a warning.`,
		Args: exactArgs("GROUP"),
		RunE: o.connected(func(cmd *cobra.Command, args []string, s *clusterConn) error {
			group := args[0]
			f := cmd.Flags()
			var target resetTarget
			var chosen []string
			if toEarliestF {
				chosen, target = append(chosen, "--to-earliest"), resetTarget{kind: toEarliest}
			}
			if toLatestF {
				chosen, target = append(chosen, "--to-latest"), resetTarget{kind: toLatest}
			}
			if f.Changed("to-offset") {
				if toOffsetF < 0 {
					return usageErr(cmd, "--to-offset must not be negative")
				}
				chosen, target = append(chosen, "--to-offset"), resetTarget{kind: toOffset, offset: toOffsetF}
			}
			if f.Changed("to-datetime") {
				at, err := parseDateTime(toDatetime, time.Local)
				if err != nil {
					return usageErr(cmd, "%v", err)
				}
				chosen, target = append(chosen, "--to-datetime"), resetTarget{kind: toTime, at: at}
			}
			if f.Changed("by-duration") {
				d, err := parseBackDuration(byDuration)
				if err != nil {
					return usageErr(cmd, "%v", err)
				}
				chosen, target = append(chosen, "--by-duration"), resetTarget{kind: toTime, at: o.now().Add(-d)}
			}
			if f.Changed("shift-by") {
				chosen, target = append(chosen, "--shift-by"), resetTarget{kind: shiftBy, shift: shiftByF}
			}
			if len(chosen) != 1 {
				return usageErr(cmd, "give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --by-duration, --shift-by (got %d)", len(chosen))
			}
			specs, err := parseTopicSpecs(topics)
			if err != nil {
				return usageErr(cmd, "%v", err)
			}
			if allTopics == (len(specs) > 0) {
				return usageErr(cmd, "give either --all-topics or one or more --topic")
			}
			if execute && dryRun {
				return usageErr(cmd, "--dry-run and --execute contradict each other")
			}
			return o.resetOffsets(cmd, s, group, target, specs, execute)
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&toEarliestF, "to-earliest", false, "reset to the log start offset")
	f.BoolVar(&toLatestF, "to-latest", false, "reset to the log end offset")
	f.Int64Var(&toOffsetF, "to-offset", 0, "reset to this offset")
	f.StringVar(&toDatetime, "to-datetime", "", "reset to the first offset at or after this time: YYYY-MM-DDTHH:mm:SS[.sss][Z|±hh:mm] (local time without a zone)")
	f.StringVar(&byDuration, "by-duration", "", "reset to the first offset at or after this long ago: PnDTnHnMnS (such as PT30M) or a duration (such as 30m)")
	f.Int64Var(&shiftByF, "shift-by", 0, "move each committed offset by N (negative: back)")
	f.StringArrayVar(&topics, "topic", nil, "reset this topic (all partitions), or TOPIC:P,P for some partitions; repeatable")
	f.BoolVar(&allTopics, "all-topics", false, "reset every partition the group has committed offsets for")
	f.BoolVar(&execute, "execute", false, "commit the new offsets (without it, only print the plan)")
	f.BoolVar(&dryRun, "dry-run", false, "only print the plan (the default; accepted for kafka-consumer-groups.sh habits)")
	return cmd
}

func (o *options) resetOffsets(cmd *cobra.Command, s *clusterConn, group string, target resetTarget, specs []topicSpec, execute bool) error {
	op := fmt.Sprintf("reset offsets of group %q", group)
	// Only an inactive group may be reset: the committed offsets of a
	// group whose members consume would be overwritten by their next
	// commit. A group that does not exist yet is created by the commit.
	described, err := s.adm.DescribeGroups(s.ctx, group)
	if err != nil {
		return o.fail(op, err)
	}
	if g, ok := described[group]; ok && g.Err == nil && g.State != "Empty" && g.State != "Dead" {
		return o.fail(op, fmt.Errorf("%w: the group is %s with %d member(s); only a group without active members (Empty) can be reset", kerr.NonEmptyGroup, g.State, len(g.Members)))
	} else if ok && g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
		return o.fail(op, g.Err)
	}

	committed, err := s.adm.FetchOffsets(s.ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return o.fail(op, err)
	}
	if err := committed.Error(); err != nil {
		return o.fail(op, err)
	}

	// The partitions to reset: those named, or all the group committed.
	var tps []kadm.TopicPartitions
	if len(specs) == 0 {
		tps = committed.Partitions().Sorted()
		if len(tps) == 0 {
			return o.fail(op, errors.New("the group has no committed offsets, so --all-topics names nothing; name the partitions with --topic"))
		}
	} else {
		tps, err = o.resolvePartitions(s, specs)
		if err != nil {
			return o.fail(op, err)
		}
	}
	var topicNames []string
	for _, tp := range tps {
		topicNames = append(topicNames, tp.Topic)
	}
	starts, err := s.adm.ListStartOffsets(s.ctx, topicNames...)
	if err != nil {
		return o.fail(op, err)
	}
	ends, err := s.adm.ListEndOffsets(s.ctx, topicNames...)
	if err != nil {
		return o.fail(op, err)
	}
	var atTime kadm.ListedOffsets
	if target.kind == toTime {
		if atTime, err = s.adm.ListOffsetsAfterMilli(s.ctx, target.at.UnixMilli(), topicNames...); err != nil {
			return o.fail(op, err)
		}
	}
	var parts []partitionState
	for _, tp := range tps {
		for _, p := range tp.Partitions {
			ps := partitionState{topic: tp.Topic, partition: p, committed: -1}
			start, ok := starts.Lookup(tp.Topic, p)
			if !ok || start.Err != nil {
				return o.fail(op, fmt.Errorf("log start offset of %s/%d: %w", tp.Topic, p, cmp.Or[error](start.Err, kerr.UnknownTopicOrPartition)))
			}
			end, ok := ends.Lookup(tp.Topic, p)
			if !ok || end.Err != nil {
				return o.fail(op, fmt.Errorf("log end offset of %s/%d: %w", tp.Topic, p, cmp.Or[error](end.Err, kerr.UnknownTopicOrPartition)))
			}
			ps.start, ps.end = start.Offset, end.Offset
			if c, ok := committed.Lookup(tp.Topic, p); ok && c.At >= 0 {
				ps.committed = c.At
			}
			if target.kind == toTime {
				at, ok := atTime.Lookup(tp.Topic, p)
				if !ok || at.Err != nil {
					return o.fail(op, fmt.Errorf("offset by time of %s/%d: %w", tp.Topic, p, cmp.Or[error](at.Err, kerr.UnknownTopicOrPartition)))
				}
				ps.atTime = at.Offset
			}
			parts = append(parts, ps)
		}
	}
	plan, warnings, err := planReset(target, parts)
	if err != nil {
		return o.fail(op, err)
	}
	for _, w := range warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
	}

	if execute {
		offsets := make(kadm.Offsets)
		for _, r := range plan {
			offsets.Add(kadm.Offset{Topic: r.Topic, Partition: r.Partition, At: r.NewOffset, LeaderEpoch: -1})
		}
		resps, err := s.adm.CommitOffsets(s.ctx, group, offsets)
		if err != nil {
			return o.fail(op, err)
		}
		var failed []string
		var first error
		for _, r := range resps.Sorted() {
			if r.Err != nil {
				failed = append(failed, fmt.Sprintf("%s/%d", r.Topic, r.Partition))
				first = cmp.Or(first, r.Err)
			}
		}
		if first != nil {
			return o.fail(op, fmt.Errorf("the broker refused the commit of %d of %d partition(s) (%s): %w", len(failed), len(plan), strings.Join(failed, ", "), first))
		}
	}

	if o.json() {
		return writeJSON(cmd.OutOrStdout(), struct {
			Group    string     `json:"group"`
			Executed bool       `json:"executed"`
			Offsets  []resetRow `json:"offsets"`
		}{group, execute, plan})
	}
	rows := make([][]string, 0, len(plan))
	for _, r := range plan {
		rows = append(rows, []string{r.Topic, fmt.Sprint(r.Partition), fmt.Sprint(r.NewOffset)})
	}
	if err := writeTable(cmd.OutOrStdout(), []string{"TOPIC", "PARTITION", "NEW-OFFSET"}, rows); err != nil {
		return err
	}
	if !execute {
		fmt.Fprintln(cmd.ErrOrStderr(), "Dry run: nothing was changed. Add --execute to commit these offsets.")
	}
	return nil
}

// resolvePartitions turns --topic specs into partitions, checking them
// against the cluster's metadata.
func (o *options) resolvePartitions(s *clusterConn, specs []topicSpec) ([]kadm.TopicPartitions, error) {
	names := make([]string, 0, len(specs))
	for _, sp := range specs {
		names = append(names, sp.topic)
	}
	details, err := s.adm.ListTopics(s.ctx, names...)
	if err != nil {
		return nil, err
	}
	var out []kadm.TopicPartitions
	for _, sp := range specs {
		d, ok := details[sp.topic]
		if !ok {
			return nil, fmt.Errorf("topic %q: %w", sp.topic, kerr.UnknownTopicOrPartition)
		}
		if d.Err != nil {
			return nil, fmt.Errorf("topic %q: %w", sp.topic, d.Err)
		}
		ps := sp.partitions
		if ps == nil {
			ps = d.Partitions.Numbers()
		}
		for _, p := range ps {
			if _, ok := d.Partitions[p]; !ok {
				return nil, fmt.Errorf("topic %q has no partition %d (it has %d): %w", sp.topic, p, len(d.Partitions), kerr.UnknownTopicOrPartition)
			}
		}
		out = append(out, kadm.TopicPartitions{Topic: sp.topic, Partitions: ps})
	}
	return out, nil
}
