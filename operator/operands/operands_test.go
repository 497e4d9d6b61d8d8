package operands

import (
	"fmt"
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
	assert.Equal(t, []string{"daemon", "--all", "--ready-dir=/run/sandbox-gpu", "--health-addr=:8081", "--nvswitches", "--vendor=10de",
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
	assert.True(t, Enabled(names.NRIPlugin, p), "container nodes work without sandbox workloads")
	assert.False(t, Enabled(names.VFIOManager, p), "no sandbox operands while sandbox workloads are off")
	p.SandboxWorkloads.Enabled = true
	assert.True(t, Enabled(names.VFIOManager, p))
	assert.False(t, Enabled(names.VGPUManager, p), "no image, no vGPU host driver manager")
	on := true
	p.VGPUManager = v1alpha1.VGPUManagerSpec{Enabled: &on, Image: "private.example/vgpu:550"}
	assert.True(t, Enabled(names.VGPUManager, p))
	off := false
	p.NRIPlugin.Enabled = &off
	assert.False(t, Enabled(names.NRIPlugin, p))

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
		want := op == names.Validator || op == names.VGPUDeviceManager || op == names.GPUDiscovery || release
		if a == nil || *a != want {
			t.Errorf("%s: automountServiceAccountToken %v, want %v", op, a, want)
		}
	}
}

// TestMetricsPorts: every operand with a listener probes it and names its
// port "metrics" (what the chart's PodMonitor scrapes); the flag and the
// port agree.
func TestMetricsPorts(t *testing.T) {
	want := map[string]int32{names.VFIOManager: 8081, names.Validator: 8082, names.NRIPlugin: 8083,
		names.KubeVirtDevicePlugin: 8084, names.KataDevicePlugin: 8084, names.GPUDiscovery: DiscoveryPort,
		names.VGPUDeviceManager: VGPUDeviceManagerPort, names.ReleaseOperand(names.VFIOManager): VFIOReleasePort,
		names.ReleaseOperand(names.VGPUDeviceManager): VGPUReleasePort}
	for name, port := range want {
		ds, err := Build(name, &v1alpha1.SandboxGPUPolicySpec{}, opts)
		require.NoError(t, err)
		c := ds.Spec.Template.Spec.Containers[0]
		require.Len(t, c.Ports, 1, name)
		assert.Equal(t, MetricsPortName, c.Ports[0].Name, name)
		assert.Equal(t, port, c.Ports[0].ContainerPort, name)
		assert.Equal(t, port, c.ReadinessProbe.HTTPGet.Port.IntVal, name)
		assert.Contains(t, c.Args, fmt.Sprintf("--health-addr=:%d", port), name)
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
	assert.Equal(t, []string{"daemon", "--release", "--ready-dir=/run/sandbox-gpu", "--health-addr=:8087", "--vendor=10de",
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
