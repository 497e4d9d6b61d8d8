package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pollTrue calls cond every 50 ms until it returns true, or fails after within (or when ctx ends)
// with cond's last error.
func pollTrue(ctx context.Context, within time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %v (last error: %v)", within, last)
		case <-tick.C:
		}
	}
}

// assertNoProcessesLeft fails the test when a process of the torn-down cluster still runs: one whose
// command line names the cluster's work folder, or a runc shim.
func assertNoProcessesLeft(t *testing.T) {
	t.Helper()
	dir := shared.Dir()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			continue
		}
		cmdline := strings.ReplaceAll(strings.TrimRight(string(data), "\x00"), "\x00", " ")
		if strings.Contains(cmdline, dir+"/") {
			t.Errorf("left running after teardown: pid %s: %s", filepath.Base(filepath.Dir(p)), cmdline)
		}
	}
}
