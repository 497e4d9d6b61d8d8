package ownnode

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoopWakes: a kick, a write in a watched folder and the timer a pass
// asks for each run one more pass; the end of ctx ends the loop with nil.
func TestLoopWakes(t *testing.T) {
	dir := t.TempDir()
	kick := make(chan struct{}, 1)
	passes := make(chan int, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		n := 0
		done <- loop(ctx, kick, LoopOptions{Resync: time.Hour, Dirs: []string{dir}, Log: logr.Discard()}, func() time.Duration {
			n++
			passes <- n
			// Only pass 2 asks for a timer. Decided by the pass's own
			// number, not by a value the test sends while a pass may
			// still be running (an earlier pass could take it).
			if n == 2 {
				return 10 * time.Millisecond
			}
			return 0
		})
	}()
	wait := func(what string, want int) {
		t.Helper()
		select {
		case got := <-passes:
			assert.Equal(t, want, got, what)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no pass %d within 10s", what, want)
		}
	}
	kick <- struct{}{}
	wait("a kick", 1)
	kick <- struct{}{}
	wait("a kick", 2)
	// Nothing else wakes the loop now: Resync is an hour away, no kick, no write.
	wait("the timer pass 2 asked for", 3)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ready"), []byte("1"), 0o644))
	wait("a write in the watched folder", 4) // more may follow: one write makes several events
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("loop still running 10s after ctx ended")
	}
}

func TestLoopNamesAMissingFolder(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent")
	err := loop(context.Background(), nil, LoopOptions{Resync: time.Hour, Dirs: []string{missing}, Log: logr.Discard()},
		func() time.Duration { return 0 })
	require.Error(t, err)
	assert.Contains(t, err.Error(), missing)
}
