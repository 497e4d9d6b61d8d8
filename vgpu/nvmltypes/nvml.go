//go:build cgo

package nvmltypes

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/nri/gpucdi"
)

// Available says whether this binary can load NVML (it was built with cgo).
const Available = true

// Opener loads and initialises NVML; shutdown releases it.
type Opener func() (lib nvml.Interface, shutdown func() error, err error)

// Namer is a vgpu.TypeNamer backed by NVML. It opens the library on the
// first question (Init once), keeps it until Close (Shutdown once), and
// tries to open it again at a later question while it could not. It never
// fails a question: a library that is missing or cannot be initialised, a
// GPU NVML does not know or cannot name, a call that panics, names nothing
// (or only what NVML did name) and is logged once per distinct failure.
// Types is the strict form. Safe for concurrent use.
type Namer struct {
	open Opener
	log  logr.Logger

	mu       sync.Mutex
	lib      nvml.Interface
	shutdown func() error
	said     map[string]bool // failures logged: the GPU and the message
}

// New returns a Namer that loads libnvidia-ml.so.1 from the library folders
// of o.DriverRoot (gpucdi.OpenNVML, as the NRI plugin's generate-cdi).
func New(o Options) *Namer {
	opts := gpucdi.Options{DriverRoot: o.DriverRoot}
	return NewWith(func() (nvml.Interface, func() error, error) { return gpucdi.OpenNVML(opts) }, o.Log)
}

// NewWith returns a Namer that loads NVML with open.
func NewWith(open Opener, log logr.Logger) *Namer {
	return &Namer{open: open, log: log, said: map[string]bool{}}
}

// TypeNames names the vGPU type ids NVML reports for gpu, supported or
// creatable, by NVML's full names ("NVIDIA H100-40C"; the caller takes the
// last word, as for the driver's sysfs names). It never returns an error:
// see Namer.
func (n *Namer) TypeNames(gpu host.Address) (map[int]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	lib, err := n.lib, error(nil)
	if lib == nil {
		if lib, err = n.openLocked(); err != nil {
			n.sayOnce("", err, "NVML is not available: vGPU type ids that no driver list and no memory name stay unnamed", "gpu", gpu)
			return nil, nil
		}
	}
	types, err := Types(lib, gpu)
	if err != nil {
		n.sayOnce(string(gpu), err, "NVML cannot name the GPU's vGPU types", "gpu", gpu, "named", len(types))
	}
	out := make(map[int]string, len(types))
	for _, t := range types {
		out[t.ID] = t.Name
	}
	return out, nil
}

// openLocked opens NVML; a panic in go-nvml (a library that lacks a
// symbol it expects) is an error.
func (n *Namer) openLocked() (lib nvml.Interface, err error) {
	defer func() {
		if r := recover(); r != nil {
			lib, err = nil, fmt.Errorf("load NVML: panicked: %v", r)
		}
	}()
	lib, shutdown, err := n.open()
	if err != nil {
		return nil, err
	}
	if lib == nil {
		return nil, fmt.Errorf("load NVML: no library: %w", nvml.ERROR_LIBRARY_NOT_FOUND)
	}
	n.lib, n.shutdown = lib, shutdown
	n.log.Info("NVML loaded: it names the vGPU type ids that no driver list and no memory name")
	return lib, nil
}

func (n *Namer) sayOnce(key string, err error, msg string, kv ...any) {
	key += "\x00" + err.Error()
	if n.said[key] {
		return
	}
	n.said[key] = true
	n.log.Error(err, msg, kv...)
}

// Close shuts NVML down if it was loaded; a later question loads it again.
func (n *Namer) Close() (err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	shutdown := n.shutdown
	n.lib, n.shutdown = nil, nil
	if shutdown == nil {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("shut down NVML: panicked: %v", r)
		}
	}()
	return shutdown()
}

// Types reads the vGPU types NVML reports for the GPU at a PCI address (an
// initialised lib): the supported ones and the creatable ones, by id.
// Errors name the GPU and wrap the nvml.Return; a type whose name NVML
// cannot give is left out and named in the error, the others returned. A
// go-nvml call that panics (a library without a symbol go-nvml expects, a
// nil handle from a broken library) is an error naming the GPU.
func Types(lib nvml.Interface, gpu host.Address) (types []Type, err error) {
	defer func() {
		if r := recover(); r != nil {
			types, err = nil, fmt.Errorf("GPU %s: NVML panicked: %v", gpu, r)
		}
	}()
	d, ret := lib.DeviceGetHandleByPciBusId(string(gpu))
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %s: NVML device by PCI bus id: %w", gpu, ret)
	}
	supported, ret := d.GetSupportedVgpus()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %s: supported vGPU types: %w", gpu, ret)
	}
	// What can be created now: a subset of the supported ones on NVIDIA's
	// driver, asked as well in case a driver differs.
	creatable, cret := d.GetCreatableVgpus()
	var errs []error
	if cret != nvml.SUCCESS && cret != nvml.ERROR_NOT_SUPPORTED {
		errs = append(errs, fmt.Errorf("GPU %s: creatable vGPU types: %w", gpu, cret))
	}
	seen := map[uint32]bool{}
	for _, id := range append(supported, creatable...) {
		if id == nil {
			continue
		}
		n := id.GetID()
		if n == 0 || seen[n] {
			continue
		}
		seen[n] = true
		name, ret := id.GetName()
		if ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("GPU %s: vGPU type %d: name: %w", gpu, n, ret))
			continue
		}
		if name == "" {
			errs = append(errs, fmt.Errorf("GPU %s: vGPU type %d: NVML gives no name", gpu, n))
			continue
		}
		t := Type{ID: int(n), Name: name}
		if fb, ret := id.GetFramebufferSize(); ret == nvml.SUCCESS {
			t.FramebufferMiB = fb >> 20
		}
		if m, ret := id.GetMaxInstances(d); ret == nvml.SUCCESS {
			t.MaxInstances = m
		}
		types = append(types, t)
	}
	slices.SortFunc(types, func(a, b Type) int { return a.ID - b.ID })
	return types, errors.Join(errs...)
}
