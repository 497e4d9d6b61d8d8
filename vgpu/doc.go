// Package vgpu is the vGPU device manager: it keeps a node's NVIDIA vGPUs
// as a config in NVIDIA vgpu-device-manager's format says, for KubeVirt.
//
// A command calls, in order:
//
//	cfg, err := vgpuconfig.Load(file)                  // or vgpuconfig.Default()
//	plan, err := vgpu.PlanConfig(ctx, h, cfg, name, vgpu.Options{NodeName: node, Allocated: a})
//	res := vgpu.Apply(ctx, h, plan, vgpu.ApplyOptions{PauseFile: pause})
//	jsonout.Write(w, vgpu.ResultReport(res)) // or vgpu.WriteTable; vgpu.PlanReport for plan
//	return res.Err()                                   // nil, or a RefusedError (exit 2)
//
// and, on a node, vgpu.Run(ctx, vgpu.RunOptions{...}). Errors map to the
// contract's exit codes with vgpu.ExitCode, or through the command shell:
// a vgpuconfig.Error exits 1, a RefusedError 2.
//
// Backends are chosen per GPU from sysfs: mdev types on the GPU (pre-Ampere
// and Ampere without SR-IOV), mdev types on SR-IOV VFs (Ampere: one vGPU
// per VF), or vendor-specific VFIO (Ada, Hopper, Blackwell: a type id
// written to each VF's nvidia/current_vgpu_type). Matching vGPUs are kept;
// nothing in use (held by a process or allocated to a pod) is ever removed;
// mdev UUIDs are stable per node, GPU and slot.
package vgpu
