package nri

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// Injection modes.
const (
	// InjectAuto uses CDI device requests on runtimes that resolve CDI
	// (containerd 2.1 and later) and resolved edits elsewhere.
	InjectAuto = "auto"
	// InjectCDI always asks the runtime to resolve CDI device names.
	InjectCDI = "cdi"
	// InjectEdits always applies the resolved edits itself.
	InjectEdits = "edits"
)

// VisibleDevicesEnv is NVIDIA's env request; the plugin sets it to "void"
// wherever a container carries it, so NVIDIA's hooks inject nothing.
const VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"

// Options configure the plugin.
type Options struct {
	// Resources are the kubelet resource names whose devices are GPUs;
	// path.Match patterns ("nvidia.com/mig-*") are allowed.
	Resources []string
	// KataRuntimeHandlers are the runtime handlers of Kata's
	// RuntimeClasses (exact names, "" the default runtime's): their pods
	// are sandboxed and left alone.
	KataRuntimeHandlers []string
	// SkipRuntimeHandlers are path.Match patterns of further sandboxed
	// runtime handlers whose pods are left alone (the command line's
	// default "kata*" applies only where no Kata handler is configured).
	SkipRuntimeHandlers []string
	// AnnotationNamespaces may use names.RequestAnnotation.
	AnnotationNamespaces []string
	// FailOpen lets a container with an allocation start without its GPUs
	// when they cannot be resolved (logged and counted) instead of failing.
	FailOpen bool
	// Injection is InjectAuto, InjectCDI or InjectEdits.
	Injection string
	// Hooks is the hook policy of GPU CDI specs: HooksNVIDIA (default),
	// HooksNone or HooksAny.
	Hooks string
	// DriverRoots are where the driver's files are, which a GPU spec may
	// mount (default DefaultDriverRoots; see Policy).
	DriverRoots []string
	// DevRoot is the host's /dev as GPU specs' host paths name it
	// (default /dev; see Policy).
	DevRoot string
	// CharMajors gives the host's character device majors by name (see
	// Policy); nil: only the fixed majors of NVIDIA's, DRM and VFIO nodes.
	CharMajors func() (map[string]int64, error)
	// Checkpoint, when set, gives the allocations of containers the
	// PodResources API does not list (ordinary init containers).
	Checkpoint *Checkpoint
	// StrictPrivileged also applies the allocation rule to privileged
	// containers. By default a privileged container without an allocation
	// is left alone, as nvidia-container-toolkit's
	// accept-nvidia-visible-devices-envvar-when-privileged does: it has
	// every host device anyway (the runtime adds them all), and NVIDIA's
	// container stack (device plugin, dcgm-exporter, GPU feature discovery)
	// reaches the GPUs that way through NVIDIA_VISIBLE_DEVICES.
	StrictPrivileged bool
	Log              logr.Logger
}

// DefaultResources are NVIDIA's device plugin's GPU and MIG resources.
var DefaultResources = []string{"nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*"}

// Plugin is the NRI plugin. Its policy (options, resolver, pod cache) can be
// replaced when the runtime hands it a config (pre-registered plugins get
// their settings that way).
type Plugin struct {
	c       atomic.Pointer[core]
	metrics *metrics
	// useCDI is decided per runtime connection (Configure).
	useCDI      atomic.Bool
	reconfigure func(config string) (Options, *Resolver, PodResources, error)
	syncing     atomic.Bool
}

// core is one configuration of the plugin.
type core struct {
	o       Options
	pol     Policy
	res     *Resolver
	pods    *cache
	metrics *metrics
	useCDI  *atomic.Bool
}

// New builds a plugin. reg may be nil.
func New(o Options, res *Resolver, pods PodResources, reg prometheus.Registerer) (*Plugin, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	p := &Plugin{metrics: m}
	c, err := p.newCore(o, res, pods)
	if err != nil {
		return nil, err
	}
	p.c.Store(c)
	p.useCDI.Store(c.o.Injection == InjectCDI)
	return p, nil
}

func (p *Plugin) newCore(o Options, res *Resolver, pods PodResources) (*core, error) {
	if res == nil || pods == nil {
		return nil, errors.New("nri plugin: resolver and pod resources are required")
	}
	if len(o.Resources) == 0 {
		o.Resources = DefaultResources
	}
	for _, p := range append(append([]string{}, o.Resources...), o.SkipRuntimeHandlers...) {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("pattern %q: %w", p, err)
		}
	}
	if o.Hooks == "" {
		o.Hooks = HooksNVIDIA
	}
	if err := validHookPolicy(o.Hooks); err != nil {
		return nil, err
	}
	switch o.Injection {
	case "":
		o.Injection = InjectAuto
	case InjectAuto, InjectCDI, InjectEdits:
	default:
		return nil, fmt.Errorf("injection mode %q: want auto, cdi or edits", o.Injection)
	}
	for _, r := range o.DriverRoots {
		if !cleanAbs(r) {
			return nil, fmt.Errorf("driver root %q: want an absolute, clean path", r)
		}
	}
	pol := Policy{Hooks: o.Hooks, DriverRoots: o.DriverRoots, DevRoot: o.DevRoot, CharMajors: o.CharMajors}
	return &core{o: o, pol: pol, res: res, pods: newCache(pods), metrics: p.metrics, useCDI: &p.useCDI}, nil
}

// SetReconfigure makes a non-empty config from the runtime (the plugin's
// .conf file in the runtime's plugin config dir) replace the plugin's
// settings: fn turns the text into them. Call it before Run.
func (p *Plugin) SetReconfigure(fn func(config string) (Options, *Resolver, PodResources, error)) {
	p.reconfigure = fn
}

func (p *Plugin) core() *core { return p.c.Load() }

// Configure applies the runtime's config, if any, and picks the injection
// mode for the runtime that connected.
func (p *Plugin) Configure(_ context.Context, config, runtime, version string) (api.EventMask, error) {
	if strings.TrimSpace(config) != "" && p.reconfigure != nil {
		o, res, pods, err := p.reconfigure(config)
		if err == nil {
			var c *core
			if c, err = p.newCore(o, res, pods); err == nil {
				p.c.Store(c)
			}
		}
		if err != nil {
			p.core().o.Log.Error(err, "Rejected the runtime's plugin config")
			return 0, fmt.Errorf("plugin config: %w", err)
		}
	}
	c := p.core()
	p.useCDI.Store(c.o.Injection == InjectCDI || c.o.Injection == InjectAuto && resolvesCDI(runtime, version))
	c.o.Log.Info("Connected to the runtime", "runtime", runtime, "version", version, "cdiRequests", p.useCDI.Load())
	return api.MustParseEventMask("RunPodSandbox,RemovePodSandbox,CreateContainer"), nil
}

// resolvesCDI reports whether the runtime resolves NRI CDI device requests
// (containerd 2.1 added it).
func resolvesCDI(runtime, version string) bool {
	if runtime != "containerd" {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimPrefix(version, "v"), "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 1
}

// RunPodSandbox forgets a pod's cached allocations: a new sandbox may be a
// new pod under an old name.
func (p *Plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.core().pods.forget(pod.GetNamespace(), pod.GetName())
	return nil
}

// RemovePodSandbox forgets the pod.
func (p *Plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.core().pods.forget(pod.GetNamespace(), pod.GetName())
	return nil
}

// CreateContainer gives the container exactly its GPUs.
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	start := time.Now()
	c := p.core()
	adj, outcome, err := c.adjust(ctx, pod, ctr)
	p.metrics.observe(outcome, time.Since(start))
	if err != nil {
		c.o.Log.Error(err, "Refused a container", "pod", podKey(pod), "container", ctr.GetName())
		return nil, nil, err
	}
	return adj, nil, nil
}

func podKey(pod *api.PodSandbox) string { return pod.GetNamespace() + "/" + pod.GetName() }

// adjust decides the adjustment; outcome labels the metric.
func (p *core) adjust(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, string, error) {
	if p.skipped(pod) {
		return nil, "skipped_sandboxed", nil
	}
	who := fmt.Sprintf("pod %s container %s", podKey(pod), ctr.GetName())
	ids, lookupErr := p.gpuIDs(ctx, pod, ctr)
	adj := &api.ContainerAdjustment{}
	privileged := !p.o.StrictPrivileged && isPrivileged(ctr)
	if privileged && lookupErr == nil && len(ids) == 0 {
		p.o.Log.V(1).Info("Privileged container without an allocation left alone (env-based GPU access)", "pod", podKey(pod), "container", ctr.GetName())
		return nil, "privileged", nil
	}
	if lookupErr != nil {
		why := p.mayNeedGPU(pod, ctr)
		if why == "" {
			// Nothing says it may need a GPU: it would get none anyway.
			p.o.Log.V(1).Info("Kubelet unreachable; container shows no sign of a GPU, let through", "pod", podKey(pod), "container", ctr.GetName(), "reason", lookupErr.Error())
			return nil, "none_unverified", nil
		}
		lookupErr = fmt.Errorf("%w (it may need a GPU: %s)", lookupErr, why)
		// Cannot tell whether it holds GPUs: it gets none, and fails closed.
		if !p.o.FailOpen {
			return nil, "failed", fmt.Errorf("%s: cannot tell which GPUs the kubelet allocated: %w", who, lookupErr)
		}
		p.strip(adj, ctr, nil, p.foreignGPUNodes(ctr, nil))
		p.o.Log.Error(lookupErr, "Starting without GPUs (fail-open)", "pod", podKey(pod), "container", ctr.GetName())
		return adj, "failed_open", nil
	}
	if len(ids) == 0 {
		foreign := p.foreignGPUNodes(ctr, nil)
		if len(foreign) > 0 && !p.o.FailOpen {
			return nil, "failed", fmt.Errorf("%s holds no GPU: %w: %s", who, errRuntimeAdded, strings.Join(nodePaths(foreign), ", "))
		}
		p.strip(adj, ctr, nil, foreign)
		return adj, "none", nil
	}
	names := make([]string, 0, len(ids))
	for _, id := range ids {
		n, err := p.res.Name(id)
		if err != nil {
			return p.failed(adj, ctr, fmt.Errorf("%s: %w", who, err))
		}
		names = append(names, n)
	}
	names = dedupe(names)
	edits, missing, err := p.res.Edits(names, &p.pol)
	if err != nil {
		if len(missing) > 0 {
			err = fmt.Errorf("%s: allocated GPUs missing from the CDI specs: %s", who, strings.Join(missing, ", "))
		} else {
			err = fmt.Errorf("%s: %w", who, err)
		}
		return p.failed(adj, ctr, err)
	}
	if inUserNS(pod, ctr) {
		if hooks := hookPaths(edits.Hooks); len(hooks) > 0 {
			return p.failed(adj, ctr, fmt.Errorf("%s: %w (hooks: %s)", who, errHooksInUserNS, strings.Join(hooks, "; ")))
		}
	}
	want := map[string]bool{}
	for _, d := range edits.Linux.Devices {
		want[d.Path] = true
	}
	foreign := p.foreignGPUNodes(ctr, want)
	if privileged {
		foreign = nil // every host device is in a privileged container: not ours to take
	}
	if len(foreign) > 0 && !p.o.FailOpen {
		return nil, "failed", fmt.Errorf("%s: %w: %s", who, errRuntimeAdded, strings.Join(nodePaths(foreign), ", "))
	}
	p.strip(adj, ctr, want, foreign)
	if p.useCDI.Load() {
		for _, n := range names {
			adj.AddCDIDevice(&api.CDIDevice{Name: n})
		}
	} else {
		if g := edits.Process.User.AdditionalGids; len(g) > 0 {
			p.o.Log.Info("CDI edits add supplementary groups, which an NRI adjustment cannot carry; a non-root container may not open group-owned device nodes",
				"pod", podKey(pod), "container", ctr.GetName(), "gids", g)
		}
		editsAdjustment(adj, edits)
	}
	if hasEnv(ctr, VisibleDevicesEnv) {
		adj.AddEnv(VisibleDevicesEnv, "void")
	}
	p.o.Log.V(1).Info("Injecting GPUs", "pod", podKey(pod), "container", ctr.GetName(), "devices", names)
	return adj, "injected", nil
}

func (p *core) failed(adj *api.ContainerAdjustment, ctr *api.Container, err error) (*api.ContainerAdjustment, string, error) {
	if !p.o.FailOpen {
		return nil, "failed", err
	}
	p.o.Log.Error(err, "Starting without GPUs (fail-open)")
	p.strip(adj, ctr, nil, p.foreignGPUNodes(ctr, nil))
	return adj, "failed_open", nil
}

// errRuntimeAdded refuses a container into which the runtime itself put GPU
// device nodes the kubelet did not allocate (from a cdi.k8s.io/ annotation
// or CRI CDI request in the container's config).
var errRuntimeAdded = errors.New("the runtime added GPU device nodes the kubelet did not allocate, " +
	"which NRI cannot take out again (containerd/nri#216)")

// foreignGPUNodes lists the container's GPU device nodes outside keep. The
// kind's device paths are looked up only for a container that has device
// nodes at all (most have none).
func (p *core) foreignGPUNodes(ctr *api.Container, keep map[string]bool) []*api.LinuxDevice {
	devs := ctr.GetLinux().GetDevices()
	if len(devs) == 0 {
		return nil
	}
	known := p.res.DevicePaths()
	var out []*api.LinuxDevice
	for _, d := range devs {
		if isGPUNode(d.GetPath(), known) && !keep[d.GetPath()] {
			out = append(out, d)
		}
	}
	return out
}

func nodePaths(devs []*api.LinuxDevice) []string {
	out := make([]string, 0, len(devs))
	for _, d := range devs {
		out = append(out, d.GetPath())
	}
	sort.Strings(out)
	return out
}

// strip takes away the foreign GPU device nodes (foreignGPUNodes of keep),
// the annotations that ask a runtime for GPUs, and NVIDIA's env
// request. Runtime-added nodes refuse the container unless it fails open;
// then each is removed and also denied in the device cgroup: the NRI
// runtime side up to v0.12.5 (containerd 2.4 included) drops a plugin's
// removal of a device the runtime itself added (containerd/nri#216), so
// the deny rule is what holds there (the node stays but cannot be opened).
func (p *core) strip(adj *api.ContainerAdjustment, ctr *api.Container, keep map[string]bool, foreign []*api.LinuxDevice) {
	kept := map[string]bool{}
	for _, d := range ctr.GetLinux().GetDevices() {
		if keep[d.GetPath()] {
			kept[devNum(d.GetType(), d.GetMajor(), d.GetMinor())] = true
		}
	}
	for _, d := range foreign {
		adj.RemoveDevice(d.GetPath())
		if kept[devNum(d.GetType(), d.GetMajor(), d.GetMinor())] {
			continue
		}
		if adj.Linux == nil {
			adj.Linux = &api.LinuxContainerAdjustment{}
		}
		if adj.Linux.Resources == nil {
			adj.Linux.Resources = &api.LinuxResources{}
		}
		typ := d.GetType()
		if typ == "" {
			typ = "c"
		}
		adj.Linux.Resources.Devices = append(adj.Linux.Resources.Devices, &api.LinuxDeviceCgroup{
			Allow: false, Type: typ, Major: api.Int64(d.GetMajor()), Minor: api.Int64(d.GetMinor()), Access: "rwm"})
	}
	prefix := p.res.kind + "="
	for k, v := range ctr.GetAnnotations() {
		if (strings.HasPrefix(k, "cdi.k8s.io/") || strings.HasPrefix(k, "nvidia.cdi.k8s.io/")) && strings.Contains(v, prefix) {
			adj.RemoveAnnotation(k)
		}
	}
	if keep == nil && hasEnv(ctr, VisibleDevicesEnv) {
		adj.AddEnv(VisibleDevicesEnv, "void")
	}
}

func devNum(typ string, major, minor int64) string { return fmt.Sprintf("%s %d:%d", typ, major, minor) }
