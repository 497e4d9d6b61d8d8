//go:build nvmlsim

package main

/*
#cgo CFLAGS: -DNVML_NO_UNVERSIONED_FUNC_DEFS=1
#include <stdlib.h>
#define nvmlErrorString nvmlErrorString_hidden
#define nvmlDeviceGetHandleByUUID nvmlDeviceGetHandleByUUID_hidden
#define nvmlDeviceGetHandleByPciBusId_v2 nvmlDeviceGetHandleByPciBusId_v2_hidden
#define nvmlDeviceGetHandleByPciBusId nvmlDeviceGetHandleByPciBusId_hidden
#include "nvml.h"
#undef nvmlErrorString
#undef nvmlDeviceGetHandleByUUID
#undef nvmlDeviceGetHandleByPciBusId_v2
#undef nvmlDeviceGetHandleByPciBusId
*/
import "C"

import "github.com/sandbox-gpu/sandbox-gpu/test/internal/nvmlsim"

// Calls NVIDIA's device plugin (through go-nvlib and go-gpuallocator) and
// NVIDIA's mock's symbol list name that the simulated host has nothing
// for. A missing symbol would end the caller ("symbol lookup error"); these
// answer as a driver without the feature, or with nothing to report.

func notSupported(d C.nvmlDevice_t) C.nvmlReturn_t {
	return withGPU(d, func(int, *nvmlsim.GPU) C.nvmlReturn_t { return C.NVML_ERROR_NOT_SUPPORTED })
}

//export nvmlDeviceGetSerial
func nvmlDeviceGetSerial(d C.nvmlDevice_t, buf *C.char, n C.uint) C.nvmlReturn_t {
	return notSupported(d)
}

//export nvmlDeviceGetAttributes_v2
func nvmlDeviceGetAttributes_v2(d C.nvmlDevice_t, a *C.nvmlDeviceAttributes_t) C.nvmlReturn_t {
	return notSupported(d) // attributes are a MIG device's; there is none
}

//export nvmlDeviceGetDeviceHandleFromMigDeviceHandle
func nvmlDeviceGetDeviceHandleFromMigDeviceHandle(md C.nvmlDevice_t, d *C.nvmlDevice_t) C.nvmlReturn_t {
	return withGPU(md, func(int, *nvmlsim.GPU) C.nvmlReturn_t { return C.NVML_ERROR_INVALID_ARGUMENT }) // not a MIG handle
}

//export nvmlDeviceGetGpuInstances
func nvmlDeviceGetGpuInstances(d C.nvmlDevice_t, profile C.uint, gis *C.nvmlGpuInstance_t, n *C.uint) C.nvmlReturn_t {
	return notSupported(d)
}

func noProcesses(d C.nvmlDevice_t, n *C.uint) C.nvmlReturn_t {
	return withGPU(d, func(int, *nvmlsim.GPU) C.nvmlReturn_t {
		if n == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*n = 0
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetComputeRunningProcesses_v3
func nvmlDeviceGetComputeRunningProcesses_v3(d C.nvmlDevice_t, n *C.uint, p *C.nvmlProcessInfo_t) C.nvmlReturn_t {
	return noProcesses(d, n)
}

//export nvmlDeviceGetGraphicsRunningProcesses_v3
func nvmlDeviceGetGraphicsRunningProcesses_v3(d C.nvmlDevice_t, n *C.uint, p *C.nvmlProcessInfo_t) C.nvmlReturn_t {
	return noProcesses(d, n)
}

//export nvmlDeviceGetTopologyCommonAncestor
func nvmlDeviceGetTopologyCommonAncestor(a, b C.nvmlDevice_t, l *C.nvmlGpuTopologyLevel_t) C.nvmlReturn_t {
	return notSupported(a)
}

//export nvmlDeviceGetNvLinkState
func nvmlDeviceGetNvLinkState(d C.nvmlDevice_t, link C.uint, s *C.nvmlEnableState_t) C.nvmlReturn_t {
	return notSupported(d)
}

//export nvmlDeviceGetGpuFabricInfo
func nvmlDeviceGetGpuFabricInfo(d C.nvmlDevice_t, f *C.nvmlGpuFabricInfo_t) C.nvmlReturn_t {
	return notSupported(d)
}

//export nvmlDeviceGetGpuFabricInfoV
func nvmlDeviceGetGpuFabricInfoV(d C.nvmlDevice_t, f *C.nvmlGpuFabricInfoV_t) C.nvmlReturn_t {
	return notSupported(d)
}

//export nvmlDeviceGetBAR1MemoryInfo
func nvmlDeviceGetBAR1MemoryInfo(d C.nvmlDevice_t, m *C.nvmlBAR1Memory_t) C.nvmlReturn_t {
	return notSupported(d)
}

//export nvmlSystemGetProcessName
func nvmlSystemGetProcessName(pid C.uint, buf *C.char, n C.uint) C.nvmlReturn_t {
	return withHost(func(*nvmlsim.Host) C.nvmlReturn_t { return C.NVML_ERROR_NOT_FOUND })
}

//export nvmlDeviceGetVirtualizationMode
func nvmlDeviceGetVirtualizationMode(d C.nvmlDevice_t, m *C.nvmlGpuVirtualizationMode_t) C.nvmlReturn_t {
	return withHost(func(h *nvmlsim.Host) C.nvmlReturn_t {
		return withGPULocked(h, d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
			if m == nil {
				return C.NVML_ERROR_INVALID_ARGUMENT
			}
			*m = C.NVML_GPU_VIRTUALIZATION_MODE_NONE
			if h.VGPU {
				*m = C.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU
			}
			return C.NVML_SUCCESS
		})
	})
}
