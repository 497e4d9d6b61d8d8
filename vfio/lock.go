package vfio

import (
	"context"

	"github.com/sandbox-gpu/sandbox-gpu/internal/hostlock"
)

// AcquireLock takes a host-wide exclusive lock (flock) on path, waiting
// until ctx ends. It serialises changes between processes on one node:
// the CLI, the daemon, its release mode, and an old and a new daemon pod
// during an update.
func AcquireLock(ctx context.Context, path string) (release func(), err error) {
	return hostlock.Acquire(ctx, path)
}
