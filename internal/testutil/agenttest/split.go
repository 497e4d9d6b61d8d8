package agenttest

import (
	"fmt"

	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// standInPID is a new pid for a stand-in process on the simulated host
// (called under a.mu, as start is).
func (a *Agent) standInPID() int {
	a.pids++
	return 30000 + a.pids
}

// holdHostGPUs makes pid (NVIDIA's device plugin) hold the device node of
// every GPU on its host driver, as NVML does while it serves them: the
// VFIO manager then takes them as in use.
func (a *Agent) holdHostGPUs(pid int, log logr.Logger) {
	if a.k == nil {
		return
	}
	snap, err := a.h.Scan()
	if err != nil {
		log.Error(err, "Cannot scan the host")
		return
	}
	for _, f := range snap.Functions {
		if f.Vendor != host.VendorNVIDIA || f.Role != host.RoleGPU || f.PhysFn != "" || host.IsVFIODriver(f.Driver) {
			continue
		}
		if minor, ok := a.h.GPUMinor(f.Address); ok {
			if err := a.k.HoldOpen(pid, "nvidia-device-plugin", fmt.Sprintf("nvidia%d", minor)); err != nil {
				log.Error(err, "Cannot hold a GPU open", "gpu", f.Address)
			}
		}
	}
}
