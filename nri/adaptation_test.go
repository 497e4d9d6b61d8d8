package nri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources/podresourcestest"
	tu "github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/kubelettest"
	"github.com/sandbox-gpu/sandbox-gpu/nri/nritest"
)

type fixture struct {
	rt      *nritest.Runtime
	kubelet *podresourcestest.Kubelet
	cdiDir  string
	plugin  *Plugin
	reg     *prometheus.Registry
	stop    func()
}

type fixtureOpts struct {
	version  string // runtime version: v2.x resolves CDI, v1.7 does not
	failOpen bool
	hooks    bool
	annNS    []string
	// checkpoint is the kubelet device checkpoint's path ("": none).
	checkpoint string
	// strictPrivileged applies the allocation rule to privileged containers.
	strictPrivileged bool
}

func checkpoint(path string) *Checkpoint {
	if path == "" {
		return nil
	}
	return &Checkpoint{Path: path}
}

func newFixture(t *testing.T, fo fixtureOpts) *fixture {
	t.Helper()
	if fo.version == "" {
		fo.version = "v2.4.2"
	}
	dir := kubelettest.ShortDir(t)
	f := &fixture{cdiDir: t.TempDir(), reg: prometheus.NewRegistry()}
	nritest.WriteSpec(t, f.cdiDir, "nvidia", nritest.GPUSpec(3, fo.hooks))
	f.kubelet = nritest.StartPodResources(t, dir)
	f.rt = nritest.StartRuntime(t, dir, fo.version)
	res, err := NewResolver("nvidia.com/gpu", []string{f.cdiDir})
	require.NoError(t, err)
	pods, err := NewKubeletPodResources(f.kubelet.Socket(), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pods.Close() })
	f.plugin, err = New(Options{FailOpen: fo.failOpen, StrictPrivileged: fo.strictPrivileged, SkipRuntimeHandlers: []string{"kata*"}, AnnotationNamespaces: fo.annNS, CharMajors: nritest.CharMajors, Checkpoint: checkpoint(fo.checkpoint), Log: funcr.New(func(p, a string) { t.Log(p, a) }, funcr.Options{Verbosity: 0})}, res, pods, f.reg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- f.plugin.Run(ctx, RunOptions{Socket: f.rt.Socket, Dial: f.rt.Dial, Name: "sandbox-gpu", Index: "10", MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	}()
	f.stop = func() {
		cancel()
		require.NoError(t, <-done)
	}
	t.Cleanup(func() {
		if f.stop != nil {
			f.stop()
		}
	})
	f.waitConnections(t, 1)
	return f
}

// waitConnections waits until the plugin has joined the runtime side n
// times (synchronized and in its plugin list).
func (f *fixture) waitConnections(t *testing.T, n int) {
	f.rt.WaitJoined(t, n, 10*time.Second)
}

var podSeq int

func pod(ns, name, handler string) *api.PodSandbox {
	podSeq++
	return &api.PodSandbox{Id: fmt.Sprintf("sandbox-%d", podSeq), Name: name, Namespace: ns, Uid: fmt.Sprintf("uid-%d", podSeq), RuntimeHandler: handler,
		Linux: &api.LinuxPodSandbox{}}
}

func ctr(name string, env []string, devices ...string) *api.Container {
	c := &api.Container{Id: "ctr-" + name, Name: name, Env: env, Linux: &api.LinuxContainer{}}
	for _, d := range devices {
		c.Linux.Devices = append(c.Linux.Devices, hostDevice(d))
	}
	return c
}

// gpuResolver resolves nvidia.com/gpu over a fresh CDI folder holding a
// spec of n stand-in GPUs.
func gpuResolver(t *testing.T, n int) *Resolver {
	t.Helper()
	dir := t.TempDir()
	nritest.WriteSpec(t, dir, "nvidia", nritest.GPUSpec(n, false))
	res, err := NewResolver("nvidia.com/gpu", []string{dir})
	require.NoError(t, err)
	return res
}

// hostDevice gives stand-in numbers: /dev/nvidiaN is 195:N, nvidiactl
// 195:255, anything else 10:<length>.
func hostDevice(path string) *api.LinuxDevice {
	d := &api.LinuxDevice{Path: path, Type: "c", Major: 10, Minor: int64(len(path))}
	var n int64
	if _, err := fmt.Sscanf(path, "/dev/nvidia%d", &n); err == nil {
		d.Major, d.Minor = 195, n
	} else if path == "/dev/nvidiactl" {
		d.Major, d.Minor = 195, 255
	}
	return d
}

// denied lists the device cgroup deny rules of an adjustment.
func denied(a *api.ContainerAdjustment) []string {
	var out []string
	for _, r := range a.GetLinux().GetResources().GetDevices() {
		if !r.GetAllow() {
			out = append(out, devNum(r.GetType(), r.GetMajor().GetValue(), r.GetMinor().GetValue()))
		}
	}
	sort.Strings(out)
	return out
}

func cdiNames(a *api.ContainerAdjustment) []string {
	var out []string
	for _, d := range a.GetCDIDevices() {
		out = append(out, d.GetName())
	}
	return out
}

func devicePaths(a *api.ContainerAdjustment) (added, removed []string) {
	for _, d := range a.GetLinux().GetDevices() {
		if p, ok := d.IsMarkedForRemoval(); ok {
			removed = append(removed, p)
		} else {
			added = append(added, d.GetPath())
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	return added, removed
}

func env(a *api.ContainerAdjustment) map[string]string {
	out := map[string]string{}
	for _, kv := range a.GetEnv() {
		out[kv.GetKey()] = kv.GetValue()
	}
	return out
}

func TestInjectsExactlyTheAllocationAsCDIRequests(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	f.kubelet.Allocate("ml", "train", "main", "nvidia.com/gpu", nritest.GPUUUID(0), "2")
	f.kubelet.Allocate("ml", "train", "side", "example.com/nic", "eth9")
	p := pod("ml", "train", "runc")

	// A GPU node the runtime put in that is not allocated refuses the
	// container: NRI cannot take it out again.
	_, err := f.rt.Create(p, ctr("main", nil, "/dev/nvidia0", "/dev/nvidia1"))
	require.ErrorContains(t, err, "pod ml/train container main: the runtime added GPU device nodes the kubelet did not allocate")
	require.ErrorContains(t, err, ": /dev/nvidia1")

	// NVIDIA's env request is voided; the runtime's own CDI request for the
	// same GPU is dropped from the annotations (it is injected once, by us).
	c := ctr("main", []string{"NVIDIA_VISIBLE_DEVICES=all"}, "/dev/fuse")
	c.Annotations = map[string]string{"cdi.k8s.io/nvidia-device-plugin": "nvidia.com/gpu=2"}
	a, err := f.rt.Create(p, c)
	require.NoError(t, err)
	assert.Equal(t, []string{"nvidia.com/gpu=" + nritest.GPUUUID(0), "nvidia.com/gpu=2"}, cdiNames(a))
	assert.Empty(t, denied(a))
	assert.Equal(t, "void", env(a)[VisibleDevicesEnv])
	assert.Contains(t, a.GetAnnotations(), "-cdi.k8s.io/nvidia-device-plugin")

	// The other container of the pod holds no GPU: none, from the cache.
	a, err = f.rt.Create(p, ctr("side", nil))
	require.NoError(t, err)
	assert.Empty(t, cdiNames(a))
	gets := f.kubelet.Calls().Get
	assert.EqualValues(t, 1, gets, "one kubelet call per pod sandbox")
	assert.Equal(t, 1.0, testutil.ToFloat64(f.plugin.metrics.outcomes.WithLabelValues("injected")))
}

func TestResolvedEditsOnRuntimesWithoutCDIRequests(t *testing.T) {
	f := newFixture(t, fixtureOpts{version: "v1.7.30"})
	f.kubelet.Allocate("ml", "infer", "main", "nvidia.com/mig-1g.10gb", nritest.MIGUUID)
	f.kubelet.Allocate("ml", "infer", "main", "nvidia.com/gpu", "1::3") // a time-sliced replica of GPU 1
	a, err := f.rt.Create(pod("ml", "infer", ""), ctr("main", nil))
	require.NoError(t, err)
	assert.Empty(t, cdiNames(a))
	added, removed := devicePaths(a)
	assert.Equal(t, []string{"/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}, added)
	assert.Empty(t, removed)
	for _, d := range a.GetLinux().GetDevices() {
		if d.GetPath() == "/dev/nvidia1" {
			assert.Equal(t, int64(195), d.GetMajor())
			assert.Equal(t, int64(1), d.GetMinor())
			assert.Equal(t, "c", d.GetType())
		}
	}
	require.Len(t, a.GetMounts(), 1)
	assert.Equal(t, "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", a.GetMounts()[0].GetDestination())
	assert.Equal(t, "void", env(a)[VisibleDevicesEnv])
}

func TestNoAllocationNoGPUWhateverTheEnvOrAnnotationsSay(t *testing.T) {
	f := newFixture(t, fixtureOpts{annNS: []string{"gpu-monitoring"}})
	f.kubelet.Allocate("default", "sneaky", "main", "cpu")
	p := pod("default", "sneaky", "runc")
	p.Annotations = map[string]string{names.RequestAnnotation: "all", "cdi.k8s.io/gpu": "nvidia.com/gpu=0"}
	c := ctr("main", []string{"NVIDIA_VISIBLE_DEVICES=all"}, "/dev/null")
	c.Annotations = map[string]string{"nvidia.cdi.k8s.io/ask": "nvidia.com/gpu=all"}
	a, err := f.rt.Create(p, c)
	require.NoError(t, err)
	assert.Empty(t, cdiNames(a))
	added, removed := devicePaths(a)
	assert.Empty(t, added)
	assert.Empty(t, removed)
	assert.Equal(t, "void", env(a)[VisibleDevicesEnv])
	assert.Contains(t, a.GetAnnotations(), "-nvidia.cdi.k8s.io/ask", "NVIDIA's runtime would inject from it later")

	// GPU nodes the runtime put in: refused, naming them.
	_, err = f.rt.Create(p, ctr("main", nil, "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/null"))
	require.ErrorContains(t, err, "pod default/sneaky container main holds no GPU: the runtime added GPU device nodes")
	require.ErrorContains(t, err, ": /dev/nvidia-uvm, /dev/nvidia0, /dev/nvidiactl")

	// The same annotation from an allowed management namespace is honoured.
	f.kubelet.Allocate("gpu-monitoring", "dcgm", "exporter", "cpu")
	m := pod("gpu-monitoring", "dcgm", "runc")
	m.Annotations = map[string]string{names.RequestAnnotation + ".exporter": "0, 1"}
	a, err = f.rt.Create(m, ctr("exporter", nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1"}, cdiNames(a))

	// A pod the kubelet does not know (made through CRI directly) holds nothing.
	a, err = f.rt.Create(pod("default", "crictl-made", "runc"), ctr("main", nil))
	require.NoError(t, err)
	assert.Empty(t, cdiNames(a))
}

func TestSandboxedPodsAreLeftAlone(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	f.kubelet.Allocate("vms", "vm", "compute", "nvidia.com/gpu", "0")
	a, err := f.rt.Create(pod("vms", "vm", "kata-qemu-nvidia-gpu"), ctr("compute", nil, "/dev/vfio/12"))
	require.NoError(t, err)
	assert.Empty(t, cdiNames(a))
	added, removed := devicePaths(a)
	assert.Empty(t, added)
	assert.Empty(t, removed)
	assert.Empty(t, denied(a))
	gets := f.kubelet.Calls().Get
	assert.Zero(t, gets, "the kubelet is not even asked")
}

func TestFailClosedNamesPodContainerAndMissingGPUs(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	f.kubelet.Allocate("ml", "big", "main", "nvidia.com/gpu", "2", "7", "GPU-ffffffff-0000-0000-0000-000000000000")
	_, err := f.rt.Create(pod("ml", "big", "runc"), ctr("main", nil))
	require.Error(t, err)
	for _, want := range []string{"pod ml/big container main", "nvidia.com/gpu=7", "nvidia.com/gpu=GPU-ffffffff-0000-0000-0000-000000000000"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.NotContains(t, err.Error(), "nvidia.com/gpu=2,")

	// An ID that cannot be a CDI name is named too.
	f.kubelet.Allocate("ml", "odd", "main", "nvidia.com/gpu", "bad id/../x")
	_, err = f.rt.Create(pod("ml", "odd", "runc"), ctr("main", nil))
	require.ErrorContains(t, err, `device ID "bad id/../x"`)

	// The kubelet is unreachable: nobody can tell, so creation fails.
	require.NoError(t, f.kubelet.Stop())
	_, err = f.rt.Create(pod("ml", "later", "runc"), ctr("main", nil))
	require.ErrorContains(t, err, "pod ml/later container main: cannot tell which GPUs the kubelet allocated")
}

func TestFailOpenStartsWithoutGPUs(t *testing.T) {
	f := newFixture(t, fixtureOpts{failOpen: true})
	f.kubelet.Allocate("ml", "big", "main", "nvidia.com/gpu", "7")
	a, err := f.rt.Create(pod("ml", "big", "runc"), ctr("main", nil, "/dev/nvidia0"))
	require.NoError(t, err)
	assert.Empty(t, cdiNames(a))
	assert.Equal(t, []string{"c 195:0"}, denied(a))
	assert.Equal(t, 1.0, testutil.ToFloat64(f.plugin.metrics.outcomes.WithLabelValues("failed_open")))

	// Runtime-added nodes without an allocation: denied in the device
	// cgroup (the removal NRI drops), and the container starts.
	f.kubelet.Allocate("ml", "plain", "main", "cpu")
	a, err = f.rt.Create(pod("ml", "plain", "runc"), ctr("main", nil, "/dev/nvidia1", "/dev/nvidiactl"))
	require.NoError(t, err)
	assert.Equal(t, []string{"c 195:1", "c 195:255"}, denied(a))
}

func TestUserNamespacePods(t *testing.T) {
	userns := func(p *api.PodSandbox) *api.PodSandbox {
		p.Linux.Namespaces = []*api.LinuxNamespace{{Type: "user"}, {Type: "mount"}}
		return p
	}
	// A spec with hooks: a clear error up front, not a failure inside runc.
	f := newFixture(t, fixtureOpts{hooks: true})
	f.kubelet.Allocate("apps", "rootless", "main", "nvidia.com/gpu", "0")
	_, err := f.rt.Create(userns(pod("apps", "rootless", "runc")), ctr("main", nil))
	require.ErrorContains(t, err, "pod apps/rootless container main")
	require.ErrorContains(t, err, "hostUsers: false")
	require.ErrorContains(t, err, "nvidia-cdi-hook update-ldcache")
	// The same pod with host users is fine.
	f.kubelet.Allocate("apps", "rooted", "main", "nvidia.com/gpu", "0")
	_, err = f.rt.Create(pod("apps", "rooted", "runc"), ctr("main", nil))
	require.NoError(t, err)

	// A spec without hooks works in a user namespace.
	g := newFixture(t, fixtureOpts{})
	g.kubelet.Allocate("apps", "rootless", "main", "nvidia.com/gpu", "0")
	a, err := g.rt.Create(userns(pod("apps", "rootless", "runc")), ctr("main", nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"nvidia.com/gpu=0"}, cdiNames(a))
}

func TestNewSandboxUnderAnOldNameAsksAgain(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	f.kubelet.Allocate("db", "web-0", "main", "nvidia.com/gpu", "0")
	a, err := f.rt.Create(pod("db", "web-0", "runc"), ctr("main", nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"nvidia.com/gpu=0"}, cdiNames(a))
	// The StatefulSet pod is recreated and lands on another GPU.
	f.kubelet.Delete("db", "web-0")
	f.kubelet.Allocate("db", "web-0", "main", "nvidia.com/gpu", "1")
	a, err = f.rt.Create(pod("db", "web-0", "runc"), ctr("main", nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"nvidia.com/gpu=1"}, cdiNames(a))
}

func TestSynchronizeReportsContainersMissingDevices(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	f.kubelet.Allocate("ml", "old", "ok", "nvidia.com/gpu", "0")
	f.kubelet.Allocate("ml", "old", "bad", "nvidia.com/gpu", "1", "2")
	p := pod("ml", "old", "runc")
	ok := ctr("ok", nil, "/dev/nvidia0", "/dev/nvidiactl")
	bad := ctr("bad", nil, "/dev/nvidia1")
	ok.PodSandboxId, bad.PodSandboxId = p.Id, p.Id
	ok.State, bad.State = api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_RUNNING
	missing, err := f.plugin.core().check(context.Background(), []*api.PodSandbox{p}, []*api.Container{ok, bad})
	require.NoError(t, err)
	require.Len(t, missing, 1)
	assert.Equal(t, Missing{Pod: "ml/old", Container: "bad", Devices: []string{"/dev/nvidia2", "/dev/nvidiactl"}}, missing[0])

	// Through the runtime: a reconnect synchronizes, and the gauge says so.
	f.rt.SetExisting([]*api.PodSandbox{p}, []*api.Container{ok, bad})
	f.rt.Stop()
	f.rt.Start()
	f.waitConnections(t, 2)
	tu.Eventually(t, 10*time.Second, "the background check to count the container", func() bool {
		return testutil.ToFloat64(f.plugin.metrics.missing) == 1
	})
	assert.GreaterOrEqual(t, testutil.ToFloat64(f.plugin.metrics.connections), 2.0)
}

func TestReconnectsWhenTheRuntimeRestarts(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	f.kubelet.Allocate("ml", "after", "main", "nvidia.com/gpu", "2")
	f.rt.Stop()
	f.rt.Start()
	f.waitConnections(t, 2)
	a, err := f.rt.Create(pod("ml", "after", "runc"), ctr("main", nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"nvidia.com/gpu=2"}, cdiNames(a))
	// SIGTERM-like stop returns nil promptly.
	f.stop()
	f.stop = nil
}

func TestSpecWrittenLaterIsFound(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	s := nritest.GPUSpec(3, false)
	s.Kind = "nvidia.com/gpu"
	s.Devices = append(s.Devices, s.Devices[0])
	s.Devices[len(s.Devices)-1].Name = "3"
	nritest.WriteSpec(t, f.cdiDir, "nvidia", s)
	f.kubelet.Allocate("ml", "new", "main", "nvidia.com/gpu", "3")
	a, err := f.rt.Create(pod("ml", "new", "runc"), ctr("main", nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"nvidia.com/gpu=3"}, cdiNames(a))
}

func TestOptionsAreChecked(t *testing.T) {
	res, err := NewResolver("nvidia.com/gpu", []string{t.TempDir()})
	require.NoError(t, err)
	pods := &staticPods{}
	_, err = New(Options{Injection: "magic"}, res, pods, nil)
	require.ErrorContains(t, err, `"magic"`)
	_, err = New(Options{Resources: []string{"nvidia.com/[gpu"}}, res, pods, nil)
	require.ErrorContains(t, err, "nvidia.com/[gpu")
	_, err = NewResolver("not a kind", nil)
	require.ErrorContains(t, err, `"not a kind"`)
	_, err = New(Options{}, nil, pods, nil)
	require.Error(t, err)
}

type staticPods struct{ m map[string]PodAllocations }

func (s *staticPods) Get(_ context.Context, ns, name string) (PodAllocations, error) {
	return s.m[ns+"/"+name], nil
}
func (s *staticPods) List(context.Context) (map[string]PodAllocations, error) { return s.m, nil }

func TestTables(t *testing.T) {
	for _, c := range []struct {
		runtime, version string
		want             bool
	}{{"containerd", "v2.4.2", true}, {"containerd", "2.1.0", true}, {"containerd", "v2.0.5", false},
		{"containerd", "v1.7.30", false}, {"cri-o", "1.34.0", false}, {"containerd", "garbage", false}, {"containerd", "v3.0.0", true}} {
		assert.Equal(t, c.want, resolvesCDI(c.runtime, c.version), "%s %s", c.runtime, c.version)
	}
	res, err := NewResolver("nvidia.com/gpu", nil)
	require.NoError(t, err)
	for id, want := range map[string]string{
		"0": "nvidia.com/gpu=0", "GPU-abc": "nvidia.com/gpu=GPU-abc", "GPU-abc::7": "nvidia.com/gpu=GPU-abc",
		"MIG-1-2": "nvidia.com/gpu=MIG-1-2", "0:1": "nvidia.com/gpu=0:1", "": "", "a/b": "", "x y": "",
	} {
		got, err := res.Name(id)
		if want == "" {
			assert.Error(t, err, id)
			continue
		}
		require.NoError(t, err, id)
		assert.Equal(t, want, got)
	}
	p, err := New(Options{}, res, &staticPods{}, nil)
	require.NoError(t, err)
	for name, want := range map[string]bool{"nvidia.com/gpu": true, "nvidia.com/mig-1g.10gb": true, "nvidia.com/gpu.shared": true,
		"nvidia.com/pgpu": false, "nvidia.com/GA102GL_A10": false, "amd.com/gpu": false} {
		assert.Equal(t, want, p.core().gpuResource(name), name)
	}
	assert.True(t, strings.HasPrefix(errHooksInUserNS.Error(), "the CDI edits carry OCI hooks"))
}

// The plugin's own adjustment when failing open, before the runtime side
// merges it: removals are requested (runtime sides that forward them drop
// the nodes) besides the deny rules, and annotations asking a runtime for
// our kind are removed.
func TestAdjustmentRemovesNodesAndAnnotations(t *testing.T) {
	res := gpuResolver(t, 3)
	pods := &staticPods{m: map[string]PodAllocations{"ml/a": {"main": {"nvidia.com/gpu": {"0"}}}}}
	p, err := New(Options{FailOpen: true}, res, pods, nil)
	require.NoError(t, err)
	c := ctr("main", nil, "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/fuse")
	c.Annotations = map[string]string{"cdi.k8s.io/x": "nvidia.com/gpu=1", "cdi.k8s.io/nic": "example.com/nic=eth1", "nvidia.cdi.k8s.io/y": "nvidia.com/gpu=all"}
	a, outcome, err := p.core().adjust(context.Background(), pod("ml", "a", "runc"), c)
	require.NoError(t, err)
	assert.Equal(t, "injected", outcome)
	_, removed := devicePaths(a)
	assert.Equal(t, []string{"/dev/nvidia1"}, removed)
	assert.Equal(t, []string{"c 195:1"}, denied(a))
	assert.Equal(t, map[string]string{"-cdi.k8s.io/x": "", "-nvidia.cdi.k8s.io/y": ""}, a.GetAnnotations())

	// Same numbers under another path as a kept node: removed, not denied.
	pods.m["ml/b"] = PodAllocations{"main": {"nvidia.com/gpu": {"1"}}}
	c = ctr("main", nil, "/dev/nvidia1")
	alias := hostDevice("/dev/nvidia1")
	alias.Path = "/dev/nvidia-alias"
	c.Linux.Devices = append(c.Linux.Devices, alias)
	a, _, err = p.core().adjust(context.Background(), pod("ml", "b", "runc"), c)
	require.NoError(t, err)
	assert.Empty(t, denied(a))
}

func TestInitContainersFromTheKubeletCheckpoint(t *testing.T) {
	res := gpuResolver(t, 3)
	// The PodResources API lists only the app container.
	pods := &staticPods{m: map[string]PodAllocations{"ml/a": {"main": {"nvidia.com/gpu": {"0"}}}}}
	cp := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
	p, err := New(Options{Checkpoint: &Checkpoint{Path: cp}, Injection: InjectCDI}, res, pods, nil)
	require.NoError(t, err)
	sb := pod("ml", "a", "runc")
	sb.Uid = "uid-a"

	// No checkpoint file: an unlisted container holds nothing.
	a, outcome, err := p.core().adjust(context.Background(), sb, ctr("setup", nil))
	require.NoError(t, err)
	assert.Equal(t, "none", outcome)
	assert.Empty(t, cdiNames(a))

	require.NoError(t, os.WriteFile(cp, []byte(`{"Data":{"PodDeviceEntries":[
		{"PodUID":"uid-a","ContainerName":"setup","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["1"],"1":["2"]},"AllocResp":""},
		{"PodUID":"uid-a","ContainerName":"main","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["0"]},"AllocResp":""},
		{"PodUID":"uid-other","ContainerName":"setup","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["0"]},"AllocResp":""}],
		"RegisteredDevices":{"nvidia.com/gpu":["0","1","2"]}},"Checksum":1}`), 0o644))
	a, _, err = p.core().adjust(context.Background(), sb, ctr("setup", nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"nvidia.com/gpu=1", "nvidia.com/gpu=2"}, cdiNames(a))
	// A listed container comes from the API, never the file.
	a, _, err = p.core().adjust(context.Background(), sb, ctr("main", nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"nvidia.com/gpu=0"}, cdiNames(a))

	// Old kubelets wrote a plain list; garbage is an error naming the file.
	require.NoError(t, os.WriteFile(cp, []byte(`{"Data":{"PodDeviceEntries":[{"PodUID":"uid-a","ContainerName":"setup","ResourceName":"nvidia.com/gpu","DeviceIDs":["2"]}]}}`), 0o644))
	a, _, err = p.core().adjust(context.Background(), sb, ctr("setup", nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"nvidia.com/gpu=2"}, cdiNames(a))
	require.NoError(t, os.WriteFile(cp, []byte(`{`), 0o644))
	_, _, err = p.core().adjust(context.Background(), sb, ctr("setup", nil))
	require.ErrorContains(t, err, "cannot tell which GPUs")
	require.ErrorContains(t, err, cp)
}

func TestSlowKubeletFailsClosedInsideTheRuntimeBudget(t *testing.T) {
	res := gpuResolver(t, 1)
	kubelet := nritest.StartPodResources(t, kubelettest.ShortDir(t))
	kubelet.Allocate("ml", "slow", "main", "nvidia.com/gpu", "0")
	release := kubelet.Delay()
	defer release()
	src, err := NewKubeletPodResources(kubelet.Socket(), 100*time.Millisecond)
	require.NoError(t, err)
	defer src.Close()
	p, err := New(Options{}, res, src, nil)
	require.NoError(t, err)
	start := time.Now()
	_, _, err = p.CreateContainer(context.Background(), pod("ml", "slow", "runc"), ctr("main", nil))
	require.ErrorContains(t, err, "pod ml/slow container main: cannot tell which GPUs the kubelet allocated")
	require.ErrorContains(t, err, "DeadlineExceeded")
	assert.Less(t, time.Since(start), 2*time.Second, "an answer before the runtime gives up on the plugin")
}

// TestResolverFindsASpecWrittenJustBefore: a spec written right before a
// container asks for its device is resolved at once, every time, whatever
// the CDI cache's watcher has seen yet (auto-refresh's Refresh alone does
// not rescan; the resolver forces it for names it does not know).
func TestResolverFindsASpecWrittenJustBefore(t *testing.T) {
	dir := t.TempDir()
	res, err := NewResolver("nvidia.com/gpu", []string{dir})
	require.NoError(t, err)
	for i := range 50 {
		name := fmt.Sprintf("gpu-%d", i)
		spec := nritest.GPUSpec(1, false)
		spec.Devices = spec.Devices[:1]
		spec.Devices[0].Name = name
		nritest.WriteSpec(t, dir, name, spec)
		_, unresolved, err := res.Edits([]string{"nvidia.com/gpu=" + name}, nil)
		require.NoError(t, err, "spec %s written just before", name)
		require.Empty(t, unresolved)
	}
}
