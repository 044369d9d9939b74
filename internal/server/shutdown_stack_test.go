package server_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/api"
	"github.com/groupd/groupd/internal/broker"
	"github.com/groupd/groupd/internal/coordinator"
	"github.com/groupd/groupd/internal/group"
	"github.com/groupd/groupd/internal/partition"
	"github.com/groupd/groupd/internal/server"
	"github.com/groupd/groupd/internal/store"
)

// countingHandler counts the requests handed to the handler under it.
type countingHandler struct {
	*api.Handler
	handled atomic.Int32
}

func (h *countingHandler) Handle(ctx context.Context, r *server.Request) (kmsg.Response, error) {
	h.handled.Add(1)
	return h.Handler.Handle(ctx, r)
}

// Commits queued behind a slow store when Shutdown begins are answered, not
// cut off: Shutdown lets requests in flight finish and their replies be
// written, as its doc says, before it closes the connection.
func TestShutdownWritesTheRepliesOfQueuedCommits(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.DiscardHandler)
	b, err := broker.Open(broker.Config{DataDir: dir, DefaultPartitions: 1,
		Log: partition.Options{Sync: partition.SyncNever}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st := store.NewMemory()
	// The first write waits until the test lets it go: the commits
	// after it queue in the coordinator meanwhile.
	entered, release := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	st.OnApply(func([]group.Record) {
		once.Do(func() { close(entered); <-release })
	})
	defer releaseOnce.Do(func() { close(release) })
	coord := coordinator.New(coordinator.Config{Group: group.Config{InitialRebalanceDelay: -1}, Store: st, Logger: quiet})
	defer coord.Close()
	if err := coord.WaitLoad(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := &countingHandler{Handler: api.New(b, coord, "127.0.0.1", 9092, quiet)}
	srv := server.New(server.Config{Handler: h, Logger: quiet})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const commits = 20
	var frames []byte
	for i := range int32(commits) {
		frames = append(frames, commitFrame(i+1, "g", int64(i+1))...)
	}
	if _, err := c.Write(frames); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first commit never reached the store (hang guard)")
	}
	for deadline := time.Now().Add(10 * time.Second); h.handled.Load() < commits; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d commits handled (hang guard)", h.handled.Load(), commits)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(ctx) }()
	// Shutdown has begun once the listener refuses connections.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break
		}
		nc.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts after Shutdown began (hang guard)")
		}
	}
	releaseOnce.Do(func() { close(release) })

	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range int32(commits) {
		corr, body, err := readFrame(c)
		if err != nil {
			t.Fatalf("reply %d of %d: %v", i+1, commits, err)
		}
		if corr != i+1 {
			t.Fatalf("reply with correlation id %d, want %d", corr, i+1)
		}
		resp := kmsg.NewPtrOffsetCommitResponse()
		resp.Version = 8
		if err := resp.ReadFrom(body); err != nil {
			t.Fatal(err)
		}
		if ec := resp.Topics[0].Partitions[0].ErrorCode; ec != 0 {
			t.Fatalf("commit %d: error code %d", i+1, ec)
		}
	}
	if _, _, err := readFrame(c); !errors.Is(err, io.EOF) {
		t.Fatalf("after the replies: %v, want the connection closed", err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	resp, err := coord.Handle(context.Background(), "test", "", fetchOffsets("g"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset; got != commits {
		t.Fatalf("committed offset %d, want %d", got, commits)
	}
}

// commitFrame is an OffsetCommit v8 request frame committing offset for
// partition 0 of topic "t".
func commitFrame(corr int32, groupID string, offset int64) []byte {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 8
	req.Group, req.Generation = groupID, -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Offset = offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.Version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 0xffff) // null client id
	b = append(b, 0)                             // flexible header: no tags
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// readFrame reads one reply frame: its correlation id and its body after
// the flexible response header's tags.
func readFrame(c net.Conn) (int32, []byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return 0, nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		return 0, nil, err
	}
	return int32(binary.BigEndian.Uint32(b)), b[5:], nil
}

func fetchOffsets(groupID string) *kmsg.OffsetFetchRequest {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 7
	req.Group = groupID
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = "t"
	rt.Partitions = []int32{0}
	req.Topics = append(req.Topics, rt)
	return req
}
