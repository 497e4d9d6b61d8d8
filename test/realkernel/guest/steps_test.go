//go:build realkernelguest

package guest

import (
	"fmt"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// removeMdev removes an mdev the way package vgpu's remove step does (vgpu/steps.go), minus
// the NVIDIA type check and the kubelet: re-read the mdev, check with the host model that no
// process holds it, and only then write remove. An mdev in use is refused with the check's
// error, which starts with "in use:".
func removeMdev(h *host.Host, uuid string) error {
	m, ok, err := h.ReadMdev(uuid)
	if err != nil || !ok {
		return err // gone already
	}
	if err := h.CheckMdevIdle(m); err != nil {
		return err
	}
	return h.RemoveMdev(uuid)
}

// disableVFs disables a PF's VFs the way package vgpu's disable-vfs step does: every VF is
// checked idle with the host model right before sriov_numvfs is written 0.
func disableVFs(h *host.Host, pf host.Address) error {
	f, err := h.ReadFunction(pf)
	if err != nil || f.SRIOVNumVFs == 0 {
		return err
	}
	for _, vf := range f.VirtFns {
		vff, err := h.ReadFunction(vf)
		if err != nil {
			return fmt.Errorf("VF %s of %s: %w", vf, pf, err)
		}
		if err := h.CheckIdle(vff); err != nil {
			return err
		}
	}
	return h.SetNumVFs(pf, 0)
}
