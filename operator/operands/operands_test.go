package operands

import (
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

var opts = Options{Namespace: "sandbox-gpu", Registry: "ghcr.io/sandbox-gpu", Version: "v0.1.0"}

func TestEveryOperandBuilds(t *testing.T) {
	p := &v1alpha1.SandboxGPUPolicySpec{}
	privileged := map[string]bool{names.VFIOManager: true, names.VGPUDeviceManager: true, names.VGPUManager: true,
		names.ReleaseOperand(names.VFIOManager): true, names.ReleaseOperand(names.VGPUDeviceManager): true}
	assert.ElementsMatch(t, names.Operands(), Names(), "a builder for every operand")
	for _, name := range Names() {
		ds, err := Build(name, p, opts)
		require.NoError(t, err, name)
		assert.Equal(t, "sandbox-gpu-"+name, ds.Name)
		assert.Equal(t, "sandbox-gpu", ds.Namespace)
		wantSelector := map[string]string{names.DeployLabel(name): "true"}
		if name == names.GPUDiscovery {
			wantSelector = map[string]string{"kubernetes.io/os": "linux"} // every Linux node: it finds the GPU nodes
		}
		if of, ok := IsRelease(name); ok {
			wantSelector = map[string]string{names.ReleaseLabel(of): "true"} // nodes leaving the config
		}
		assert.Equal(t, wantSelector, ds.Spec.Template.Spec.NodeSelector, name)
		assert.Equal(t, "system-node-critical", ds.Spec.Template.Spec.PriorityClassName, name)
		assert.Equal(t, ds.Spec.Selector.MatchLabels[names.OperandLabel], ds.Spec.Template.Labels[names.OperandLabel])
		c := ds.Spec.Template.Spec.Containers[0]
		isPriv := c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
		assert.Equal(t, privileged[name], isPriv, "%s: privileged only where sysfs writes need it", name)
		if !privileged[name] {
			assert.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop, name)
			assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem, name)
			assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation, name)
		}
	}
}

func TestPolicyShapesTheOperand(t *testing.T) {
	p := &v1alpha1.SandboxGPUPolicySpec{}
	p.VFIOManager.NVSwitches = true
	p.VFIOManager.Vendor = "10de"
	p.VFIOManager.Image = "registry.example/vfio-manager:dev"
	p.VFIOManager.Args = []string{"-v"}
	p.VFIOManager.Env = []corev1.EnvVar{{Name: "X", Value: "1"}}
	ds, err := Build(names.VFIOManager, p, opts)
	require.NoError(t, err)
	c := ds.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "registry.example/vfio-manager:dev", c.Image)
	assert.Equal(t, []string{"daemon", "--all", "--ready-dir=/run/sandbox-gpu/vfio-manager", "--health-addr=127.0.0.1:8081", "--vm-gpus-from-node", "--nvswitches", "--vendor=10de",
		"--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock", "-v"}, c.Args)
	assert.Contains(t, c.Env, corev1.EnvVar{Name: "X", Value: "1"})
	assert.True(t, ds.Spec.Template.Spec.HostPID, "in-use checks need the host's processes")
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)

	ds, err = Build(names.KubeVirtDevicePlugin, p, opts)
	require.NoError(t, err)
	assert.Equal(t, "ghcr.io/sandbox-gpu/kubevirt-device-plugin:v0.1.0", ds.Spec.Template.Spec.Containers[0].Image)
}

func TestEnabled(t *testing.T) {
	p := &v1alpha1.SandboxGPUPolicySpec{}
	for _, op := range Names() {
		_, release := IsRelease(op)
		assert.Equal(t, op == names.GPUDiscovery || release, Enabled(op, p),
			"%s: sandbox workloads off: only the discovery agent and the releases (NVIDIA's container stack serves containers)", op)
	}
	p.SandboxWorkloads.Enabled = true
	assert.True(t, Enabled(names.VFIOManager, p))
	assert.True(t, Enabled(names.NRIPlugin, p))
	assert.True(t, Enabled(names.NVIDIADevicePlugin, p), "NVIDIA's device plugin is on by default")
	assert.False(t, Enabled(names.VGPUManager, p), "no image, no vGPU host driver manager")
	on := true
	p.VGPUManager = v1alpha1.VGPUManagerSpec{Enabled: &on, Image: "private.example/vgpu:550"}
	assert.True(t, Enabled(names.VGPUManager, p))
	off := false
	p.NRIPlugin.Enabled = &off
	assert.False(t, Enabled(names.NRIPlugin, p))
	p.DevicePlugin.Enabled = &off
	assert.False(t, Enabled(names.NVIDIADevicePlugin, p), "off where the GPU Operator's container stack runs it")

	p = &v1alpha1.SandboxGPUPolicySpec{}
	assert.True(t, Enabled(names.GPUDiscovery, p), "GPU discovery is on by default, sandbox workloads or not")
	p.GPUDiscovery.Enabled = &off
	assert.False(t, Enabled(names.GPUDiscovery, p), "the policy's knob turns it off")
	_, err := Build("nope", p, opts)
	assert.Error(t, err)
}

// Only operands that talk to the API server carry a token: a node daemon's
// token may change its own Node (within the admission policy).
func TestOnlyAPIClientsGetAToken(t *testing.T) {
	p := &v1alpha1.SandboxGPUPolicySpec{}
	for _, op := range Names() {
		ds, err := Build(op, p, Options{Namespace: "ns", Registry: "r", Version: "v"})
		if err != nil {
			t.Fatal(err)
		}
		a := ds.Spec.Template.Spec.AutomountServiceAccountToken
		_, release := IsRelease(op) // release daemons publish their report on their Node
		want := op == names.Validator || op == names.VGPUDeviceManager || op == names.GPUDiscovery || op == names.VFIOManager || release
		if a == nil || *a != want {
			t.Errorf("%s: automountServiceAccountToken %v, want %v", op, a, want)
		}
	}
}

// One service account per operand: no two operands share an identity, so
// a token grants only its own operand's RBAC.
func TestEveryOperandHasItsOwnServiceAccount(t *testing.T) {
	p := &v1alpha1.SandboxGPUPolicySpec{}
	seen := map[string]string{}
	for _, op := range Names() {
		ds, err := Build(op, p, opts)
		require.NoError(t, err, op)
		sa := ds.Spec.Template.Spec.ServiceAccountName
		assert.Equal(t, ServiceAccountName(op), sa, op)
		if other, dup := seen[sa]; dup {
			t.Errorf("%s and %s share the service account %s", op, other, sa)
		}
		seen[sa] = op
	}
	assert.Equal(t, "sandbox-gpu-vfio-manager", ServiceAccountName(names.VFIOManager))
	assert.Equal(t, "sandbox-gpu-vfio-manager-release", ServiceAccountName(names.ReleaseOperand(names.VFIOManager)))
	assert.Equal(t, DiscoveryServiceAccount, ServiceAccountName(names.GPUDiscovery))
	assert.Len(t, ServiceAccounts(), len(Names()))
}

// The Kata device plugin writes its CDI specs to a folder of its own and
// mounts no other CDI folder: never /etc/cdi or /var/run/cdi, where
// NVIDIA's spec is (nvidia-ctk cdi generate, nvidia-cdi-refresh). The
// binary's own default stays /var/run/cdi.
func TestKataPluginWritesOnlyItsOwnCDIFolder(t *testing.T) {
	ds, err := Build(names.KataDevicePlugin, &v1alpha1.SandboxGPUPolicySpec{}, opts)
	require.NoError(t, err)
	c := ds.Spec.Template.Spec.Containers[0]
	assert.Contains(t, c.Args, "--cdi-dir=/var/lib/sandbox-gpu/kata-cdi")
	var cdiMounts []string
	for _, m := range c.VolumeMounts {
		if strings.Contains(m.MountPath, "cdi") {
			cdiMounts = append(cdiMounts, m.MountPath)
			assert.False(t, m.ReadOnly, "it writes its specs there")
		}
	}
	assert.Equal(t, []string{KataCDIDir}, cdiMounts)
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			assert.NotContains(t, v.HostPath.Path, "/run/cdi", "no host /var/run/cdi (or /run/cdi) volume")
			assert.NotEqual(t, "/etc/cdi", path.Clean(v.HostPath.Path), "no host /etc/cdi volume")
			assert.NotEqual(t, "/etc", path.Clean(v.HostPath.Path))
		}
	}
	// The NRI plugin still reads both folders, read-only.
	ds, err = Build(names.NRIPlugin, &v1alpha1.SandboxGPUPolicySpec{}, opts)
	require.NoError(t, err)
	ro := map[string]bool{}
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		ro[m.MountPath] = m.ReadOnly
	}
	assert.Equal(t, map[string]bool{"/etc/cdi": true, "/var/run/cdi": true}, map[string]bool{"/etc/cdi": ro["/etc/cdi"], "/var/run/cdi": ro["/var/run/cdi"]})
}

// spec.nriPlugin.cdiHooks reaches the NRI plugin as --cdi-hooks, nvidia
// when unset (the CRD's default too).
// The NRI plugin is told the handler of Kata's RuntimeClass when the
// operator found it, and keeps its default pattern otherwise.
func TestNRIKataRuntimeHandler(t *testing.T) {
	o := opts
	o.KataRuntimeHandler = "kata-nvidia"
	ds, err := Build(names.NRIPlugin, &v1alpha1.SandboxGPUPolicySpec{}, o)
	require.NoError(t, err)
	assert.Contains(t, ds.Spec.Template.Spec.Containers[0].Args, "--kata-runtime-handler=kata-nvidia")
	ds, err = Build(names.NRIPlugin, &v1alpha1.SandboxGPUPolicySpec{}, opts)
	require.NoError(t, err)
	for _, a := range ds.Spec.Template.Spec.Containers[0].Args {
		assert.NotContains(t, a, "--kata-runtime-handler")
	}
}

func TestNRICDIHooksKnob(t *testing.T) {
	for hooks, want := range map[string]string{"": "nvidia", "nvidia": "nvidia", "none": "none", "any": "any"} {
		p := &v1alpha1.SandboxGPUPolicySpec{}
		p.NRIPlugin.CDIHooks = hooks
		ds, err := Build(names.NRIPlugin, p, opts)
		require.NoError(t, err)
		var got []string
		for _, a := range ds.Spec.Template.Spec.Containers[0].Args {
			if strings.HasPrefix(a, "--cdi-hooks") {
				got = append(got, a)
			}
		}
		assert.Equal(t, []string{"--cdi-hooks=" + want}, got, "cdiHooks %q", hooks)
	}
}

// A vendor other than NVIDIA comes with its PCI class filter (the CRD
// requires one): each class reaches the VFIO manager and its release as
// --class, so neither takes the vendor's other functions.
func TestVFIOManagerClassFilter(t *testing.T) {
	p := &v1alpha1.SandboxGPUPolicySpec{}
	p.VFIOManager.Vendor = "1002"
	p.VFIOManager.AllowOtherVendors = true
	p.VFIOManager.PCIClasses = []string{"0300", "0302"}
	for _, op := range []string{names.VFIOManager, names.ReleaseOperand(names.VFIOManager)} {
		ds, err := Build(op, p, opts)
		require.NoError(t, err)
		args := ds.Spec.Template.Spec.Containers[0].Args
		assert.Subset(t, args, []string{"--vendor=1002", "--class=0300", "--class=0302"}, op)
	}
	ds, err := Build(names.VFIOManager, &v1alpha1.SandboxGPUPolicySpec{}, opts)
	require.NoError(t, err)
	for _, a := range ds.Spec.Template.Spec.Containers[0].Args {
		assert.NotContains(t, a, "--class", "no filter unless the policy gives one")
	}
}

// TestMetricsPorts: every operand with a listener probes it and names its
// port "metrics" (what the chart's PodMonitor scrapes); the flag and the
// port agree. The host-network ones (the VFIO manager and its release)
// listen on the node's loopback only: the flag names 127.0.0.1, the
// kubelet probes 127.0.0.1, and the port is "health", not scraped.
func TestMetricsPorts(t *testing.T) {
	want := map[string]int32{names.VFIOManager: names.VFIOManagerPort, names.Validator: names.ValidatorPort, names.NRIPlugin: names.NRIPluginPort,
		names.KubeVirtDevicePlugin: names.DevicePluginPort, names.KataDevicePlugin: names.DevicePluginPort, names.GPUDiscovery: names.GPUDiscoveryPort,
		names.VGPUDeviceManager: names.VGPUDeviceManagerPort, names.ReleaseOperand(names.VFIOManager): names.VFIOReleasePort,
		names.ReleaseOperand(names.VGPUDeviceManager): names.VGPUDeviceManagerPort}
	loopback := 0
	for name, port := range want {
		ds, err := Build(name, &v1alpha1.SandboxGPUPolicySpec{}, opts)
		require.NoError(t, err)
		c := ds.Spec.Template.Spec.Containers[0]
		require.Len(t, c.Ports, 1, name)
		assert.Equal(t, port, c.Ports[0].ContainerPort, name)
		assert.Equal(t, port, c.ReadinessProbe.HTTPGet.Port.IntVal, name)
		if ds.Spec.Template.Spec.HostNetwork {
			loopback++
			assert.Equal(t, HealthPortName, c.Ports[0].Name, name)
			assert.Equal(t, "127.0.0.1", c.ReadinessProbe.HTTPGet.Host, name)
			assert.Contains(t, c.Args, fmt.Sprintf("--health-addr=127.0.0.1:%d", port), name)
			continue
		}
		assert.Equal(t, MetricsPortName, c.Ports[0].Name, name)
		assert.Empty(t, c.ReadinessProbe.HTTPGet.Host, name)
		assert.Contains(t, c.Args, fmt.Sprintf("--health-addr=:%d", port), name)
	}
	assert.Equal(t, 2, loopback, "the VFIO manager and its release run in the host network")
	// No operand outside the table runs in the host network.
	for _, name := range Names() {
		ds, err := Build(name, &v1alpha1.SandboxGPUPolicySpec{}, opts)
		require.NoError(t, err)
		if _, listed := want[name]; !listed {
			assert.False(t, ds.Spec.Template.Spec.HostNetwork, name)
		}
	}
}

// TestReleaseDaemonSets: each release DaemonSet runs its operand's binary
// in release mode on nodes with the release label, whether sandbox
// workloads are on or not (turning them off moves nodes out of VM
// configs), with the operand's image and env but not its selection args;
// both read the kubelet's PodResources read-only. The VFIO manager reads
// it too, and is told where the socket is (a missing socket then stops it
// instead of passing allocations by).
func TestReleaseDaemonSets(t *testing.T) {
	p := &v1alpha1.SandboxGPUPolicySpec{}
	p.VFIOManager.Image = "registry.example/vfio-manager:dev"
	p.VFIOManager.Args = []string{"--device=0000:3b:00.0"}
	p.VFIOManager.Env = []corev1.EnvVar{{Name: "X", Value: "1"}}
	p.VFIOManager.Vendor = "10de"
	vfioRel, vgpuRel := names.ReleaseOperand(names.VFIOManager), names.ReleaseOperand(names.VGPUDeviceManager)
	assert.True(t, Enabled(vfioRel, p), "sandbox workloads off: a release still runs")
	assert.True(t, Enabled(vgpuRel, p))
	off := false
	p.VGPUDeviceManager.Enabled = &off
	assert.False(t, Enabled(vgpuRel, p), "an operand turned off has no release")

	ds, err := Build(vfioRel, p, opts)
	require.NoError(t, err)
	c := ds.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "sandbox-gpu-vfio-manager-release", ds.Name)
	assert.Equal(t, "registry.example/vfio-manager:dev", c.Image)
	assert.Equal(t, []string{"daemon", "--release", "--ready-dir=/run/sandbox-gpu/vfio-manager", "--health-addr=127.0.0.1:8087", "--vendor=10de",
		"--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock"}, c.Args)
	assert.Contains(t, c.Env, corev1.EnvVar{Name: "X", Value: "1"})
	assert.True(t, ds.Spec.Template.Spec.HostPID)
	assert.True(t, ds.Spec.Template.Spec.HostNetwork)
	assert.Equal(t, names.ReleaseOperand(names.VFIOManager), ds.Spec.Template.Labels[names.OperandLabel])

	ds, err = Build(vgpuRel, p, opts)
	require.NoError(t, err)
	c = ds.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "ghcr.io/sandbox-gpu/vgpu-device-manager:v0.1.0", c.Image)
	assert.Equal(t, []string{"run", "--release", "--node-name=$(NODE_NAME)", "--health-addr=:8085"}, c.Args)
	for _, v := range ds.Spec.Template.Spec.Volumes {
		assert.Nil(t, v.ConfigMap, "a release reads no vGPU config")
	}

	for _, op := range []string{names.VFIOManager, vfioRel, vgpuRel} {
		ds, err := Build(op, p, opts)
		require.NoError(t, err)
		var found bool
		for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
			if m.MountPath == PodResourcesDir {
				found = true
				assert.True(t, m.ReadOnly, "%s: PodResources read-only", op)
			}
		}
		assert.True(t, found, "%s mounts the kubelet's PodResources", op)
	}
}
