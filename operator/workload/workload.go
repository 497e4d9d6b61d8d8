// Package workload decides, per GPU node, which workload config applies and
// which operands must run there. It is pure: the controllers feed it
// objects and write what it returns.
package workload

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// nfdGPULabels are the Node Feature Discovery labels of NVIDIA PCI devices.
var nfdGPULabels = []string{
	"feature.node.kubernetes.io/pci-10de.present",
	"feature.node.kubernetes.io/pci-0302_10de.present",
	"feature.node.kubernetes.io/pci-0300_10de.present",
}

// IsGPUNode reports whether NFD or the node agent says the node has an
// NVIDIA GPU. Other nodes are never touched.
func IsGPUNode(n *corev1.Node) bool {
	if n.Labels[names.GPUPresentLabel] == "true" {
		return true
	}
	for _, l := range nfdGPULabels {
		if n.Labels[l] == "true" {
			return true
		}
	}
	return false
}

// Config returns the workload config for a node and, when its label is
// set but invalid, a sentence naming the node and the value. Without
// sandbox workloads every node runs containers.
func Config(n *corev1.Node, p *v1alpha1.SandboxGPUPolicy) (config, invalid string) {
	sw := p.Spec.SandboxWorkloads
	if !sw.Enabled {
		return v1alpha1.WorkloadContainer, ""
	}
	def := sw.DefaultWorkload
	if def == "" {
		def = v1alpha1.WorkloadContainer
	}
	v, ok := n.Labels[names.WorkloadConfigLabel]
	if !ok {
		return def, ""
	}
	switch v {
	case v1alpha1.WorkloadContainer, v1alpha1.WorkloadVMPassthrough, v1alpha1.WorkloadVMVGPU:
		return v, ""
	}
	return def, fmt.Sprintf("Node %s has invalid %s=%q (want container, vm-passthrough or vm-vgpu), so it gets the policy default %q.", n.Name, names.WorkloadConfigLabel, v, def)
}

// Operands returns the operands a node with this config runs under the
// policy, sorted. A config the policy's mode cannot serve (Unsupported)
// runs none. Without sandbox workloads no node runs any (the GPU
// discovery agent runs everywhere, by no deploy label): every GPU node is
// a container node served by NVIDIA's container stack as it would be
// without this product. With them, container nodes run the NRI plugin and
// NVIDIA's device plugin, each unless the policy turns it off.
func Operands(config string, p *v1alpha1.SandboxGPUPolicy) []string {
	s := p.Spec
	if !s.SandboxWorkloads.Enabled {
		return nil
	}
	mode := Mode(p)
	var out []string
	add := func(name string, enabled bool) {
		if enabled {
			out = append(out, name)
		}
	}
	switch config {
	case v1alpha1.WorkloadContainer:
		out = containerOperands(p)
	case v1alpha1.WorkloadVMPassthrough:
		add(names.VFIOManager, s.VFIOManager.IsEnabled())
		add(names.KubeVirtDevicePlugin, mode == v1alpha1.ModeKubeVirt && s.SandboxDevicePlugin.IsEnabled())
		add(names.KataDevicePlugin, mode == v1alpha1.ModeKata && s.KataSandboxDevicePlugin.IsEnabled())
		add(names.Validator, s.Validator.IsEnabled())
	case v1alpha1.WorkloadVMVGPU:
		if Unsupported(config, p) != "" {
			return nil
		}
		add(names.VGPUManager, s.VGPUManager.IsEnabled())
		add(names.VGPUDeviceManager, s.VGPUDeviceManager.IsEnabled())
		add(names.KubeVirtDevicePlugin, s.SandboxDevicePlugin.IsEnabled())
		add(names.Validator, s.Validator.IsEnabled())
	}
	sort.Strings(out)
	return out
}

// containerOperands are the operands through which containers get GPUs:
// NVIDIA's device plugin advertises nvidia.com/gpu, the NRI plugin
// injects what the kubelet allocated.
func containerOperands(p *v1alpha1.SandboxGPUPolicy) []string {
	var out []string
	if p.Spec.NRIPlugin.IsEnabled() {
		out = append(out, names.NRIPlugin)
	}
	if p.Spec.DevicePlugin.IsEnabled() {
		out = append(out, names.NVIDIADevicePlugin)
	}
	return out
}

// Mixed reports whether a node splits its GPUs between VMs and containers:
// it declares sandbox-gpu.io/vm-gpus, and not every GPU ("all", or empty,
// is a plain vm-passthrough node). The VFIO manager judges the value; a
// bad one moves nothing and is reported on the Node, and the node still
// counts as mixed.
func Mixed(n *corev1.Node) bool {
	v, ok := n.Annotations[names.VMGPUsAnnotation]
	v = strings.TrimSpace(v)
	return ok && v != "" && !strings.EqualFold(v, "all")
}

// NodeOperands returns the operands this node runs with config, sorted:
// Operands, and on a mixed vm-passthrough node (Mixed) also the container
// operands, for the GPUs that stay on their host driver.
func NodeOperands(n *corev1.Node, config string, p *v1alpha1.SandboxGPUPolicy) []string {
	out := Operands(config, p)
	if config != v1alpha1.WorkloadVMPassthrough || len(out) == 0 || !Mixed(n) {
		return out
	}
	for _, o := range containerOperands(p) {
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	sort.Strings(out)
	return out
}

// Mode is the policy's sandbox mode (kubevirt when unset).
func Mode(p *v1alpha1.SandboxGPUPolicy) string {
	if m := p.Spec.SandboxWorkloads.Mode; m != "" {
		return m
	}
	return v1alpha1.ModeKubeVirt
}

// Unsupported says, in a sentence without the node's name, why the
// policy's mode cannot serve config; "" when it can. Kata takes no vGPU: a
// vm-vgpu node in Kata mode runs no operand (it must not silently become a
// passthrough node) and is reported.
func Unsupported(config string, p *v1alpha1.SandboxGPUPolicy) string {
	if config == v1alpha1.WorkloadVMVGPU && p.Spec.SandboxWorkloads.Enabled && Mode(p) == v1alpha1.ModeKata {
		return "Kata (spec.sandboxWorkloads.mode=kata) takes no vGPU, so no vGPU operand runs there; " +
			"label the node " + names.WorkloadConfigLabel + "=vm-passthrough or container, or run the policy in kubevirt mode"
	}
	return ""
}

// DriverNeeded is the NVIDIA host driver a config needs, as the GPU
// discovery agent names it (names.GPUDriverLabel): container the
// data-centre driver (NVIDIA's vGPU host driver serves no CUDA container),
// vm-vgpu the vGPU host driver (the data-centre driver offers no vGPU);
// "" for vm-passthrough, which binds the GPUs to vfio-pci on either.
func DriverNeeded(config string) string {
	switch config {
	case v1alpha1.WorkloadContainer:
		return names.GPUDriverDataCentre
	case v1alpha1.WorkloadVMVGPU:
		return names.GPUDriverVGPUHost
	}
	return ""
}

// driverNames are the drivers in words.
var driverNames = map[string]string{
	names.GPUDriverDataCentre: "NVIDIA's data-centre driver",
	names.GPUDriverVGPUHost:   "NVIDIA's vGPU host driver",
}

// ChangesDrivers reports whether the operator changes a node's NVIDIA
// driver: the vGPU host driver is its vgpu-manager operand (NVIDIA's vGPU
// Manager image), which loads the vGPU host driver once the data-centre
// driver let the GPUs go and unloads it when it leaves, after which the
// node's data-centre driver (host-installed or the GPU Operator's) takes
// them back. A vGPU host driver installed on the host is not the
// operator's to change.
func ChangesDrivers(p *v1alpha1.SandboxGPUPolicy) bool { return p.Spec.VGPUManager.IsEnabled() }

// DriverRefusal says, in a sentence without the node's name, why a node
// cannot switch to config with the NVIDIA driver it reports (the GPU
// discovery agent's names.GPUDriverLabel), "" when it can: config needs
// the other driver, and the operator does not change drivers
// (ChangesDrivers). Nothing is drained for such a switch.
func DriverRefusal(n *corev1.Node, config string, p *v1alpha1.SandboxGPUPolicy) string {
	need, have := DriverNeeded(config), n.Labels[names.GPUDriverLabel]
	if need == "" || have == need || driverNames[have] == "" || ChangesDrivers(p) {
		return ""
	}
	if need == names.GPUDriverDataCentre {
		return "its GPUs are on NVIDIA's vGPU host driver (" + names.GPUDriverLabel + "=" + have + "), installed on the host, " +
			"which serves no CUDA container, and the operator changes drivers only through the vGPU host driver it deploys; " +
			"replace it with NVIDIA's data-centre driver on the host, or deploy the vGPU host driver with the policy " +
			"(spec.vgpuManager) instead of installing it, or label the node " + names.WorkloadConfigLabel + "=vm-vgpu or vm-passthrough"
	}
	return "its GPUs are on NVIDIA's data-centre driver (" + names.GPUDriverLabel + "=" + have + "), which offers no vGPU, " +
		"and the policy deploys no vGPU host driver; enable spec.vgpuManager with NVIDIA's vGPU Manager image " +
		"(it takes the GPUs from the data-centre driver), or install the vGPU host driver on the host, or label the node " +
		names.WorkloadConfigLabel + "=container or vm-passthrough"
}

// DriverHeld returns the operands of config that wait while the operator
// changes the node's driver (ChangesDrivers) and the node does not report
// the driver config needs yet: container operands until the data-centre
// driver serves the GPUs, the vGPU device manager until the vGPU host
// driver does. why says what is awaited, in words that follow "waiting
// for". A node whose driver nobody reports (no label) is not held: the
// vGPU device manager still waits for the vgpu-manager (Prerequisite).
func DriverHeld(n *corev1.Node, config string, p *v1alpha1.SandboxGPUPolicy) (held []string, why string) {
	need := DriverNeeded(config)
	have, ok := n.Labels[names.GPUDriverLabel]
	if need == "" || !ok || have == need || !ChangesDrivers(p) {
		return nil, ""
	}
	if config == v1alpha1.WorkloadContainer {
		held = containerOperands(p)
	} else if p.Spec.VGPUDeviceManager.IsEnabled() {
		held = []string{names.VGPUDeviceManager}
	}
	return held, fmt.Sprintf("the node's GPUs to be on %s (the GPU discovery agent reports %s=%s)", driverNames[need], names.GPUDriverLabel, have)
}

// Prerequisite names the operand that must be ready on a node before
// operand is started there ("" for none): the vGPU device manager waits
// for the vGPU host driver (when it is deployed), as the GPU Operator's
// vgpu-device-manager waits for its vgpu-manager: the driver container
// enables the SR-IOV VFs itself at start and tears them down when that
// fails, so nothing may touch the VFs before it is done.
//
// On a mixed node NVIDIA's device plugin runs only while the VFIO manager
// is ready (RunsWhileReady): it lists the GPUs it finds at its start, which
// must be the container GPUs only, after the VM GPUs moved to vfio; and
// NVML holds every GPU it sees open, so a GPU it serves cannot move to a VM
// (the VFIO manager takes it as in use). A change of the split that moves
// GPUs to VMs makes the VFIO manager not ready: the device plugin stops,
// the GPUs move, and it starts again with the new container GPUs.
func Prerequisite(operand string) string {
	switch operand {
	case names.VGPUDeviceManager:
		return names.VGPUManager
	case names.NVIDIADevicePlugin:
		return names.VFIOManager
	}
	return ""
}

// RunsWhileReady reports whether operand runs only while its prerequisite
// is ready (NVIDIA's device plugin on a mixed node); other operands, once
// running, are never stopped for their prerequisite's restart.
func RunsWhileReady(operand string) bool { return operand == names.NVIDIADevicePlugin }

// Staged returns the operands to label now: those of want whose
// prerequisite is not wanted, is ready (ready[name]), or that run already
// (labelled[name]: a running operand is never stopped for its
// prerequisite's restart, unless it RunsWhileReady).
func Staged(want []string, ready, labelled map[string]bool) []string {
	out := make([]string, 0, len(want))
	for _, o := range want {
		pre := Prerequisite(o)
		if pre == "" || !slices.Contains(want, pre) || ready[pre] || labelled[o] && !RunsWhileReady(o) {
			out = append(out, o)
		}
	}
	return out
}

// DeployLabels returns the node's labels with the deploy labels for these
// operands set and every other deploy label removed. The input is not
// modified; changed reports whether anything differs.
func DeployLabels(current map[string]string, operands []string) (map[string]string, bool) {
	return NodeLabels(current, operands, nil)
}

// NodeLabels returns the node's labels with the deploy labels of deploy
// and the release labels of release set, and every other deploy and
// release label removed (one write swaps an operand for its release). The
// input is not modified; changed reports whether anything differs.
func NodeLabels(current map[string]string, deploy, release []string) (map[string]string, bool) {
	want := map[string]bool{}
	for _, o := range deploy {
		want[names.DeployLabel(o)] = true
	}
	for _, o := range release {
		want[names.ReleaseLabel(o)] = true
	}
	out := make(map[string]string, len(current)+len(want))
	changed := false
	for k, v := range current {
		ours := strings.HasPrefix(k, names.DeployPrefix) || strings.HasPrefix(k, names.ReleasePrefix)
		if ours && !want[k] {
			changed = true
			continue
		}
		out[k] = v
	}
	for k := range want {
		if out[k] != "true" {
			out[k] = "true"
			changed = true
		}
	}
	return out, changed
}

// GPUResource reports whether a resource name is a GPU resource of the
// given config: what must be released before the node may switch.
func GPUResource(config, resource string) bool {
	if !strings.HasPrefix(resource, "nvidia.com/") {
		return false
	}
	if config == v1alpha1.WorkloadContainer {
		return IsContainerResource(resource)
	}
	return !IsContainerResource(resource)
}

// IsContainerResource reports whether a resource is one NVIDIA's container
// device plugin advertises for ordinary containers: nvidia.com/gpu, its
// time-sliced (or MPS) nvidia.com/gpu.shared, and the MIG devices
// nvidia.com/mig-<profile> (also .shared). Such pods hold GPUs of the
// container config and are drained when a node leaves it.
func IsContainerResource(resource string) bool {
	return resource == "nvidia.com/gpu" || resource == "nvidia.com/gpu.shared" || strings.HasPrefix(resource, "nvidia.com/mig-")
}

// IsVGPUResource reports whether a resource is a vGPU type the KubeVirt
// device plugin advertises: nvidia.com/NVIDIA_<type> (the sysfs type name
// "NVIDIA A10-4Q" with blanks as _), for mdev vGPUs and SR-IOV
// vendor-specific VFIO vGPUs (VFs) alike; passthrough GPUs are named
// after their pci.ids model (nvidia.com/GA102GL_A10).
func IsVGPUResource(resource string) bool {
	return strings.HasPrefix(resource, "nvidia.com/NVIDIA_")
}

// HoldsGPU reports whether a pod that has not finished requests a GPU
// resource of config.
func HoldsGPU(pod *corev1.Pod, config string) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for name := range c.Resources.Limits {
			if GPUResource(config, string(name)) {
				return true
			}
		}
		for name := range c.Resources.Requests {
			if GPUResource(config, string(name)) {
				return true
			}
		}
	}
	return false
}
