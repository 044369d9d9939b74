package cli

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TopicsCmd is `groupd topics`: list, create, describe and delete, and
// the partition admin commands: reassign, reassignments, elect-leaders.
func TopicsCmd() *cobra.Command {
	o := newOptions()
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "List, create, describe and delete topics, move partitions, elect leaders (any Kafka cluster)",
		Long: `List, create, describe and delete topics over the Kafka protocol, as
kafka-topics.sh does, move partitions between brokers as
kafka-reassign-partitions.sh does and elect leaders as kafka-leader-election.sh
does; the commands work against groupd and against any Kafka cluster.

Exit status: 0 success, 1 the operation failed (the broker refused it, the
topic does not exist, the broker could not be reached), 2 usage error.`,
		Args: cobra.ArbitraryArgs,
		RunE: parentRun,
	}
	o.addFlags(cmd)
	cmd.AddCommand(listTopicsCmd(o), createTopicsCmd(o), describeTopicsCmd(o), deleteTopicsCmd(o),
		reassignCmd(o), reassignmentsCmd(o), electLeadersCmd(o))
	return cmd
}

// topicLine is a topic in `list` and `create` output.
type topicLine struct {
	Topic             string `json:"topic"`
	ID                string `json:"id"`
	Partitions        int    `json:"partitions"`
	ReplicationFactor int    `json:"replication_factor"`
}

func listTopicsCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the topics with their partition count and replication factor",
		Args:  exactArgs(),
		RunE: o.connected(func(cmd *cobra.Command, _ []string, s *clusterConn) error {
			details, err := s.adm.ListTopics(s.ctx)
			if err != nil {
				return o.fail("list topics", err)
			}
			lines := []topicLine{}
			for _, d := range details.Sorted() {
				lines = append(lines, topicLine{d.Topic, d.ID.String(), len(d.Partitions), d.Partitions.NumReplicas()})
			}
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), lines)
			}
			rows := make([][]string, 0, len(lines))
			for _, l := range lines {
				rows = append(rows, []string{l.Topic, fmt.Sprint(l.Partitions), fmt.Sprint(l.ReplicationFactor), l.ID})
			}
			return writeTable(cmd.OutOrStdout(), []string{"TOPIC", "PARTITIONS", "REPLICATION-FACTOR", "ID"}, rows)
		}),
	}
}

func createTopicsCmd(o *options) *cobra.Command {
	var (
		partitions int32
		rf         int16
		configs    []string
	)
	cmd := &cobra.Command{
		Use:   "create TOPIC...",
		Short: "Create topics",
		Args:  minArgs(1, "one or more TOPIC names"),
		RunE: o.connected(func(cmd *cobra.Command, args []string, s *clusterConn) error {
			cfg, err := parseConfigs(configs)
			if err != nil {
				return usageErr(cmd, "%v", err)
			}
			if partitions == 0 || partitions < -1 {
				return usageErr(cmd, "--partitions must be positive (or -1 for the broker's default)")
			}
			if rf == 0 || rf < -1 {
				return usageErr(cmd, "--replication-factor must be positive (or -1 for the broker's default)")
			}
			resps, err := s.adm.CreateTopics(s.ctx, partitions, rf, cfg, args...)
			if err != nil {
				return o.fail("create topics", err)
			}
			answers := make([]answer, len(args))
			for i, t := range args {
				r, ok := resps[t]
				err := answerErr(ok, r.Err, r.ErrMessage)
				line := topicLine{Topic: t}
				if err == nil {
					line = topicLine{t, r.ID.String(), int(r.NumPartitions), int(r.ReplicationFactor)}
				}
				answers[i] = answer{name: t, err: err, json: struct {
					topicLine
					Error string `json:"error,omitempty"`
				}{line, errString(err)},
					line: fmt.Sprintf("Created topic %q (%d partition(s), replication factor %d, id %s).", t, line.Partitions, line.ReplicationFactor, line.ID)}
			}
			return o.report(cmd, "create topic", answers)
		}),
	}
	f := cmd.Flags()
	f.Int32Var(&partitions, "partitions", -1, "number of partitions (-1: the broker's default)")
	f.Int16Var(&rf, "replication-factor", -1, "number of replicas of each partition (-1: the broker's default)")
	f.StringArrayVar(&configs, "config", nil, "a topic config NAME=VALUE; repeatable")
	return cmd
}

// topicView is a described topic: the JSON of `topics describe`.
type topicView struct {
	Topic             string          `json:"topic"`
	ID                string          `json:"id"`
	Internal          bool            `json:"internal"`
	ReplicationFactor int             `json:"replication_factor"`
	Partitions        []partitionView `json:"partitions"`
	// Configs are the topic's own settings (not the broker's defaults);
	// nil when the broker does not serve DescribeConfigs.
	Configs []configView `json:"configs"`
}

type partitionView struct {
	Partition int32   `json:"partition"`
	Leader    int32   `json:"leader"`
	Replicas  []int32 `json:"replicas"`
	ISR       []int32 `json:"isr"`
	Error     string  `json:"error,omitempty"`
}

type configView struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

func describeTopicsCmd(o *options) *cobra.Command {
	var under, unavail bool
	cmd := &cobra.Command{
		Use:   "describe [TOPIC...]",
		Short: "Show topics' partitions, leaders, replicas and configs (all topics without names)",
		Long: `Show each topic's id, partitions with their leader, replicas and in-sync
replicas, and the configs set on the topic itself. Configs need the broker to
serve DescribeConfigs; when it does not, they are left out with a note.

As with kafka-topics.sh, --under-replicated-partitions and
--unavailable-partitions (either or both) list only the partitions with
fewer in-sync replicas than replicas, or without a live leader, one table
of TOPIC PARTITION LEADER REPLICAS ISR for all topics, and no configs.`,
		RunE: o.connected(func(cmd *cobra.Command, args []string, s *clusterConn) error {
			md, err := s.adm.Metadata(s.ctx, args...)
			if err != nil {
				return o.fail("describe topics", err)
			}
			details := md.Topics
			if len(args) == 0 {
				details.FilterInternal() // as kadm's ListTopics
			}
			if under || unavail {
				return o.writeUnhealthy(cmd, details, liveBrokers(md), under, unavail)
			}
			var views []topicView
			var missing []error
			for _, d := range details.Sorted() {
				if d.Err != nil {
					missing = append(missing, o.fail(fmt.Sprintf("describe topic %q", d.Topic), d.Err))
					continue
				}
				v := topicView{Topic: d.Topic, ID: d.ID.String(), Internal: d.IsInternal, ReplicationFactor: d.Partitions.NumReplicas(), Partitions: []partitionView{}}
				for _, p := range d.Partitions.Sorted() {
					pv := partitionView{Partition: p.Partition, Leader: p.Leader, Replicas: orEmpty(p.Replicas), ISR: orEmpty(p.ISR)}
					if p.Err != nil {
						pv.Error = p.Err.Error()
					}
					v.Partitions = append(v.Partitions, pv)
				}
				views = append(views, v)
			}
			note, err := o.topicConfigs(s, views)
			if err != nil {
				return o.fail("describe topic configs", err)
			}
			if note != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "note:", note)
			}
			if o.json() {
				if views == nil {
					views = []topicView{}
				}
				if err := writeJSON(cmd.OutOrStdout(), views); err != nil {
					return err
				}
			} else if err := writeTopicViews(cmd.OutOrStdout(), views); err != nil {
				return err
			}
			return errors.Join(missing...)
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&under, "under-replicated-partitions", false, "list only the partitions with fewer in-sync replicas than replicas")
	f.BoolVar(&unavail, "unavailable-partitions", false, "list only the partitions without a live leader")
	return cmd
}

// topicConfigs fills in the topics' own configs, or says why it cannot.
func (o *options) topicConfigs(s *clusterConn, views []topicView) (note string, err error) {
	if len(views) == 0 {
		return "", nil
	}
	versions, err := s.adm.ApiVersions(s.ctx)
	if err != nil {
		return "", err
	}
	for _, v := range versions.Sorted() {
		if v.Err != nil {
			return "", v.Err
		}
		if _, ok := v.KeyMaxVersion(kmsg.DescribeConfigs.Int16()); !ok {
			return fmt.Sprintf("broker %d does not serve DescribeConfigs, so topic configs are not shown", v.NodeID), nil
		}
	}
	names := make([]string, len(views))
	for i, v := range views {
		names[i] = v.Topic
	}
	rcs, err := s.adm.DescribeTopicConfigs(s.ctx, names...)
	if err != nil {
		return "", err
	}
	for i := range views {
		rc, err := rcs.On(views[i].Topic, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			return "", fmt.Errorf("topic %q: %w", views[i].Topic, err)
		}
		views[i].Configs = []configView{}
		for _, c := range rc.Configs {
			// Like kafka-topics.sh: only what is set on the topic.
			if c.Source != kmsg.ConfigSourceDynamicTopicConfig {
				continue
			}
			views[i].Configs = append(views[i].Configs, configView{c.Key, c.MaybeValue(), c.Source.String()})
		}
		slices.SortFunc(views[i].Configs, func(a, b configView) int { return cmp.Compare(a.Name, b.Name) })
	}
	return "", nil
}

func writeTopicViews(w io.Writer, views []topicView) error {
	for i, v := range views {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "Topic: %s  ID: %s  Partitions: %d  Replication factor: %d\n", v.Topic, v.ID, len(v.Partitions), v.ReplicationFactor)
		// The ERROR column only when a partition has one.
		header := []string{"PARTITION", "LEADER", "REPLICAS", "ISR"}
		if slices.ContainsFunc(v.Partitions, func(p partitionView) bool { return p.Error != "" }) {
			header = append(header, "ERROR")
		}
		var rows [][]string
		for _, p := range v.Partitions {
			row := []string{fmt.Sprint(p.Partition), fmt.Sprint(p.Leader), joinInts(p.Replicas), joinInts(p.ISR), p.Error}
			rows = append(rows, row[:len(header)])
		}
		if err := writeTable(w, header, rows); err != nil {
			return err
		}
		if len(v.Configs) > 0 {
			fmt.Fprintln(w)
			rows = rows[:0]
			for _, c := range v.Configs {
				rows = append(rows, []string{c.Name, c.Value, c.Source})
			}
			if err := writeTable(w, []string{"CONFIG", "VALUE", "SOURCE"}, rows); err != nil {
				return err
			}
		}
	}
	return nil
}

func joinInts(is []int32) string {
	s := make([]string, len(is))
	for i, n := range is {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

func deleteTopicsCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "delete TOPIC...",
		Short: "Delete topics and their data",
		Args:  minArgs(1, "one or more TOPIC names"),
		RunE: o.connected(func(cmd *cobra.Command, args []string, s *clusterConn) error {
			resps, err := s.adm.DeleteTopics(s.ctx, args...)
			if err != nil {
				return o.fail("delete topics", err)
			}
			answers := make([]answer, len(args))
			for i, t := range args {
				r, ok := resps[t]
				err := answerErr(ok, r.Err, r.ErrMessage)
				answers[i] = answer{name: t, err: err, line: fmt.Sprintf("Deleted topic %q.", t), json: struct {
					Topic string `json:"topic"`
					Error string `json:"error,omitempty"`
				}{t, errString(err)}}
			}
			return o.report(cmd, "delete topic", answers)
		}),
	}
}

// orEmpty makes a nil list print as [] in JSON.
func orEmpty(is []int32) []int32 {
	if is == nil {
		return []int32{}
	}
	return is
}
