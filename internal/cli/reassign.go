package cli

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// reassignLine is the outcome of `topics reassign`.
type reassignLine struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Replicas  []int32 `json:"replicas,omitempty"`
	Cancel    bool    `json:"cancel,omitempty"`
	Error     string  `json:"error,omitempty"`
}

func reassignCmd(o *options) *cobra.Command {
	var (
		topic     string
		partition int32
		replicas  string
		cancel    bool
	)
	cmd := &cobra.Command{
		Use:   "reassign --topic TOPIC --partition P (--replicas ID,ID,... | --cancel)",
		Short: "Move a partition to other brokers, or cancel such a move",
		Long: `Move a partition to the brokers given by --replicas, the first being its
preferred leader (AlterPartitionReassignments, as kafka-reassign-partitions.sh
--execute). The command returns once the cluster has taken the move; the new
replicas then copy the partition, and once all of them are in sync the old
ones are dropped. Follow it with 'groupd topics reassignments'.

--cancel stops a move under way: the partition goes back to the replicas it
had before.`,
		Args: exactArgs(),
		RunE: o.connected(func(cmd *cobra.Command, _ []string, s *clusterConn) error {
			switch {
			case topic == "":
				return usageErr(cmd, "--topic is required")
			case partition < 0:
				return usageErr(cmd, "--partition is required (a partition number)")
			case (replicas == "") == !cancel:
				return usageErr(cmd, "give exactly one of --replicas and --cancel")
			}
			var target []int32
			if !cancel {
				var err error
				if target, err = parseReplicas(replicas); err != nil {
					return usageErr(cmd, "--replicas: %v", err)
				}
			}
			var req kadm.AlterPartitionAssignmentsReq
			req.Assign(topic, partition, target)
			resps, err := s.adm.AlterPartitionAssignments(s.ctx, req)
			if err != nil {
				return o.fail("reassign", err)
			}
			r, ok := resps[topic][partition]
			err = answerErr(ok, r.Err, r.ErrMessage)
			name := fmt.Sprintf("%s:%d", topic, partition)
			line := fmt.Sprintf("Reassignment of %q partition %d to replicas %s started; follow it with 'groupd topics reassignments'.", topic, partition, joinInts(target))
			if cancel {
				line = fmt.Sprintf("Reassignment of %q partition %d cancelled: it goes back to its earlier replicas.", topic, partition)
			}
			return o.report(cmd, "reassign", []answer{{name: name, err: err, line: line,
				json: reassignLine{Topic: topic, Partition: partition, Replicas: target, Cancel: cancel, Error: errString(err)}}})
		}),
	}
	f := cmd.Flags()
	f.StringVar(&topic, "topic", "", "the topic")
	f.Int32Var(&partition, "partition", -1, "the partition number")
	f.StringVar(&replicas, "replicas", "", "the new replicas: broker ids, comma-separated, the preferred leader first")
	f.BoolVar(&cancel, "cancel", false, "cancel the partition's reassignment under way")
	return cmd
}

// parseReplicas reads a comma-separated list of distinct broker ids.
func parseReplicas(s string) ([]int32, error) {
	var out []int32
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a broker id", f)
		}
		if slices.Contains(out, int32(n)) {
			return nil, fmt.Errorf("broker %d is named twice", n)
		}
		out = append(out, int32(n))
	}
	return out, nil
}

// reassignmentLine is a reassignment under way: the JSON of `topics
// reassignments`.
type reassignmentLine struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Replicas  []int32 `json:"replicas"`
	Adding    []int32 `json:"adding"`
	Removing  []int32 `json:"removing"`
}

func reassignmentsCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "reassignments [TOPIC[:P,P...]...]",
		Short: "List the partition reassignments under way (all without arguments)",
		Long: `List the partition reassignments under way (ListPartitionReassignments, as
kafka-reassign-partitions.sh --list): each partition's current replicas and the
ones being added and removed. Without arguments, every reassignment in the
cluster; TOPIC alone stands for all of its partitions.`,
		RunE: o.connected(func(cmd *cobra.Command, args []string, s *clusterConn) error {
			specs, err := parseTopicSpecs(args)
			if err != nil {
				return usageErr(cmd, "%v", strings.TrimPrefix(err.Error(), "--topic "))
			}
			req := kmsg.NewPtrListPartitionReassignmentsRequest()
			req.TimeoutMillis = int32(o.timeout.Milliseconds())
			if len(specs) > 0 {
				specs, err = o.expandPartitions(s, specs)
				if err != nil {
					return err
				}
				req.Topics = []kmsg.ListPartitionReassignmentsRequestTopic{}
				for _, sp := range specs {
					rt := kmsg.NewListPartitionReassignmentsRequestTopic()
					rt.Topic, rt.Partitions = sp.topic, sp.partitions
					req.Topics = append(req.Topics, rt)
				}
			}
			resp, err := req.RequestWith(s.ctx, s.cl)
			if err != nil {
				return o.fail("list reassignments", err)
			}
			if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
				return o.fail("list reassignments", answerErr(true, err, deref(resp.ErrorMessage)))
			}
			lines := []reassignmentLine{}
			for _, rt := range resp.Topics {
				for _, rp := range rt.Partitions {
					lines = append(lines, reassignmentLine{rt.Topic, rp.Partition, orEmpty(rp.Replicas), orEmpty(rp.AddingReplicas), orEmpty(rp.RemovingReplicas)})
				}
			}
			slices.SortFunc(lines, func(a, b reassignmentLine) int {
				return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
			})
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), lines)
			}
			rows := make([][]string, 0, len(lines))
			for _, l := range lines {
				rows = append(rows, []string{l.Topic, fmt.Sprint(l.Partition), joinInts(l.Replicas), joinInts(l.Adding), joinInts(l.Removing)})
			}
			return writeTable(cmd.OutOrStdout(), []string{"TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"}, rows)
		}),
	}
}

// expandPartitions gives the topics named without partitions all of
// theirs, from Metadata; an unknown topic fails the command.
func (o *options) expandPartitions(s *clusterConn, specs []topicSpec) ([]topicSpec, error) {
	var names []string
	for _, sp := range specs {
		if sp.partitions == nil {
			names = append(names, sp.topic)
		}
	}
	if len(names) == 0 {
		return specs, nil
	}
	details, err := s.adm.ListTopics(s.ctx, names...)
	if err != nil {
		return nil, o.fail("describe topics", err)
	}
	for i, sp := range specs {
		if sp.partitions != nil {
			continue
		}
		d, ok := details[sp.topic]
		if !ok || d.Err != nil {
			err := d.Err
			if err == nil {
				err = kerr.UnknownTopicOrPartition
			}
			return nil, o.fail(fmt.Sprintf("topic %q", sp.topic), err)
		}
		for _, p := range d.Partitions.Sorted() {
			specs[i].partitions = append(specs[i].partitions, p.Partition)
		}
	}
	return specs, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// electionLine is one partition's outcome of `topics elect-leaders`.
type electionLine struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Result is "elected", "not-needed" (the partition is led as asked
	// already) or "failed".
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
}

func electLeadersCmd(o *options) *cobra.Command {
	var unclean bool
	cmd := &cobra.Command{
		Use:   "elect-leaders [--unclean] [TOPIC[:P,P...]...]",
		Short: "Give partitions their preferred leader back (all partitions without arguments)",
		Long: `Elect leaders (ElectLeaders, as kafka-leader-election.sh). By default the
preferred replica, the first of a partition's replicas, becomes its leader if
it is up and in sync. With --unclean, a partition that has no leader gets one:
an in-sync replica if one is up, else any replica that is up, which may lose
records the others had acknowledged.

Without arguments every partition of the cluster is asked for, and only those
that changed, or could not, are listed. A partition already led as asked is
"not-needed", which is not a failure.`,
		RunE: o.connected(func(cmd *cobra.Command, args []string, s *clusterConn) error {
			specs, err := parseTopicSpecs(args)
			if err != nil {
				return usageErr(cmd, "%v", strings.TrimPrefix(err.Error(), "--topic "))
			}
			var set kadm.TopicsSet
			if len(specs) > 0 {
				if specs, err = o.expandPartitions(s, specs); err != nil {
					return err
				}
				set = kadm.TopicsSet{}
				for _, sp := range specs {
					set.Add(sp.topic, sp.partitions...)
				}
			}
			how := kadm.ElectPreferredReplica
			if unclean {
				how = kadm.ElectLiveReplica
			}
			rs, err := s.adm.ElectLeaders(s.ctx, how, set)
			if err != nil {
				return o.fail("elect leaders", err)
			}
			var lines []electionLine
			var failures []error
			for _, ps := range rs {
				for _, r := range ps {
					l := electionLine{Topic: r.Topic, Partition: r.Partition, Result: "elected"}
					switch err := answerErr(true, r.Err, r.ErrMessage); {
					case errors.Is(err, kerr.ElectionNotNeeded):
						l.Result = "not-needed"
					case err != nil:
						l.Result, l.Error = "failed", err.Error()
						failures = append(failures, o.fail(fmt.Sprintf("elect the leader of %q partition %d", r.Topic, r.Partition), err))
					}
					lines = append(lines, l)
				}
			}
			slices.SortFunc(lines, func(a, b electionLine) int {
				return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
			})
			slices.SortFunc(failures, func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
			if o.json() {
				if lines == nil {
					lines = []electionLine{}
				}
				if err := writeJSON(cmd.OutOrStdout(), lines); err != nil {
					return err
				}
			} else {
				header := []string{"TOPIC", "PARTITION", "RESULT"}
				if len(failures) > 0 {
					header = append(header, "ERROR")
				}
				rows := make([][]string, 0, len(lines))
				for _, l := range lines {
					rows = append(rows, []string{l.Topic, fmt.Sprint(l.Partition), l.Result, l.Error}[:len(header)])
				}
				if err := writeTable(cmd.OutOrStdout(), header, rows); err != nil {
					return err
				}
			}
			return errors.Join(failures...)
		}),
	}
	cmd.Flags().BoolVar(&unclean, "unclean", false, "elect a leader for partitions without one, outside the ISR if need be")
	return cmd
}
