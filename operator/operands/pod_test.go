package operands

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

func build(t *testing.T, operand string, p *v1alpha1.SandboxGPUPolicySpec, o Options) (*appsv1.DaemonSet, *corev1.Container) {
	t.Helper()
	ds, err := Build(operand, p, o)
	require.NoError(t, err, operand)
	return ds, &ds.Spec.Template.Spec.Containers[0]
}

// The operator's registry, version, pull secrets and pull policy reach
// every operand; the policy adds secrets, overrides the policy and each
// operand's image.
func TestImagesPullSecretsAndPolicy(t *testing.T) {
	o := opts
	o.Registry, o.Version = "registry.example:5000/mirror/sandbox-gpu", "v9.9.9"
	o.ImagePullSecrets = []string{"regcred", "mirror"}
	o.ImagePullPolicy = corev1.PullAlways
	binaries := map[string]string{names.VFIOManager: "vfio-manager", names.KubeVirtDevicePlugin: "kubevirt-device-plugin",
		names.KataDevicePlugin: "kata-device-plugin", names.NRIPlugin: "nri-gpu-plugin", names.Validator: "sandbox-gpu-validator",
		names.VGPUDeviceManager: "vgpu-device-manager", names.VGPUManager: "vgpu-manager", names.GPUDiscovery: "sandbox-gpu-validator",
		names.ReleaseOperand(names.VFIOManager): "vfio-manager", names.ReleaseOperand(names.VGPUDeviceManager): "vgpu-device-manager"}
	for _, op := range Names() {
		ds, c := build(t, op, &v1alpha1.SandboxGPUPolicySpec{}, o)
		if op == names.NVIDIADevicePlugin {
			assert.Equal(t, DefaultDevicePluginImage, c.Image, "NVIDIA's own image, wherever ours come from")
		} else {
			assert.Equal(t, "registry.example:5000/mirror/sandbox-gpu/"+binaries[op]+":v9.9.9", c.Image, op)
		}
		assert.Equal(t, corev1.PullAlways, c.ImagePullPolicy, op)
		assert.Equal(t, []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}}, ds.Spec.Template.Spec.ImagePullSecrets, op)
	}

	p := &v1alpha1.SandboxGPUPolicySpec{ImagePullSecrets: []string{"mirror", "nvcr"}, ImagePullPolicy: corev1.PullIfNotPresent}
	p.VGPUManager.Image = "nvcr.io/private/vgpu-manager:550"
	ds, c := build(t, names.VGPUManager, p, o)
	assert.Equal(t, "nvcr.io/private/vgpu-manager:550", c.Image)
	assert.Equal(t, corev1.PullIfNotPresent, c.ImagePullPolicy, "the policy's pull policy wins")
	assert.Equal(t, []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}, {Name: "nvcr"}}, ds.Spec.Template.Spec.ImagePullSecrets,
		"the policy's secrets are added, each once")

	ds, c = build(t, names.NRIPlugin, &v1alpha1.SandboxGPUPolicySpec{}, opts)
	assert.Empty(t, c.ImagePullPolicy, "no pull policy given: the cluster's default")
	assert.Nil(t, ds.Spec.Template.Spec.ImagePullSecrets)
}

func TestGPUDiscoveryDaemonSet(t *testing.T) {
	p := &v1alpha1.SandboxGPUPolicySpec{}
	p.GPUDiscovery.Args = []string{"--resync=5m"}
	ds, c := build(t, names.GPUDiscovery, p, opts)
	spec := ds.Spec.Template.Spec
	assert.Equal(t, "sandbox-gpu-gpu-discovery", ds.Name)
	assert.Equal(t, []string{"discover", "--health-addr=:8086", "--resync=5m"}, c.Args)
	assert.Equal(t, DiscoveryServiceAccount, spec.ServiceAccountName)
	assert.Equal(t, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, spec.Tolerations, "every taint tolerated")
	require.NotNil(t, spec.SecurityContext.RunAsNonRoot)
	assert.True(t, *spec.SecurityContext.RunAsNonRoot)
	assert.Nil(t, c.SecurityContext.Privileged)
	assert.False(t, spec.HostPID || spec.HostNetwork)
	require.NotNil(t, spec.AutomountServiceAccountToken)
	assert.True(t, *spec.AutomountServiceAccountToken, "it labels its Node")
	require.Len(t, c.VolumeMounts, 1)
	assert.Equal(t, corev1.VolumeMount{Name: "sys", MountPath: "/sys", ReadOnly: true}, c.VolumeMounts[0], "sysfs read-only")
	assert.Equal(t, "/sys", spec.Volumes[0].HostPath.Path)
}

// hostReaders are the operands that read the host through the root flags.
func hostReaders() []string {
	return []string{names.VFIOManager, names.KubeVirtDevicePlugin, names.KataDevicePlugin, names.VGPUDeviceManager, names.GPUDiscovery,
		names.ReleaseOperand(names.VFIOManager), names.ReleaseOperand(names.VGPUDeviceManager)}
}

func hostPaths(ds *appsv1.DaemonSet) map[string]string {
	out := map[string]string{}
	c := ds.Spec.Template.Spec.Containers[0]
	for _, v := range ds.Spec.Template.Spec.Volumes {
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name && v.HostPath != nil {
				rw := "rw"
				if m.ReadOnly {
					rw = "ro"
				}
				out[v.HostPath.Path] = m.MountPath + ":" + rw
			}
		}
	}
	return out
}

// The node's own /sys and /dev, the binaries' default roots: no operand
// can be pointed elsewhere (the cluster suite rewrites its operand pods in
// admission, never the DaemonSets).
func TestProductionHostMounts(t *testing.T) {
	want := map[string]map[string]string{
		names.VFIOManager:          {"/sys": "/sys:rw", "/dev": "/dev:rw", "/lib/modules": "/lib/modules:ro"}, // --modules-root: it loads vfio-pci
		names.KubeVirtDevicePlugin: {"/sys": "/sys:ro", "/dev/vfio": "/dev/vfio:ro"},
		names.KataDevicePlugin:     {"/sys": "/sys:ro", "/dev/vfio": "/dev/vfio:ro"},
		names.VGPUDeviceManager:    {"/sys": "/sys:rw", "/dev": "/dev:rw"},
		names.GPUDiscovery:         {"/sys": "/sys:ro"},
	}
	for _, op := range hostReaders() {
		ds, c := build(t, op, &v1alpha1.SandboxGPUPolicySpec{}, opts)
		got := hostPaths(ds)
		for host, mount := range want[op] {
			assert.Equal(t, mount, got[host], "%s: %s", op, host)
		}
		for _, a := range c.Args {
			assert.False(t, strings.HasPrefix(a, "--sysfs-root") || strings.HasPrefix(a, "--dev-root") || strings.HasPrefix(a, "--proc-root") ||
				strings.HasPrefix(a, "--node-dev-root"), "%s: default roots, got %s", op, a)
		}
	}
}
