// Package operands builds the operand DaemonSets from an embedded base
// manifest, one builder per operand. Each DaemonSet runs only on nodes
// carrying its deploy label.
package operands

import (
	_ "embed"
	"fmt"
	"slices"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

//go:embed manifests/node-agent.yaml
var baseManifest []byte

// Options are the cluster-level inputs of the builders.
type Options struct {
	Namespace string
	// Registry and Version give default images: <registry>/<binary>:<version>.
	Registry string
	Version  string
	// ImagePullSecrets name Secrets in Namespace every operand pod pulls
	// with (the policy's spec.imagePullSecrets are added).
	ImagePullSecrets []string
	// ImagePullPolicy of every operand container ("": the cluster's
	// default); the policy's spec.imagePullPolicy wins when set.
	ImagePullPolicy corev1.PullPolicy
	// OSTag is the vm-vgpu nodes' OS as the GPU Operator names it
	// (ubuntu22.04: Node Feature Discovery's os_release ID and VERSION_ID),
	// appended to a bare vGPU host driver version; "" when unknown.
	OSTag string
	// KataRuntimeHandler is the handler of the RuntimeClass of Kata GPU
	// pods (spec.kata.runtimeClassName) when it exists; the NRI plugin
	// leaves that handler's pods alone ("": its default kata* pattern).
	KataRuntimeHandler string
}

type builder struct {
	binary     string
	privileged bool // sysfs writes need it
	spec       func(p *v1alpha1.SandboxGPUPolicySpec) v1alpha1.OperandSpec
	customize  func(ds *appsv1.DaemonSet, p *v1alpha1.SandboxGPUPolicySpec, o Options)
	// image, when set, makes the image from the policy (over spec's Image);
	// "" keeps the default.
	image func(p *v1alpha1.SandboxGPUPolicySpec, o Options) string
	// pullSecrets, when set, are this operand's own pull secrets, added
	// to the operator's and the policy's.
	pullSecrets func(p *v1alpha1.SandboxGPUPolicySpec) []string
	// releases names the operand whose release DaemonSet this is: it runs
	// on nodes with that operand's release label, whether sandbox
	// workloads are on or not (a node leaves a VM config when they are
	// turned off too), and takes the operand's image, env and resources but
	// not its extra args (which select what the operand manages).
	releases string
}

var builders = map[string]builder{
	names.VFIOManager: {binary: "vfio-manager", privileged: true,
		spec: func(p *v1alpha1.SandboxGPUPolicySpec) v1alpha1.OperandSpec { return p.VFIOManager.OperandSpec },
		customize: func(ds *appsv1.DaemonSet, p *v1alpha1.SandboxGPUPolicySpec, _ Options) {
			c := &ds.Spec.Template.Spec.Containers[0]
			// It splits the GPUs as its Node's sandbox-gpu.io/vm-gpus
			// says (absent: every GPU), which it reads and watches with
			// its token, and reports the split on that Node.
			// A move refused because a GPU was busy (NVIDIA's device plugin
			// still stopping, a container still ending) is tried again at
			// the binary's --retry (10s).
			c.Args = []string{"daemon", "--all", "--ready-dir=" + names.WriterDir(names.VFIOManager), "--health-addr=" + names.HealthAddr(LoopbackHost, names.VFIOManagerPort), "--vm-gpus-from-node"}
			if p.VFIOManager.NVSwitches {
				c.Args = append(c.Args, "--nvswitches")
			}
			vfioManager(ds, p, names.VFIOManagerPort)
		}},
	names.ReleaseOperand(names.VFIOManager): {binary: "vfio-manager", privileged: true, releases: names.VFIOManager,
		spec:      func(p *v1alpha1.SandboxGPUPolicySpec) v1alpha1.OperandSpec { return p.VFIOManager.OperandSpec },
		customize: vfioRelease},
	names.ReleaseOperand(names.VGPUDeviceManager): {binary: "vgpu-device-manager", privileged: true, releases: names.VGPUDeviceManager,
		spec:      func(p *v1alpha1.SandboxGPUPolicySpec) v1alpha1.OperandSpec { return p.VGPUDeviceManager.OperandSpec },
		customize: vgpuRelease},
	names.KubeVirtDevicePlugin: {binary: "kubevirt-device-plugin",
		spec: func(p *v1alpha1.SandboxGPUPolicySpec) v1alpha1.OperandSpec { return p.SandboxDevicePlugin },
		customize: func(ds *appsv1.DaemonSet, _ *v1alpha1.SandboxGPUPolicySpec, _ Options) {
			devicePlugin(ds)
			// It pauses on the vGPU device manager's files and keeps its
			// permittedHostDevices in its own folder.
			readRun(ds, names.VGPUDeviceManager)
			mount(ds, "run", names.WriterDir(names.KubeVirtDevicePlugin), false)
		}},
	names.KataDevicePlugin: {binary: "kata-device-plugin",
		spec: func(p *v1alpha1.SandboxGPUPolicySpec) v1alpha1.OperandSpec { return p.KataSandboxDevicePlugin },
		customize: func(ds *appsv1.DaemonSet, _ *v1alpha1.SandboxGPUPolicySpec, _ Options) {
			devicePlugin(ds)
			// Its specs go to a folder of its own (KataCDIDir), never one
			// where NVIDIA's spec is (nvidia-ctk writes /etc/cdi,
			// nvidia-cdi-refresh /var/run/cdi): containerd reads it when
			// listed first in cdi_spec_dirs (README). It mounts no other
			// CDI folder.
			c := &ds.Spec.Template.Spec.Containers[0]
			c.Args = append(c.Args, "--cdi-dir="+KataCDIDir)
			mount(ds, "cdi", KataCDIDir, false)
		}},
	names.NRIPlugin: {binary: "nri-gpu-plugin",
		spec: func(p *v1alpha1.SandboxGPUPolicySpec) v1alpha1.OperandSpec { return p.NRIPlugin.OperandSpec },
		customize: func(ds *appsv1.DaemonSet, p *v1alpha1.SandboxGPUPolicySpec, o Options) {
			c := &ds.Spec.Template.Spec.Containers[0]
			hooks := p.NRIPlugin.CDIHooks
			if hooks == "" {
				hooks = v1alpha1.CDIHooksNVIDIA
			}
			c.Args = []string{"--health-addr=" + names.HealthAddr("", names.NRIPluginPort), "--cdi-hooks=" + hooks}
			if o.KataRuntimeHandler != "" {
				// Kata's pods, decided by the handler of the policy's
				// RuntimeClass, not by a name pattern.
				c.Args = append(c.Args, "--kata-runtime-handler="+o.KataRuntimeHandler)
			}
			if o.Namespace != "" {
				// The device plugin's pods ask for every GPU by
				// annotation (DevicePluginGPURequest): only there.
				c.Args = append(c.Args, "--annotation-namespace="+o.Namespace)
			}
			probe(c, "/readyz", names.NRIPluginPort)
			mount(ds, "nri", "/var/run/nri", false)
			mount(ds, "pod-resources", "/var/lib/kubelet/pod-resources", true)      // connect needs no writable mount
			mount(ds, "device-checkpoint", "/var/lib/kubelet/device-plugins", true) // init containers' GPUs
			mount(ds, "cdi", "/var/run/cdi", true)
			mount(ds, "etc-cdi", "/etc/cdi", true)
		}},
	names.NVIDIADevicePlugin: {binary: "k8s-device-plugin",
		spec:      func(p *v1alpha1.SandboxGPUPolicySpec) v1alpha1.OperandSpec { return p.DevicePlugin.OperandSpec },
		image:     devicePluginImage,
		customize: nvidiaDevicePlugin,
	},
	names.Validator: {binary: "sandbox-gpu-validator",
		spec: func(p *v1alpha1.SandboxGPUPolicySpec) v1alpha1.OperandSpec { return p.Validator },
		customize: func(ds *appsv1.DaemonSet, _ *v1alpha1.SandboxGPUPolicySpec, _ Options) {
			c := &ds.Spec.Template.Spec.Containers[0]
			c.Args = []string{"--health-addr=" + names.HealthAddr("", names.ValidatorPort)}
			// Reads the VFIO manager's, the vGPU device manager's and the
			// KubeVirt plugin's files, read-only; it may start first, so the
			// folders are created if missing. Its image's user (nonroot)
			// reads them (0644 files in 0755 folders).
			readRun(ds, names.Writers()...)
			nonRoot := true
			ds.Spec.Template.Spec.SecurityContext.RunAsNonRoot = &nonRoot
			probe(c, "/readyz", names.ValidatorPort)
		}},
	names.VGPUDeviceManager: {binary: "vgpu-device-manager", privileged: true,
		spec:      func(p *v1alpha1.SandboxGPUPolicySpec) v1alpha1.OperandSpec { return p.VGPUDeviceManager.OperandSpec },
		customize: vgpuDeviceManager,
	},
	names.VGPUManager: {binary: "vgpu-manager", privileged: true,
		spec: func(p *v1alpha1.SandboxGPUPolicySpec) v1alpha1.OperandSpec {
			m := p.VGPUManager
			return v1alpha1.OperandSpec{Enabled: m.Enabled, Args: m.Args, Env: m.Env, Resources: m.Resources}
		},
		image: func(p *v1alpha1.SandboxGPUPolicySpec, o Options) string {
			return VGPUManagerImage(p.VGPUManager, o.OSTag)
		},
		pullSecrets: func(p *v1alpha1.SandboxGPUPolicySpec) []string { return p.VGPUManager.ImagePullSecrets },
		customize:   vgpuManager,
	},
	names.GPUDiscovery: {binary: "sandbox-gpu-validator",
		spec:      func(p *v1alpha1.SandboxGPUPolicySpec) v1alpha1.OperandSpec { return p.GPUDiscovery },
		customize: discovery,
	},
}

// Names lists the operands that have builders.
func Names() []string {
	out := make([]string, 0, len(builders))
	for n := range builders {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Enabled reports whether the policy turns the operand on cluster-wide
// (nodes then select it by their deploy labels).
func Enabled(operand string, p *v1alpha1.SandboxGPUPolicySpec) bool {
	b, ok := builders[operand]
	if ok && b.releases != "" {
		return b.spec(p).IsEnabled()
	}
	// Without sandbox workloads no node operand runs but the discovery
	// agent (and the release daemons, above): NVIDIA's container stack
	// serves containers as it would without this product.
	if !ok || !p.SandboxWorkloads.Enabled && operand != names.GPUDiscovery {
		return false
	}
	if operand == names.VGPUManager {
		return p.VGPUManager.IsEnabled()
	}
	return b.spec(p).IsEnabled()
}

// KataCDIDir is where the Kata device plugin's DaemonSet has it write its
// CDI specs: a folder only it writes, which containerd must list first
// (lowest priority) in its cdi_spec_dirs, so that nothing there can shadow
// a device of /etc/cdi or /var/run/cdi, where NVIDIA's spec is.
const KataCDIDir = "/var/lib/sandbox-gpu/kata-cdi"

// DaemonSetName is the name of an operand's DaemonSet.
func DaemonSetName(operand string) string { return "sandbox-gpu-" + operand }

// Build returns the operand's DaemonSet under the policy.
func Build(operand string, p *v1alpha1.SandboxGPUPolicySpec, o Options) (*appsv1.DaemonSet, error) {
	b, ok := builders[operand]
	if !ok {
		return nil, fmt.Errorf("unknown operand %q", operand)
	}
	ds := &appsv1.DaemonSet{}
	if err := yaml.UnmarshalStrict(baseManifest, ds); err != nil {
		return nil, fmt.Errorf("embedded manifest: %w", err)
	}
	labels := map[string]string{names.OperandLabel: operand, "app.kubernetes.io/part-of": "sandbox-gpu"}
	ds.ObjectMeta = metav1.ObjectMeta{Name: DaemonSetName(operand), Namespace: o.Namespace, Labels: labels}
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{names.OperandLabel: operand}}
	ds.Spec.Template.Labels = labels
	ds.Spec.Template.Spec.NodeSelector = map[string]string{names.DeployLabel(operand): "true"}
	ds.Spec.Template.Spec.ServiceAccountName = ServiceAccountName(operand)
	apiAccess(ds, operand)
	if b.releases != "" {
		ds.Spec.Template.Spec.NodeSelector = map[string]string{names.ReleaseLabel(b.releases): "true"}
	}
	c := &ds.Spec.Template.Spec.Containers[0]
	c.Name = operand
	c.Image = fmt.Sprintf("%s/%s:%s", o.Registry, b.binary, o.Version)
	if b.privileged {
		priv := true
		c.SecurityContext.Privileged = &priv
		c.SecurityContext.AllowPrivilegeEscalation = &priv
		c.SecurityContext.Capabilities = nil
	}
	b.customize(ds, p, o)
	s := b.spec(p)
	if s.Image != "" {
		c.Image = s.Image
	}
	if b.image != nil {
		if img := b.image(p, o); img != "" {
			c.Image = img
		}
	}
	var own []string
	if b.pullSecrets != nil {
		own = b.pullSecrets(p)
	}
	pullWith(ds, p, o, own...)
	if b.releases == "" {
		c.Args = append(c.Args, s.Args...)
	}
	c.Env = append(c.Env, s.Env...)
	if s.Resources != nil {
		c.Resources = *s.Resources
	}
	return ds, nil
}

// apiAccess gives the operand its service account token when it talks to
// the API server (APIClients); the base manifest turns it off.
func apiAccess(ds *appsv1.DaemonSet, operand string) {
	on := slices.Contains(APIClients(), operand)
	ds.Spec.Template.Spec.AutomountServiceAccountToken = &on
}

func devicePlugin(ds *appsv1.DaemonSet) {
	c := &ds.Spec.Template.Spec.Containers[0]
	c.Args = append(c.Args, "--health-addr="+names.HealthAddr("", names.DevicePluginPort))
	probe(c, "/readyz", names.DevicePluginPort)
	mount(ds, "device-plugins", "/var/lib/kubelet/device-plugins", false)
	mount(ds, "sys", "/sys", true)
	mount(ds, "dev-vfio", "/dev/vfio", true)
	readRun(ds, names.VFIOManager) // waits for the VFIO manager's ready file
}

// readRun mounts the run folders of writers (names.WriterDir) read-only:
// a reader can plant nothing where a privileged daemon writes.
func readRun(ds *appsv1.DaemonSet, writers ...string) {
	for _, w := range writers {
		mount(ds, "run-"+w, names.WriterDir(w), true)
	}
}

// mount adds a host folder. It is created if missing, even for read-only
// mounts: /etc/cdi or /var/run/cdi may not exist yet on a node, and a pod
// must not stay in ContainerCreating for that.
func mount(ds *appsv1.DaemonSet, name, path string, readOnly bool) {
	t := corev1.HostPathDirectoryOrCreate
	ds.Spec.Template.Spec.Volumes = append(ds.Spec.Template.Spec.Volumes, corev1.Volume{Name: name,
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}})
	c := &ds.Spec.Template.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path, ReadOnly: readOnly})
}

// probe makes the operand's listener (/healthz, /readyz, /metrics on port)
// its readiness probe and names the port "metrics", which the chart's
// PodMonitor scrapes.
func probe(c *corev1.Container, path string, port int32) {
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstrFrom(port)}}}
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: MetricsPortName, ContainerPort: port, Protocol: corev1.ProtocolTCP})
}

// MetricsPortName is the name of every operand's /metrics port.
const MetricsPortName = "metrics"

// Host-network operands (the VFIO manager and its release, which need the
// host's interfaces for their in-use checks) serve /healthz, /readyz and
// /metrics on the node's loopback only, never on every interface of the
// host: the kubelet probes LoopbackHost (it runs in the host's network
// namespace), and the port is named HealthPortName, so the chart's
// PodMonitor, which scrapes the "metrics" ports, does not try the node's
// address where nothing answers.
const (
	LoopbackHost   = names.LoopbackHost
	HealthPortName = "health"
)

// loopbackProbe is probe for a host-network operand listening on
// LoopbackHost:port.
func loopbackProbe(c *corev1.Container, path string, port int32) {
	probe(c, path, port)
	c.ReadinessProbe.HTTPGet.Host = LoopbackHost
	c.Ports[len(c.Ports)-1].Name = HealthPortName
}
