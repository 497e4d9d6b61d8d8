// Package testutil is the root of the test kit: the harnesses more than one part uses, for the
// product module's tests, the demo and the test/ module's suites. Here are the helpers every
// package's tests share (polling with a deadline, files, binaries built for a test, a peer that
// is missing); below it, one package per concern:
//
//   - proc: the one process runner (own process group, output collected, exit 0 on SIGTERM, RSS)
//   - apiserver: a package's real kube-apiserver and etcd (envtest), started on first use
//   - kubelettest: the kubelet's device-plugin registration service, for device plugins
//   - agenttest: GPU nodes played in process (operands on simulated hosts, a stand-in kubelet)
//   - e2e, containerdconf, mountinfo: what the end-to-end suites of test/ share
//
// A fake of one subject stays beside it (host/hostsim, vfio/vfiotest, nri/nritest,
// internal/podresources/podresourcestest); internal/archtest keeps both rules (kit_test.go) and
// keeps the kit out of every shipped binary.
package testutil

import (
	"fmt"
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

// Map returns f of each element of in, in order (nil when in is empty):
// the IDs of devices, the paths of nodes, for one assertion.
func Map[T, R any](in []T, f func(T) R) []R {
	var out []R
	for _, v := range in {
		out = append(out, f(v))
	}
	return out
}

// WriteFile writes content to file p (mode 0644), making its parent
// folders, and fails the test on an error.
func WriteFile(tb testing.TB, p, content string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Symlink makes p a symbolic link to target, making p's parent folders,
// and fails the test on an error.
func Symlink(tb testing.TB, target, p string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		tb.Fatal(err)
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

// SkipMissingPeersEnv, set to 1 outside CI, lets a developer skip the
// suites whose real peers (kube-apiserver and etcd, QEMU and a kernel,
// containerd, the one-node cluster) are not installed here. CI (CI=true)
// and `make test` never skip: a missing peer fails the run with how to
// install it.
const SkipMissingPeersEnv = "SANDBOX_GPU_SKIP_MISSING_PEERS"

// MissingPeer reports a peer the test needs that is not here: it fails the
// test with the message (which says how to install the peer), or skips it
// when SkipMissingPeersEnv=1 is set outside CI.
func MissingPeer(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(SkipMissingPeersEnv) == "1" && os.Getenv("CI") != "true" {
		tb.Skipf("%s (%s=1)", msg, SkipMissingPeersEnv)
	}
	tb.Fatalf("%s (outside CI, %s=1 skips instead)", msg, SkipMissingPeersEnv)
}

// EnvtestAssets returns KUBEBUILDER_ASSETS, or reports the missing
// kube-apiserver and etcd through MissingPeer.
func EnvtestAssets(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		MissingPeer(tb, "KUBEBUILDER_ASSETS is unset: run `export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh | tail -1)` (make test does; it builds kube-apiserver and etcd from the Go module proxy)")
	}
	return dir
}
