package cli

import (
	"bufio"
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinarySmoke runs the built groupd binary: a server, and the
// commands against it, to show the exit statuses a script sees.
func TestBinarySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the groupd binary")
	}
	bin := filepath.Join(t.TempDir(), "groupd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/groupd/groupd/cmd/groupd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	srv := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--log-level", "warn")
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGTERM)
		srv.Wait()
	})
	// The start prints the Kafka address, then the HTTP side's.
	addrc, httpc := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "groupd listening on "); ok {
				addrc <- strings.Fields(rest)[0]
			}
			if _, rest, ok := strings.Cut(sc.Text(), " on http://"); ok {
				httpc <- strings.TrimSuffix(rest, "/")
			}
		}
	}()
	var addr, httpAddr string
	for _, c := range []struct {
		ch  chan string
		dst *string
	}{{addrc, &addr}, {httpc, &httpAddr}} {
		select {
		case *c.dst = <-c.ch:
		case <-time.After(30 * time.Second):
			t.Fatal("groupd did not start")
		}
	}

	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout for 0, in stderr otherwise
	}{
		{[]string{"topics", "create", "smoke", "--partitions", "2"}, 0, `Created topic "smoke"`},
		{[]string{"groups", "reset-offsets", "g", "--to-earliest", "--topic", "smoke", "--execute"}, 0, "NEW-OFFSET"},
		{[]string{"groups", "list", "-o", "json"}, 0, `"group": "g"`},
		{[]string{"groups", "describe", "nope"}, 1, "GROUP_ID_NOT_FOUND"},
		{[]string{"groups", "rebalances", "g", "--admin-addr", "127.0.0.1:1"}, 1, "admin API at 127.0.0.1:1"},
		{[]string{"groups", "rebalances", "g", "--admin-addr", httpAddr}, 0, "TRIGGER"},
		{[]string{"groups", "rebalances", "nope", "--admin-addr", httpAddr}, 1, "GROUP_ID_NOT_FOUND"},
		{[]string{"groups", "reset-offsets", "g"}, 2, "exactly one of"},
		{[]string{"groups", "describe", "--bogus", "g"}, 2, "unknown flag"},
	} {
		cmd := exec.Command(bin, append(tc.args, "--bootstrap-server", addr)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		got := out.String()
		if tc.code != 0 {
			got = errb.String()
		}
		if code != tc.code || !strings.Contains(got, tc.want) {
			t.Errorf("groupd %q: exit %d, want %d naming %q\nstdout: %s\nstderr: %s", tc.args, code, tc.code, tc.want, out.String(), errb.String())
		}
	}
}
