// Package testutil holds helpers every package's tests share.
package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds until it holds, failing the
// test when the deadline passes. It never sleeps for synchronisation.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// BuildBinary builds the main package pkg (a path like "." or
// "../../cmd/x") into the test's temporary folder with the extra
// environment (CGO_ENABLED=0, say) and returns the binary's path.
func BuildBinary(tb testing.TB, pkg string, env ...string) string {
	tb.Helper()
	out := filepath.Join(tb.TempDir(), "binary")
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}
