package store

import "testing"

func TestIdleReportsQueuedFolds(t *testing.T) {
	s, err := OpenPebble(t.TempDir(), Options{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Idle() {
		t.Fatal("a new store is busy")
	}
	// A fold queued or running (set as grewLocked does, without waking
	// the folder) is background work.
	l := &s.logs[1]
	l.mu.Lock()
	l.folding = true
	l.mu.Unlock()
	if s.Idle() {
		t.Fatal("idle with a fold pending")
	}
	l.mu.Lock()
	l.folding = false
	l.mu.Unlock()
	if !s.Idle() {
		t.Fatal("busy after the fold ended")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !s.Idle() {
		t.Fatal("a closed store is busy")
	}
}
