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

import (
	"time"
	"unsafe"

	"github.com/sandbox-gpu/sandbox-gpu/test/internal/nvmlsim"
)

// vGPU types: only on the vGPU host driver; the data-centre driver says
// NOT_SUPPORTED, as the real one does.

func putTypeIDs(n *C.uint, ids *C.nvmlVgpuTypeId_t, list []uint32) C.nvmlReturn_t {
	if n == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	have := int(*n)
	*n = C.uint(len(list))
	if have < len(list) {
		if len(list) == 0 {
			return C.NVML_SUCCESS
		}
		return C.NVML_ERROR_INSUFFICIENT_SIZE
	}
	if len(list) == 0 {
		return C.NVML_SUCCESS
	}
	if ids == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	out := unsafeSlice(ids, len(list))
	for i, id := range list {
		out[i] = C.nvmlVgpuTypeId_t(id)
	}
	return C.NVML_SUCCESS
}

//export nvmlDeviceGetSupportedVgpus
func nvmlDeviceGetSupportedVgpus(d C.nvmlDevice_t, n *C.uint, ids *C.nvmlVgpuTypeId_t) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
		if g.Supported == nil {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		list := make([]uint32, 0, len(g.Supported))
		for _, t := range g.Supported {
			list = append(list, t.ID)
		}
		return putTypeIDs(n, ids, list)
	})
}

//export nvmlDeviceGetCreatableVgpus
func nvmlDeviceGetCreatableVgpus(d C.nvmlDevice_t, n *C.uint, ids *C.nvmlVgpuTypeId_t) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
		if g.Supported == nil {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		return putTypeIDs(n, ids, g.Creatable)
	})
}

// vgpuType finds a type id among the GPUs' supported types.
func vgpuType(id C.nvmlVgpuTypeId_t, f func(t nvmlsim.VGPUType) C.nvmlReturn_t) C.nvmlReturn_t {
	return withHost(func(h *nvmlsim.Host) C.nvmlReturn_t {
		for _, g := range h.GPUs {
			for _, t := range g.Supported {
				if t.ID == uint32(id) {
					return f(t)
				}
			}
		}
		return C.NVML_ERROR_INVALID_ARGUMENT
	})
}

//export nvmlVgpuTypeGetName
func nvmlVgpuTypeGetName(id C.nvmlVgpuTypeId_t, buf *C.char, size *C.uint) C.nvmlReturn_t {
	return vgpuType(id, func(t nvmlsim.VGPUType) C.nvmlReturn_t {
		if size == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		r := putString(buf, *size, t.Name)
		*size = C.uint(len(t.Name) + 1)
		return r
	})
}

//export nvmlVgpuTypeGetFramebufferSize
func nvmlVgpuTypeGetFramebufferSize(id C.nvmlVgpuTypeId_t, fb *C.ulonglong) C.nvmlReturn_t {
	return vgpuType(id, func(t nvmlsim.VGPUType) C.nvmlReturn_t {
		if fb == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*fb = C.ulonglong(t.SizeMiB << 20)
		return C.NVML_SUCCESS
	})
}

//export nvmlVgpuTypeGetMaxInstances
func nvmlVgpuTypeGetMaxInstances(d C.nvmlDevice_t, id C.nvmlVgpuTypeId_t, n *C.uint) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
		if n == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		for _, t := range g.Supported {
			if t.ID == uint32(id) {
				*n = C.uint(t.Instances)
				return C.NVML_SUCCESS
			}
		}
		return C.NVML_ERROR_INVALID_ARGUMENT
	})
}

// Persistence, drain and removal (issue 22 item 5) are not simulated yet:
// every call says NOT_SUPPORTED, as a driver without the feature does.

//export nvmlDeviceGetPersistenceMode
func nvmlDeviceGetPersistenceMode(d C.nvmlDevice_t, m *C.nvmlEnableState_t) C.nvmlReturn_t {
	return withGPU(d, func(int, *nvmlsim.GPU) C.nvmlReturn_t { return C.NVML_ERROR_NOT_SUPPORTED })
}

//export nvmlDeviceSetPersistenceMode
func nvmlDeviceSetPersistenceMode(d C.nvmlDevice_t, m C.nvmlEnableState_t) C.nvmlReturn_t {
	return withGPU(d, func(int, *nvmlsim.GPU) C.nvmlReturn_t { return C.NVML_ERROR_NOT_SUPPORTED })
}

//export nvmlDeviceQueryDrainState
func nvmlDeviceQueryDrainState(p *C.nvmlPciInfo_t, s *C.nvmlEnableState_t) C.nvmlReturn_t {
	return withHost(func(*nvmlsim.Host) C.nvmlReturn_t { return C.NVML_ERROR_NOT_SUPPORTED })
}

//export nvmlDeviceModifyDrainState
func nvmlDeviceModifyDrainState(p *C.nvmlPciInfo_t, s C.nvmlEnableState_t) C.nvmlReturn_t {
	return withHost(func(*nvmlsim.Host) C.nvmlReturn_t { return C.NVML_ERROR_NOT_SUPPORTED })
}

//export nvmlDeviceRemoveGpu
func nvmlDeviceRemoveGpu(p *C.nvmlPciInfo_t) C.nvmlReturn_t {
	return withHost(func(*nvmlsim.Host) C.nvmlReturn_t { return C.NVML_ERROR_NOT_SUPPORTED })
}

//export nvmlDeviceRemoveGpu_v2
func nvmlDeviceRemoveGpu_v2(p *C.nvmlPciInfo_t, g C.nvmlDetachGpuState_t, l C.nvmlPcieLinkState_t) C.nvmlReturn_t {
	return nvmlDeviceRemoveGpu(p)
}

// Events: NVIDIA's device plugin's health check registers for Xid events
// and waits; the simulated GPUs never raise one, so a wait times out after
// the timeout the caller gave, as on a healthy GPU.

//export nvmlEventSetCreate
func nvmlEventSetCreate(set *C.nvmlEventSet_t) C.nvmlReturn_t {
	return withHost(func(*nvmlsim.Host) C.nvmlReturn_t {
		if set == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*set = C.nvmlEventSet_t{handle: (*C.struct_nvmlEventSet_st)(C.malloc(1))}
		return C.NVML_SUCCESS
	})
}

//export nvmlEventSetFree
func nvmlEventSetFree(set C.nvmlEventSet_t) C.nvmlReturn_t {
	if set.handle == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	C.free(unsafe.Pointer(set.handle))
	return C.NVML_SUCCESS
}

//export nvmlDeviceGetSupportedEventTypes
func nvmlDeviceGetSupportedEventTypes(d C.nvmlDevice_t, types *C.ulonglong) C.nvmlReturn_t {
	return withGPU(d, func(int, *nvmlsim.GPU) C.nvmlReturn_t {
		if types == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*types = C.nvmlEventTypeXidCriticalError | C.nvmlEventTypeDoubleBitEccError | C.nvmlEventTypeSingleBitEccError
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceRegisterEvents
func nvmlDeviceRegisterEvents(d C.nvmlDevice_t, types C.ulonglong, set C.nvmlEventSet_t) C.nvmlReturn_t {
	return withGPU(d, func(int, *nvmlsim.GPU) C.nvmlReturn_t { return C.NVML_SUCCESS })
}

//export nvmlEventSetWait_v2
func nvmlEventSetWait_v2(set C.nvmlEventSet_t, data *C.nvmlEventData_t, timeoutms C.uint) C.nvmlReturn_t {
	if set.handle == nil || data == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	time.Sleep(time.Duration(timeoutms) * time.Millisecond) // the caller's timeout: no event comes
	return C.NVML_ERROR_TIMEOUT
}

//export nvmlEventSetWait
func nvmlEventSetWait(set C.nvmlEventSet_t, data *C.nvmlEventData_t, timeoutms C.uint) C.nvmlReturn_t {
	return nvmlEventSetWait_v2(set, data, timeoutms)
}
