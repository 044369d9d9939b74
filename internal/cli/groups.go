package cli

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// GroupsCmd is `groupd groups`: list, describe, lag, reset-offsets,
// delete, delete-offsets and rebalances.
func GroupsCmd() *cobra.Command {
	o := newOptions()
	cmd := &cobra.Command{
		Use:   "groups",
		Short: "List, inspect and administer consumer groups (any Kafka cluster)",
		Long: `List, inspect and administer consumer groups over the Kafka protocol, as
kafka-consumer-groups.sh does; the commands work against groupd and against
any Kafka cluster. 'rebalances' reads groupd's admin API instead.

Exit status: 0 success, 1 the operation failed (the broker refused it, the
group does not exist, the broker could not be reached), 2 usage error.`,
		Args: cobra.ArbitraryArgs,
		RunE: parentRun,
	}
	o.addFlags(cmd)
	cmd.AddCommand(
		listGroupsCmd(o),
		describeGroupCmd(o),
		lagCmd(o),
		resetOffsetsCmd(o),
		deleteGroupsCmd(o),
		deleteOffsetsCmd(o),
		rebalancesCmd(o),
	)
	return cmd
}

func listGroupsCmd(o *options) *cobra.Command {
	var states, types []string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the groups with their type and state",
		Args:  exactArgs(),
		RunE: o.connected(func(cmd *cobra.Command, _ []string, s *clusterConn) error {
			want, err := canonicalStates(states)
			if err != nil {
				return usageErr(cmd, "%v", err)
			}
			listed, err := s.adm.ListGroupsByType(s.ctx, types, want...)
			if err != nil {
				return o.fail("list groups", err)
			}
			type groupLine struct {
				Group        string `json:"group"`
				Type         string `json:"type"`
				State        string `json:"state"`
				ProtocolType string `json:"protocol_type"`
				Coordinator  int32  `json:"coordinator"`
			}
			lines := []groupLine{}
			for _, g := range listed.Sorted() {
				// Brokers before ListGroups v4 ignore the filter.
				if len(want) > 0 && !slices.ContainsFunc(want, func(s string) bool { return strings.EqualFold(s, g.State) }) {
					continue
				}
				lines = append(lines, groupLine{g.Group, g.GroupType, g.State, g.ProtocolType, g.Coordinator})
			}
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), lines)
			}
			rows := make([][]string, 0, len(lines))
			for _, l := range lines {
				rows = append(rows, []string{l.Group, l.Type, l.State})
			}
			return writeTable(cmd.OutOrStdout(), []string{"GROUP", "TYPE", "STATE"}, rows)
		}),
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only groups in these states (Empty, Stable, PreparingRebalance, CompletingRebalance, Dead, ...; case-insensitive; repeatable or comma-separated)")
	cmd.Flags().StringSliceVar(&types, "type", nil, "only groups of these types (classic, consumer, ...; needs ListGroups v5)")
	return cmd
}

// groupView is a described group with its committed offsets and lag: the
// JSON of `describe` and the source of its tables.
type groupView struct {
	Group        string       `json:"group"`
	State        string       `json:"state"`
	ProtocolType string       `json:"protocol_type"`
	Protocol     string       `json:"protocol"`
	Coordinator  brokerView   `json:"coordinator"`
	Members      []memberView `json:"members"`
	Offsets      []offsetView `json:"offsets"`
}

type brokerView struct {
	ID   int32  `json:"id"`
	Host string `json:"host"`
	Port int32  `json:"port"`
}

type memberView struct {
	MemberID   string            `json:"member_id"`
	InstanceID string            `json:"instance_id,omitempty"`
	ClientID   string            `json:"client_id"`
	ClientHost string            `json:"client_host"`
	Assignment []topicPartitions `json:"assignment"`
}

type topicPartitions struct {
	Topic      string  `json:"topic"`
	Partitions []int32 `json:"partitions"`
}

// offsetView is a group's position on one partition. Offsets and lag are
// -1 where unknown: no committed offset, or a partition whose log end
// could not be listed.
type offsetView struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed int64  `json:"committed"`
	LogEnd    int64  `json:"log_end_offset"`
	// Lag is LogEnd minus Committed (never below 0).
	Lag        int64  `json:"lag"`
	MemberID   string `json:"member_id,omitempty"`
	ClientID   string `json:"client_id,omitempty"`
	ClientHost string `json:"client_host,omitempty"`
	Error      string `json:"error,omitempty"`
}

func (m memberView) partitionCount() int {
	n := 0
	for _, t := range m.Assignment {
		n += len(t.Partitions)
	}
	return n
}

// describeGroup reads a group, its committed offsets and the log end of
// each of its partitions. A group the broker does not know is an error
// naming GROUP_ID_NOT_FOUND, as for kafka-consumer-groups.sh.
func (o *options) describeGroup(s *clusterConn, group string) (groupView, error) {
	op := fmt.Sprintf("describe group %q", group)
	lags, err := s.adm.Lag(s.ctx, group)
	if err != nil {
		return groupView{}, o.fail(op, err)
	}
	l, ok := lags[group]
	switch {
	case !ok:
		return groupView{}, o.fail(op, kerr.GroupIDNotFound)
	case l.DescribeErr != nil:
		return groupView{}, o.fail(op, l.DescribeErr)
	case l.State == "Dead":
		// Brokers before DescribeGroups v6 report an unknown group as Dead.
		return groupView{}, o.fail(op, kerr.GroupIDNotFound)
	case l.FetchErr != nil:
		return groupView{}, o.fail(op, l.FetchErr)
	}
	v := groupView{
		Group:        group,
		State:        l.State,
		ProtocolType: l.ProtocolType,
		Protocol:     l.Protocol,
		Coordinator:  brokerView{l.Coordinator.NodeID, l.Coordinator.Host, l.Coordinator.Port},
		Members:      []memberView{},
		Offsets:      []offsetView{},
	}
	for _, m := range l.Members {
		mv := memberView{MemberID: m.MemberID, ClientID: m.ClientID, ClientHost: m.ClientHost, Assignment: []topicPartitions{}}
		if m.InstanceID != nil {
			mv.InstanceID = *m.InstanceID
		}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				ps := slices.Clone(t.Partitions)
				slices.Sort(ps)
				mv.Assignment = append(mv.Assignment, topicPartitions{t.Topic, ps})
			}
			slices.SortFunc(mv.Assignment, func(a, b topicPartitions) int { return cmp.Compare(a.Topic, b.Topic) })
		}
		v.Members = append(v.Members, mv)
	}
	for _, pl := range l.Lag.Sorted() {
		ov := offsetView{Topic: pl.Topic, Partition: pl.Partition, Committed: -1, LogEnd: -1, Lag: -1}
		if pl.Commit.At >= 0 {
			ov.Committed = pl.Commit.At
		}
		if pl.End.Err == nil && pl.End.Offset >= 0 {
			ov.LogEnd = pl.End.Offset
		}
		// kadm counts an uncommitted partition's lag from the log
		// start; like kafka-consumer-groups.sh we call it unknown.
		if pl.Err == nil && ov.Committed >= 0 && ov.LogEnd >= 0 {
			ov.Lag = max(ov.LogEnd-ov.Committed, 0)
		}
		if pl.Err != nil {
			ov.Error = pl.Err.Error()
		}
		if pl.Member != nil {
			ov.MemberID, ov.ClientID, ov.ClientHost = pl.Member.MemberID, pl.Member.ClientID, pl.Member.ClientHost
		}
		v.Offsets = append(v.Offsets, ov)
	}
	return v, nil
}

func describeGroupCmd(o *options) *cobra.Command {
	var members, verbose, state, offsets bool
	cmd := &cobra.Command{
		Use:   "describe GROUP",
		Short: "Show a group's offsets and lag per partition, its members (--members) or its state (--state)",
		Long: `Show a group as kafka-consumer-groups.sh --describe does.

By default: one line per partition the group consumes or has committed, with
the committed offset, the log end offset, the lag between them and the member
that owns the partition. --members lists the members (--verbose adds their
assignments), --state the group's coordinator, assignment strategy, state and
member count. With --output json the whole group is printed, whichever view
is chosen.`,
		Args: exactArgs("GROUP"),
		RunE: o.connected(func(cmd *cobra.Command, args []string, s *clusterConn) error {
			n := 0
			for _, b := range []bool{members, state, offsets} {
				if b {
					n++
				}
			}
			if n > 1 {
				return usageErr(cmd, "give at most one of --offsets, --members, --state")
			}
			v, err := o.describeGroup(s, args[0])
			if err != nil {
				return err
			}
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			stderr := cmd.ErrOrStderr()
			switch v.State {
			case "Empty":
				fmt.Fprintf(stderr, "Consumer group '%s' has no active members.\n", v.Group)
			case "PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling":
				fmt.Fprintf(stderr, "Consumer group '%s' is rebalancing (%s).\n", v.Group, v.State)
			}
			out := cmd.OutOrStdout()
			switch {
			case state:
				coord := fmt.Sprintf("%s (%d)", net.JoinHostPort(v.Coordinator.Host, strconv.Itoa(int(v.Coordinator.Port))), v.Coordinator.ID)
				return writeTable(out, []string{"COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"},
					[][]string{{coord, v.Protocol, v.State, fmt.Sprint(len(v.Members))}})
			case members:
				header := []string{"CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"}
				if verbose {
					header = []string{"CONSUMER-ID", "INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"}
				}
				var rows [][]string
				for _, m := range v.Members {
					row := []string{m.MemberID, m.ClientHost, m.ClientID, fmt.Sprint(m.partitionCount())}
					if verbose {
						row = []string{m.MemberID, m.InstanceID, m.ClientHost, m.ClientID, fmt.Sprint(m.partitionCount()), formatAssignment(m.Assignment)}
					}
					rows = append(rows, row)
				}
				return writeTable(out, header, rows)
			default:
				var rows [][]string
				for _, ov := range v.Offsets {
					rows = append(rows, []string{ov.Topic, fmt.Sprint(ov.Partition), offsetCell(ov.Committed), offsetCell(ov.LogEnd), offsetCell(ov.Lag), ov.MemberID, ov.ClientHost, ov.ClientID})
				}
				return writeTable(out, []string{"TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"}, rows)
			}
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&offsets, "offsets", false, "show offsets and lag per partition (the default)")
	f.BoolVar(&members, "members", false, "show the members")
	f.BoolVar(&verbose, "verbose", false, "with --members: show each member's instance id and assignment")
	f.BoolVar(&state, "state", false, "show the coordinator, assignment strategy, state and member count")
	return cmd
}

// formatAssignment prints an assignment as kafka-consumer-groups.sh
// does: topic(0,1,2),other(3).
func formatAssignment(a []topicPartitions) string {
	var parts []string
	for _, t := range a {
		ps := make([]string, len(t.Partitions))
		for i, p := range t.Partitions {
			ps[i] = fmt.Sprint(p)
		}
		parts = append(parts, t.Topic+"("+strings.Join(ps, ",")+")")
	}
	return strings.Join(parts, ",")
}

func lagCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "lag GROUP",
		Short: "Show a group's lag per partition, per topic and in total",
		Long: `Show a group's lag: for each partition, the log end offset minus the
group's committed offset; then the sum per topic and in total. A partition
without a committed offset has no lag ("-") and is left out of the sums.`,
		Args: exactArgs("GROUP"),
		RunE: o.connected(func(cmd *cobra.Command, args []string, s *clusterConn) error {
			v, err := o.describeGroup(s, args[0])
			if err != nil {
				return err
			}
			type topicLag struct {
				Topic string `json:"topic"`
				Lag   int64  `json:"lag"`
			}
			var topics []topicLag
			var total int64
			unknown := 0
			for _, ov := range v.Offsets {
				if len(topics) == 0 || topics[len(topics)-1].Topic != ov.Topic {
					topics = append(topics, topicLag{Topic: ov.Topic})
				}
				if ov.Lag < 0 {
					unknown++
					continue
				}
				topics[len(topics)-1].Lag += ov.Lag
				total += ov.Lag
			}
			if o.json() {
				if topics == nil {
					topics = []topicLag{}
				}
				return writeJSON(cmd.OutOrStdout(), struct {
					Group      string       `json:"group"`
					State      string       `json:"state"`
					Partitions []offsetView `json:"partitions"`
					Topics     []topicLag   `json:"topics"`
					TotalLag   int64        `json:"total_lag"`
				}{v.Group, v.State, v.Offsets, topics, total})
			}
			out := cmd.OutOrStdout()
			var rows [][]string
			for _, ov := range v.Offsets {
				rows = append(rows, []string{ov.Topic, fmt.Sprint(ov.Partition), offsetCell(ov.Committed), offsetCell(ov.LogEnd), offsetCell(ov.Lag)})
			}
			if err := writeTable(out, []string{"TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"}, rows); err != nil {
				return err
			}
			fmt.Fprintln(out)
			rows = rows[:0]
			for _, t := range topics {
				rows = append(rows, []string{t.Topic, fmt.Sprint(t.Lag)})
			}
			rows = append(rows, []string{"TOTAL", fmt.Sprint(total)})
			if err := writeTable(out, []string{"TOPIC", "LAG"}, rows); err != nil {
				return err
			}
			if unknown > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "%d partition(s) without a committed offset or log end are not counted.\n", unknown)
			}
			return nil
		}),
	}
}

func deleteGroupsCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "delete GROUP...",
		Short: "Delete groups and their committed offsets (only groups without active members)",
		Args:  minArgs(1, "one or more GROUP names"),
		RunE: o.connected(func(cmd *cobra.Command, args []string, s *clusterConn) error {
			resps, err := s.adm.DeleteGroups(s.ctx, args...)
			if err != nil {
				return o.fail("delete groups", err)
			}
			answers := make([]answer, len(args))
			for i, g := range args {
				r, ok := resps[g]
				err := answerErr(ok, r.Err, r.ErrMessage)
				answers[i] = answer{name: g, err: err, line: fmt.Sprintf("Deleted group %q.", g), json: struct {
					Group string `json:"group"`
					Error string `json:"error,omitempty"`
				}{g, errString(err)}}
			}
			return o.report(cmd, "delete group", answers)
		}),
	}
}

func deleteOffsetsCmd(o *options) *cobra.Command {
	var topics []string
	cmd := &cobra.Command{
		Use:   "delete-offsets GROUP --topic TOPIC[:P,P]...",
		Short: "Delete a group's committed offsets of some topics or partitions",
		Long: `Delete a group's committed offsets of the named topics (all partitions the
group committed, and all the topic has) or partitions. The broker refuses
while active members of the group consume the topic.`,
		Args: exactArgs("GROUP"),
		RunE: o.connected(func(cmd *cobra.Command, args []string, s *clusterConn) error {
			group := args[0]
			specs, err := parseTopicSpecs(topics)
			if err != nil {
				return usageErr(cmd, "%v", err)
			}
			if len(specs) == 0 {
				return usageErr(cmd, "name the offsets to delete with one or more --topic")
			}
			op := fmt.Sprintf("delete offsets of group %q", group)
			set, err := o.offsetsToDelete(s, group, specs)
			if err != nil {
				return o.fail(op, err)
			}
			resps, err := s.adm.DeleteOffsets(s.ctx, group, set)
			if err != nil {
				return o.fail(op, err)
			}
			type result struct {
				Topic     string `json:"topic"`
				Partition int32  `json:"partition"`
				Error     string `json:"error,omitempty"`
			}
			var results []result
			var first error
			failed := 0
			for _, tp := range set.Sorted() {
				for _, p := range tp.Partitions {
					err, ok := resps.Lookup(tp.Topic, p)
					if !ok {
						err = errors.New("the broker did not answer for this partition")
					}
					r := result{Topic: tp.Topic, Partition: p}
					if err != nil {
						r.Error = err.Error()
						first = cmp.Or(first, err)
						failed++
					}
					results = append(results, r)
				}
			}
			if o.json() {
				if err := writeJSON(cmd.OutOrStdout(), results); err != nil {
					return err
				}
			} else {
				var rows [][]string
				for _, r := range results {
					status := "Successful"
					if r.Error != "" {
						status = "Error: " + r.Error
					}
					rows = append(rows, []string{r.Topic, fmt.Sprint(r.Partition), status})
				}
				if err := writeTable(cmd.OutOrStdout(), []string{"TOPIC", "PARTITION", "STATUS"}, rows); err != nil {
					return err
				}
			}
			if first != nil {
				return o.fail(op, fmt.Errorf("%d of %d partition(s) failed: %w", failed, len(results), first))
			}
			return nil
		}),
	}
	cmd.Flags().StringArrayVar(&topics, "topic", nil, "delete the offsets of this topic, or of TOPIC:P,P only; repeatable")
	return cmd
}

// offsetsToDelete expands --topic specs: a topic without partitions
// stands for every partition the group committed on it and every
// partition it has, so that the offsets of a deleted topic can still be
// deleted.
func (o *options) offsetsToDelete(s *clusterConn, group string, specs []topicSpec) (kadm.TopicsSet, error) {
	set := make(kadm.TopicsSet)
	var whole []string
	for _, sp := range specs {
		if sp.partitions != nil {
			set.Add(sp.topic, sp.partitions...)
		} else {
			whole = append(whole, sp.topic)
		}
	}
	if len(whole) == 0 {
		return set, nil
	}
	committed, err := s.adm.FetchOffsets(s.ctx, group)
	if err != nil {
		return nil, err
	}
	details, err := s.adm.ListTopics(s.ctx, whole...)
	if err != nil {
		return nil, err
	}
	for _, t := range whole {
		for p := range committed[t] {
			set.Add(t, p)
		}
		if d, ok := details[t]; ok && d.Err == nil {
			set.Add(t, d.Partitions.Numbers()...)
		}
		if len(set[t]) == 0 {
			return nil, fmt.Errorf("topic %q: the group has no offsets on it and it does not exist: %w", t, kerr.UnknownTopicOrPartition)
		}
	}
	return set, nil
}
