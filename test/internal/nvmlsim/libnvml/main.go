//go:build nvmlsim

// Command libnvml is the simulated NVML as a C-ABI shared library: built
// with -buildmode=c-shared into libnvidia-ml.so.1 (nvmlsim.Build), it
// answers the NVML calls of our code (gpucdi, vgpu/nvmltypes), NVIDIA's
// k8s-device-plugin and nvidia-ctk from the simulated host whose root
// SANDBOX_GPU_NVMLSIM_ROOT names, read at nvmlInit. The build tag keeps it
// out of `go build ./...` and `go vet ./...`: its preamble includes
// go-nvml's nvml.h, whose folder Build passes in CGO_CFLAGS.
//
// A C library holds process-wide state (the init count, the handles it
// gave out); here that is the one package-level value, lib, behind a mutex.
package main

/*
#cgo CFLAGS: -DNVML_NO_UNVERSIONED_FUNC_DEFS=1
#include <stdlib.h>
#include <string.h>
// The prototypes whose const-qualified pointers cgo's export header cannot
// spell are renamed away; the exports below define the real names.
#define nvmlErrorString nvmlErrorString_hidden
#define nvmlDeviceGetHandleByUUID nvmlDeviceGetHandleByUUID_hidden
#define nvmlDeviceGetHandleByPciBusId_v2 nvmlDeviceGetHandleByPciBusId_v2_hidden
#define nvmlDeviceGetHandleByPciBusId nvmlDeviceGetHandleByPciBusId_hidden
#include "nvml.h"
#undef nvmlErrorString
#undef nvmlDeviceGetHandleByUUID
#undef nvmlDeviceGetHandleByPciBusId_v2
#undef nvmlDeviceGetHandleByPciBusId

static void nvmlsim_copy(char *dst, const char *src, size_t n) { memcpy(dst, src, n); dst[n] = 0; }
*/
import "C"

import (
	"errors"
	"sync"
	"unsafe"

	"github.com/sandbox-gpu/sandbox-gpu/test/internal/nvmlsim"
)

func main() {}

// state is the library's process-wide state.
type state struct {
	mu      sync.Mutex
	inits   int
	host    *nvmlsim.Host
	handles map[string]C.nvmlDevice_t // by PCI address, stable for the process
	addrs   map[*C.struct_nvmlDevice_st]string
	errs    map[C.nvmlReturn_t]*C.char
}

var lib = &state{handles: map[string]C.nvmlDevice_t{}, addrs: map[*C.struct_nvmlDevice_st]string{}, errs: map[C.nvmlReturn_t]*C.char{}}

func (s *state) init() C.nvmlReturn_t {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inits > 0 {
		s.inits++
		return C.NVML_SUCCESS
	}
	// C's environment, not the Go runtime's copy taken at load time: the
	// process may have set the root since.
	name := C.CString(nvmlsim.RootEnv)
	defer C.free(unsafe.Pointer(name))
	root := ""
	if p := C.getenv(name); p != nil {
		root = C.GoString(p)
	}
	h, err := nvmlsim.Read(root)
	if err != nil {
		if errors.Is(err, nvmlsim.ErrNoDriver) {
			return C.NVML_ERROR_DRIVER_NOT_LOADED
		}
		return C.NVML_ERROR_UNKNOWN
	}
	s.host = h
	s.inits = 1
	return C.NVML_SUCCESS
}

func (s *state) shutdown() C.nvmlReturn_t {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inits == 0 {
		return C.NVML_ERROR_UNINITIALIZED
	}
	s.inits--
	if s.inits == 0 {
		s.host = nil
	}
	return C.NVML_SUCCESS
}

// handle returns the stable handle of the GPU at addr. s.mu is held.
func (s *state) handle(addr string) C.nvmlDevice_t {
	h, ok := s.handles[addr]
	if !ok {
		// A real, never-freed C address: an opaque handle.
		h = C.nvmlDevice_t{handle: (*C.struct_nvmlDevice_st)(C.malloc(1))}
		s.handles[addr], s.addrs[h.handle] = h, addr
	}
	return h
}

// withHost runs f on the host read at init, or says NVML is uninitialised.
func withHost(f func(h *nvmlsim.Host) C.nvmlReturn_t) C.nvmlReturn_t {
	lib.mu.Lock()
	defer lib.mu.Unlock()
	if lib.inits == 0 {
		return C.NVML_ERROR_UNINITIALIZED
	}
	return f(lib.host)
}

// withGPU runs f on the GPU behind d: INVALID_ARGUMENT for a handle this
// library did not give, GPU_IS_LOST for a GPU that has left the nvidia
// driver since (moved to vfio-pci, removed).
func withGPU(d C.nvmlDevice_t, f func(i int, g *nvmlsim.GPU) C.nvmlReturn_t) C.nvmlReturn_t {
	return withHost(func(h *nvmlsim.Host) C.nvmlReturn_t { return withGPULocked(h, d, f) })
}

// withGPULocked is withGPU inside withHost.
func withGPULocked(h *nvmlsim.Host, d C.nvmlDevice_t, f func(i int, g *nvmlsim.GPU) C.nvmlReturn_t) C.nvmlReturn_t {
	addr, ok := lib.addrs[d.handle]
	if !ok {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	for i := range h.GPUs {
		if h.GPUs[i].Address == addr {
			if !nvmlsim.OnNVIDIA(h.Root, addr) {
				return C.NVML_ERROR_GPU_IS_LOST
			}
			return f(i, &h.GPUs[i])
		}
	}
	return C.NVML_ERROR_GPU_IS_LOST
}

// putString copies s and its NUL into buf of length n, or says the buffer
// is too small, as NVML does.
func putString(buf *C.char, n C.uint, s string) C.nvmlReturn_t {
	if buf == nil {
		return C.NVML_ERROR_INVALID_ARGUMENT
	}
	if C.uint(len(s)) >= n {
		return C.NVML_ERROR_INSUFFICIENT_SIZE
	}
	cs := C.CString(s)
	defer C.free(unsafe.Pointer(cs))
	C.nvmlsim_copy(buf, cs, C.size_t(len(s)))
	return C.NVML_SUCCESS
}

// errorStrings are the real library's texts for the returns it gives.
var errorStrings = map[C.nvmlReturn_t]string{
	C.NVML_SUCCESS:                  "Success",
	C.NVML_ERROR_UNINITIALIZED:      "Uninitialized",
	C.NVML_ERROR_INVALID_ARGUMENT:   "Invalid Argument",
	C.NVML_ERROR_NOT_SUPPORTED:      "Not Supported",
	C.NVML_ERROR_NO_PERMISSION:      "Insufficient Permissions",
	C.NVML_ERROR_NOT_FOUND:          "Not Found",
	C.NVML_ERROR_INSUFFICIENT_SIZE:  "Insufficient Size",
	C.NVML_ERROR_DRIVER_NOT_LOADED:  "Driver Not Loaded",
	C.NVML_ERROR_TIMEOUT:            "Timeout",
	C.NVML_ERROR_GPU_IS_LOST:        "GPU is lost",
	C.NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
	C.NVML_ERROR_LIBRARY_NOT_FOUND:  "NVML Shared Library Not Found",
	C.NVML_ERROR_IN_USE:             "In use by another client",
	C.NVML_ERROR_UNKNOWN:            "Unknown Error",
}

//export nvmlErrorString
func nvmlErrorString(r C.nvmlReturn_t) *C.char {
	lib.mu.Lock()
	defer lib.mu.Unlock()
	if s, ok := lib.errs[r]; ok {
		return s
	}
	text, ok := errorStrings[r]
	if !ok {
		text = "Unknown Error"
	}
	s := C.CString(text) // kept for the process: callers hold it
	lib.errs[r] = s
	return s
}
