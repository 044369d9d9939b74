package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// faultPanicClientID is the client id that makes the fault-injection
// build of groupd panic in its handler (internal/api, fault_on.go).
const faultPanicClientID = "groupd-faultinject-panic"

var (
	faultBinOnce sync.Once
	faultBinPath string
	faultBinErr  error
)

// groupdFaultBinary builds cmd/groupd with the groupd_faultinject tag,
// beside the ordinary binary of groupdBinary.
func groupdFaultBinary(t *testing.T) string {
	t.Helper()
	dir := filepath.Dir(groupdBinary(t))
	faultBinOnce.Do(func() {
		tmp := filepath.Join(dir, fmt.Sprintf("groupd-faultinject.%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-tags", "groupd_faultinject", "-o", tmp, "github.com/groupd/groupd/cmd/groupd")
		if out, err := cmd.CombinedOutput(); err != nil {
			faultBinErr = fmt.Errorf("go build -tags groupd_faultinject: %v\n%s", err, out)
			return
		}
		faultBinPath = filepath.Join(dir, "groupd-faultinject")
		faultBinErr = os.Rename(tmp, faultBinPath)
	})
	if faultBinErr != nil {
		t.Fatal(faultBinErr)
	}
	return faultBinPath
}

// memory reads a process's resident set and its peak (VmRSS and VmHWM
// in /proc/PID/status), in bytes.
func (p *groupdProc) memory(t testing.TB) (rss, peak int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("reading groupd's memory: %v", err)
	}
	field := func(name string) int64 {
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, name+":"); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				if err != nil {
					t.Fatalf("%s: %q", name, l)
				}
				return kb << 10
			}
		}
		t.Fatalf("no %s in /proc/PID/status", name)
		return 0
	}
	return field("VmRSS"), field("VmHWM")
}

func (p *groupdProc) expectAlive(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("groupd exited: %v\n%s", p.err, p.stderr.String())
	default:
	}
}

func needProcFS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs Linux: ulimit and /proc/PID/status")
	}
}

// dialMany opens n connections, closed when the test ends.
func dialMany(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	return conns
}

// apiVersionsOn sends ApiVersions on c and reports whether it was answered
// (false: the server closed the connection). It fails the test if neither
// happens within 10 s.
func apiVersionsOn(t *testing.T, c net.Conn) bool {
	t.Helper()
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1.0"
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(requestFrame(req, 1)); err != nil {
		return false // reset by a server that closed it
	}
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection neither served nor closed: %v", err)
		}
		return false
	}
	_, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(size[:])))
	return err == nil
}

// TestBinaryConnectionsUnderOpenFileLimit opens 400 connections to the
// binary started under an open-file limit of 256. With the default cap
// (three quarters of the limit) the connections past it are closed at
// once; with a cap above the limit, accepts fail for want of descriptors
// and are retried. Either way the broker keeps serving, and a fresh
// client is served once the connections are gone.
func TestBinaryConnectionsUnderOpenFileLimit(t *testing.T) {
	needProcFS(t)
	limited := []string{"sh", "-c", `ulimit -n 256 && exec "$0" "$@"`, groupdBinary(t)}

	t.Run("default cap", func(t *testing.T) {
		p := startGroupdCmd(t, limited, t.TempDir(), "127.0.0.1:0", "--log-level", "info")
		if log := p.stderr.String(); !strings.Contains(log, `msg="open-file limit" soft=256 hard=256 max_connections=192`) {
			t.Fatalf("no open-file limit line for 256 with a cap of 192:\n%s", log)
		}
		conns := dialMany(t, p.addr, 400)
		served := 0
		for _, c := range conns {
			if apiVersionsOn(t, c) {
				served++
			}
		}
		if served != 192 {
			t.Errorf("%d of 400 connections served, want the cap of 192", served)
		}
		if !strings.Contains(p.stderr.String(), "refusing connection: too many open") {
			t.Errorf("no log line for refused connections:\n%s", p.stderr.String())
		}
		for _, c := range conns {
			c.Close()
		}
		expectServing(t, p.addr)
		p.expectAlive(t)
	})

	t.Run("cap above the limit", func(t *testing.T) {
		p := startGroupdCmd(t, limited, t.TempDir(), "127.0.0.1:0", "--max-connections", "100000")
		conns := dialMany(t, p.addr, 400)
		if !apiVersionsOn(t, conns[0]) {
			t.Fatal("first connection not served")
		}
		waitFor(t, 20*time.Second, "accepts failing for want of descriptors", func() (bool, string) {
			return strings.Contains(p.stderr.String(), "accept failed; retrying"), "no log line"
		})
		if !strings.Contains(p.stderr.String(), "too many open files") {
			t.Errorf("accept failures are not EMFILE:\n%s", p.stderr.String())
		}
		// Connections already open are served while accepts fail.
		if !apiVersionsOn(t, conns[1]) {
			t.Fatal("open connection not served while out of descriptors")
		}
		p.expectAlive(t)
		for _, c := range conns {
			c.Close()
		}
		// The backlog of closed connections drains through accept
		// retries a second apart at most.
		waitFor(t, 30*time.Second, "a fresh client served", func() (bool, string) {
			c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
			if err != nil {
				return false, err.Error()
			}
			defer c.Close()
			return apiVersionsOn(t, c), "fresh connection closed"
		})
		p.expectAlive(t)
	})
}

// TestBinaryAnnouncedFramesDoNotPinMemory opens 150 connections that each
// announce a 100 MB request (the default --max-request-bytes allows it)
// and send nothing more. Memory follows the bytes received, so the
// process stays small, and a normal client is served meanwhile.
func TestBinaryAnnouncedFramesDoNotPinMemory(t *testing.T) {
	needProcFS(t)
	p := startGroupd(t, t.TempDir(), "127.0.0.1:0", "--fsync", "never")
	announce := func() []net.Conn {
		conns := dialMany(t, p.addr, 150)
		for _, c := range conns {
			// The size and the start of a header: the frame has begun.
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte{0x05, 0xf5, 0xe1, 0x00, 0, 0, 0, 0}); err != nil {
				t.Fatal(err)
			}
		}
		return conns
	}
	// A buffer allocated for a size announced is not resident until it
	// is written to, and fresh memory from the OS needs no zeroing; memory
	// reused after earlier connections does. So the announcing comes in
	// rounds, each connection of a round hanging up before the next.
	for range 3 {
		for _, c := range announce() {
			c.Close()
		}
		time.Sleep(200 * time.Millisecond)
	}
	conns := announce()
	checkMemory := func(when string) {
		t.Helper()
		rss, peak := p.memory(t)
		t.Logf("groupd %s: VmRSS %d MiB, VmHWM %d MiB", when, rss>>20, peak>>20)
		if peak >= 512<<20 {
			t.Fatalf("VmHWM %d MiB %s, want under 512 MiB", peak>>20, when)
		}
	}
	checkMemory("after 4 rounds of 150 announced 100 MB frames")
	const topic = "beside"
	createTopic(t, p.addr, topic, 1)
	produceKeyed(t, newClient(t, p.addr), topic, 10)
	if got := consumeAll(t, p.addr, topic, 10); len(got[0]) != 10 {
		t.Fatalf("consumed %d records, want 10", len(got[0]))
	}
	// Each stalled connection is still open: the frame timeout is a
	// minute away.
	for _, c := range conns[:5] {
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		var b [1]byte
		if _, err := c.Read(b[:]); !isTimeout(err) {
			t.Fatalf("stalled connection: %v, want it open", err)
		}
	}
	checkMemory("with 150 frames stalled, after serving a client")
	p.expectAlive(t)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// bombFetch names every partition of topic copies times, each with
// partition max bytes at its largest, under MaxBytes maxBytes.
func bombFetch(topic string, partitions, copies int, maxBytes int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxBytes, req.MinBytes, req.MaxWaitMillis = 12, maxBytes, 1, 0
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	for range copies {
		for p := range int32(partitions) {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.PartitionMaxBytes = p, 1<<31-1
			rt.Partitions = append(rt.Partitions, rp)
		}
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// TestBinaryFetchBomb fills 8 partitions with 64 MiB and sends fetches that
// name each partition 100 times with the largest limits: one connection
// reads its reply, four pipeline four such fetches each and read nothing.
// The reply holds each partition once and no more than --fetch-max-bytes,
// a fetch with MaxBytes 0 gets one batch, and the process stays under
// 1 GiB and serving.
func TestBinaryFetchBomb(t *testing.T) {
	needProcFS(t)
	p := startGroupd(t, t.TempDir(), "127.0.0.1:0", "--fsync", "never")
	const topic, parts = "bomb", 8
	createTopic(t, p.addr, topic, parts)
	cl := newClient(t, p.addr, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	value := bytes.Repeat([]byte("x"), 100<<10)
	var recs []*kgo.Record
	for range 640 {
		recs = append(recs, &kgo.Record{Value: value})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	honest := dialRaw(t, p.addr)
	resp, err := honest.do(bombFetch(topic, parts, 100, 1<<31-1))
	if err != nil {
		t.Fatal(err)
	}
	total, named := 0, 0
	for _, rt := range resp.(*kmsg.FetchResponse).Topics {
		for _, rp := range rt.Partitions {
			named++
			total += len(rp.RecordBatches)
		}
	}
	if named != parts {
		t.Errorf("reply names %d partitions, want each of %d once", named, parts)
	}
	if total == 0 || total > 55<<20 {
		t.Errorf("reply holds %d bytes of records, want some and at most 55 MiB", total)
	}
	resp, err = honest.do(bombFetch(topic, 1, 1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if rts := resp.(*kmsg.FetchResponse).Topics; len(rts) != 1 || len(rts[0].Partitions) != 1 ||
		len(rts[0].Partitions[0].RecordBatches) == 0 || len(rts[0].Partitions[0].RecordBatches) > 2<<20 {
		t.Errorf("MaxBytes 0 fetch naming a partition 1000 times: %d topics, want one partition with one batch", len(rts))
	}

	frame := requestFrame(bombFetch(topic, parts, 100, 1<<31-1), 1)
	var pipelined []byte
	for range 4 {
		pipelined = append(pipelined, frame...)
	}
	for _, c := range dialMany(t, p.addr, 4) {
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(pipelined); err != nil {
			t.Fatal(err)
		}
	}
	// Give the bombs time to be read and handled as far as they will be,
	// sampling memory meanwhile; the peak is what counts.
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		p.expectAlive(t)
	}
	expectServing(t, p.addr)
	rss, peak := p.memory(t)
	t.Logf("groupd under fetch bombs: VmRSS %d MiB, VmHWM %d MiB", rss>>20, peak>>20)
	if peak >= 1<<30 {
		t.Fatalf("VmHWM %d MiB under fetch bombs, want under 1 GiB", peak>>20)
	}
}

// TestBinaryPanicInHandler runs the fault-injection build, whose handler
// panics on a request with a particular client id. That connection is
// closed, the panic is logged with the request's key, version and client
// id and the stack, and everything else goes on. The ordinary binary does
// not contain the fault.
func TestBinaryPanicInHandler(t *testing.T) {
	bin := groupdFaultBinary(t)
	for _, c := range []struct {
		path string
		want bool
	}{{bin, true}, {groupdBinary(t), false}} {
		b, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(b, []byte(faultPanicClientID)); got != c.want {
			t.Fatalf("%s contains the fault: %v, want %v", c.path, got, c.want)
		}
	}

	p := startGroupdCmd(t, []string{bin}, t.TempDir(), "127.0.0.1:0")
	bystander := dialRaw(t, p.addr)
	if _, err := bystander.do(kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatal(err)
	}

	victim := dialRaw(t, p.addr)
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	victim.write(kmsg.NewRequestFormatter(kmsg.FormatterClientID(faultPanicClientID)).AppendRequest(nil, req, 7))
	victim.expectClosed()

	if _, err := bystander.do(kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatalf("bystander connection broken by another's panic: %v", err)
	}
	expectServing(t, p.addr)
	p.expectAlive(t)
	var line string
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "panic while handling request") {
			line = sc.Text()
		}
	}
	for _, want := range []string{"level=ERROR", "api=Metadata", "key=3", "version=12", "client=" + faultPanicClientID,
		"correlation_id=7", "fault injected into 3 v12", "stack=", "injectFault"} {
		if !strings.Contains(line, want) {
			t.Errorf("panic log line lacks %q: %q", want, line)
		}
	}
}
