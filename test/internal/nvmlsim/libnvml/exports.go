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
	"fmt"
	"strings"
	"unsafe"

	"github.com/sandbox-gpu/sandbox-gpu/test/internal/nvmlsim"
)

//export nvmlInit_v2
func nvmlInit_v2() C.nvmlReturn_t { return lib.init() }

//export nvmlInit
func nvmlInit() C.nvmlReturn_t { return lib.init() }

//export nvmlInitWithFlags
func nvmlInitWithFlags(flags C.uint) C.nvmlReturn_t { return lib.init() }

//export nvmlShutdown
func nvmlShutdown() C.nvmlReturn_t { return lib.shutdown() }

//export nvmlSystemGetDriverVersion
func nvmlSystemGetDriverVersion(buf *C.char, n C.uint) C.nvmlReturn_t {
	return withHost(func(*nvmlsim.Host) C.nvmlReturn_t { return putString(buf, n, nvmlsim.DriverVersion) })
}

//export nvmlSystemGetNVMLVersion
func nvmlSystemGetNVMLVersion(buf *C.char, n C.uint) C.nvmlReturn_t {
	// Answered before init too, as the real library does.
	return putString(buf, n, nvmlsim.NVMLVersion)
}

//export nvmlSystemGetCudaDriverVersion
func nvmlSystemGetCudaDriverVersion(v *C.int) C.nvmlReturn_t {
	if v == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	*v = nvmlsim.CUDADriverVersion
	return C.NVML_SUCCESS
}

//export nvmlSystemGetCudaDriverVersion_v2
func nvmlSystemGetCudaDriverVersion_v2(v *C.int) C.nvmlReturn_t {
	return nvmlSystemGetCudaDriverVersion(v)
}

//export nvmlDeviceGetCount_v2
func nvmlDeviceGetCount_v2(n *C.uint) C.nvmlReturn_t {
	return withHost(func(h *nvmlsim.Host) C.nvmlReturn_t {
		if n == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*n = C.uint(len(h.GPUs))
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetCount
func nvmlDeviceGetCount(n *C.uint) C.nvmlReturn_t { return nvmlDeviceGetCount_v2(n) }

//export nvmlDeviceGetHandleByIndex_v2
func nvmlDeviceGetHandleByIndex_v2(i C.uint, d *C.nvmlDevice_t) C.nvmlReturn_t {
	return withHost(func(h *nvmlsim.Host) C.nvmlReturn_t {
		if d == nil || int(i) >= len(h.GPUs) {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*d = lib.handle(h.GPUs[i].Address)
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetHandleByIndex
func nvmlDeviceGetHandleByIndex(i C.uint, d *C.nvmlDevice_t) C.nvmlReturn_t {
	return nvmlDeviceGetHandleByIndex_v2(i, d)
}

func handleBy(d *C.nvmlDevice_t, match func(g nvmlsim.GPU) bool) C.nvmlReturn_t {
	return withHost(func(h *nvmlsim.Host) C.nvmlReturn_t {
		if d == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		for _, g := range h.GPUs {
			if match(g) {
				*d = lib.handle(g.Address)
				return C.NVML_SUCCESS
			}
		}
		return C.NVML_ERROR_NOT_FOUND
	})
}

//export nvmlDeviceGetHandleByUUID
func nvmlDeviceGetHandleByUUID(uuid *C.char, d *C.nvmlDevice_t) C.nvmlReturn_t {
	if uuid == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	u := C.GoString(uuid)
	return handleBy(d, func(g nvmlsim.GPU) bool { return g.UUID == u })
}

// busID normalises a PCI bus id as NVML accepts it (domain optional, any
// case) to the 8-digit-domain form NVML reports.
func busID(s string) string {
	var dom, bus, dev, fn uint
	if _, err := fmt.Sscanf(s, "%x:%x:%x.%x", &dom, &bus, &dev, &fn); err != nil {
		if _, err := fmt.Sscanf(s, "%x:%x.%x", &bus, &dev, &fn); err != nil {
			return ""
		}
		dom = 0
	}
	return fmt.Sprintf("%08X:%02X:%02X.%X", dom, bus, dev, fn)
}

//export nvmlDeviceGetHandleByPciBusId_v2
func nvmlDeviceGetHandleByPciBusId_v2(id *C.char, d *C.nvmlDevice_t) C.nvmlReturn_t {
	if id == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	want := busID(C.GoString(id))
	if want == "" {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	return handleBy(d, func(g nvmlsim.GPU) bool { return busID(g.Address) == want })
}

//export nvmlDeviceGetHandleByPciBusId
func nvmlDeviceGetHandleByPciBusId(id *C.char, d *C.nvmlDevice_t) C.nvmlReturn_t {
	return nvmlDeviceGetHandleByPciBusId_v2(id, d)
}

//export nvmlDeviceGetUUID
func nvmlDeviceGetUUID(d C.nvmlDevice_t, buf *C.char, n C.uint) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t { return putString(buf, n, g.UUID) })
}

//export nvmlDeviceGetName
func nvmlDeviceGetName(d C.nvmlDevice_t, buf *C.char, n C.uint) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t { return putString(buf, n, g.Model.Name) })
}

//export nvmlDeviceGetIndex
func nvmlDeviceGetIndex(d C.nvmlDevice_t, i *C.uint) C.nvmlReturn_t {
	return withGPU(d, func(idx int, _ *nvmlsim.GPU) C.nvmlReturn_t {
		if i == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*i = C.uint(idx)
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetMinorNumber
func nvmlDeviceGetMinorNumber(d C.nvmlDevice_t, m *C.uint) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
		if m == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*m = C.uint(g.Minor)
		return C.NVML_SUCCESS
	})
}

func fillPCI(g *nvmlsim.GPU, p *C.nvmlPciInfo_t) {
	var dom, bus, dev, fn uint
	_, _ = fmt.Sscanf(g.Address, "%x:%x:%x.%x", &dom, &bus, &dev, &fn)
	*p = C.nvmlPciInfo_t{}
	p.domain, p.bus, p.device = C.uint(dom), C.uint(bus), C.uint(dev)
	p.pciDeviceId = C.uint(uint32(g.Device)<<16 | uint32(g.Vendor))
	p.pciSubSystemId = C.uint(uint32(g.SubDevice)<<16 | uint32(g.SubVendor))
	long := busID(g.Address)
	legacy := fmt.Sprintf("%04X:%02X:%02X.%X", dom, bus, dev, fn)
	for i := 0; i < len(long) && i < len(p.busId)-1; i++ {
		p.busId[i] = C.char(long[i])
	}
	for i := 0; i < len(legacy) && i < len(p.busIdLegacy)-1; i++ {
		p.busIdLegacy[i] = C.char(legacy[i])
	}
}

//export nvmlDeviceGetPciInfo_v3
func nvmlDeviceGetPciInfo_v3(d C.nvmlDevice_t, p *C.nvmlPciInfo_t) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
		if p == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		fillPCI(g, p)
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetPciInfo_v2
func nvmlDeviceGetPciInfo_v2(d C.nvmlDevice_t, p *C.nvmlPciInfo_t) C.nvmlReturn_t {
	return nvmlDeviceGetPciInfo_v3(d, p)
}

//export nvmlDeviceGetPciInfo
func nvmlDeviceGetPciInfo(d C.nvmlDevice_t, p *C.nvmlPciInfo_t) C.nvmlReturn_t {
	return nvmlDeviceGetPciInfo_v3(d, p)
}

// reservedMiB is what the driver keeps of a GPU's memory for itself.
const reservedMiB = 512

//export nvmlDeviceGetMemoryInfo
func nvmlDeviceGetMemoryInfo(d C.nvmlDevice_t, m *C.nvmlMemory_t) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
		if m == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		total := C.ulonglong(g.Model.MemoryMiB << 20)
		used := C.ulonglong(reservedMiB << 20)
		m.total, m.used, m.free = total, used, total-used
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetMemoryInfo_v2
func nvmlDeviceGetMemoryInfo_v2(d C.nvmlDevice_t, m *C.nvmlMemory_v2_t) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
		if m == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		total := C.ulonglong(g.Model.MemoryMiB << 20)
		m.total, m.reserved, m.used, m.free = total, reservedMiB<<20, 0, total-reservedMiB<<20
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetCudaComputeCapability
func nvmlDeviceGetCudaComputeCapability(d C.nvmlDevice_t, major, minor *C.int) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
		if major == nil || minor == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*major, *minor = C.int(g.Model.Major), C.int(g.Model.Minor)
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetArchitecture
func nvmlDeviceGetArchitecture(d C.nvmlDevice_t, a *C.nvmlDeviceArchitecture_t) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
		if a == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*a = C.nvmlDeviceArchitecture_t(g.Model.Arch)
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetBrand
func nvmlDeviceGetBrand(d C.nvmlDevice_t, b *C.nvmlBrandType_t) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
		if b == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*b = C.NVML_BRAND_NVIDIA
		if strings.HasPrefix(g.Model.Name, "Tesla") {
			*b = C.NVML_BRAND_TESLA
		}
		return C.NVML_SUCCESS
	})
}

// MIG: a MIG-capable GPU reports MIG disabled (current and pending); the
// others NOT_SUPPORTED. The simulated host has no MIG instances yet.

//export nvmlDeviceGetMigMode
func nvmlDeviceGetMigMode(d C.nvmlDevice_t, cur, pending *C.uint) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
		if !g.Model.MIG {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		if cur == nil || pending == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*cur, *pending = C.NVML_DEVICE_MIG_DISABLE, C.NVML_DEVICE_MIG_DISABLE
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceIsMigDeviceHandle
func nvmlDeviceIsMigDeviceHandle(d C.nvmlDevice_t, is *C.uint) C.nvmlReturn_t {
	return withGPU(d, func(_ int, _ *nvmlsim.GPU) C.nvmlReturn_t {
		if is == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*is = 0
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetMaxMigDeviceCount
func nvmlDeviceGetMaxMigDeviceCount(d C.nvmlDevice_t, n *C.uint) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
		if n == nil {
			return C.NVML_ERROR_INVALID_ARGUMENT
		}
		*n = 0
		if g.Model.MIG {
			*n = 7
		}
		return C.NVML_SUCCESS
	})
}

//export nvmlDeviceGetMigDeviceHandleByIndex
func nvmlDeviceGetMigDeviceHandleByIndex(d C.nvmlDevice_t, i C.uint, md *C.nvmlDevice_t) C.nvmlReturn_t {
	return withGPU(d, func(_ int, g *nvmlsim.GPU) C.nvmlReturn_t {
		if !g.Model.MIG {
			return C.NVML_ERROR_NOT_SUPPORTED
		}
		return C.NVML_ERROR_NOT_FOUND // MIG disabled: no MIG device
	})
}

//export nvmlDeviceGetGpuInstanceId
func nvmlDeviceGetGpuInstanceId(d C.nvmlDevice_t, id *C.uint) C.nvmlReturn_t {
	return withGPU(d, func(int, *nvmlsim.GPU) C.nvmlReturn_t { return C.NVML_ERROR_INVALID_ARGUMENT }) // not a MIG device
}

//export nvmlDeviceGetComputeInstanceId
func nvmlDeviceGetComputeInstanceId(d C.nvmlDevice_t, id *C.uint) C.nvmlReturn_t {
	return withGPU(d, func(int, *nvmlsim.GPU) C.nvmlReturn_t { return C.NVML_ERROR_INVALID_ARGUMENT })
}

//export nvmlDeviceGetNumaNodeId
func nvmlDeviceGetNumaNodeId(d C.nvmlDevice_t, node *C.uint) C.nvmlReturn_t {
	return withGPU(d, func(int, *nvmlsim.GPU) C.nvmlReturn_t { return C.NVML_ERROR_NOT_SUPPORTED })
}

// unsafeSlice views n C values at p.
func unsafeSlice[T any](p *T, n int) []T { return unsafe.Slice(p, n) }
