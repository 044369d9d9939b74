package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/partition"
)

// backend is a cluster the commands run against: groupd in-process, or
// franz-go's kfake. Every scenario runs against both.
type backend struct {
	name  string
	start func(t *testing.T) string // the bootstrap address
	// servesConfigs is whether DescribeConfigs is served.
	servesConfigs bool
}

var backends = []backend{
	{name: "groupd", start: startGroupd, servesConfigs: true},
	{name: "kfake", start: startKfake, servesConfigs: true},
}

func startGroupd(t *testing.T) string { return startGroupdApp(t).Addr() }

// startGroupdApp starts groupd in-process, with its HTTP side (the admin
// API) on a free port, until the test ends.
func startGroupdApp(t *testing.T) *app.App {
	t.Helper()
	level := slog.LevelWarn
	if os.Getenv("GROUPD_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	a, err := app.Start(app.Config{
		Listen:            "127.0.0.1:0",
		DataDir:           t.TempDir(),
		DefaultPartitions: 1,
		Log:               partition.Options{Sync: partition.SyncNever},
		// No initial rebalance delay: the first member's group is Stable
		// as soon as it has synced.
		Group:      group.Config{InitialRebalanceDelay: -1},
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
		HTTPListen: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatalf("start groupd: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil && err != app.ErrStopped {
			t.Errorf("stop groupd: %v", err)
		}
	})
	return a
}

func startKfake(t *testing.T) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// forEachBackend runs fn as a subtest against each backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend, addr string)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { fn(t, b, b.start(t)) })
	}
}

type cliResult struct {
	stdout, stderr string
	err            error
	code           int
}

// runCLI runs the commands as the groupd binary does, with its output
// captured, and maps the outcome to the exit status.
func runCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	root := &cobra.Command{Use: "groupd", SilenceUsage: true}
	root.AddCommand(GroupsCmd(), TopicsCmd(), ClusterCmd())
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return cliResult{stdout.String(), stderr.String(), err, ExitCode(err)}
}

// mustRun runs a command that must succeed.
func mustRun(t *testing.T, args ...string) cliResult {
	t.Helper()
	r := runCLI(t, args...)
	if r.code != 0 {
		t.Fatalf("%q: exit %d: %v\nstdout:\n%s\nstderr:\n%s", args, r.code, r.err, r.stdout, r.stderr)
	}
	return r
}

// mustFail runs a command that must exit with code, naming want in its
// error (and so in what the binary prints).
func mustFail(t *testing.T, code int, want string, args ...string) cliResult {
	t.Helper()
	r := runCLI(t, args...)
	if r.code != code {
		t.Fatalf("%q: exit %d (%v), want %d\nstdout:\n%s", args, r.code, r.err, code, r.stdout)
	}
	if !strings.Contains(r.err.Error(), want) || !strings.Contains(r.stderr, want) {
		t.Fatalf("%q: error %q (printed %q), want it to name %q", args, r.err, r.stderr, want)
	}
	return r
}

// parseTable splits a table into rows keyed by its header. Cells hold no
// white space except in the last column, or where the header's does too
// ("COORDINATOR (ID)").
func parseTable(t *testing.T, out string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header := strings.Fields(lines[0])
	var rows []map[string]string
	for _, l := range lines[1:] {
		if l == "" {
			break // a second table follows
		}
		cells := strings.Fields(l)
		// The last column may hold white space (an error, a storm's cause).
		if len(cells) > len(header) {
			cells = append(cells[:len(header)-1], strings.Join(cells[len(header)-1:], " "))
		}
		if len(cells) != len(header) {
			t.Fatalf("row %q has %d cells, header %q has %d", l, len(cells), header, len(header))
		}
		row := map[string]string{}
		for i, h := range header {
			row[h] = cells[i]
		}
		rows = append(rows, row)
	}
	return rows
}

func adminClient(t *testing.T, addr string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// produce writes n[p] records to each partition p of topic.
func produce(t *testing.T, addr, topic string, n []int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for p, count := range n {
		for i := range count {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte(fmt.Sprintf("%d-%d", p, i))})
		}
	}
	if err := cl.ProduceSync(testCtx(t), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// consumer is a franz-go group member that has been assigned every
// partition of its topic.
type consumer struct {
	cl       *kgo.Client
	memberID string
}

func startConsumer(t *testing.T, addr, groupID, topic string, partitions int) *consumer {
	t.Helper()
	assigned := make(chan int, 16)
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addr),
		kgo.ClientID("cli-test-consumer"),
		kgo.ConsumerGroup(groupID),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			assigned <- len(m[topic])
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx := testCtx(t)
	for got := 0; got < partitions; {
		select {
		case n := <-assigned:
			got += n
		case <-ctx.Done():
			t.Fatalf("consumer was assigned %d of %d partitions", got, partitions)
		}
	}
	memberID, _ := cl.GroupMetadata()
	return &consumer{cl: cl, memberID: memberID}
}

// commit commits offsets as the group member.
func (c *consumer) commit(t *testing.T, topic string, offsets map[int32]int64) {
	t.Helper()
	m := map[int32]kgo.EpochOffset{}
	for p, o := range offsets {
		m[p] = kgo.EpochOffset{Epoch: -1, Offset: o}
	}
	var commitErr error
	c.cl.CommitOffsetsSync(testCtx(t), map[string]map[int32]kgo.EpochOffset{topic: m}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		commitErr = err
		if err == nil {
			for _, rt := range resp.Topics {
				for _, rp := range rt.Partitions {
					if rp.ErrorCode != 0 && commitErr == nil {
						commitErr = fmt.Errorf("%s/%d: error code %d", rt.Topic, rp.Partition, rp.ErrorCode)
					}
				}
			}
		}
	})
	if commitErr != nil {
		t.Fatalf("commit: %v", commitErr)
	}
}

// committed reads a group's committed offsets, independently of the CLI.
func committed(t *testing.T, adm *kadm.Client, groupID string) map[string]int64 {
	t.Helper()
	resps, err := adm.FetchOffsets(testCtx(t), groupID)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[string]int64{} // some brokers say so for a group without offsets
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	resps.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil {
			t.Fatalf("fetch offsets %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.At
	})
	return out
}

// waitState waits until the group reaches state, as members leave
// asynchronously to the client's Close.
func waitState(t *testing.T, adm *kadm.Client, groupID, state string) {
	t.Helper()
	ctx := testCtx(t)
	for {
		d, err := adm.DescribeGroups(ctx, groupID)
		if err == nil && d[groupID].State == state {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("group %s never reached %s (last %v, %v)", groupID, state, d[groupID].State, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// planOf reads a reset plan table as "topic/partition" → new offset.
func planOf(t *testing.T, out string) map[string]int64 {
	t.Helper()
	plan := map[string]int64{}
	for _, r := range parseTable(t, out) {
		n, err := strconv.ParseInt(r["NEW-OFFSET"], 10, 64)
		if err != nil {
			t.Fatalf("NEW-OFFSET %q", r["NEW-OFFSET"])
		}
		plan[r["TOPIC"]+"/"+r["PARTITION"]] = n
	}
	return plan
}

func equalMaps(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestGroupCommands drives a group through describe, lag, list, a refused
// and an accepted reset, delete-offsets and delete.
func TestGroupCommands(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, addr string) {
		bs := "--bootstrap-server=" + addr
		adm := adminClient(t, addr)
		const topic, groupID = "events", "readers"
		mustRun(t, "topics", "create", topic, "--partitions", "3", bs)
		produced := []int{10, 7, 4}
		produce(t, addr, topic, produced)
		c := startConsumer(t, addr, groupID, topic, 3)
		c.commit(t, topic, map[int32]int64{0: 4, 1: 7})

		// The high watermarks and commits as the cluster reports them,
		// read without the CLI.
		ends, err := adm.ListEndOffsets(testCtx(t), topic)
		if err != nil {
			t.Fatal(err)
		}
		commits := committed(t, adm, groupID)
		for p, n := range produced {
			if e, _ := ends.Lookup(topic, int32(p)); e.Offset != int64(n) {
				t.Fatalf("high watermark of %s/%d is %d, produced %d", topic, p, e.Offset, n)
			}
		}

		// describe: every partition with its owner; lag is the high
		// watermark minus the committed offset, unknown without a commit.
		r := mustRun(t, "groups", "describe", groupID, bs)
		rows := parseTable(t, r.stdout)
		if len(rows) != 3 {
			t.Fatalf("describe printed %d partitions:\n%s", len(rows), r.stdout)
		}
		var totalLag int64
		for p, row := range rows {
			key := fmt.Sprintf("%s/%d", topic, p)
			end, _ := ends.Lookup(topic, int32(p))
			if row["TOPIC"] != topic || row["PARTITION"] != strconv.Itoa(p) {
				t.Fatalf("row %d: %v", p, row)
			}
			if row["LOG-END-OFFSET"] != strconv.FormatInt(end.Offset, 10) {
				t.Errorf("%s: LOG-END-OFFSET %s, want %d", key, row["LOG-END-OFFSET"], end.Offset)
			}
			if cur, ok := commits[key]; ok {
				lag := end.Offset - cur
				totalLag += lag
				if row["CURRENT-OFFSET"] != strconv.FormatInt(cur, 10) || row["LAG"] != strconv.FormatInt(lag, 10) {
					t.Errorf("%s: CURRENT-OFFSET %s LAG %s, want %d and %d", key, row["CURRENT-OFFSET"], row["LAG"], cur, lag)
				}
			} else if row["CURRENT-OFFSET"] != "-" || row["LAG"] != "-" {
				t.Errorf("%s has no commit but shows CURRENT-OFFSET %s LAG %s", key, row["CURRENT-OFFSET"], row["LAG"])
			}
			if row["CONSUMER-ID"] != c.memberID || row["CLIENT-ID"] != "cli-test-consumer" || row["HOST"] == "-" {
				t.Errorf("%s: owner %s %s %s, want member %s", key, row["CONSUMER-ID"], row["HOST"], row["CLIENT-ID"], c.memberID)
			}
		}
		if totalLag != 6 {
			t.Fatalf("test set-up: total lag %d, want 6", totalLag)
		}

		// The JSON view agrees with the table.
		r = mustRun(t, "groups", "describe", groupID, bs, "-o", "json")
		var v groupView
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("describe JSON: %v\n%s", err, r.stdout)
		}
		if v.State != "Stable" || len(v.Members) != 1 || v.Members[0].MemberID != c.memberID || len(v.Offsets) != 3 {
			t.Fatalf("describe JSON: %+v", v)
		}
		for i, ov := range v.Offsets {
			if strconv.FormatInt(ov.Lag, 10) != rows[i]["LAG"] && !(ov.Lag == -1 && rows[i]["LAG"] == "-") {
				t.Errorf("JSON lag of partition %d is %d, table says %s", i, ov.Lag, rows[i]["LAG"])
			}
		}

		r = mustRun(t, "groups", "describe", groupID, "--members", bs)
		rows = parseTable(t, r.stdout)
		if len(rows) != 1 || rows[0]["CONSUMER-ID"] != c.memberID || rows[0]["#PARTITIONS"] != "3" || rows[0]["CLIENT-ID"] != "cli-test-consumer" {
			t.Fatalf("describe --members:\n%s", r.stdout)
		}
		r = mustRun(t, "groups", "describe", groupID, "--members", "--verbose", bs)
		if rows = parseTable(t, r.stdout); len(rows) != 1 || rows[0]["ASSIGNMENT"] != topic+"(0,1,2)" {
			t.Fatalf("describe --members --verbose:\n%s", r.stdout)
		}
		r = mustRun(t, "groups", "describe", groupID, "--state", bs)
		rows = parseTable(t, r.stdout)
		if len(rows) != 1 || rows[0]["STATE"] != "Stable" || rows[0]["#MEMBERS"] != "1" || rows[0]["ASSIGNMENT-STRATEGY"] == "-" {
			t.Fatalf("describe --state:\n%s", r.stdout)
		}

		// lag: per partition as in describe, then per topic and in total.
		r = mustRun(t, "groups", "lag", groupID, bs)
		if !strings.Contains(r.stdout, "TOTAL") {
			t.Fatalf("lag:\n%s", r.stdout)
		}
		sums := parseTable(t, r.stdout[strings.Index(r.stdout, "\n\n")+2:])
		if len(sums) != 2 || sums[0]["TOPIC"] != topic || sums[0]["LAG"] != "6" || sums[1]["TOPIC"] != "TOTAL" || sums[1]["LAG"] != "6" {
			t.Fatalf("lag sums:\n%s", r.stdout)
		}
		r = mustRun(t, "groups", "lag", groupID, bs, "-o", "json")
		var lagJSON struct {
			TotalLag int64 `json:"total_lag"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &lagJSON); err != nil || lagJSON.TotalLag != 6 {
			t.Fatalf("lag JSON (%v):\n%s", err, r.stdout)
		}

		// list, filtered by state (case-insensitively, as Kafka's tool).
		r = mustRun(t, "groups", "list", "--state", "stable", bs)
		if rows = parseTable(t, r.stdout); len(rows) != 1 || rows[0]["GROUP"] != groupID || rows[0]["STATE"] != "Stable" || rows[0]["TYPE"] != "classic" {
			t.Fatalf("list --state stable:\n%s", r.stdout)
		}
		r = mustRun(t, "groups", "list", "--state", "Empty", bs)
		if rows = parseTable(t, r.stdout); len(rows) != 0 {
			t.Fatalf("list --state Empty:\n%s", r.stdout)
		}

		// An active group can be neither reset nor deleted.
		before := committed(t, adm, groupID)
		mustFail(t, 1, "NON_EMPTY_GROUP", "groups", "reset-offsets", groupID, "--to-earliest", "--topic", topic, "--execute", bs)
		mustFail(t, 1, "NON_EMPTY_GROUP", "groups", "reset-offsets", groupID, "--to-earliest", "--topic", topic, bs)
		mustFail(t, 1, "NON_EMPTY_GROUP", "groups", "delete", groupID, bs)
		// Nor its offsets on a topic its members consume deleted.
		r = mustFail(t, 1, "GROUP_SUBSCRIBED_TO_TOPIC", "groups", "delete-offsets", groupID, "--topic", topic+":0", bs)
		if rows = parseTable(t, r.stdout); len(rows) != 1 || !strings.HasPrefix(rows[0]["STATUS"], "Error:") {
			t.Fatalf("delete-offsets of a subscribed topic:\n%s", r.stdout)
		}
		if after := committed(t, adm, groupID); !equalMaps(before, after) {
			t.Fatalf("refused commands changed offsets: %v → %v", before, after)
		}

		c.cl.Close()
		waitState(t, adm, groupID, "Empty")
		r = mustRun(t, "groups", "list", "--state", "Empty", bs)
		if rows = parseTable(t, r.stdout); len(rows) != 1 || rows[0]["GROUP"] != groupID {
			t.Fatalf("list --state Empty after the member left:\n%s", r.stdout)
		}
		// Without members every partition of a committed topic is still
		// shown, owned by nobody.
		r = mustRun(t, "groups", "describe", groupID, bs)
		if rows = parseTable(t, r.stdout); !strings.Contains(r.stderr, "has no active members") || len(rows) != 3 || rows[0]["LAG"] != "6" || rows[0]["CONSUMER-ID"] != "-" {
			t.Fatalf("describe of an empty group:\n%s\n%s", r.stdout, r.stderr)
		}

		// A dry run changes nothing; --execute commits exactly what the
		// dry run printed. Shifting partition 0 (at 4) back by 5 passes
		// the log start and is clamped to it, with a warning.
		reset := []string{"groups", "reset-offsets", groupID, "--all-topics", "--shift-by", "-5", bs}
		dry := mustRun(t, reset...)
		plan := planOf(t, dry.stdout)
		if want := map[string]int64{topic + "/0": 0, topic + "/1": 2}; !equalMaps(plan, want) {
			t.Fatalf("dry run plan %v, want %v", plan, want)
		}
		if !strings.Contains(dry.stderr, "before the log start") || !strings.Contains(dry.stderr, "Dry run") {
			t.Errorf("dry run stderr: %s", dry.stderr)
		}
		if after := committed(t, adm, groupID); !equalMaps(before, after) {
			t.Fatalf("dry run changed offsets: %v → %v", before, after)
		}
		exec := mustRun(t, append(reset, "--execute")...)
		if got := planOf(t, exec.stdout); !equalMaps(got, plan) {
			t.Fatalf("--execute printed %v, the dry run %v", got, plan)
		}
		if after := committed(t, adm, groupID); !equalMaps(after, plan) {
			t.Fatalf("--execute committed %v, the dry run printed %v", after, plan)
		}

		// The other targets, as dry runs and one with JSON.
		for _, tc := range []struct {
			args []string
			want map[string]int64
		}{
			{[]string{"--to-latest", "--topic", topic}, map[string]int64{topic + "/0": 10, topic + "/1": 7, topic + "/2": 4}},
			{[]string{"--to-earliest", "--topic", topic + ":1,2"}, map[string]int64{topic + "/1": 0, topic + "/2": 0}},
			{[]string{"--to-offset", "5", "--topic", topic}, map[string]int64{topic + "/0": 5, topic + "/1": 5, topic + "/2": 4}},
			{[]string{"--to-datetime", "2099-01-01T00:00:00Z", "--topic", topic + ":0"}, map[string]int64{topic + "/0": 10}},
			{[]string{"--by-duration", "P1D", "--topic", topic + ":0"}, map[string]int64{topic + "/0": 0}},
			{[]string{"--by-duration", "PT0S", "--topic", topic + ":0"}, map[string]int64{topic + "/0": 10}},
		} {
			r := mustRun(t, append([]string{"groups", "reset-offsets", groupID, bs}, tc.args...)...)
			if got := planOf(t, r.stdout); !equalMaps(got, tc.want) {
				t.Errorf("%q: plan %v, want %v", tc.args, got, tc.want)
			}
		}
		if after := committed(t, adm, groupID); !equalMaps(after, plan) {
			t.Fatalf("dry runs changed offsets: %v → %v", plan, after)
		}
		r = mustRun(t, "groups", "reset-offsets", groupID, "--to-latest", "--topic", topic, "--execute", "-o", "json", bs)
		var resetJSON struct {
			Executed bool       `json:"executed"`
			Offsets  []resetRow `json:"offsets"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &resetJSON); err != nil || !resetJSON.Executed || len(resetJSON.Offsets) != 3 {
			t.Fatalf("reset JSON (%v):\n%s", err, r.stdout)
		}
		for _, row := range resetJSON.Offsets {
			if want := int64(produced[row.Partition]); row.NewOffset != want || row.Current != plan[fmt.Sprintf("%s/%d", topic, row.Partition)] && row.Partition != 2 {
				t.Errorf("reset JSON row %+v, want new offset %d", row, want)
			}
		}
		if after := committed(t, adm, groupID); !equalMaps(after, map[string]int64{topic + "/0": 10, topic + "/1": 7, topic + "/2": 4}) {
			t.Fatalf("after --to-latest --execute: %v", after)
		}

		// delete-offsets of one partition leaves the others.
		r = mustRun(t, "groups", "delete-offsets", groupID, "--topic", topic+":1", bs)
		if rows = parseTable(t, r.stdout); len(rows) != 1 || rows[0]["STATUS"] != "Successful" {
			t.Fatalf("delete-offsets:\n%s", r.stdout)
		}
		if after := committed(t, adm, groupID); !equalMaps(after, map[string]int64{topic + "/0": 10, topic + "/2": 4}) {
			t.Fatalf("after delete-offsets of partition 1: %v", after)
		}

		// delete, after which the group is unknown.
		r = mustRun(t, "groups", "delete", groupID, bs)
		if !strings.Contains(r.stdout, `Deleted group "readers"`) {
			t.Fatalf("delete: %s", r.stdout)
		}
		if after := committed(t, adm, groupID); len(after) != 0 {
			t.Fatalf("deleted group still has offsets %v", after)
		}
		mustFail(t, 1, "GROUP_ID_NOT_FOUND", "groups", "describe", groupID, bs)
		mustFail(t, 1, "GROUP_ID_NOT_FOUND", "groups", "delete", groupID, bs)

		// Resetting a group that does not exist creates it, as with
		// kafka-consumer-groups.sh: a way to start a new group anywhere.
		mustRun(t, "groups", "reset-offsets", "fresh", "--to-offset", "3", "--topic", topic+":0", "--execute", bs)
		if after := committed(t, adm, "fresh"); !equalMaps(after, map[string]int64{topic + "/0": 3}) {
			t.Fatalf("reset of a new group committed %v", after)
		}
	})
}

func TestUnknownGroupAndTopic(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ backend, addr string) {
		bs := "--bootstrap-server=" + addr
		for _, args := range [][]string{
			{"groups", "describe", "nope"},
			{"groups", "describe", "nope", "--members"},
			{"groups", "lag", "nope"},
			{"groups", "delete", "nope"},
		} {
			r := mustFail(t, 1, "GROUP_ID_NOT_FOUND", append(args, bs)...)
			if !strings.Contains(r.stderr, "groupd groups list") {
				t.Errorf("%q: no hint in %q", args, r.stderr)
			}
		}
		mustFail(t, 1, "UNKNOWN_TOPIC_OR_PARTITION", "groups", "reset-offsets", "g", "--to-earliest", "--topic", "nope", bs)
		mustFail(t, 1, "--all-topics names nothing", "groups", "reset-offsets", "g", "--to-earliest", "--all-topics", bs)
		mustFail(t, 1, "UNKNOWN_TOPIC_OR_PARTITION", "topics", "describe", "nope", bs)
		mustFail(t, 1, "UNKNOWN_TOPIC_OR_PARTITION", "topics", "delete", "nope", bs)
		mustRun(t, "topics", "create", "one", "--partitions", "1", bs)
		mustFail(t, 1, "has no partition 3", "groups", "reset-offsets", "g", "--to-earliest", "--topic", "one:3", bs)
	})
}

func TestTopicCommands(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, addr string) {
		bs := "--bootstrap-server=" + addr
		r := mustRun(t, "topics", "create", "rt", "--partitions", "2", "--replication-factor", "1", "--config", "retention.ms=3600000", bs)
		if !strings.Contains(r.stdout, `Created topic "rt" (2 partition(s), replication factor 1`) {
			t.Fatalf("create: %s", r.stdout)
		}
		mustFail(t, 1, "TOPIC_ALREADY_EXISTS", "topics", "create", "rt", bs)

		r = mustRun(t, "topics", "list", bs)
		rows := parseTable(t, r.stdout)
		i := slices.IndexFunc(rows, func(r map[string]string) bool { return r["TOPIC"] == "rt" })
		if i < 0 || rows[i]["PARTITIONS"] != "2" || rows[i]["REPLICATION-FACTOR"] != "1" {
			t.Fatalf("list:\n%s", r.stdout)
		}

		r = mustRun(t, "topics", "describe", "rt", bs)
		desc := r.stdout
		if !strings.HasPrefix(desc, "Topic: rt  ID: ") || !strings.Contains(desc, "Partitions: 2") {
			t.Fatalf("describe:\n%s", desc)
		}
		parts := parseTable(t, desc[strings.Index(desc, "\n")+1:])
		if len(parts) != 2 || parts[0]["PARTITION"] != "0" || parts[1]["PARTITION"] != "1" || parts[0]["LEADER"] == "-" || parts[0]["REPLICAS"] != parts[0]["LEADER"] {
			t.Fatalf("describe partitions:\n%s", desc)
		}
		var views []topicView
		r = mustRun(t, "topics", "describe", "rt", bs, "-o", "json")
		if err := json.Unmarshal([]byte(r.stdout), &views); err != nil || len(views) != 1 || len(views[0].Partitions) != 2 {
			t.Fatalf("describe JSON (%v):\n%s", err, r.stdout)
		}
		if b.servesConfigs {
			if !strings.Contains(desc, "retention.ms") || len(views[0].Configs) != 1 || views[0].Configs[0].Value != "3600000" {
				t.Fatalf("describe shows no configs:\n%s\n%s", desc, r.stdout)
			}
		} else {
			if !strings.Contains(r.stderr, "does not serve DescribeConfigs") || views[0].Configs != nil {
				t.Fatalf("describe without DescribeConfigs: stderr %q, configs %v", r.stderr, views[0].Configs)
			}
		}

		r = mustRun(t, "topics", "delete", "rt", bs)
		if !strings.Contains(r.stdout, `Deleted topic "rt"`) {
			t.Fatalf("delete: %s", r.stdout)
		}
		r = mustRun(t, "topics", "list", bs, "-o", "json")
		var lines []topicLine
		if err := json.Unmarshal([]byte(r.stdout), &lines); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(lines, func(l topicLine) bool { return l.Topic == "rt" }) {
			t.Fatalf("deleted topic still listed: %s", r.stdout)
		}
		mustFail(t, 1, "UNKNOWN_TOPIC_OR_PARTITION", "topics", "describe", "rt", bs)
	})
}

// TestPartitionAdminOnOneNode: a single groupd node answers the partition
// admin commands as a Kafka cluster of one broker: its partitions' only
// replica leads, there is no other broker to move them to and no
// reassignment under way.
func TestPartitionAdminOnOneNode(t *testing.T) {
	bs := "--bootstrap-server=" + startGroupd(t)
	mustRun(t, "topics", "create", "solo", "--partitions", "2", "--replication-factor", "1", bs)
	r := mustRun(t, "topics", "elect-leaders", "solo", bs)
	rows := parseTable(t, r.stdout)
	if len(rows) != 2 || rows[0]["PARTITION"] != "0" || rows[0]["RESULT"] != "not-needed" || rows[1]["RESULT"] != "not-needed" {
		t.Fatalf("elect-leaders:\n%s", r.stdout)
	}
	// Asked for every partition: those led as asked are left out.
	r = mustRun(t, "topics", "elect-leaders", bs, "-o", "json")
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("elect-leaders of every partition: %s", r.stdout)
	}
	mustFail(t, 1, "UNKNOWN_TOPIC_OR_PARTITION", "topics", "elect-leaders", "solo:5", bs)
	mustFail(t, 1, "INVALID_REPLICA_ASSIGNMENT", "topics", "reassign", "--topic", "solo", "--partition", "0", "--replicas", "7", bs)
	r = mustFail(t, 1, "NO_REASSIGNMENT_IN_PROGRESS", "topics", "reassign", "--topic", "solo", "--partition", "0", "--cancel", bs)
	if !strings.Contains(r.stderr, "groupd topics reassignments") {
		t.Errorf("no hint: %s", r.stderr)
	}
	r = mustRun(t, "topics", "reassignments", bs)
	if rows := parseTable(t, r.stdout); len(rows) != 0 || !strings.HasPrefix(r.stdout, "TOPIC") {
		t.Fatalf("reassignments:\n%s", r.stdout)
	}
}

// TestUsageErrors: command lines that cannot run exit 2 before any
// connection is tried (the bootstrap address accepts none).
func TestUsageErrors(t *testing.T) {
	bs := "--bootstrap-server=127.0.0.1:1"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"groups", "describe"}, "describe takes GROUP"},
		{[]string{"groups", "describe", "a", "b"}, "describe takes GROUP"},
		{[]string{"groups", "describe", "g", "--members", "--state"}, "at most one of"},
		{[]string{"groups", "describe", "g", "--nope"}, "unknown flag: --nope"},
		{[]string{"groups", "describe", "g", "-o", "yaml"}, "--output must be table or json"},
		{[]string{"groups", "describe", "g", "--timeout", "soon"}, "invalid argument"},
		{[]string{"groups", "list", "--state", "running"}, "not a group state"},
		{[]string{"groups", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"topics", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"groups", "reset-offsets", "g", "--topic", "t"}, "exactly one of"},
		{[]string{"groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"}, "exactly one of"},
		{[]string{"groups", "reset-offsets", "g", "--to-earliest"}, "either --all-topics or"},
		{[]string{"groups", "reset-offsets", "g", "--to-earliest", "--all-topics", "--topic", "t"}, "either --all-topics or"},
		{[]string{"groups", "reset-offsets", "g", "--to-earliest", "--topic", "t:x"}, "not a partition number"},
		{[]string{"groups", "reset-offsets", "g", "--to-offset", "-1", "--topic", "t"}, "must not be negative"},
		{[]string{"groups", "reset-offsets", "g", "--to-offset", "x", "--topic", "t"}, "invalid argument"},
		{[]string{"groups", "reset-offsets", "g", "--to-datetime", "yesterday", "--topic", "t"}, "--to-datetime"},
		{[]string{"groups", "reset-offsets", "g", "--by-duration", "P1H", "--topic", "t"}, "--by-duration"},
		{[]string{"groups", "reset-offsets", "g", "--to-earliest", "--topic", "t", "--execute", "--dry-run"}, "contradict"},
		{[]string{"groups", "delete-offsets", "g"}, "--topic"},
		{[]string{"groups", "delete"}, "one or more GROUP"},
		{[]string{"topics", "create"}, "one or more TOPIC"},
		{[]string{"topics", "create", "t", "--partitions", "0"}, "--partitions must be positive"},
		{[]string{"topics", "create", "t", "--config", "retention"}, "NAME=VALUE"},
		{[]string{"topics", "list", "--bootstrap-server", ""}, "--bootstrap-server is empty"},
		{[]string{"topics", "reassign", "--partition", "0", "--replicas", "1"}, "--topic is required"},
		{[]string{"topics", "reassign", "--topic", "t", "--replicas", "1"}, "--partition is required"},
		{[]string{"topics", "reassign", "--topic", "t", "--partition", "0"}, "exactly one of --replicas and --cancel"},
		{[]string{"topics", "reassign", "--topic", "t", "--partition", "0", "--replicas", "1", "--cancel"}, "exactly one of --replicas and --cancel"},
		{[]string{"topics", "reassign", "--topic", "t", "--partition", "0", "--replicas", "1,x"}, `"x" is not a broker id`},
		{[]string{"topics", "reassign", "--topic", "t", "--partition", "0", "--replicas", "1,2,1"}, "broker 1 is named twice"},
		{[]string{"topics", "reassign", "t", "--partition", "0", "--cancel"}, "reassign takes no"},
		{[]string{"topics", "elect-leaders", "t:x"}, "not a partition number"},
		{[]string{"topics", "reassignments", ":1"}, "no topic name"},
	} {
		// The address goes first, so that a test's own wins.
		args := append(slices.Clone(tc.args[:2]), bs)
		r := runCLI(t, append(args, tc.args[2:]...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "--help' for usage") {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 naming %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

func TestUnreachableBroker(t *testing.T) {
	r := mustFail(t, 1, "connection refused", "groups", "list", "--bootstrap-server=127.0.0.1:1")
	if !strings.Contains(r.stderr, "is the broker running?") {
		t.Errorf("no hint: %s", r.stderr)
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{fmt.Errorf("x"), 1},
		{&OpError{Op: "x", Err: fmt.Errorf("y")}, 1},
		{&UsageError{msg: "x"}, 2},
		{fmt.Errorf("wrapped: %w", &UsageError{msg: "x"}), 2},
	} {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
