package realkernel

import (
	"path/filepath"
	"strings"
	"testing"
)

// guestTestBinary builds the guest tests (package guest, tag realkernelguest) into one static
// x86_64 test binary for the initramfs, without symbol tables and DWARF (as the image builds
// its binaries): package vgpu brings client-go and gRPC along, and every byte is unpacked
// by the guest's kernel under TCG.
func guestTestBinary(t *testing.T, env hostEnv) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "guest.test")
	buildStatic(t, filepath.Join(env.repoRoot, "test"), "guest tests", out, "./realkernel/guest",
		"test", "-c", "-tags", "realkernelguest", "-ldflags=-s -w")
	return out
}

// guestResult is one test or subtest the guest ran, from its -test.v output.
type guestResult struct {
	name, status string // PASS, FAIL or SKIP
}

// parseGuestTests reads the "--- PASS: name (0.01s)" lines of go test -v output, in order.
func parseGuestTests(out string) []guestResult {
	var rs []guestResult
	for line := range strings.Lines(out) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "--- ")
		if !ok {
			continue
		}
		status, rest, ok := strings.Cut(rest, ": ")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, " ")
		rs = append(rs, guestResult{name: name, status: status})
	}
	return rs
}

// checkGuestTests checks a step that ran the guest test binary: it exited 0, the named top
// tests passed, and every test and subtest it ran passed (none skipped). Each guest result
// becomes a subtest here, so that a failure names the guest case; the guest's output is shown
// once when anything failed.
func checkGuestTests(t *testing.T, con *console, step string, top ...string) {
	t.Helper()
	st := con.step(t, step)
	defer func() {
		if t.Failed() {
			t.Logf("guest output of %s:\n%s", st.cmd, quoteLines(st.stdout+st.stderr))
		}
	}()
	if st.rc != 0 {
		t.Errorf("%s: exit %d", st.cmd, st.rc)
	}
	results := parseGuestTests(st.stdout)
	passed := map[string]bool{}
	for _, r := range results {
		passed[r.name] = r.status == "PASS"
		t.Run(r.name, func(t *testing.T) {
			if r.status != "PASS" {
				t.Errorf("guest test %s: %s (its output is logged by the parent)", r.name, r.status)
			}
		})
	}
	for _, name := range top {
		if !passed[name] {
			t.Errorf("guest test %s did not pass (ran %d tests and subtests)", name, len(results))
		}
	}
}

// quoteLines prefixes every line with "| ": the guest's own "--- PASS" lines must not read as
// results of this test to go test -json.
func quoteLines(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString("| " + line)
	}
	return b.String()
}
