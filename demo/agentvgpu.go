package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/validator"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu"
)

// vgpuResync is how often the demo's vGPU device manager applies its
// config without an event (a node's default is 5m): a change refused
// because a VM held a vGPU goes through on the first pass after the VM
// exits.
const vgpuResync = 2 * time.Second

// startVGPU runs the vGPU device manager's node loop on the simulated
// host, following the Node's nvidia.com/vgpu.config over the built-in
// config (written into the node's folder, as the operator's ConfigMap
// would be mounted). It is ready while its last pass succeeded.
func (a *agent) startVGPU(ctx context.Context, log logr.Logger) (func() bool, error) {
	if a.h == nil {
		return nil, fmt.Errorf("node %s: no simulated host", a.node)
	}
	file := a.path("vgpu-config", "config.yaml")
	if err := os.MkdirAll(a.path("vgpu-config"), 0o755); err != nil {
		return nil, fmt.Errorf("node %s: vGPU config folder: %w", a.node, err)
	}
	if err := os.WriteFile(file, vgpu.DefaultConfigYAML(), 0o644); err != nil {
		return nil, fmt.Errorf("node %s: vGPU config %s: %w", a.node, file, err)
	}
	o := vgpu.RunOptions{Client: a.cs, NodeName: a.node, ConfigFile: file, Host: a.h, RunDir: a.path("run"),
		Resync: vgpuResync, Log: log, Observe: func(r vgpu.ReadyReport) {
			a.mu.Lock()
			a.vgpu = &r
			a.mu.Unlock()
		}}
	go func() {
		if err := vgpu.Run(ctx, o); err != nil {
			log.Error(err, "vGPU device manager stopped")
		}
	}()
	return func() bool {
		r := a.vgpuReport()
		return r != nil && r.State == vgpu.StateSuccess
	}, nil
}

// vgpuReport is the vGPU device manager's last report (nil before its
// first pass).
func (a *agent) vgpuReport() *vgpu.ReadyReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.vgpu
}

// validatorReport is the validator's last check (zero before it runs).
func (a *agent) validatorReport() validator.Report {
	a.mu.Lock()
	v := a.validator
	a.mu.Unlock()
	if v == nil {
		return validator.Report{}
	}
	return v.Report()
}

// startVM plays a VM started on one of the node's vGPUs of a type: QEMU
// (comm qemu-kvm) holds its VFIO group node open. It returns the vGPU's
// UUID and group node.
func (a *agent) startVM(pid int, typeName string) (uuid, group string, err error) {
	if a.k == nil {
		return "", "", fmt.Errorf("node %s: no simulated host", a.node)
	}
	mdevs, err := a.h.Mdevs()
	if err != nil {
		return "", "", fmt.Errorf("node %s: mdevs: %w", a.node, err)
	}
	for _, m := range mdevs {
		if m.TypeName == typeName && m.IOMMUGroup != host.NoGroup {
			group = fmt.Sprintf("vfio/%d", m.IOMMUGroup)
			if err := a.k.HoldOpen(pid, "qemu-kvm", group); err != nil {
				return "", "", fmt.Errorf("node %s: qemu-kvm (pid %d) opening /dev/%s: %w", a.node, pid, group, err)
			}
			return m.UUID, "/dev/" + group, nil
		}
	}
	return "", "", fmt.Errorf("node %s: no vGPU of type %q", a.node, typeName)
}

// stopVM ends the VM's process, closing its VFIO group.
func (a *agent) stopVM(pid int) error {
	if err := a.k.Exit(pid); err != nil {
		return fmt.Errorf("node %s: qemu-kvm (pid %d) exit: %w", a.node, pid, err)
	}
	return nil
}
