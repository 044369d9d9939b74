package e2e

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/groupd/groupd/internal/app"
	"github.com/groupd/groupd/internal/partition"
)

// startServer runs groupd on 127.0.0.1:0 over dir and stops it when the
// test ends (unless the test stops it first).
func startServer(t testing.TB, dir string, opts ...func(*app.Config)) *app.App {
	t.Helper()
	level := slog.LevelWarn
	if os.Getenv("GROUPD_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	cfg := app.Config{
		Listen:            "127.0.0.1:0",
		DataDir:           dir,
		AutoCreateTopics:  true,
		DefaultPartitions: 1,
		Log:               partition.Options{Sync: partition.SyncNever},
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := app.Start(cfg)
	if err != nil {
		t.Fatalf("start groupd: %v", err)
	}
	t.Cleanup(func() { stopServer(t, a) })
	return a
}

func stopServer(t testing.TB, a *app.App) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil && err != app.ErrStopped {
		t.Errorf("stop groupd: %v", err)
	}
}
