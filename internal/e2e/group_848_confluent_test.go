//go:build cgo

package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// A confluent-kafka-go member runs in a process of its own: this test
// binary again, running TestConfluentMemberProcess, so that kill is a real
// kill -9 (librdkafka has no way to drop its connections on demand). The
// child reports its rebalance callbacks and records as lines on stdout;
// closing its stdin asks it to close the consumer cleanly.

// confluentMemberEnv carries the child's configuration.
const confluentMemberEnv = "GROUPD_E2E_CONFLUENT_MEMBER"

// confluentLinePrefix marks the child's reports among whatever else the
// test binary prints.
const confluentLinePrefix = "groupd-member "

type confluentMemberConfig struct {
	Addr, Topic, Group, Member, Instance string
	// Classic makes the member speak the classic protocol with the
	// cooperative-sticky assignor instead of group.protocol=consumer.
	Classic bool
}

func init() { startConfluentMember = startConfluentProcess }

type confluentMember struct {
	name    string
	cmd     *exec.Cmd
	stdin   interface{ Close() error }
	drained chan struct{} // closed when the child's stdout reached EOF
	once    sync.Once
}

func startConfluentProcess(t *testing.T, addr, topic, group, member, instance string, tr *ownershipTracker) groupMember {
	t.Helper()
	return startConfluentChild(t, confluentMemberConfig{Addr: addr, Topic: topic, Group: group, Member: member, Instance: instance}, tr)
}

// startConfluentChild starts the child process that runs the member conf
// describes and feeds its reports to tr.
func startConfluentChild(t *testing.T, c confluentMemberConfig, tr *ownershipTracker) groupMember {
	t.Helper()
	member := c.Member
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	conf, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestConfluentMemberProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), confluentMemberEnv+"="+string(conf))
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cm := &confluentMember{name: member, cmd: cmd, stdin: stdin, drained: make(chan struct{})}
	go func() {
		defer close(cm.drained)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), confluentLinePrefix)
			if !ok {
				continue
			}
			kind, rest, _ := strings.Cut(line, " ")
			switch kind {
			case "assigned":
				tr.assigned(member, 0, parsePartitions(rest))
			case "revoked":
				tr.revoked(member, 0, parsePartitions(rest))
			case "lost":
				tr.lost(member, parsePartitions(rest))
			case "record":
				ps, key, _ := strings.Cut(rest, " ")
				p, _ := strconv.Atoi(ps)
				tr.record(member, int32(p), key)
			}
		}
	}()
	t.Cleanup(func() {
		cm.kill()
		if t.Failed() {
			t.Logf("%s (confluent-kafka-go) stderr:\n%s", member, tail(stderr.String(), 4000))
		}
	})
	return cm
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func parsePartitions(s string) []int32 {
	var ps []int32
	for f := range strings.FieldsSeq(s) {
		p, _ := strconv.Atoi(f)
		ps = append(ps, int32(p))
	}
	return ps
}

// stop asks the child to close its consumer (commit, revoke, leave) and
// waits until it exited and every report was read.
func (cm *confluentMember) stop() {
	cm.once.Do(func() {
		cm.stdin.Close()
		done := make(chan struct{})
		go func() { <-cm.drained; cm.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cm.cmd.Process.Kill()
			<-done
		}
	})
}

// kill is kill -9: no commit, no leave.
func (cm *confluentMember) kill() {
	cm.once.Do(func() {
		cm.cmd.Process.Signal(syscall.SIGKILL)
		<-cm.drained
		cm.cmd.Wait()
	})
}

// TestConfluentMemberProcess is the child side of startConfluentProcess;
// run directly it skips.
func TestConfluentMemberProcess(t *testing.T) {
	raw := os.Getenv(confluentMemberEnv)
	if raw == "" {
		t.Skip("runs only as a confluent-kafka-go member started by the consumer-protocol tests")
	}
	var conf confluentMemberConfig
	if err := json.Unmarshal([]byte(raw), &conf); err != nil {
		t.Fatal(err)
	}
	if err := runConfluentMember(conf); err != nil {
		t.Fatal(err)
	}
}

func runConfluentMember(conf confluentMemberConfig) error {
	cm := kafka.ConfigMap{
		"bootstrap.servers":  conf.Addr,
		"client.id":          conf.Member,
		"group.id":           conf.Group,
		"group.protocol":     "consumer",
		"auto.offset.reset":  "earliest",
		"enable.auto.commit": true,
		// An offset is stored for commit only once its record was
		// reported: Close polls, and drops, records of its own, which
		// must not count as consumed.
		"enable.auto.offset.store":           false,
		"auto.commit.interval.ms":            300,
		"fetch.wait.max.ms":                  200,
		"topic.metadata.refresh.interval.ms": 1000,
	}
	if conf.Instance != "" {
		cm["group.instance.id"] = conf.Instance
	}
	if conf.Classic {
		// Short heartbeats so that a classic member learns of a
		// rebalance (REBALANCE_IN_PROGRESS) within a second.
		cm["group.protocol"] = "classic"
		cm["partition.assignment.strategy"] = "cooperative-sticky"
		cm["session.timeout.ms"] = int(groupSession / time.Millisecond)
		cm["heartbeat.interval.ms"] = int(groupHeartbeat / time.Millisecond)
	}
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		return err
	}
	var out sync.Mutex // the rebalance callback and the loop both report
	report := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Fprintf(os.Stdout, confluentLinePrefix+format+"\n", args...)
	}
	parts := func(tps []kafka.TopicPartition) string {
		var ps []int
		for _, tp := range tps {
			if tp.Topic != nil && *tp.Topic == conf.Topic {
				ps = append(ps, int(tp.Partition))
			}
		}
		slices.Sort(ps)
		var b strings.Builder
		for i, p := range ps {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.Itoa(p))
		}
		return b.String()
	}
	rebalance := func(c *kafka.Consumer, ev kafka.Event) error {
		switch e := ev.(type) {
		case kafka.AssignedPartitions:
			if err := c.IncrementalAssign(e.Partitions); err != nil {
				return err
			}
			report("assigned %s", parts(e.Partitions))
		case kafka.RevokedPartitions:
			if c.AssignmentLost() {
				report("lost %s", parts(e.Partitions))
			} else {
				// Commit what was consumed before giving the
				// partitions up, as kgo's default revoke does.
				var kerr kafka.Error
				if _, err := c.Commit(); err != nil && !(errors.As(err, &kerr) && kerr.Code() == kafka.ErrNoOffset) {
					fmt.Fprintf(os.Stderr, "commit on revoke: %v\n", err)
				}
				report("revoked %s", parts(e.Partitions))
			}
			if err := c.IncrementalUnassign(e.Partitions); err != nil {
				return err
			}
		}
		return nil
	}
	if err := c.SubscribeTopics([]string{conf.Topic}, rebalance); err != nil {
		return err
	}
	stop := make(chan struct{})
	go func() {
		// The parent closes our stdin to ask for a clean stop.
		_, _ = bufio.NewReader(os.Stdin).ReadBytes(0)
		close(stop)
	}()
	for {
		select {
		case <-stop:
			// Close commits through the revoke callback and leaves
			// the group (a static member leaves with epoch -2).
			return c.Close()
		default:
		}
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			if e.TopicPartition.Error == nil {
				report("record %d %s", e.TopicPartition.Partition, e.Key)
				if _, err := c.StoreMessage(e); err != nil {
					fmt.Fprintf(os.Stderr, "store offset: %v\n", err)
				}
			}
		case kafka.Error:
			fmt.Fprintf(os.Stderr, "consumer error: %v\n", e)
		}
	}
}
