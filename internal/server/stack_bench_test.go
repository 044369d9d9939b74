package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/api"
	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/coordinator"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/server"
	"github.com/groupd/groupd/internal/store"
)

// stackConn is a client connection that sends one request at a time.
type stackConn struct {
	c    net.Conn
	corr int32
	buf  []byte
}

func (sc *stackConn) do(req kmsg.Request) (kmsg.Response, error) {
	sc.corr++
	if _, err := sc.c.Write(requestFrame(req, sc.corr)); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(sc.c, size[:]); err != nil {
		return nil, err
	}
	n := int(size[0])<<24 | int(size[1])<<16 | int(size[2])<<8 | int(size[3])
	if cap(sc.buf) < n {
		sc.buf = make([]byte, n)
	}
	body := sc.buf[:n]
	if _, err := io.ReadFull(sc.c, body); err != nil {
		return nil, err
	}
	body = body[4:] // the correlation id
	resp := req.ResponseKind()
	if resp.IsFlexible() {
		body = body[1:] // the header's empty tags
	}
	return resp, resp.ReadFrom(body)
}

func cpuNow(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// requestFrame is a request frame with client id "bench".
func requestFrame(req kmsg.Request, corr int32) []byte {
	b := []byte{0, 0, 0, 0}
	b = append(b, byte(req.Key()>>8), byte(req.Key()), byte(req.GetVersion()>>8), byte(req.GetVersion()))
	b = append(b, byte(corr>>24), byte(corr>>16), byte(corr>>8), byte(corr))
	b = append(b, 0, 5, 'b', 'e', 'n', 'c', 'h')
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	n := len(b) - 4
	b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return b
}

// stackMember is a stable group's only member.
type stackMember struct {
	group, id string
	gen       int32
}

// BenchmarkHeartbeatStack measures the whole path of a classic heartbeat
// inside one process: a client's frame over loopback, the server's edge,
// the API layer, the coordinator's shard and the group machine, and the
// reply back. Connections keep one heartbeat in flight each, back to back,
// as members on their own connections do. It reports the process's CPU
// time per heartbeat (client included); instruction counts of
//
//	valgrind --tool=callgrind ./server.test -test.run '^$' -test.bench HeartbeatStack -test.benchtime 20000x
//
// compare builds without the machine's noise.
func BenchmarkHeartbeatStack(b *testing.B) {
	const conns, perConn = 32, 8
	dir := b.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	br, err := broker.Open(broker.Config{DataDir: dir, Log: partition.Options{Sync: partition.SyncNever}, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	st, err := store.OpenPebble(filepath.Join(dir, "coordinator"), store.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	coord := coordinator.New(coordinator.Config{Group: group.Config{InitialRebalanceDelay: -1}, Store: st, Logger: quiet})
	b.Cleanup(func() { coord.Close(); st.Close() })
	if err := coord.WaitLoad(context.Background()); err != nil {
		b.Fatal(err)
	}
	srv := server.New(server.Config{Handler: api.New(br, coord, "127.0.0.1", 9092, quiet), Logger: quiet})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Shutdown(context.Background()) })

	cs := make([]*stackConn, conns)
	members := make([][]stackMember, conns)
	for i := range cs {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		cs[i] = &stackConn{c: c}
		for j := range perConn {
			members[i] = append(members[i], joinAlone(b, cs[i], fmt.Sprintf("g-%d-%d", i, j)))
		}
	}
	reqs := make([][]*kmsg.HeartbeatRequest, conns)
	for i, ms := range members {
		for _, m := range ms {
			r := kmsg.NewPtrHeartbeatRequest()
			r.Version = 4
			r.Group, r.MemberID, r.Generation = m.group, m.id, m.gen
			reqs[i] = append(reqs[i], r)
		}
	}
	start := cpuNow(b)
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i, c := range cs {
		n := b.N / conns
		if i < b.N%conns {
			n++
		}
		wg.Go(func() {
			for k := range n {
				resp, err := c.do(reqs[i][k%perConn])
				if err == nil && resp.(*kmsg.HeartbeatResponse).ErrorCode != 0 {
					err = kerr.ErrorForCode(resp.(*kmsg.HeartbeatResponse).ErrorCode)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64((cpuNow(b)-start).Nanoseconds())/float64(b.N)/1e3, "cpu-us/op")
}

// joinAlone makes a group whose one member is stable: JoinGroup v4 (the
// member id round trip), then SyncGroup with an empty assignment.
func joinAlone(b *testing.B, c *stackConn, groupID string) stackMember {
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version = 4
	join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = groupID, 30000, 60000
	join.ProtocolType = "consumer"
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name = "range"
	join.Protocols = append(join.Protocols, p)
	var jr *kmsg.JoinGroupResponse
	for range 2 {
		resp, err := c.do(join)
		if err != nil {
			b.Fatal(err)
		}
		jr = resp.(*kmsg.JoinGroupResponse)
		join.MemberID = jr.MemberID
	}
	if jr.ErrorCode != 0 {
		b.Fatalf("join %s: %v", groupID, kerr.ErrorForCode(jr.ErrorCode))
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Version = 3
	sync.Group, sync.MemberID, sync.Generation = groupID, jr.MemberID, jr.Generation
	a := kmsg.NewSyncGroupRequestGroupAssignment()
	a.MemberID = jr.MemberID
	sync.GroupAssignment = append(sync.GroupAssignment, a)
	resp, err := c.do(sync)
	if err != nil {
		b.Fatal(err)
	}
	if ec := resp.(*kmsg.SyncGroupResponse).ErrorCode; ec != 0 {
		b.Fatalf("sync %s: %v", groupID, kerr.ErrorForCode(ec))
	}
	return stackMember{group: groupID, id: jr.MemberID, gen: jr.Generation}
}
