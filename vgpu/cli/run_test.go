package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	sharedapi "github.com/sandbox-gpu/sandbox-gpu/internal/testutil/apiserver"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	"github.com/sandbox-gpu/sandbox-gpu/nri/gpucdi"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu/nvmltypes"
)

// The L40S host (two cards, vendor-specific VFIO) of the run tests: GPU 0
// is filled by an earlier manager whose run folder is gone, so no list and
// no memory names its vGPUs (type id 1155, L40S-24Q); GPU 1 is empty.
const (
	fillFirst = "version: v1\nvgpu-configs:\n  first:\n  - devices: [0]\n    vgpu-devices: {\"L40S-24Q\": 2}\n"
	bothCards = "version: v1\nvgpu-configs:\n  default:\n  - devices: [0]\n    vgpu-devices: {\"L40S-24Q\": 2}\n" +
		"  - devices: [1]\n    vgpu-devices: {\"%s\": %d}\n"
)

const runWait = 60 * time.Second

// buffer is a bytes.Buffer safe for the daemon's log and the test.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// daemon is `vgpu-device-manager run` on the simulated host for a Node of
// an envtest API server, in a run folder of its own.
type daemon struct {
	runDir, config string
	stderr         buffer
}

// fillFirstGPU fills GPU 0 of the L40S host with `apply` in a run folder
// that is then thrown away.
func fillFirstGPU(t *testing.T, s *sim) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "first.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fillFirst), 0o644))
	code, _, errOut := s.run(t, "apply", "--config", cfg, "--selected", "first")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, map[string]int{"NVIDIA L40S-24Q": 2}, s.k.VGPUCounts("0000:41:00.0"))
}

// startDaemon runs `run` for a new Node until the test ends; extra are
// more flags.
func startDaemon(t *testing.T, s *sim, p *shell.Program, node string, extra ...string) *daemon {
	t.Helper()
	cfg := apiserver.Config(t)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	require.NoError(t, err)
	dir := t.TempDir()
	d := &daemon{runDir: filepath.Join(dir, "run"), config: filepath.Join(dir, "config", "config.yaml")}
	require.NoError(t, os.MkdirAll(filepath.Dir(d.config), 0o755))
	d.writeConfig(t, "L40S-24Q", 2)
	args := append([]string{"run", "--config", d.config, "--node-name", node, "--kubeconfig", sharedapi.Kubeconfig(t, cfg),
		"--health-addr=127.0.0.1:0", "--retry=50ms", "--pod-resources-socket=", "--run-dir", d.runDir,
		"--sysfs-root", s.opts.SysfsRoot, "--dev-root", s.opts.DevRoot, "--proc-root", s.opts.ProcRoot}, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- shell.Run(ctx, p, args, shell.IO{Stdout: &bytes.Buffer{}, Stderr: &d.stderr}) }()
	t.Cleanup(func() {
		cancel()
		assert.Equal(t, 0, <-done, d.stderr.String())
		_ = cs.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
	})
	return d
}

// writeConfig replaces the config file as a ConfigMap update does (a new
// file renamed over it): GPU 0 keeps L40S-24Q: 2, GPU 1 gets n of typ.
func (d *daemon) writeConfig(t *testing.T, typ string, n int) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(d.config), "..config.tmp")
	require.NoError(t, os.WriteFile(tmp, []byte(fmt.Sprintf(bothCards, typ, n)), 0o644))
	require.NoError(t, os.Rename(tmp, d.config))
}

// waitReady waits for a ready report that cond accepts and returns it.
func (d *daemon) waitReady(t *testing.T, what string, cond func(wire.VGPUReady) bool) wire.VGPUReady {
	t.Helper()
	var r wire.VGPUReady
	testutil.Eventually(t, runWait, what+"\n"+d.stderr.String(), func() bool {
		var err error
		r, err = wire.ReadVGPUReady(filepath.Join(d.runDir, names.VGPUReadyFile))
		return err == nil && cond(r)
	})
	return r
}

// TestRunWithoutNVMLSaysSoOnceAndApplies: `run` where the driver root holds
// no libnvidia-ml.so.1 (no driver, or a container that cannot see it), in
// a fresh run folder over a card filled before: it says once that NVML is
// not available, reports that card's vGPUs as unnamed (refused, never
// counted), and still applies the other card, pass after pass (a config
// change applies again; the log still says it once).
func TestRunWithoutNVMLSaysSoOnceAndApplies(t *testing.T) {
	s := newSim(t, "l40s-vgpu")
	fillFirstGPU(t, s)
	root := t.TempDir()
	d := startDaemon(t, s, ProgramOn(s.k), "vgpu-no-nvml", "--driver-root", root)

	r := d.waitReady(t, "GPU 1 applied, GPU 0 unnamed", func(r wire.VGPUReady) bool {
		return len(r.GPUs) == 2 && r.GPUs[1].VGPUs["L40S-24Q"] == 2
	})
	assert.Equal(t, wire.VGPUStateFailed, r.State)
	assert.Empty(t, r.GPUs[0].VGPUs)
	assert.Equal(t, map[string]string{"0000:41:00.4": "1155", "0000:41:00.5": "1155"}, r.GPUs[0].Unnamed)
	require.Len(t, r.Refused, 1)
	assert.Contains(t, r.Refused[0].Reason, "type id 1155")

	d.writeConfig(t, "L40S-12Q", 4)
	d.waitReady(t, "GPU 1 changed", func(r wire.VGPUReady) bool { return r.GPUs[1].VGPUs["L40S-12Q"] == 4 })
	out := d.stderr.String()
	want := "built without cgo"
	if nvmltypes.Available {
		want = "libnvidia-ml.so.1 not found under driver root " + root + " (searched " + strings.Join(gpucdi.DefaultLibDirs(), ", ") + ")"
	}
	assert.Equal(t, 1, strings.Count(out, "NVML is not available"), out)
	assert.Equal(t, 1, strings.Count(out, want), out)
}
