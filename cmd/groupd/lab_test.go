package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/groupd/groupd/internal/lab"
)

func runRoot(args ...string) (string, error) {
	cmd := rootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestLabFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lab", "--scenarios", "crash,reboot"}, `unknown scenario "reboot"`},
		{[]string{"lab", "--protocols", "sticky"}, `unknown protocol "sticky"`},
		{[]string{"lab", "--scenarios", "scale-in", "--members", "2", "--change", "2"}, "scale-in of 2 members needs more than 2 members"},
		{[]string{"lab", "--commit", "never"}, `unknown commit mode "never"`},
	} {
		_, err := runRoot(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// A run saved with --json prints its table and draws its report again,
// without running anything.
func TestLabFromJSON(t *testing.T) {
	rec := &lab.Recording{
		Events: []lab.OwnerEvent{
			{At: 100 * time.Millisecond, Member: "m1", Kind: lab.Assigned, Generation: 1, Partitions: []lab.TP{{Topic: "t", Partition: 0}}},
			{At: 2 * time.Second, Member: "m1", Kind: lab.Revoked, Generation: 1, Partitions: []lab.TP{{Topic: "t", Partition: 0}}},
			{At: 2500 * time.Millisecond, Member: "m2", Kind: lab.Assigned, Generation: 2, Partitions: []lab.TP{{Topic: "t", Partition: 0}}},
		},
		Actions:       []lab.Action{{At: 2 * time.Second, What: "leave", Member: "m1"}},
		BaselineStart: time.Second,
		End:           3 * time.Second,
	}
	rep := &lab.Report{Broker: "test", Results: []lab.Result{
		{Scenario: lab.ScaleIn, Protocol: lab.Protocol{Name: "eager", Base: lab.Eager}, Topics: []string{"t"},
			Actions: rec.Actions, End: rec.End, Measurements: lab.Analyze(rec)},
		{Scenario: lab.ScaleIn, Protocol: lab.Protocol{Name: "consumer", Base: lab.Consumer}, Unsupported: "no API key 68"},
	}}
	dir := t.TempDir()
	saved := filepath.Join(dir, "run.json")
	var b bytes.Buffer
	if err := lab.WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(saved, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "report.html")
	out, err := runRoot("lab", "--from-json", saved, "--report", page)
	if err != nil {
		t.Fatal(err)
	}
	// One pause of 500ms, one hand-off, and the consumer protocol
	// reported unsupported.
	if !strings.Contains(out, "scale-in  eager") || !strings.Contains(out, "500ms") || !strings.Contains(out, "unsupported by the broker") {
		t.Errorf("table:\n%s", out)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(html, []byte("<svg")); n != 4 {
		t.Errorf("the report has %d charts, want 4", n)
	}
}

// `groupd lab --bootstrap-server` runs against a broker it does not embed:
// franz-go's kfake, in process, which serves the consumer protocol. A
// member leaves under each base protocol; the JSON says what the clients
// saw, and nothing is lost.
func TestLabCommandBootstrapServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs live consumer groups")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second),
		kfake.BrokerConfigs(map[string]string{
			"group.consumer.session.timeout.ms":    "2000",
			"group.consumer.heartbeat.interval.ms": "200",
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out, err := runRoot("lab", "--bootstrap-server", c.ListenAddrs()[0], "--json",
		"--scenarios", "scale-in", "--protocols", "eager,cooperative,consumer",
		"--members", "3", "--change", "1", "--partitions", "6", "--rate", "200",
		"--quiet", "500ms", "--cooldown", "300ms", "--session-timeout", "2s",
		"--heartbeat-interval", "200ms", "--rebalance-timeout", "2s",
		"--auto-commit-interval", "300ms", "--settle-timeout", "30s")
	if err != nil {
		t.Fatalf("groupd lab: %v\n%s", err, out)
	}
	rep, err := lab.ReadJSON(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Broker, c.ListenAddrs()[0]) || len(rep.Results) != 3 {
		t.Fatalf("ran against %q with %d results", rep.Broker, len(rep.Results))
	}
	for _, res := range rep.Results {
		m := res.Measurements
		if res.Unsupported != "" || res.Err != "" || m == nil {
			t.Errorf("%s: unsupported %q, error %q", res.Protocol.Name, res.Unsupported, res.Err)
			continue
		}
		// The leaver's partitions move to the two who stay.
		if m.Lost != 0 || m.Produced == 0 || m.Rebalances == 0 || m.Moved < 2 {
			t.Errorf("%s: %d lost of %d, %d rebalances, %d moved", res.Protocol.Name, m.Lost, m.Produced, m.Rebalances, m.Moved)
		}
		if res.Broker != nil {
			t.Errorf("%s: rebalance records from kfake, which keeps none", res.Protocol.Name)
		}
	}
}
