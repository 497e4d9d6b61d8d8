package kubelet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/test/internal/e2e"
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

// pluginProc is a plugin running as a subprocess, in a process group of its own.
type pluginProc struct {
	name    string
	cmd     *exec.Cmd
	out     *e2e.SyncBuffer
	done    chan struct{} // closed when the process has been waited for
	waitErr error
}

// startPlugin starts a plugin binary. The test fails if it is still running, or exits other than 0,
// when stopped; its output is logged when the test fails.
func startPlugin(t *testing.T, bin string, args ...string) *pluginProc {
	t.Helper()
	p := &pluginProc{name: filepath.Base(bin), out: &e2e.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			t.Errorf("%s (pid %d) still running at the end of the test; killing it", p.name, p.cmd.Process.Pid)
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s %s output:\n%s", p.name, strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

// stop sends SIGTERM and requires the plugin to exit 0 within the deadline, leaving no process of
// its group behind.
func (p *pluginProc) stop(t *testing.T, within time.Duration) {
	t.Helper()
	pid := p.cmd.Process.Pid
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("SIGTERM %s (pid %d): %v", p.name, pid, err)
	}
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		t.Fatalf("%s (pid %d) did not exit within %v of SIGTERM", p.name, pid, within)
	}
	if p.waitErr != nil {
		t.Errorf("%s (pid %d) on SIGTERM: %v, want exit status 0", p.name, pid, p.waitErr)
	}
	// Kill with signal 0 probes the whole process group: ESRCH means nothing of it is left.
	if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("%s (pid %d) left processes in its group behind (kill -0: %v)", p.name, pid, err)
	}
}
