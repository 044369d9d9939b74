package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var (
	groupdBinOnce sync.Once
	groupdBinPath string
	groupdBinErr  error
)

// groupdBinary builds cmd/groupd once per test binary run. The result goes
// to a per-user, per-checkout path under the temp dir (built beside it and
// renamed, so concurrent runs never see half a file), which later runs of
// the same checkout overwrite. Two checkouts never share a binary.
func groupdBinary(t testing.TB) string {
	t.Helper()
	groupdBinOnce.Do(func() {
		wd, _ := os.Getwd()
		h := fnv.New32a()
		h.Write([]byte(wd))
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("groupd-e2e-%d-%08x", os.Getuid(), h.Sum32()))
		if groupdBinErr = os.MkdirAll(dir, 0o755); groupdBinErr != nil {
			return
		}
		tmp := filepath.Join(dir, fmt.Sprintf("groupd.%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-o", tmp, "github.com/groupd/groupd/cmd/groupd")
		if out, err := cmd.CombinedOutput(); err != nil {
			groupdBinErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		groupdBinPath = filepath.Join(dir, "groupd")
		groupdBinErr = os.Rename(tmp, groupdBinPath)
	})
	if groupdBinErr != nil {
		t.Fatal(groupdBinErr)
	}
	return groupdBinPath
}

// lockedBuffer collects a process's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type groupdProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *lockedBuffer
	exited chan struct{}
	err    error // cmd.Wait's result, once exited is closed
}

// startGroupd runs the binary on listen over dir, with extra flags after
// the defaults (a later flag wins), and waits for its
// "groupd listening on HOST:PORT ..." line.
func startGroupd(t testing.TB, dir, listen string, extra ...string) *groupdProc {
	t.Helper()
	return startGroupdCmd(t, []string{groupdBinary(t)}, dir, listen, extra...)
}

// startGroupdCmd is startGroupd with the command that runs groupd given:
// argv is a binary, or a wrapper and its arguments ending in the binary.
func startGroupdCmd(t testing.TB, argv []string, dir, listen string, extra ...string) *groupdProc {
	t.Helper()
	args := append([]string{"--listen", listen, "--data-dir", dir,
		"--log-level", "warn", "--group-initial-rebalance-delay", "100ms", "--http-listen", "127.0.0.1:0"}, extra...)
	return startListener(t, "groupd", append(argv[:len(argv):len(argv)], args...))
}

// startListener runs argv, a server called name, and waits for its
// "NAME listening on HOST:PORT ..." line.
func startListener(t testing.TB, name string, argv []string) *groupdProc {
	t.Helper()
	p := &groupdProc{stderr: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stderr = p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), name+" listening on "); ok {
				select {
				case addrc <- strings.Fields(rest)[0]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.exited
		if t.Failed() {
			t.Logf("%s (%s) stderr:\n%s", name, p.addr, p.stderr.String())
		}
	})
	select {
	case p.addr = <-addrc:
		return p
	case <-p.exited:
		t.Fatalf("%s exited before listening: %v\n%s", name, p.err, p.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not print its address\n%s", name, p.stderr.String())
	}
	return nil
}

func (p *groupdProc) signal(sig os.Signal) {
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Signal(sig)
	}
}

// stop sends SIGTERM and expects a clean exit.
func (p *groupdProc) stop(t *testing.T) {
	t.Helper()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("groupd did not exit within 30s of SIGTERM")
	}
	if p.err != nil {
		t.Fatalf("groupd exited with %v after SIGTERM\n%s", p.err, p.stderr.String())
	}
}

// TestBinaryRestartKeepsStableGroup stops the real binary with SIGTERM while
// three members (eager range, 15 s sessions) sit in a Stable group, and
// starts it again on the same address and data dir. The members keep
// running and reconnect; the group must come back Stable with the same
// members, generation and assignments, without a single revoke or assign
// callback, and go on serving fetches and commits.
func TestBinaryRestartKeepsStableGroup(t *testing.T) {
	dir := t.TempDir()
	p := startGroupd(t, dir, "127.0.0.1:0")
	addr := p.addr
	const topic, group = "restart", "restart-group"
	createTopic(t, addr, topic, 6)
	pc := newClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	adm := kadm.NewClient(newClient(t, addr))
	produceRange(t, pc, 0, 300)

	consumed := &keySet{}
	var ms []*recordedMember
	for i := range 3 {
		ms = append(ms, startRecordedMember(t, addr, topic, group, fmt.Sprintf("r%d", i), consumed, kgo.SessionTimeout(15*time.Second)))
	}
	waitFor(t, 20*time.Second, "three members stable", func() (bool, string) {
		if ok, why := allHeldAndConsumed(ms, 6, consumed, 300); !ok {
			return false, why
		}
		st, ids, _ := describeGroup(t, adm, group, topic)
		return st == "Stable" && len(ids) == 3, fmt.Sprintf("group %s with %d members", st, len(ids))
	})
	type memberState struct {
		events []string
		owned  []int32
		member string
		gen    int32
	}
	snap := func() []memberState {
		var out []memberState
		for _, m := range ms {
			ev, o, _ := m.snapshot()
			id, gen := m.cl.GroupMetadata()
			out = append(out, memberState{ev, o, id, gen})
		}
		return out
	}
	before := snap()
	_, idsBefore, partsBefore := describeGroup(t, adm, group, topic)
	t.Logf("stable: %+v", before)

	p.stop(t)
	p = startGroupd(t, dir, addr)
	restarted := time.Now()

	// The members reconnect by themselves; records produced now are
	// consumed only if fetching works again.
	produceRange(t, pc, 300, 600)
	waitFor(t, 20*time.Second, "records after the restart consumed", func() (bool, string) {
		return consumed.has(600), "not all of 600"
	})
	// Let every member heartbeat several times against the new process.
	time.Sleep(time.Until(restarted.Add(3 * time.Second)))

	st, idsAfter, partsAfter := describeGroup(t, adm, group, topic)
	if st != "Stable" {
		t.Errorf("group %s after the restart, want Stable", st)
	}
	if !mapsEqual(idsAfter, idsBefore) {
		t.Errorf("members after the restart %v, before %v", idsAfter, idsBefore)
	}
	if !partsEqual(partsAfter, partsBefore) {
		t.Errorf("assignments after the restart %v, before %v", partsAfter, partsBefore)
	}
	after := snap()
	for i := range ms {
		b, a := before[i], after[i]
		if !slices.Equal(a.events, b.events) {
			t.Errorf("member r%d saw callbacks across the restart: %v", i, a.events[len(b.events):])
		}
		if a.member != b.member || a.gen != b.gen {
			t.Errorf("member r%d: %s generation %d after the restart, %s generation %d before", i, a.member, a.gen, b.member, b.gen)
		}
	}
	consumed.mu.Lock()
	dups := consumed.dups
	consumed.mu.Unlock()
	if dups != 0 {
		t.Errorf("%d records consumed twice across the restart", dups)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func partsEqual(a, b map[string][]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(b[k], v) {
			return false
		}
	}
	return true
}

// commitConn sends OffsetCommit requests on one connection of its own,
// without the test-failing helpers of rawConn, so it can run in a goroutine
// and simply stop when the server dies.
type commitConn struct {
	c    net.Conn
	corr int32
}

func (cc *commitConn) do(req kmsg.Request) (kmsg.Response, error) {
	cc.corr++
	cc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := cc.c.Write(requestFrame(req, cc.corr)); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(cc.c, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(cc.c, body); err != nil {
		return nil, err
	}
	if len(body) < 4 || int32(binary.BigEndian.Uint32(body)) != cc.corr {
		return nil, errors.New("bad response header")
	}
	body = body[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() {
		if len(body) == 0 {
			return nil, errors.New("no header tags")
		}
		body = body[1:]
	}
	return resp, resp.ReadFrom(body)
}

// TestBinaryKill9KeepsAcknowledgedCommits kills the real binary with
// SIGKILL while several connections commit offsets as simple groups
// (generation -1, no member id; OffsetCommit v8), each one request at a
// time with a rising offset. After a restart on the same data dir every
// acknowledged commit is there: the offset fetched is the last one
// acknowledged or, at most, the one that was in flight at the kill.
func TestBinaryKill9KeepsAcknowledgedCommits(t *testing.T) {
	dir := t.TempDir()
	p := startGroupd(t, dir, "127.0.0.1:0")
	const topic, parts, writers = "kill9", 4, 6
	createTopic(t, p.addr, topic, parts)

	type progress struct {
		acked, sent int64
		errs        []string
	}
	prog := make([]progress, writers)
	var wg sync.WaitGroup
	for w := range writers {
		c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cc := &commitConn{c: c}
		wg.Go(func() {
			pr := &prog[w]
			for off := int64(1); ; off++ {
				req := kmsg.NewPtrOffsetCommitRequest()
				req.Version = 8
				req.Group = fmt.Sprintf("kill9-%d", w)
				req.Generation = -1
				rt := kmsg.NewOffsetCommitRequestTopic()
				rt.Topic = topic
				for part := range int32(parts) {
					rp := kmsg.NewOffsetCommitRequestTopicPartition()
					rp.Partition = part
					rp.Offset = off
					rp.LeaderEpoch = -1
					rt.Partitions = append(rt.Partitions, rp)
				}
				req.Topics = append(req.Topics, rt)
				pr.sent = off
				resp, err := cc.do(req)
				if err != nil {
					return // the server died
				}
				for _, rt := range resp.(*kmsg.OffsetCommitResponse).Topics {
					for _, rp := range rt.Partitions {
						if rp.ErrorCode != 0 {
							pr.errs = append(pr.errs, fmt.Sprintf("offset %d partition %d: error %d", off, rp.Partition, rp.ErrorCode))
						}
					}
				}
				if len(pr.errs) > 0 {
					return
				}
				pr.acked = off
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	p.signal(syscall.SIGKILL)
	<-p.exited
	wg.Wait()

	p = startGroupd(t, dir, "127.0.0.1:0")
	adm := kadm.NewClient(newClient(t, p.addr))
	total := int64(0)
	for w := range writers {
		pr := prog[w]
		if len(pr.errs) > 0 {
			t.Errorf("writer %d: commits failed before the kill: %v", w, pr.errs)
			continue
		}
		if pr.acked < 10 {
			t.Errorf("writer %d: only %d commits acknowledged before the kill", w, pr.acked)
		}
		total += pr.acked
		group := fmt.Sprintf("kill9-%d", w)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		fetched, err := adm.FetchOffsets(ctx, group)
		cancel()
		if err != nil {
			t.Fatalf("%s: offset fetch: %v", group, err)
		}
		for part := range int32(parts) {
			o, ok := fetched.Lookup(topic, part)
			if !ok || o.Err != nil {
				t.Errorf("%s partition %d: no committed offset after the restart (%v); %d was acknowledged", group, part, o.Err, pr.acked)
				continue
			}
			if o.At != pr.acked && o.At != pr.sent {
				t.Errorf("%s partition %d: committed offset %d after the restart; acknowledged %d, last sent %d", group, part, o.At, pr.acked, pr.sent)
			}
		}
	}
	t.Logf("%d commits acknowledged over %d connections before SIGKILL", total, writers)
}
