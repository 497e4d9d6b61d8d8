package vgpu

import (
	"strconv"

	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// States of the nvidia.com/vgpu.config.state node label, the same as the
// ready report's (wire.VGPUReady).
const (
	StatePending = wire.VGPUStatePending // the manager is changing the node's vGPUs
	StateSuccess = wire.VGPUStateSuccess // every GPU holds what the selected config asks
	StateFailed  = wire.VGPUStateFailed  // a config error, or a GPU refused or failed
)

// ReadyGPUs are the GPUs as the ready report (wire.VGPUReady) lists them:
// a vendor-specific VFIO GPU with every type id it can name (typeIds) and
// the VFs whose vGPU nobody can name (unnamed, never counted in vgpus).
func ReadyGPUs(gpus []*GPU) []wire.VGPUGPU {
	out := []wire.VGPUGPU{}
	for _, g := range gpus {
		id := gpuID(g)
		rg := wire.VGPUGPU{Index: id.Index, Address: id.Address, Device: id.Device, Backend: string(id.Backend), VGPUs: g.counts()}
		delete(rg.VGPUs, "") // unnamed ones are listed by VF below
		if g.Backend != BackendVendorVFIO {
			out = append(out, rg)
			continue
		}
		for tid, name := range g.Names {
			if wire.ValidTypeName(name) {
				if rg.TypeIDs == nil {
					rg.TypeIDs = map[string]string{}
				}
				rg.TypeIDs[strconv.Itoa(tid)] = name
			}
		}
		for _, v := range g.VGPUs {
			if v.Type == "" {
				if rg.Unnamed == nil {
					rg.Unnamed = map[string]string{}
				}
				rg.Unnamed[string(v.Parent)] = v.TypeID
			}
		}
		out = append(out, rg)
	}
	return out
}

// readyRefusals are the refusals as the ready report lists them.
func readyRefusals(refused []Refusal) []wire.VGPURefusal {
	var out []wire.VGPURefusal
	for _, r := range refused {
		out = append(out, wire.VGPURefusal{GPU: r.GPU, Address: string(r.Address), Reason: r.Reason})
	}
	return out
}
