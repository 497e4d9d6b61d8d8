package vgpu

import (
	"encoding/json"
	"fmt"

	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
)

// States of the nvidia.com/vgpu.config.state node label.
const (
	StatePending = "pending" // the manager is changing the node's vGPUs
	StateSuccess = "success" // every GPU holds what the selected config asks
	StateFailed  = "failed"  // a config error, or a GPU refused or failed
)

// ReadyReport is the JSON of names.VGPUReadyFile, rewritten (atomically,
// only when it changes) after every run of the loop:
//
//	config   the selected config
//	state    success or failed, as the node label
//	gpus     every NVIDIA GPU: index, address, device, backend, vgpus (by type),
//	         typeIds (vendor-specific VFIO: type id -> short name of the vGPUs
//	         it holds, which sysfs no longer names on a full card; the KubeVirt
//	         device plugin names its resources from them)
//	refused  GPUs refused or failed: gpu, address, reason ("in use: ...")
//	error    why nothing was applied (a config error), when so
type ReadyReport struct {
	Config  string     `json:"config"`
	State   string     `json:"state"`
	GPUs    []ReadyGPU `json:"gpus"`
	Refused []Refusal  `json:"refused"`
	Error   string     `json:"error,omitempty"`
	// Release: the report of a release (run --release), never written to
	// the ready file.
	Release bool `json:"release,omitempty"`
}

// ReadyGPU is one GPU's vGPUs in the ready file.
type ReadyGPU struct {
	GPUID
	VGPUs   map[string]int    `json:"vgpus"`
	TypeIDs map[string]string `json:"typeIds,omitempty"`
}

func readyGPUs(gpus []*GPU) []ReadyGPU {
	out := []ReadyGPU{}
	for _, g := range gpus {
		rg := ReadyGPU{GPUID: gpuID(g), VGPUs: g.counts()}
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

// writeReady writes the ready file when its content changed.
func writeReady(path string, r ReadyReport) error {
	if r.Refused == nil {
		r.Refused = []Refusal{}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = atomicfile.Write(path, append(b, '\n'), 0o644)
	return err
}

// ReadReadyFile reads the vGPU device manager's ready file (for the
// validator).
func ReadReadyFile(path string) (ReadyReport, error) {
	var r ReadyReport
	b, err := atomicfile.Read(path) // a link, FIFO or huge file: an error naming it
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
