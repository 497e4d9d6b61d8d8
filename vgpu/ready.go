package vgpu

import (
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// States of the nvidia.com/vgpu.config.state node label, the same as the
// ready report's (wire.VGPUReady).
const (
	StatePending = wire.VGPUStatePending // the manager is changing the node's vGPUs
	StateSuccess = wire.VGPUStateSuccess // every GPU holds what the selected config asks
	StateFailed  = wire.VGPUStateFailed  // a config error, or a GPU refused or failed
)

// ReadyGPUs are the GPUs as the ready report (wire.VGPUReady) lists them.
func ReadyGPUs(gpus []*GPU) []wire.VGPUGPU {
	out := []wire.VGPUGPU{}
	for _, g := range gpus {
		id := gpuID(g)
		rg := wire.VGPUGPU{Index: id.Index, Address: id.Address, Device: id.Device, Backend: string(id.Backend), VGPUs: g.counts()}
		for _, v := range g.VGPUs {
			if g.Backend == BackendVendorVFIO && v.TypeID != "" && v.Type != "" {
				if rg.TypeIDs == nil {
					rg.TypeIDs = map[string]string{}
				}
				rg.TypeIDs[v.TypeID] = v.Type
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
