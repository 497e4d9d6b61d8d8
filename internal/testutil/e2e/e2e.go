// Package e2e holds what the end-to-end suites of the test/ module share: the repository root,
// polling with a deadline, a buffer a subprocess writes into while the test reads it, and gRPC
// servers that stop with the test (grpc.go). Their subprocesses run through the kit's process
// runner (internal/testutil/proc).
package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// RepoRoot is two levels above a suite's package, checked by its go.mod.
func RepoRoot() (string, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", fmt.Errorf("repository root: %w", err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("repository root %s: %w", root, err)
	}
	if !bytes.HasPrefix(mod, []byte("module github.com/sandbox-gpu/sandbox-gpu\n")) {
		return "", fmt.Errorf("repository root %s: go.mod is not module github.com/sandbox-gpu/sandbox-gpu", root)
	}
	return root, nil
}

// Poll calls cond every 20 ms until it holds, or fails after within.
func Poll(within time.Duration, cond func() bool) error {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return fmt.Errorf("not reached within %v", within)
		case <-tick.C:
		}
	}
	return nil
}

// SyncBuffer collects a process's output while the process writes it.
type SyncBuffer = testutil.SyncBuffer
