package validator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	sharedapi "github.com/sandbox-gpu/sandbox-gpu/internal/testutil/apiserver"
)

// One real kube-apiserver and etcd (envtest) for the package, started by
// the first test that needs it.
var apiserver sharedapi.Shared

func TestMain(m *testing.M) { os.Exit(apiserver.Run(m)) }

type fixture struct {
	cs        kubernetes.Interface
	node      string
	ready     string
	permitted string
	vgpuReady string
	v         *Validator
	metrics   *prometheus.Registry
}

func start(t *testing.T, name string, labels map[string]string) *fixture {
	t.Helper()
	cs, err := kubernetes.NewForConfig(apiserver.Config(t))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	require.NoError(t, err)
	dir := t.TempDir()
	f := &fixture{cs: cs, node: name, ready: filepath.Join(dir, "vfio-manager.ready"), permitted: filepath.Join(dir, "permitted.json"),
		vgpuReady: filepath.Join(dir, names.VGPUReadyFile), metrics: prometheus.NewRegistry()}
	f.v, err = New(Options{NodeName: name, Client: cs, VFIOReadyFile: f.ready, PermittedFile: f.permitted, VGPUReadyFile: f.vgpuReady, Resync: time.Hour, Log: logr.Discard(),
		Registerer: f.metrics})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- f.v.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		_ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return f
}

func (f *fixture) get(t *testing.T) *corev1.Node {
	n, err := f.cs.CoreV1().Nodes().Get(context.Background(), f.node, metav1.GetOptions{})
	require.NoError(t, err)
	return n
}

func (f *fixture) waitProblems(t *testing.T, want ...string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("problems %q", want), func() bool {
		return fmt.Sprint(f.v.Report().Problems) == fmt.Sprint(want)
	})
}

func writeJSON(t *testing.T, path string, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, b, 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

var a10 = kubevirtv1.PermittedHostDevices{PciHostDevices: []kubevirtv1.PciHostDevice{
	{PCIVendorSelector: "10DE:2236", ResourceName: "nvidia.com/GA102GL_A10", ExternalResourceProvider: true},
	// A model the curated table does not know: only publishing gets it to the CR.
	{PCIVendorSelector: "10DE:9999", ResourceName: "nvidia.com/GB999_FUTURE", ExternalResourceProvider: true},
}}

func TestPassthroughNodeValidatesAndPublishes(t *testing.T) {
	f := start(t, "gpu-a", map[string]string{
		names.DeployLabel(names.VFIOManager): "true", names.DeployLabel(names.KubeVirtDevicePlugin): "true"})
	f.waitProblems(t,
		"KubeVirt device plugin: "+f.permitted+" does not exist yet",
		"VFIO manager: "+f.ready+" does not exist yet")
	require.False(t, f.v.Report().Ready)

	writeJSON(t, f.ready, map[string]any{"ready": false, "reason": "0000:3b:00.0: in use", "expires": time.Now().Add(time.Hour)})
	writeJSON(t, f.permitted, a10)
	f.waitProblems(t,
		"VFIO manager: not ready: 0000:3b:00.0: in use",
		"node gpu-a: resource nvidia.com/GA102GL_A10 is not allocatable yet",
		"node gpu-a: resource nvidia.com/GB999_FUTURE is not allocatable yet")
	compact, _ := json.Marshal(a10)
	require.Equal(t, string(compact), f.get(t).Annotations[names.PermittedAnnotation], "published before the kubelet advertises")

	writeJSON(t, f.ready, liveReady(time.Hour))
	n := f.get(t)
	n.Status.Capacity = corev1.ResourceList{"nvidia.com/GA102GL_A10": resource.MustParse("1"), "nvidia.com/GB999_FUTURE": resource.MustParse("1")}
	n.Status.Allocatable = n.Status.Capacity
	_, err := f.cs.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
	require.NoError(t, err)
	f.waitProblems(t)
	require.True(t, f.v.Report().Ready)

	// Steady state: the same content rewritten causes a check but no write.
	rv := f.get(t).ResourceVersion
	before := f.v.Report().Time
	writeJSON(t, f.permitted, a10)
	testutil.Eventually(t, 10*time.Second, "a re-check", func() bool { return f.v.Report().Time.After(before) })
	require.Equal(t, rv, f.get(t).ResourceVersion, "no write when nothing changed")
	assert.Equal(t, 1.0, promtest.ToFloat64(f.v.metrics.ready))
	assert.Equal(t, 0.0, promtest.ToFloat64(f.v.metrics.problems))
	assert.Equal(t, 1.0, promtest.ToFloat64(f.v.metrics.patches.WithLabelValues("ok")), "one write: the first publication")
	count, err := promtest.GatherAndCount(f.metrics, "sandbox_gpu_validator_checks_total")
	require.NoError(t, err)
	assert.Equal(t, 2, count, "ready and not_ready checks were counted")

	// The plugin's devices change: the annotation follows.
	one := kubevirtv1.PermittedHostDevices{PciHostDevices: a10.PciHostDevices[:1]}
	writeJSON(t, f.permitted, one)
	compact, _ = json.Marshal(one)
	testutil.Eventually(t, 10*time.Second, "the annotation to follow the file", func() bool {
		return f.get(t).Annotations[names.PermittedAnnotation] == string(compact)
	})
}

func TestOnlyWhatTheDeployLabelsRun(t *testing.T) {
	// A Kata node: no KubeVirt plugin, so nothing is published even if a
	// stale file is there; the VFIO manager is still checked.
	f := start(t, "gpu-kata", map[string]string{names.DeployLabel(names.VFIOManager): "true"})
	writeJSON(t, f.permitted, a10)
	f.waitProblems(t, "VFIO manager: "+f.ready+" does not exist yet")
	writeJSON(t, f.ready, liveReady(time.Hour))
	f.waitProblems(t)
	require.NotContains(t, f.get(t).Annotations, names.PermittedAnnotation)

	// Garbage is reported, with the file named.
	n := f.get(t)
	n.Labels[names.DeployLabel(names.KubeVirtDevicePlugin)] = "true"
	_, err := f.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(f.permitted, []byte("{not json"), 0o644))
	testutil.Eventually(t, 10*time.Second, "a parse error naming the file", func() bool {
		p := f.v.Report().Problems
		return len(p) == 1 && strings.Contains(p[0], f.permitted)
	})
}

func TestNewNeedsNodeAndClient(t *testing.T) {
	_, err := New(Options{})
	require.ErrorContains(t, err, "node name")
	_, err = New(Options{NodeName: "x"})
	require.ErrorContains(t, err, "client")
}

// TestVGPUNodeWaitsForItsConfig: on a vm-vgpu node the validator is ready
// only once the vGPU device manager applied the selected config on every
// GPU; a refusal (a vGPU in use) or a config error is named.
func TestVGPUNodeWaitsForItsConfig(t *testing.T) {
	f := start(t, "gpu-vgpu", map[string]string{names.DeployLabel(names.VGPUDeviceManager): "true"})
	f.waitProblems(t, "vGPU device manager: "+f.vgpuReady+" does not exist yet")
	writeJSON(t, f.vgpuReady, map[string]any{"config": "A10-8Q", "state": "failed",
		"refused": []map[string]any{{"gpu": 0, "address": "0000:3b:00.0", "reason": "in use: mdev 0c0ffee0 held by pid 4242 (qemu-kvm)"}}})
	f.waitProblems(t, `vGPU device manager: config "A10-8Q" not applied on 0000:3b:00.0: in use: mdev 0c0ffee0 held by pid 4242 (qemu-kvm)`)
	writeJSON(t, f.vgpuReady, map[string]any{"config": "nope", "state": "failed", "error": `config "nope" not found`})
	f.waitProblems(t, `vGPU device manager: config "nope" not applied: config "nope" not found`)
	writeJSON(t, f.vgpuReady, map[string]any{"config": "A10-4Q", "state": "success"})
	f.waitProblems(t)
	require.True(t, f.v.Report().Ready)
}

// liveReady is a ready file a live VFIO manager would write, its heartbeat
// good for d.
func liveReady(d time.Duration) map[string]any {
	return map[string]any{"ready": true, "pid": 7, "heartbeat": time.Now(), "expires": time.Now().Add(d)}
}

// TestKilledVFIOManagerIsNotReady: the VFIO manager killed with -9 leaves
// its ready file behind; once its heartbeat runs out the validator says so,
// without any event to wake it.
func TestKilledVFIOManagerIsNotReady(t *testing.T) {
	f := start(t, "gpu-killed", map[string]string{names.DeployLabel(names.VFIOManager): "true"})
	writeJSON(t, f.ready, liveReady(300*time.Millisecond))
	f.waitProblems(t)
	testutil.Eventually(t, 10*time.Second, "the heartbeat to run out", func() bool {
		p := f.v.Report().Problems
		return len(p) == 1 && strings.Contains(p[0], "VFIO manager: not ready: the VFIO manager (pid 7) has not written its readiness since") &&
			strings.Contains(p[0], "it is not running")
	})
}

// TestHostileRunFilesAreProblemsNotHangs: a FIFO at the permitted file, a
// link at the VFIO ready file (to a live ready report outside the folder)
// and a huge vGPU ready file are each a problem naming the file, seen
// promptly; the validator still stops (the fixture's cleanup waits for it)
// and the link's target is unchanged.
func TestHostileRunFilesAreProblemsNotHangs(t *testing.T) {
	f := start(t, "gpu-hostile", map[string]string{names.DeployLabel(names.VFIOManager): "true",
		names.DeployLabel(names.KubeVirtDevicePlugin): "true", names.DeployLabel(names.VGPUDeviceManager): "true"})
	outside := filepath.Join(t.TempDir(), "vfio-manager.ready")
	writeJSON(t, outside, liveReady(time.Hour))
	before, err := os.ReadFile(outside)
	require.NoError(t, err)
	require.NoError(t, os.Symlink(outside, f.ready))
	require.NoError(t, syscall.Mkfifo(f.permitted, 0o644))
	require.NoError(t, os.WriteFile(f.vgpuReady, make([]byte, atomicfile.MaxSize+1), 0o644))
	f.waitProblems(t,
		fmt.Sprintf("KubeVirt device plugin: %s is a FIFO, not a regular file", f.permitted),
		fmt.Sprintf("VFIO manager: %s is a symbolic link, not followed", f.ready),
		fmt.Sprintf("vGPU device manager: %s is %d bytes, over the %d a reader accepts", f.vgpuReady, atomicfile.MaxSize+1, atomicfile.MaxSize))
	assert.False(t, f.v.Report().Ready)
	after, err := os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, before, after)
}
