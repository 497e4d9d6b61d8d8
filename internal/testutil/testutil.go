// Package testutil holds helpers every package's tests share.
package testutil

import (
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
