package wire

import (
	"encoding/json"
	"fmt"

	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
)

// States of a vGPU ready report, the same as the nvidia.com/vgpu.config.state
// node label's values.
const (
	VGPUStatePending = "pending" // the manager is changing the node's vGPUs
	VGPUStateSuccess = "success" // every GPU holds what the selected config asks
	VGPUStateFailed  = "failed"  // a config error, or a GPU refused or failed
)

// VGPUReady is the vGPU device manager's report (names.VGPUReadyFile, and
// its /readyz), rewritten (atomically, only when it changes) after every
// run of its loop:
//
//	config   the selected config
//	state    success or failed, as the node label
//	gpus     every NVIDIA GPU: index, address, device, backend, vgpus (by type),
//	         typeIds (vendor-specific VFIO: type id -> short name of every id
//	         the manager can name on the GPU, the driver's lists and its memory
//	         (VGPUTypeNames) together, which sysfs no longer names on a full
//	         card; the KubeVirt device plugin names its resources from them),
//	         unnamed (vendor-specific VFIO: VF -> type id of a vGPU nobody can
//	         name, counted nowhere else and never advertised)
//	refused  GPUs refused or failed: gpu, address, reason ("in use: ...")
//	error    why nothing was applied (a config error), when so
type VGPUReady struct {
	Config  string        `json:"config"`
	State   string        `json:"state"`
	GPUs    []VGPUGPU     `json:"gpus"`
	Refused []VGPURefusal `json:"refused"`
	Error   string        `json:"error,omitempty"`
	// Release: the report of a release (run --release), never written to
	// the ready file.
	Release bool `json:"release,omitempty"`
}

// VGPUGPU is one GPU's vGPUs in the report.
type VGPUGPU struct {
	Index   int               `json:"index"`
	Address string            `json:"address"`
	Device  string            `json:"device"`  // vendor:device, hex
	Backend string            `json:"backend"` // mdev, mdev-sriov, vendor-vfio, sriov or none
	VGPUs   map[string]int    `json:"vgpus"`
	TypeIDs map[string]string `json:"typeIds,omitempty"`
	Unnamed map[string]string `json:"unnamed,omitempty"` // VF -> type id nobody names
}

// VGPURefusal is a GPU whose change was refused or failed.
type VGPURefusal struct {
	GPU     int    `json:"gpu"`
	Address string `json:"address"`
	Reason  string `json:"reason"`
}

// WriteVGPUReady replaces the report at path with r (indented JSON, no
// refusal as []), atomically; an unchanged report writes nothing.
func WriteVGPUReady(path string, r VGPUReady) error {
	if r.Refused == nil {
		r.Refused = []VGPURefusal{}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = atomicfile.Write(path, append(b, '\n'), 0o644)
	return err
}

// RemoveVGPUReady removes the report (a link there itself, never its
// target); a missing file is no error.
func RemoveVGPUReady(path string) error { return atomicfile.Remove(path) }

// ReadVGPUReady reads the vGPU device manager's report through
// atomicfile.Read: a link, a FIFO or an oversized file there is an error
// naming it.
func ReadVGPUReady(path string) (VGPUReady, error) {
	b, err := atomicfile.Read(path)
	if err != nil {
		return VGPUReady{}, err
	}
	return ParseVGPUReady(path, b)
}

// ParseVGPUReady parses a report's content; errors name path.
func ParseVGPUReady(path string, b []byte) (VGPUReady, error) {
	var r VGPUReady
	if err := json.Unmarshal(b, &r); err != nil {
		return VGPUReady{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
