package server

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// shardHandler answers every request with a brief reply (a heartbeat's)
// that another goroutine releases, as a coordinator shard releases the
// replies to heartbeats once it has stepped them.
type shardHandler struct{ queue chan chan struct{} }

func newShardHandler(b *testing.B) *shardHandler {
	h := &shardHandler{queue: make(chan chan struct{}, 1024)}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case done := <-h.queue:
				close(done)
			case <-stop:
				return
			}
		}
	}()
	b.Cleanup(func() { close(stop) })
	return h
}

func (*shardHandler) Supports(key, version int16) bool { return true }

func (h *shardHandler) Handle(_ context.Context, r *Request) (kmsg.Response, error) {
	done := make(chan struct{})
	h.queue <- done
	return &briefWaiter{Response: kmsg.NewPtrHeartbeatResponse(), done: done}, nil
}

// cpuTime is the user and system time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBriefReplies drives a Server whose replies are released by a
// shard-like goroutine over loopback connections, each keeping inflight
// requests in flight, and reports the CPU time the process (server and
// clients) spent per request beside the usual time per request:
//
//	go test ./internal/server -run '^$' -bench BriefReplies -count 5
func BenchmarkBriefReplies(b *testing.B) {
	for _, load := range []struct{ conns, inflight int }{{200, 1}, {32, 8}} {
		b.Run(fmt.Sprintf("conns=%d/inflight=%d", load.conns, load.inflight), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := New(Config{Handler: newShardHandler(b), Logger: slog.New(slog.DiscardHandler)})
			go srv.Serve(ln)
			defer srv.Shutdown(context.Background())
			f := frameOf(kmsg.NewPtrApiVersionsRequest(), 1, "beat")
			frame := append(binary.BigEndian.AppendUint32(nil, uint32(len(f))), f...)
			conns := make([]net.Conn, load.conns)
			for i := range conns {
				if conns[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
					b.Fatal(err)
				}
				defer conns[i].Close()
			}
			perConn := max(b.N/load.conns, 1)
			b.ResetTimer()
			cpu := cpuTime(b)
			var wg sync.WaitGroup
			errs := make(chan error, load.conns)
			for _, c := range conns {
				wg.Go(func() {
					r := bufio.NewReader(c)
					w := bufio.NewWriter(c)
					var size [4]byte
					sent := 0
					for got := 0; got < perConn; got++ {
						for sent < perConn && sent-got < load.inflight {
							w.Write(frame)
							sent++
						}
						if r.Buffered() == 0 {
							if err := w.Flush(); err != nil {
								errs <- err
								return
							}
						}
						if _, err := io.ReadFull(r, size[:]); err != nil {
							errs <- err
							return
						}
						if _, err := r.Discard(int(binary.BigEndian.Uint32(size[:]))); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			cpu = cpuTime(b) - cpu
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(perConn*load.conns), "cpu-ns/op")
		})
	}
}
