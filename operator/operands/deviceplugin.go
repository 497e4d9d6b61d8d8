package operands

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// DefaultDevicePluginImage is NVIDIA's k8s-device-plugin, which the
// operator runs where containers get GPUs unless the policy names another
// image (spec.devicePlugin.image).
const DefaultDevicePluginImage = "nvcr.io/nvidia/k8s-device-plugin:v0.18.2"

// DevicePluginGPURequest is the NRI plugin's request annotation value the
// device plugin's pods carry: every GPU of the node's host driver (and the
// driver's libraries and device nodes, from the GPU CDI spec), injected by
// the NRI plugin, which honours it in the operand namespace only
// (--annotation-namespace). So NVIDIA's plugin reaches NVML without
// nvidia-container-runtime.
const DevicePluginGPURequest = "all"

// DevicePluginDir is the kubelet's device-plugin folder, where NVIDIA's
// plugin serves its socket and registers.
const DevicePluginDir = "/var/lib/kubelet/device-plugins"

// devicePluginImage is the policy's image, else NVIDIA's.
func devicePluginImage(p *v1alpha1.SandboxGPUPolicySpec, _ Options) string {
	if img := p.DevicePlugin.Image; img != "" {
		return img
	}
	return DefaultDevicePluginImage
}

// nvidiaDevicePlugin shapes NVIDIA's k8s-device-plugin for the NRI plugin:
// device IDs are GPU UUIDs (DEVICE_ID_STRATEGY=uuid), passed only in
// NVIDIA_VISIBLE_DEVICES (DEVICE_LIST_STRATEGY=envvar, no device specs),
// which the NRI plugin turns into CDI devices from the kubelet's
// PodResources and then voids, so no runtime hook injects them again. Its
// own pod asks the NRI plugin for every GPU by annotation; where NVIDIA's
// runtime runs instead, NVIDIA_VISIBLE_DEVICES=all does the same. Without
// NVML (the driver not loaded yet, the NRI plugin not registered yet) it
// exits (FAIL_ON_INIT_ERROR) and is restarted until it finds it. It
// talks only to the kubelet: no token, no RBAC; not privileged.
func nvidiaDevicePlugin(ds *appsv1.DaemonSet, p *v1alpha1.SandboxGPUPolicySpec, _ Options) {
	c := &ds.Spec.Template.Spec.Containers[0]
	c.Command = []string{"nvidia-device-plugin"} // the image's entrypoint, in /usr/bin
	c.Args = nil
	root := p.DevicePlugin.DriverRoot
	if root == "" {
		root = "/"
	}
	c.Env = append(c.Env,
		corev1.EnvVar{Name: "DEVICE_LIST_STRATEGY", Value: "envvar"},
		corev1.EnvVar{Name: "DEVICE_ID_STRATEGY", Value: "uuid"},
		corev1.EnvVar{Name: "PASS_DEVICE_SPECS", Value: "false"},
		corev1.EnvVar{Name: "FAIL_ON_INIT_ERROR", Value: "true"},
		corev1.EnvVar{Name: "NVIDIA_DRIVER_ROOT", Value: root},
		corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"},
	)
	if ds.Spec.Template.Annotations == nil {
		ds.Spec.Template.Annotations = map[string]string{}
	}
	ds.Spec.Template.Annotations[names.RequestAnnotation] = DevicePluginGPURequest
	mount(ds, "device-plugins", DevicePluginDir, false)
}
