package workload

import (
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// ReleaseOperand names the operand whose host state a node leaving config
// must return, "" when there is none: a vm-passthrough node's GPUs are on
// vfio (the VFIO manager's), a vm-vgpu node's hold vGPUs and VFs (the vGPU
// device manager's). It runs in release mode (its release DaemonSet)
// before the next config's operands start. An operand the policy turned
// off made nothing to return. Whether sandbox workloads are on does not
// matter: turning them off moves every node to container.
func ReleaseOperand(config string, p *v1alpha1.SandboxGPUPolicy) string {
	s := p.Spec
	switch config {
	case v1alpha1.WorkloadVMPassthrough:
		if s.VFIOManager.IsEnabled() {
			return names.VFIOManager
		}
	case v1alpha1.WorkloadVMVGPU:
		if s.VGPUDeviceManager.IsEnabled() {
			return names.VGPUDeviceManager
		}
	}
	return ""
}

// KeptWhileReleasing lists the operands of config that keep running while
// its release runs: the vGPU host driver, without which no vGPU can be
// removed. The device plugins (whose resources the drain emptied), the
// validator and the operand being released stop.
func KeptWhileReleasing(config string, p *v1alpha1.SandboxGPUPolicy) []string {
	if config != v1alpha1.WorkloadVMVGPU {
		return nil
	}
	var out []string
	for _, o := range Operands(config, p) {
		if o == names.VGPUManager {
			out = append(out, o)
		}
	}
	return out
}
