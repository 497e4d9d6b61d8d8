package discovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	sharedapi "github.com/sandbox-gpu/sandbox-gpu/internal/testutil/apiserver"
)

// One real kube-apiserver and etcd (envtest) for the package, started by
// the first test that needs it.
var apiserver sharedapi.Shared

func TestMain(m *testing.M) { os.Exit(apiserver.Run(m)) }

const wait = 10 * time.Second

// cpuOnly is a host without any NVIDIA function: an Intel ISA bridge and
// an Intel NIC, unbound.
func cpuOnly() hostsim.Fixture {
	return hostsim.Fixture{Name: "cpu-only", Description: "no NVIDIA function", IOMMU: true,
		Funcs: []hostsim.Func{
			{Address: "0000:00:1f.0", Vendor: 0x8086, Device: 0xa1c8, SubVendor: 0x8086, SubDevice: 0x7270, Class: 0x060100, Group: 1, NvidiaMinor: -1},
			{Address: "0000:18:00.0", Vendor: 0x8086, Device: 0x1593, SubVendor: 0x8086, SubDevice: 0x0002, Class: 0x020000, Group: 2, NvidiaMinor: -1},
		}}
}

func newHost(t *testing.T, fixture string) (*hostsim.Kernel, *host.Host) {
	t.Helper()
	if fixture == "cpu-only" {
		k, err := cpuOnly().Build(t.TempDir())
		require.NoError(t, err)
		return k, host.New(k.Options())
	}
	return hostsim.NewHost(t, fixture)
}

func TestCountGPUs(t *testing.T) {
	for fixture, want := range map[string]int{
		"a10": 1, "hgx-h100": 8, "workstation": 1, "cpu-only": 0, "gh200": 1, "l40s-vgpu": 2, "t4x8-vgpu": 8,
	} {
		_, h := newHost(t, fixture)
		s, err := h.Scan()
		require.NoError(t, err, fixture)
		assert.Equal(t, want, CountGPUs(s), "%s: GPUs, not NVSwitches, audio, USB or other vendors' functions", fixture)
	}
}

// A GPU with SR-IOV VFs enabled (vGPU) still counts once.
func TestVirtualFunctionsDoNotCount(t *testing.T) {
	k, h := newHost(t, "a100-sriov-vgpu")
	require.NoError(t, k.WriteFile(filepath.Join(k.Options().SysfsRoot, "bus/pci/devices/0000:41:00.0/sriov_numvfs"), []byte("4")))
	s, err := h.Scan()
	require.NoError(t, err)
	require.Greater(t, len(s.Functions), 4, "the VFs are there")
	assert.Equal(t, 1, CountGPUs(s))
}

func TestLabels(t *testing.T) {
	assert.Equal(t, []string{names.GPUDriverDataCentre, names.GPUDriverVGPUHost, names.GPUDriverNone},
		[]string{host.NVIDIADriverDataCentre, host.NVIDIADriverVGPUHost, host.NVIDIADriverNone}, "the label's values are the host's kinds")
	assert.Empty(t, Labels(0, host.NVIDIADriverDataCentre))
	assert.Equal(t, map[string]string{names.GPUPresentLabel: "true", names.GPUCountLabel: "8", names.GPUDriverLabel: "datacenter"},
		Labels(8, host.NVIDIADriverDataCentre))
	v, d := "1", "vgpu-host"
	assert.Nil(t, labelPatch(map[string]string{"other": "x"}, Labels(0, "")), "nothing to do without GPUs or labels")
	assert.Equal(t, map[string]*string{names.GPUPresentLabel: nil, names.GPUCountLabel: nil, names.GPUDriverLabel: nil},
		labelPatch(map[string]string{names.GPUPresentLabel: "true", names.GPUCountLabel: "2", names.GPUDriverLabel: "none", "other": "x"}, Labels(0, "none")))
	assert.Equal(t, map[string]*string{names.GPUCountLabel: &v, names.GPUDriverLabel: &d},
		labelPatch(map[string]string{names.GPUPresentLabel: "true", names.GPUCountLabel: "2", names.GPUDriverLabel: "datacenter"}, Labels(1, host.NVIDIADriverVGPUHost)))
}

func TestNewNeedsNodeClientAndHost(t *testing.T) {
	_, err := New(Options{})
	require.ErrorContains(t, err, "node name")
	_, err = New(Options{NodeName: "x"})
	require.ErrorContains(t, err, "client")
	_, err = New(Options{NodeName: "x", Client: &kubernetes.Clientset{}})
	require.ErrorContains(t, err, "host")
}

// agent is one agent against envtest on a simulated host.
type agent struct {
	cs      kubernetes.Interface
	node    string
	a       *Agent
	kernel  *hostsim.Kernel
	metrics *prometheus.Registry
}

func start(t *testing.T, node, fixture string, labels map[string]string) *agent {
	t.Helper()
	k, h := newHost(t, fixture)
	return startOn(t, node, k, h, labels, nil)
}

// startOn runs an agent for node (created with labels) on a built host;
// mutate, when set, changes its options.
func startOn(t *testing.T, node string, k *hostsim.Kernel, h *host.Host, labels map[string]string, mutate func(*Options)) *agent {
	t.Helper()
	cs, err := kubernetes.NewForConfig(apiserver.Config(t))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: labels}}, metav1.CreateOptions{})
	require.NoError(t, err)
	ag := &agent{cs: cs, node: node, kernel: k, metrics: prometheus.NewRegistry()}
	// A short resync: the steady-state test counts scans.
	o := Options{NodeName: node, Client: cs, Host: h, Resync: 50 * time.Millisecond, Log: logr.Discard(), Registerer: ag.metrics}
	if mutate != nil {
		mutate(&o)
	}
	ag.a, err = New(o)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- ag.a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		_ = cs.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
	})
	return ag
}

func (ag *agent) labels(t *testing.T) map[string]string {
	t.Helper()
	n, err := ag.cs.CoreV1().Nodes().Get(context.Background(), ag.node, metav1.GetOptions{})
	require.NoError(t, err)
	return n.Labels
}

func (ag *agent) resourceVersion(t *testing.T) string {
	t.Helper()
	n, err := ag.cs.CoreV1().Nodes().Get(context.Background(), ag.node, metav1.GetOptions{})
	require.NoError(t, err)
	return n.ResourceVersion
}

// waitLabels waits until the Node carries exactly want of the agent's
// labels and the agent reports ready with that many GPUs (the report is
// set after the write, so the labels alone may show first).
func (ag *agent) waitLabels(t *testing.T, want map[string]string) {
	t.Helper()
	gpus := 0
	if v, ok := want[names.GPUCountLabel]; ok {
		_, err := fmt.Sscan(v, &gpus)
		require.NoError(t, err)
	}
	testutil.Eventually(t, wait, fmt.Sprintf("node %s labels %v", ag.node, want), func() bool {
		l := ag.labels(t)
		for _, k := range owned() {
			if w, ok := want[k]; ok != (l[k] != "") || l[k] != w {
				return false
			}
		}
		r := ag.a.Report()
		return r.Ready && r.GPUs == gpus
	})
}

// gpuLabels are the agent's labels for count GPUs on driver.
func gpuLabels(count, driver string) map[string]string {
	return map[string]string{names.GPUPresentLabel: "true", names.GPUCountLabel: count, names.GPUDriverLabel: driver}
}

// scans waits for n more successful scans than now and returns.
func (ag *agent) scans(t *testing.T, n float64) {
	t.Helper()
	c := ag.a.metrics.scans.WithLabelValues("ok")
	from := promtest.ToFloat64(c)
	testutil.Eventually(t, wait, fmt.Sprintf("%v more scans", n), func() bool { return promtest.ToFloat64(c) >= from+n })
}

func TestLabelsAGPUNodeAndNoWriteOnResync(t *testing.T) {
	for fixture, count := range map[string]int{"a10": 1, "hgx-h100": 8} {
		t.Run(fixture, func(t *testing.T) {
			ag := start(t, "disc-"+fixture, fixture, map[string]string{"team": "ml"})
			ag.waitLabels(t, gpuLabels(fmt.Sprint(count), host.NVIDIADriverDataCentre))
			assert.Equal(t, "ml", ag.labels(t)["team"], "other labels are left alone")
			assert.Equal(t, count, ag.a.Report().GPUs)
			assert.Equal(t, float64(count), promtest.ToFloat64(ag.a.metrics.gpus))

			// Steady state: resyncs scan but write nothing.
			rv := ag.resourceVersion(t)
			ag.scans(t, 5)
			assert.Equal(t, rv, ag.resourceVersion(t), "no write on resync")
			assert.Equal(t, 1.0, promtest.ToFloat64(ag.a.metrics.patches.WithLabelValues("ok")), "one write: the first labelling")
			assert.Equal(t, 0.0, promtest.ToFloat64(ag.a.metrics.patches.WithLabelValues("failed")))
			c, err := promtest.GatherAndCount(ag.metrics, "sandbox_gpu_discovery_gpus")
			require.NoError(t, err)
			assert.Equal(t, 1, c)
		})
	}
}

func TestCPUOnlyNodeGetsNoLabels(t *testing.T) {
	ag := start(t, "disc-cpu", "cpu-only", nil)
	ag.scans(t, 3)
	assert.True(t, ag.a.Report().Ready)
	assert.Equal(t, 0, ag.a.Report().GPUs)
	assert.NotContains(t, ag.labels(t), names.GPUPresentLabel)
	assert.NotContains(t, ag.labels(t), names.GPUCountLabel)
	assert.Equal(t, 0.0, promtest.ToFloat64(ag.a.metrics.patches.WithLabelValues("ok")), "no write on a node without GPUs")
}

// Labels left on a node whose GPUs are gone (or set by hand) are removed;
// GPUs that go while it runs take the labels with them.
func TestLabelsFollowTheGPUs(t *testing.T) {
	ag := start(t, "disc-gone", "workstation", map[string]string{names.GPUCountLabel: "3"})
	ag.waitLabels(t, gpuLabels("1", host.NVIDIADriverDataCentre))

	// Someone removes a label: it comes back (the watch sees the change).
	n, err := ag.cs.CoreV1().Nodes().Get(context.Background(), ag.node, metav1.GetOptions{})
	require.NoError(t, err)
	delete(n.Labels, names.GPUPresentLabel)
	_, err = ag.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	require.NoError(t, err)
	ag.waitLabels(t, gpuLabels("1", host.NVIDIADriverDataCentre))

	// The card is taken out: its functions leave sysfs.
	devices := filepath.Join(ag.kernel.Options().SysfsRoot, "bus", "pci", "devices")
	for _, fn := range []string{"0000:01:00.0", "0000:01:00.1", "0000:01:00.2", "0000:01:00.3"} {
		require.NoError(t, os.Remove(filepath.Join(devices, fn)))
	}
	ag.waitLabels(t, map[string]string{})
	assert.Equal(t, 0, ag.a.Report().GPUs)
}

// A host that cannot be read leaves the labels alone and is not ready.
func TestScanFailureKeepsLabels(t *testing.T) {
	ag := start(t, "disc-broken", "a10", nil)
	ag.waitLabels(t, gpuLabels("1", host.NVIDIADriverDataCentre))
	devices := filepath.Join(ag.kernel.Options().SysfsRoot, "bus", "pci", "devices")
	require.NoError(t, os.Rename(devices, devices+".gone"))
	testutil.Eventually(t, wait, "not ready after a failed scan", func() bool { return !ag.a.Report().Ready })
	assert.Contains(t, ag.a.Report().Error, "scan the host")
	assert.Equal(t, "1", ag.labels(t)[names.GPUCountLabel], "labels kept")
	require.NoError(t, os.Rename(devices+".gone", devices))
	ag.waitLabels(t, gpuLabels("1", host.NVIDIADriverDataCentre))
}

// The driver label follows the kernel: a host on the data-centre driver
// whose vGPU Manager unloads it and loads the vGPU host driver reports
// none, then vgpu-host, and datacenter again once the vGPU host driver went
// and the data-centre driver was loaded back, all read from /sys/module,
// and long before the next resync: the driver poll wakes the scan.
func TestDriverLabelFollowsTheKernel(t *testing.T) {
	fx, err := hostsim.Lookup("a10-vgpu")
	require.NoError(t, err)
	k, err := fx.Build(t.TempDir(), hostsim.DataCentreDriver())
	require.NoError(t, err)
	ag := startOn(t, "disc-driver", k, host.New(k.Options()), nil, func(o *Options) {
		o.Resync, o.DriverPoll = time.Hour, 20*time.Millisecond
	})
	ag.waitLabels(t, gpuLabels("1", host.NVIDIADriverDataCentre))
	require.NoError(t, k.DeleteModule(hostsim.ModuleNVIDIA))
	ag.waitLabels(t, gpuLabels("1", host.NVIDIADriverNone))
	require.NoError(t, k.InitModule(k.ModuleImage(hostsim.ModuleNVIDIA, hostsim.FlavourVGPU)))
	require.NoError(t, k.InitModule(k.ModuleImage(hostsim.ModuleVGPUVFIO, hostsim.FlavourVGPU)))
	ag.waitLabels(t, gpuLabels("1", host.NVIDIADriverVGPUHost))
	// The report is stored once the scan's label write is done: poll it.
	testutil.Eventually(t, wait, "the report names the vGPU host driver", func() bool { return ag.a.Report().Driver == host.NVIDIADriverVGPUHost })
	require.NoError(t, k.DeleteModule(hostsim.ModuleVGPUVFIO))
	require.NoError(t, k.DeleteModule(hostsim.ModuleNVIDIA))
	require.NoError(t, host.New(k.Options()).EnsureDriver(context.Background(), "nvidia", hostsim.ModuleNVIDIA))
	ag.waitLabels(t, gpuLabels("1", host.NVIDIADriverDataCentre))
}
