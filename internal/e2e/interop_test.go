package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The interop tests drive groupd with clients in other languages: kcat and
// confluent-kafka (librdkafka), kafka-python and kafkajs. CI installs them
// (see .ci/run); elsewhere a missing client skips its test, except under
// CI=true, where it fails.

const interopRecords = 500

func requireTool(t *testing.T, name string, args ...string) {
	t.Helper()
	if err := exec.Command(name, args...).Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not usable under CI: %v", name, err)
		}
		t.Skipf("%s not installed (.ci/run installs it): %v", name, err)
	}
}

func runClient(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func TestInteropKcat(t *testing.T) {
	requireTool(t, "kcat", "-V")
	a := startServer(t, t.TempDir(), fastGroups)
	var lines strings.Builder
	for i := range interopRecords {
		lines.WriteString("kcat-" + strconv.Itoa(i) + "\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod := exec.CommandContext(ctx, "kcat", "-b", a.Addr(), "-P", "-t", "kcat", "-z", "snappy")
	prod.Stdin = strings.NewReader(lines.String())
	if out, err := prod.CombinedOutput(); err != nil {
		t.Fatalf("kcat produce: %v\n%s", err, out)
	}
	// -G consumes in a group; -e exits at the end of the partitions.
	out := runClient(t, nil, "kcat", "-b", a.Addr(), "-G", "kcat-group", "-o", "beginning", "-e", "-q", "kcat")
	if got := strings.Count(out, "kcat-"); got != interopRecords {
		t.Fatalf("kcat consumed %d records, want %d:\n%s", got, interopRecords, out)
	}
}

func TestInteropPython(t *testing.T) {
	for _, c := range []struct{ script, module string }{
		{"kafka_python_client.py", "kafka"},
		{"librdkafka_client.py", "confluent_kafka"},
	} {
		t.Run(c.module, func(t *testing.T) {
			requireTool(t, pythonWithClients(), "-c", "import "+c.module)
			a := startServer(t, t.TempDir(), fastGroups)
			topic := strings.ReplaceAll(c.module, "_", "-")
			createTopic(t, a.Addr(), topic, 3)
			out := runClient(t, nil, pythonWithClients(), filepath.Join("testdata", "interop", c.script), a.Addr(), topic, strconv.Itoa(interopRecords))
			if !strings.Contains(out, "consumed "+strconv.Itoa(interopRecords)) {
				t.Fatalf("%s: %s", c.script, out)
			}
		})
	}
}

// pythonWithClients is the interpreter that has the Debian client packages:
// the system one, not whichever python3 comes first on PATH.
func pythonWithClients() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

func TestInteropKafkaJS(t *testing.T) {
	modules := os.Getenv("GROUPD_KAFKAJS_NODE_PATH")
	if modules == "" {
		modules = filepath.Join(os.TempDir(), "groupd-kafkajs", "node_modules")
	}
	env := []string{"NODE_PATH=" + modules}
	requireTool(t, "node", "-e", "require('"+filepath.Join(modules, "kafkajs")+"')")
	a := startServer(t, t.TempDir(), fastGroups)
	createTopic(t, a.Addr(), "kafkajs", 3)
	out := runClient(t, append(env, "KAFKAJS_NO_PARTITIONER_WARNING=1"), "node", filepath.Join("testdata", "interop", "kafkajs.js"), a.Addr(), "kafkajs", strconv.Itoa(interopRecords))
	if !strings.Contains(out, "consumed "+strconv.Itoa(interopRecords)) {
		t.Fatalf("kafkajs: %s", out)
	}
}
