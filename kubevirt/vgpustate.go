package kubevirt

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/internal/gpuname"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// VGPUState is what the plugin reads of the vGPU device manager, through
// two files in its run folder (names.VGPUPauseFile, names.VGPUReadyFile).
type VGPUState struct {
	// PauseFile exists while the manager changes a GPU's vGPUs.
	PauseFile string
	// ReadyFile is the manager's report; its gpus[].typeIds name the
	// vendor-specific VFIO type ids of the vGPUs it made ("1155" ->
	// "L40S-24Q"), which sysfs no longer names once a card is full.
	ReadyFile string
}

// Paused reports whether the manager is changing vGPUs now.
func (v VGPUState) Paused() bool { return wire.VGPUPause(v.PauseFile).Paused() }

// TypeNames maps vendor type ids to vGPU type names ("NVIDIA L40S-24Q",
// as sysfs names them) from the manager's report; none when there is no
// report or it cannot be read (the caller falls back to sysfs's lists).
func (v VGPUState) TypeNames() map[int]string {
	out := map[int]string{}
	if v.ReadyFile == "" {
		return out
	}
	r, err := wire.ReadVGPUReady(v.ReadyFile) // never a link, a FIFO or over 1 MiB
	if err != nil {
		return out
	}
	return typeNames(r)
}

// typeNames reads the gpus[].typeIds of the vGPU device manager's report;
// an entry whose name is no valid resource name is left out.
func typeNames(report wire.VGPUReady) map[int]string {
	out := map[int]string{}
	for _, g := range report.GPUs {
		for id, short := range g.TypeIDs {
			n, err := strconv.Atoi(id)
			name := "NVIDIA " + short
			// A name the kubelet would refuse as a resource ("A10/../4Q",
			// over 63 characters) names nothing: sysfs's lists decide.
			if err != nil || n <= 0 || short == "" || gpuname.ValidResourceName(strings.TrimPrefix(TypeResource(name), ResourcePrefix)) != nil {
				continue
			}
			out[n] = name
		}
	}
	return out
}

// Folders are the folders of the two files, watched so that a pause and
// its end are seen at once.
func (v VGPUState) Folders() []string {
	var out []string
	for _, f := range []string{v.PauseFile, v.ReadyFile} {
		if f != "" {
			out = append(out, filepath.Dir(f))
		}
	}
	return out
}
