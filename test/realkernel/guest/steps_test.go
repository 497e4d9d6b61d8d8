//go:build realkernelguest

package guest

import (
	"context"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu"
)

// The guest tests change mdevs and VFs only through package vgpu's own steps (vgpu.Step.Apply,
// what vgpu.Apply runs for each step of a plan): the same re-read of the target, VFIO group
// claim and in-use check before each write as on an NVIDIA GPU. No kubelet runs in a guest, so
// only processes count as users.

// createMdev applies a create step of an mdev of type typeID on mtty.
func createMdev(h *host.Host, uuid, typeID string) error {
	return applyStep(h, vgpu.Step{Op: vgpu.OpCreate, ID: uuid, TypeID: typeID, Parent: mttyParent})
}

// removeMdev applies a remove step of an mdev planned as of type typeID.
func removeMdev(h *host.Host, uuid, typeID string) error {
	return applyStep(h, vgpu.Step{Op: vgpu.OpRemove, ID: uuid, TypeID: typeID, Parent: mttyParent})
}

// enableVFs applies an enable-vfs step of n VFs on pf.
func enableVFs(h *host.Host, pf host.Address, n int) error {
	return applyStep(h, vgpu.Step{Op: vgpu.OpEnableVFs, Address: pf, VFs: n})
}

// disableVFs applies a disable-vfs step on pf.
func disableVFs(h *host.Host, pf host.Address) error {
	return applyStep(h, vgpu.Step{Op: vgpu.OpDisableVFs, Address: pf})
}

func applyStep(h *host.Host, s vgpu.Step) error {
	return s.Apply(context.Background(), h, nil)
}
