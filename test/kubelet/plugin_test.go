package kubelet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/e2e"
)

// The plugin binaries this suite drives, from the product module's cmd/.
var pluginCommands = []string{"kubevirt-device-plugin", "kata-device-plugin"}

// errNoPlugins marks a checkout without the plugins' sources (the suite skips).
var errNoPlugins = errors.New("the device plugins are not in this checkout")

// binEnv names a folder of prebuilt plugin binaries (for example the repository's bin/ after
// make build) to use instead of building them.
const binEnv = "KUBELET_SUITE_PLUGIN_DIR"

// binDir holds the plugin binaries, built once per test process; TestMain removes it.
var binDir string

// builtPlugins builds the plugins once, on first use, so that a run selecting no test of this suite
// builds nothing.
var builtPlugins = sync.OnceValues(func() (string, error) {
	if dir := os.Getenv(binEnv); dir != "" {
		for _, c := range pluginCommands {
			if _, err := os.Stat(filepath.Join(dir, c)); err != nil {
				return "", fmt.Errorf("%s=%s: %w", binEnv, dir, err)
			}
		}
		return dir, nil
	}
	root, err := e2e.RepoRoot()
	if err != nil {
		return "", err
	}
	var pkgs []string
	for _, c := range pluginCommands {
		if _, err := os.Stat(filepath.Join(root, "cmd", c)); err != nil {
			return "", fmt.Errorf("%w: cmd/%s: %w", errNoPlugins, c, err)
		}
		pkgs = append(pkgs, "./cmd/"+c)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("%w: no go tool to build them: %w", errNoPlugins, err)
	}
	dir, err := os.MkdirTemp("", "dpbin")
	if err != nil {
		return "", fmt.Errorf("plugin binary folder: %w", err)
	}
	binDir = dir
	cmd := exec.Command(goTool, append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	cmd.Dir = root
	// The product module is built on its own, whatever go.work or GOFLAGS the test run has.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s in %s: %w\n%s", strings.Join(pkgs, " "), root, err, out)
	}
	return dir, nil
})

// pluginBinary returns the path of a built plugin; it skips the test when the checkout has no plugin
// sources, and fails it when they do not build.
func pluginBinary(t *testing.T, name string) string {
	t.Helper()
	dir, err := builtPlugins()
	if errors.Is(err, errNoPlugins) {
		t.Fatalf("the kubelet device-manager suite needs the plugins' sources: %v", err)
	}
	if err != nil {
		t.Fatalf("building the device plugins: %v", err)
	}
	return filepath.Join(dir, name)
}
