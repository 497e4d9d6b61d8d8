// Package nvmltypes names a GPU's vGPU type ids from NVML, where the vGPU
// host driver offers it: the device by PCI bus id, its supported and
// creatable vGPU types, each type's name, framebuffer and max instances.
// The vGPU device manager asks it (behind its memory, vgpu.TypeMemory) only
// for type ids that neither the driver's sysfs lists nor the memory name:
// the vGPUs of a full card in a fresh run folder.
//
// NVML needs cgo: a binary built without it gets a Namer that names nothing
// and says once that NVML is not available. The library is
// libnvidia-ml.so.1 from the driver root's library folders (as the NRI
// plugin's generate-cdi loads it), opened on first need and shut down by
// Close.
package nvmltypes

import "github.com/go-logr/logr"

// Type is one vGPU type NVML reports for a GPU.
type Type struct {
	ID   int
	Name string // as NVML names it: "NVIDIA H100-40C"
	// FramebufferMiB and MaxInstances (on this GPU alone) are 0 when NVML
	// did not say.
	FramebufferMiB uint64
	MaxInstances   int
}

// Options configure New.
type Options struct {
	// DriverRoot is where the driver's files are (/ for a host-installed
	// driver, /run/nvidia/driver for the vGPU host driver container's
	// root); default /.
	DriverRoot string
	// Log gets each failure once: the library missing, a GPU NVML cannot
	// name.
	Log logr.Logger
}
