package operands

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	vgpucli "github.com/sandbox-gpu/sandbox-gpu/vgpu/cli"
)

// mounts maps each mount path of the operand's container to its host path
// (or "configmap:<name>"), "ro"/"rw" and its propagation.
func mounts(ds *appsv1.DaemonSet) map[string]string {
	vols := map[string]corev1.Volume{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	out := map[string]string{}
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		v := vols[m.Name]
		src := "?"
		switch {
		case v.HostPath != nil:
			src = v.HostPath.Path
		case v.ConfigMap != nil:
			src = "configmap:" + v.ConfigMap.Name
		}
		rw := "rw"
		if m.ReadOnly {
			rw = "ro"
		}
		if m.MountPropagation != nil {
			rw += "," + string(*m.MountPropagation)
		}
		out[m.MountPath] = src + ":" + rw
	}
	return out
}

// The vGPU device manager as deployed on a vm-vgpu node: its config from
// the policy, its Node by token, the host writable, its users found.
func TestVGPUDeviceManagerDaemonSet(t *testing.T) {
	p := &v1alpha1.SandboxGPUPolicySpec{}
	ds, c := build(t, names.VGPUDeviceManager, p, opts)
	spec := ds.Spec.Template.Spec
	assert.Equal(t, []string{"run", "--config=/etc/vgpu-config/config.yaml", "--node-name=$(NODE_NAME)", "--default=default", "--health-addr=:8085"}, c.Args,
		"without a policy default: the built-in config's default entry")
	assert.Equal(t, map[string]string{
		"/sys": "/sys:rw", "/dev": "/dev:rw", // creates and removes vGPUs
		"/run/sandbox-gpu/vgpu-device-manager": "/run/sandbox-gpu/vgpu-device-manager:rw", // its lock, pause and ready files
		"/var/lib/kubelet/pod-resources":       "/var/lib/kubelet/pod-resources:ro",
		"/etc/vgpu-config":                     "configmap:" + DefaultVGPUConfigMap + ":ro", // the operator's ConfigMap
	}, mounts(ds))
	assert.True(t, spec.HostPID, "the in-use scan reads every process's open files")
	assert.False(t, spec.HostNetwork)
	require.NotNil(t, c.SecurityContext.Privileged)
	assert.True(t, *c.SecurityContext.Privileged)
	require.NotNil(t, spec.AutomountServiceAccountToken)
	assert.True(t, *spec.AutomountServiceAccountToken, "it labels its own Node")
	assert.Equal(t, "sandbox-gpu-vgpu-device-manager", spec.ServiceAccountName, "its own account")
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, "ready: the selected config is applied")
	assert.Equal(t, int32(names.VGPUDeviceManagerPort), c.ReadinessProbe.HTTPGet.Port.IntVal)
	assert.Equal(t, []corev1.ContainerPort{{Name: MetricsPortName, ContainerPort: names.VGPUDeviceManagerPort, Protocol: corev1.ProtocolTCP}}, c.Ports)

	p.VGPUDeviceManager.Config = v1alpha1.VGPUConfig{Name: "my-vgpu-config", Default: "A10-4Q"}
	p.VGPUDeviceManager.Args = []string{"--resync=1m"}
	ds, c = build(t, names.VGPUDeviceManager, p, opts)
	assert.Equal(t, []string{"run", "--config=/etc/vgpu-config/config.yaml", "--node-name=$(NODE_NAME)", "--default=A10-4Q", "--health-addr=:8085", "--resync=1m"}, c.Args)
	assert.Equal(t, "configmap:my-vgpu-config:ro", mounts(ds)["/etc/vgpu-config"], "the policy's ConfigMap")
	assert.Equal(t, "my-vgpu-config", VGPUConfigMap(p))
	assert.NotContains(t, mounts(ds), VGPUDriverRoot, "a host-installed driver: no driver root mounted")

	// With the operator's vGPU host driver: NVML from that driver's root,
	// read-only, following a driver container started again.
	on := true
	p.VGPUManager = v1alpha1.VGPUManagerSpec{Enabled: &on, Image: "vgpu-manager:550.90.05"}
	ds, c = build(t, names.VGPUDeviceManager, p, opts)
	assert.Equal(t, []string{"run", "--config=/etc/vgpu-config/config.yaml", "--node-name=$(NODE_NAME)", "--default=A10-4Q", "--health-addr=:8085",
		"--driver-root=/run/nvidia/driver", "--resync=1m"}, c.Args)
	assert.Equal(t, "/run/nvidia/driver:ro,HostToContainer", mounts(ds)["/run/nvidia/driver"])
	assert.Len(t, mounts(ds), 6, "the driver root is the only mount added")
}

// The command's default health address is the operand's port.
func TestVGPUDeviceManagerPortIsTheCommandDefault(t *testing.T) {
	var found bool
	for _, cmd := range vgpucli.Program().Commands {
		if cmd.Name == "run" {
			found = true
			assert.Equal(t, fmt.Sprintf(":%d", names.VGPUDeviceManagerPort), cmd.HealthAddr)
		}
	}
	assert.True(t, found, "vgpu-device-manager has a run command")
}

// NVIDIA's vGPU host driver container, deployed as the GPU Operator does.
func TestVGPUManagerDaemonSet(t *testing.T) {
	on := true
	p := &v1alpha1.SandboxGPUPolicySpec{ImagePullSecrets: []string{"mirror"}}
	p.VGPUManager = v1alpha1.VGPUManagerSpec{Enabled: &on, Repository: "nvcr.io/example-org/vgpu", Image: "vgpu-manager", Version: "550.90.05",
		ImagePullSecrets: []string{"ngc-secret", "mirror"}, Env: []corev1.EnvVar{{Name: "DELAY_BEFORE_VF_CREATION", Value: "30"}}}
	o := opts
	o.ImagePullSecrets, o.OSTag = []string{"regcred"}, "ubuntu22.04"
	ds, c := build(t, names.VGPUManager, p, o)
	spec := ds.Spec.Template.Spec
	assert.Equal(t, "nvcr.io/example-org/vgpu/vgpu-manager:550.90.05-ubuntu22.04", c.Image, "the nodes' OS appended, as the GPU Operator does")
	assert.Equal(t, []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}, {Name: "ngc-secret"}}, spec.ImagePullSecrets,
		"the operator's, the policy's and its own, each once")
	assert.Equal(t, []string{"nvidia-driver"}, c.Command)
	assert.Equal(t, []string{"init"}, c.Args)
	assert.Contains(t, c.Env, corev1.EnvVar{Name: "DELAY_BEFORE_VF_CREATION", Value: "30"})
	assert.True(t, spec.HostPID && spec.HostIPC)
	require.NotNil(t, c.SecurityContext.Privileged)
	assert.True(t, *c.SecurityContext.Privileged)
	assert.False(t, *c.SecurityContext.ReadOnlyRootFilesystem, "the installer writes the container's root")
	assert.False(t, *spec.AutomountServiceAccountToken, "no API access")
	assert.Equal(t, map[string]string{
		"/run/nvidia":          "/run/nvidia:rw,Bidirectional", // the driver root, /run/nvidia/driver, shared with the host
		"/host-etc/os-release": "/etc/os-release:ro",
		"/dev/vfio":            "/dev/vfio:rw",
		"/sys/fs/cgroup":       "/sys/fs/cgroup:rw",
		"/var/log":             "/var/log:rw",
		"/dev/log":             "/dev/log:rw",
		"/sys/module/firmware_class/parameters/path": "/sys/module/firmware_class/parameters/path:rw",
		"/lib/firmware": "/run/nvidia/driver/lib/firmware:rw",
	}, mounts(ds))
	require.NotNil(t, c.StartupProbe)
	require.NotNil(t, c.ReadinessProbe)
	startup := strings.Join(c.StartupProbe.Exec.Command, " ")
	for _, want := range []string{"nvidia_vgpu_vfio", "pgrep nvidia-vgpu-mgr", "/run/nvidia/driver", "sriov_numvfs"} {
		assert.Contains(t, startup, want)
	}
	assert.GreaterOrEqual(t, c.StartupProbe.FailureThreshold*c.StartupProbe.PeriodSeconds, int32(15*60), "minutes to install the driver")
	assert.Contains(t, strings.Join(c.ReadinessProbe.Exec.Command, " "), "pgrep nvidia-vgpu-mgr")
	assert.Empty(t, c.Ports, "NVIDIA's image serves nothing")
}

func TestVGPUManagerImage(t *testing.T) {
	for _, tc := range []struct {
		repository, image, version, osTag, want string
		digest                                  string
	}{
		{"nvcr.io/org/vgpu", "vgpu-manager", "550.90.05", "ubuntu22.04", "nvcr.io/org/vgpu/vgpu-manager:550.90.05-ubuntu22.04", ""},
		{"nvcr.io/org/vgpu/", "vgpu-manager", "550.90.05", "", "nvcr.io/org/vgpu/vgpu-manager:550.90.05", ""},                           // OS unknown: as given
		{"nvcr.io/org/vgpu", "vgpu-manager", "550.90.05-rhel9.4", "ubuntu22.04", "nvcr.io/org/vgpu/vgpu-manager:550.90.05-rhel9.4", ""}, // a whole tag
		{"nvcr.io/org/vgpu", "vgpu-manager", "sha256:0123abcd", "ubuntu22.04", "nvcr.io/org/vgpu/vgpu-manager@sha256:0123abcd", ""},
		{"", "registry.example/vgpu-manager:17.4-ubuntu24.04", "", "ubuntu22.04", "registry.example/vgpu-manager:17.4-ubuntu24.04", ""}, // a whole reference
		{"nvcr.io/org/vgpu", "", "550.90.05", "ubuntu22.04", "", ""},
		// digest wins over version, and no OS is appended to it
		{"nvcr.io/org/vgpu", "vgpu-manager", "550.90.05", "ubuntu22.04", "nvcr.io/org/vgpu/vgpu-manager@sha256:" + strings.Repeat("ab", 32), "sha256:" + strings.Repeat("ab", 32)},
		{"", "registry.example/vgpu-manager", "", "ubuntu22.04", "registry.example/vgpu-manager@sha256:" + strings.Repeat("cd", 32), "sha256:" + strings.Repeat("cd", 32)},
	} {
		m := v1alpha1.VGPUManagerSpec{Repository: tc.repository, Image: tc.image, Version: tc.version, Digest: tc.digest}
		assert.Equal(t, tc.want, VGPUManagerImage(m, tc.osTag), "%+v", tc)
	}
}

func TestVGPUManagerNeedsAnImage(t *testing.T) {
	on := true
	p := &v1alpha1.SandboxGPUPolicySpec{}
	p.SandboxWorkloads.Enabled = true
	p.VGPUManager = v1alpha1.VGPUManagerSpec{Enabled: &on, Repository: "nvcr.io/org/vgpu", Version: "550.90.05"}
	assert.False(t, Enabled(names.VGPUManager, p), "no image: not deployed")
	p.VGPUManager.Image = "vgpu-manager"
	assert.True(t, Enabled(names.VGPUManager, p))
	p.SandboxWorkloads.Enabled = false
	assert.False(t, Enabled(names.VGPUManager, p), "sandbox workloads off")
}
