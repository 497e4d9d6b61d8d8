package containerd

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources/podresourcestest"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/e2e"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/proc"
)

const (
	// pluginEnv runs a prebuilt plugin binary instead of building ./cmd/nri-gpu-plugin.
	pluginEnv = "SANDBOX_GPU_NRI_PLUGIN"
	// pluginIndex is the --plugin-index the suite gives the plugin: containerd names an external
	// plugin "<index>-<name>" in its log, which is how the suite sees it connect.
	pluginIndex = "10"
)

// errNoPlugin marks a checkout without the plugin's sources (the plugin tests skip).
var errNoPlugin = errors.New("cmd/nri-gpu-plugin is not in this checkout")

// binDir holds the plugin binary, built once per test process; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// builtPlugin builds the plugin once, on first use, so that a run selecting only TestHarness builds
// nothing.
var builtPlugin = sync.OnceValues(func() (string, error) {
	if p := os.Getenv(pluginEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", pluginEnv, p, err)
		}
		return p, nil
	}
	root, err := e2e.RepoRoot()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "nri-gpu-plugin")); err != nil {
		return "", fmt.Errorf("%w: %w", errNoPlugin, err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go tool to build the plugin: %w", err)
	}
	dir, err := os.MkdirTemp("", "nribin")
	if err != nil {
		return "", fmt.Errorf("plugin binary folder: %w", err)
	}
	binDir = dir
	out := filepath.Join(dir, "nri-gpu-plugin")
	cmd := exec.Command(goTool, "build", "-o", out, "./cmd/nri-gpu-plugin")
	cmd.Dir = root
	// The product module is built on its own, whatever go.work or GOFLAGS the test run has.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/nri-gpu-plugin in %s: %w\n%s", root, err, msg)
	}
	return out, nil
})

// pluginBinary returns the plugin binary; it skips the test when the checkout has no plugin sources,
// and fails it when they do not build.
func pluginBinary(t *testing.T) string {
	t.Helper()
	start := time.Now()
	bin, err := builtPlugin()
	if errors.Is(err, errNoPlugin) {
		t.Fatalf("the NRI plugin tests need the plugin's sources: %v", err)
	}
	if err != nil {
		t.Fatalf("building the NRI plugin: %v", err)
	}
	t.Logf("plugin binary %s (%v)", bin, time.Since(start).Round(time.Millisecond))
	return bin
}

// pluginArgs is the plugin's command line contract: containerd's NRI socket, the kubelet's
// PodResources socket, the CDI folder (the same containerd resolves CDI devices from), the resource
// the kubelet allocates, the CDI kind its device IDs are names of, the NRI plugin index, and the
// dev root under which the CDI spec's stand-in nodes lie (the CDI policy checks host paths there).
func pluginArgs(d *daemon, k *podresourcestest.Kubelet) []string {
	return []string{
		"--dev-root", d.path("dev"),
		"--nri-socket", d.nriSocket(),
		"--pod-resources-socket", k.Socket(),
		"--cdi-dir", d.cdiDir(),
		"--resource", cdiKind,
		"--cdi-kind", cdiKind,
		"--plugin-index", pluginIndex,
	}
}

// waitConnected waits until the running containerd logs that the plugin (by its index) connected
// and synchronized: containerd's NRI adaptation logs `plugin "<index>-<name>" connected and
// synchronized` at info level once the plugin has registered and answered Synchronize.
func waitConnected(t *testing.T, d *daemon, p *proc.Program) {
	t.Helper()
	start := time.Now()
	r := d.current()
	err := e2e.Poll(connectWithin, func() bool {
		return p.Exited() || len(r.log.Lines(`"`+pluginIndex+"-", "connected and synchronized")) > 0
	})
	if p.Exited() {
		t.Fatalf("nri-gpu-plugin exited (%v) before connecting to containerd", p.Err())
	}
	if err != nil {
		t.Fatalf("containerd never logged plugin %q connected and synchronized: %v", pluginIndex+"-*", err)
	}
	t.Logf("plugin connected to containerd run %d within %v: %s", len(d.runs), time.Since(start).Round(time.Millisecond),
		r.log.Lines(`"`+pluginIndex+"-", "connected and synchronized")[0])
}
