package main

import (
	"fmt"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/agenttest"
)

// vgpuResync is how often the demo's node daemons (the vGPU device manager
// among them) act without an event (a node's default is 5m): a change
// refused because a VM held a vGPU goes through on the first pass after
// the VM exits.
const vgpuResync = 2 * time.Second

// startVM plays a VM started on one of the node's vGPUs of a type: QEMU
// (comm qemu-kvm) holds its VFIO group node open. It returns the vGPU's
// UUID and group node.
func startVM(a *agenttest.Agent, node string, pid int, typeName string) (uuid, group string, err error) {
	if a.Kernel() == nil {
		return "", "", fmt.Errorf("node %s: no simulated host", node)
	}
	mdevs, err := a.Host().Mdevs()
	if err != nil {
		return "", "", fmt.Errorf("node %s: mdevs: %w", node, err)
	}
	for _, m := range mdevs {
		if m.TypeName == typeName && m.IOMMUGroup != host.NoGroup {
			group = fmt.Sprintf("vfio/%d", m.IOMMUGroup)
			if err := a.Kernel().HoldOpen(pid, "qemu-kvm", group); err != nil {
				return "", "", fmt.Errorf("node %s: qemu-kvm (pid %d) opening /dev/%s: %w", node, pid, group, err)
			}
			return m.UUID, "/dev/" + group, nil
		}
	}
	return "", "", fmt.Errorf("node %s: no vGPU of type %q", node, typeName)
}

// stopVM ends the VM's process, closing its VFIO group.
func stopVM(a *agenttest.Agent, node string, pid int) error {
	if err := a.Kernel().Exit(pid); err != nil {
		return fmt.Errorf("node %s: qemu-kvm (pid %d) exit: %w", node, pid, err)
	}
	return nil
}
