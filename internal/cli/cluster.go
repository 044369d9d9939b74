package cli

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

// ClusterCmd is `groupd cluster`: describe.
func ClusterCmd() *cobra.Command {
	o := newOptions()
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Describe the cluster: its nodes and the health of its partitions (any Kafka cluster)",
		Long: `Describe the cluster over the Kafka protocol: its id, its controller, its
live brokers, and how many partitions it has, are under-replicated and are
offline. The commands work against groupd (one node or a cluster) and against
any Kafka cluster.

Exit status: 0 success, 1 the brokers could not be reached or refused, 2
usage error.`,
		Args: cobra.ArbitraryArgs,
		RunE: parentRun,
	}
	o.addFlags(cmd)
	cmd.AddCommand(describeClusterCmd(o))
	return cmd
}

// clusterView is `cluster describe`'s answer; its field names are the
// admin API's (GET /api/v1/cluster).
type clusterView struct {
	ClusterID  string          `json:"cluster_id"`
	Controller int32           `json:"controller"`
	Nodes      []nodeView      `json:"nodes"`
	Partitions partitionCounts `json:"partitions"`
}

type nodeView struct {
	ID   int32  `json:"id"`
	Host string `json:"host"`
	Port int32  `json:"port"`
	Rack string `json:"rack"`
}

type partitionCounts struct {
	Topics          int `json:"topics"`
	Total           int `json:"total"`
	UnderReplicated int `json:"under_replicated"`
	Offline         int `json:"offline"`
}

func describeClusterCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "describe",
		Short: "Show the cluster id, the controller, the live brokers and the partitions' health",
		Long: `Show the cluster id, the controller, the live brokers (ID HOST PORT RACK) and
counts of the partitions of every topic, internal ones included: all of
them, the under-replicated ones (with a live leader, and fewer in-sync
replicas than replicas) and the offline ones (without a live leader).
'groupd topics describe --under-replicated-partitions' and
'--unavailable-partitions' list them.`,
		Args: exactArgs(),
		RunE: o.connected(func(cmd *cobra.Command, _ []string, s *clusterConn) error {
			md, err := s.adm.Metadata(s.ctx)
			if err != nil {
				return o.fail("describe cluster", err)
			}
			v := clusterView{ClusterID: md.Cluster, Controller: md.Controller, Nodes: []nodeView{}}
			for _, b := range md.Brokers {
				n := nodeView{ID: b.NodeID, Host: b.Host, Port: b.Port}
				if b.Rack != nil {
					n.Rack = *b.Rack
				}
				v.Nodes = append(v.Nodes, n)
			}
			live := liveBrokers(md)
			for _, t := range md.Topics {
				if t.Err != nil {
					continue
				}
				v.Partitions.Topics++
				for _, p := range t.Partitions {
					v.Partitions.Total++
					switch {
					case unavailable(p, live):
						v.Partitions.Offline++
					case underReplicated(p):
						v.Partitions.UnderReplicated++
					}
				}
			}
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			w := cmd.OutOrStdout()
			controller := "none"
			if v.Controller >= 0 {
				controller = fmt.Sprint(v.Controller)
			}
			fmt.Fprintf(w, "Cluster: %s  Controller: %s\n", v.ClusterID, controller)
			fmt.Fprintf(w, "Topics: %d  Partitions: %d  Under-replicated: %d  Offline: %d\n\n",
				v.Partitions.Topics, v.Partitions.Total, v.Partitions.UnderReplicated, v.Partitions.Offline)
			rows := make([][]string, 0, len(v.Nodes))
			for _, n := range v.Nodes {
				rows = append(rows, []string{fmt.Sprint(n.ID), n.Host, fmt.Sprint(n.Port), n.Rack})
			}
			return writeTable(w, []string{"ID", "HOST", "PORT", "RACK"}, rows)
		}),
	}
}

// liveBrokers are the brokers a Metadata answer lists: the live ones.
func liveBrokers(md kadm.Metadata) []int32 {
	ids := make([]int32, len(md.Brokers))
	for i, b := range md.Brokers {
		ids[i] = b.NodeID
	}
	return ids
}

// unavailable is a partition without a live leader, as kafka-topics.sh's
// --unavailable-partitions finds them.
func unavailable(p kadm.PartitionDetail, live []int32) bool {
	return p.Leader < 0 || !slices.Contains(live, p.Leader)
}

// underReplicated is a partition with fewer in-sync replicas than
// replicas. kafka-topics.sh's --under-replicated-partitions lists them
// whether they have a leader or not; the counts of `cluster describe`, the
// admin API and the metrics count an offline one as offline only, as
// Kafka's UnderReplicatedPartitions (reported by leaders) does.
func underReplicated(p kadm.PartitionDetail) bool {
	return len(p.ISR) < len(p.Replicas)
}

// partitionLine is a partition in the filtered output of `topics
// describe`.
type partitionLine struct {
	Topic string `json:"topic"`
	partitionView
}

// writeUnhealthy prints the partitions of details that are
// under-replicated (under) or unavailable (unavail), by topic and
// partition, as kafka-topics.sh's --under-replicated-partitions and
// --unavailable-partitions do.
func (o *options) writeUnhealthy(cmd *cobra.Command, details kadm.TopicDetails, live []int32, under, unavail bool) error {
	lines := []partitionLine{}
	var failed []error
	for _, d := range details.Sorted() {
		if d.Err != nil {
			failed = append(failed, o.fail(fmt.Sprintf("describe topic %q", d.Topic), d.Err))
			continue
		}
		for _, p := range d.Partitions.Sorted() {
			if !(under && underReplicated(p) || unavail && unavailable(p, live)) {
				continue
			}
			pv := partitionView{Partition: p.Partition, Leader: p.Leader, Replicas: orEmpty(p.Replicas), ISR: orEmpty(p.ISR)}
			if p.Err != nil {
				pv.Error = p.Err.Error()
			}
			lines = append(lines, partitionLine{d.Topic, pv})
		}
	}
	if o.json() {
		if err := writeJSON(cmd.OutOrStdout(), lines); err != nil {
			return err
		}
		return errors.Join(failed...)
	}
	header := []string{"TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"}
	if slices.ContainsFunc(lines, func(l partitionLine) bool { return l.Error != "" }) {
		header = append(header, "ERROR")
	}
	rows := make([][]string, 0, len(lines))
	for _, l := range lines {
		row := []string{l.Topic, fmt.Sprint(l.Partition), fmt.Sprint(l.Leader), joinInts(l.Replicas), joinInts(l.ISR), l.Error}
		rows = append(rows, row[:len(header)])
	}
	if err := writeTable(cmd.OutOrStdout(), header, rows); err != nil {
		return err
	}
	return errors.Join(failed...)
}
