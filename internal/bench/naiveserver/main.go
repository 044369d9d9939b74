// Command naiveserver is the floor of the benchmark harness
// (internal/bench/harness): a naive Kafka server with one goroutine per
// connection that reads a frame, decodes it with kmsg, answers, encodes
// the answer with kmsg and writes it in one write, then reads the next.
// It keeps no offsets and no durable state, checks next to nothing, and
// imports no groupd package, so that what it costs is what any server
// written the obvious way in Go costs on the same machine for the same
// load: the kernel's loopback, the Go runtime's network poller, the
// framing and the kmsg codec.
//
// It serves what the load generator (internal/bench/loadgen) needs and no
// more: ApiVersions, Metadata (itself as the only broker, the topics
// created through it), CreateTopics, FindCoordinator (itself), Heartbeat
// (always no error), OffsetCommit (every partition accepted and
// forgotten), a minimal classic group for JoinGroup, SyncGroup, LeaveGroup
// and DescribeGroups (a join phase completes when every known member has
// a join pending; no timers), and ConsumerGroupHeartbeat answered with the
// member's own epoch and no assignment (a joining member gets epoch 1 and
// an empty assignment). A request that waits (a JoinGroup or SyncGroup
// parked until the group completes the phase) holds its connection's
// goroutine until it is answered, as a blocking server would.
//
//	naiveserver -listen 127.0.0.1:0
//
// prints "naive listening on HOST:PORT" once it accepts connections and
// runs until SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to accept Kafka connections on")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "naiveserver:", err)
		os.Exit(1)
	}
	s := newServer(ln.Addr().(*net.TCPAddr))
	go s.serve(ln)
	fmt.Printf("naive listening on %s\n", ln.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	ln.Close()
}
