package operands

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

func envOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			out[e.Name] = e.Value
		}
	}
	return out
}

// NVIDIA's k8s-device-plugin, set up for the NRI plugin: NVIDIA's image by
// default, UUIDs in NVIDIA_VISIBLE_DEVICES only, fail (and be restarted)
// until NVML is there, the driver root from the policy; the kubelet's
// device-plugin folder; its pod asks the NRI plugin for every GPU by
// annotation; its own account without a token; not privileged, as the
// other unprivileged operands.
func TestNVIDIADevicePluginDaemonSet(t *testing.T) {
	p := &v1alpha1.SandboxGPUPolicySpec{}
	ds, err := Build(names.NVIDIADevicePlugin, p, opts)
	require.NoError(t, err)
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	assert.Equal(t, "sandbox-gpu-nvidia-device-plugin", ds.Name)
	assert.Equal(t, "nvcr.io/nvidia/k8s-device-plugin:v0.18.2", c.Image, "NVIDIA's image, not ours")
	assert.Equal(t, []string{"nvidia-device-plugin"}, c.Command)
	assert.Empty(t, c.Args)
	env := envOf(c)
	for k, v := range map[string]string{"DEVICE_LIST_STRATEGY": "envvar", "DEVICE_ID_STRATEGY": "uuid", "PASS_DEVICE_SPECS": "false",
		"FAIL_ON_INIT_ERROR": "true", "NVIDIA_DRIVER_ROOT": "/", "NVIDIA_VISIBLE_DEVICES": "all"} {
		assert.Equal(t, v, env[k], k)
	}
	assert.Equal(t, map[string]string{names.RequestAnnotation: "all"}, ds.Spec.Template.Annotations,
		"the NRI plugin injects the driver and every host-driver GPU")
	assert.Equal(t, map[string]string{names.DeployLabel(names.NVIDIADevicePlugin): "true"}, spec.NodeSelector)
	var mounts []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, m.MountPath)
		assert.False(t, m.ReadOnly, "it serves its socket there")
	}
	assert.Equal(t, []string{"/var/lib/kubelet/device-plugins"}, mounts)
	assert.Equal(t, "sandbox-gpu-nvidia-device-plugin", spec.ServiceAccountName)
	require.NotNil(t, spec.AutomountServiceAccountToken)
	assert.False(t, *spec.AutomountServiceAccountToken, "no token: it talks to the kubelet only")
	assert.False(t, slices.Contains(APIClients(), names.NVIDIADevicePlugin))
	assert.Nil(t, c.SecurityContext.Privileged)
	assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	assert.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	assert.False(t, spec.HostPID || spec.HostNetwork)
	assert.Equal(t, "system-node-critical", spec.PriorityClassName)

	// The policy: image, driver root, env, args and resources.
	p.DevicePlugin.Image = "registry.example/nvidia/k8s-device-plugin:v0.17.0"
	p.DevicePlugin.DriverRoot = "/run/nvidia/driver"
	p.DevicePlugin.Args = []string{"--mig-strategy=single"}
	p.DevicePlugin.Env = []corev1.EnvVar{{Name: "MIG_STRATEGY", Value: "single"}}
	p.DevicePlugin.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}}
	ds, err = Build(names.NVIDIADevicePlugin, p, opts)
	require.NoError(t, err)
	c = ds.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "registry.example/nvidia/k8s-device-plugin:v0.17.0", c.Image)
	assert.Equal(t, "/run/nvidia/driver", envOf(c)["NVIDIA_DRIVER_ROOT"])
	assert.Equal(t, "single", envOf(c)["MIG_STRATEGY"])
	assert.Equal(t, []string{"--mig-strategy=single"}, c.Args)
	assert.Equal(t, "128Mi", c.Resources.Limits.Memory().String())
}

// The NRI plugin honours the request annotation in the operand namespace
// only (the device plugin's pods), and the VFIO manager follows its Node's
// split with the node's name and its token.
func TestNRIAndVFIOManagerForTheSplit(t *testing.T) {
	p := &v1alpha1.SandboxGPUPolicySpec{}
	ds, err := Build(names.NRIPlugin, p, opts)
	require.NoError(t, err)
	var ns []string
	for _, a := range ds.Spec.Template.Spec.Containers[0].Args {
		if len(a) > len("--annotation-namespace") && a[:len("--annotation-namespace")] == "--annotation-namespace" {
			ns = append(ns, a)
		}
	}
	assert.Equal(t, []string{"--annotation-namespace=sandbox-gpu"}, ns)

	ds, err = Build(names.VFIOManager, p, opts)
	require.NoError(t, err)
	c := ds.Spec.Template.Spec.Containers[0]
	assert.Contains(t, c.Args, "--vm-gpus-from-node")
	var nodeName *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "NODE_NAME" {
			nodeName = &c.Env[i]
		}
	}
	require.NotNil(t, nodeName, "NODE_NAME from the downward API")
	assert.Equal(t, "spec.nodeName", nodeName.ValueFrom.FieldRef.FieldPath)
	assert.True(t, *ds.Spec.Template.Spec.AutomountServiceAccountToken, "it reads and patches its Node")
	ds, err = Build(names.ReleaseOperand(names.VFIOManager), p, opts)
	require.NoError(t, err)
	assert.NotContains(t, ds.Spec.Template.Spec.Containers[0].Args, "--vm-gpus-from-node", "a release returns every GPU")
}
