package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
