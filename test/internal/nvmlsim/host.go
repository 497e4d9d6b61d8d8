// Package nvmlsim is a simulated NVML: what NVIDIA's libnvidia-ml.so.1
// reports, read from a simulated host (package host/hostsim) rooted in a
// directory. Read takes the host apart as NVML sees it; the C-ABI library
// in libnvml (built with -buildmode=c-shared by Build) answers NVML calls
// from it. Test code only: nothing here ships.
package nvmlsim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

// RootEnv names the simulated host's root directory the library reads at
// nvmlInit.
const RootEnv = "SANDBOX_GPU_NVMLSIM_ROOT"

// Versions the simulated driver reports (an R580 data-centre driver).
const (
	DriverVersion     = "580.95.05"
	CUDADriverVersion = 13000 // CUDA 13.0, as nvmlSystemGetCudaDriverVersion_v2 encodes it
	NVMLVersion       = "13.580.95.05"
)

// Model is what NVML knows of a GPU product, by PCI device id.
type Model struct {
	Name         string
	MemoryMiB    uint64
	Major, Minor int  // CUDA compute capability
	MIG          bool // MIG-capable
	Arch         int  // nvmlDeviceArchitecture_t
}

// NVML's architecture numbers (nvml.h NVML_DEVICE_ARCH_*).
const (
	archTuring    = 6
	archAmpere    = 7
	archAda       = 8
	archHopper    = 9
	archBlackwell = 10
)

// models are the products the fixtures hold, named as nvidia-smi names them.
var models = map[uint16]Model{
	0x1eb8: {"Tesla T4", 15360, 7, 5, false, archTuring},
	0x20b5: {"NVIDIA A100 80GB PCIe", 81920, 8, 0, true, archAmpere},
	0x20f1: {"NVIDIA A100-PCIE-40GB", 40960, 8, 0, true, archAmpere},
	0x2230: {"NVIDIA RTX A6000", 49140, 8, 6, false, archAmpere},
	0x2235: {"NVIDIA A40", 46068, 8, 6, false, archAmpere},
	0x2236: {"NVIDIA A10", 23028, 8, 6, false, archAmpere},
	0x25b6: {"NVIDIA A16", 15356, 8, 6, false, archAmpere},
	0x26b5: {"NVIDIA L40", 46068, 8, 9, false, archAda},
	0x26b9: {"NVIDIA L40S", 46068, 8, 9, false, archAda},
	0x27b8: {"NVIDIA L4", 23034, 8, 9, false, archAda},
	0x2330: {"NVIDIA H100 80GB HBM3", 81559, 9, 0, true, archHopper},
	0x2331: {"NVIDIA H100 PCIe", 81559, 9, 0, true, archHopper},
	0x2335: {"NVIDIA H200", 143771, 9, 0, true, archHopper},
	0x2342: {"NVIDIA GH200 480GB", 97871, 9, 0, true, archHopper},
	0x2901: {"NVIDIA B200", 183359, 10, 0, true, archBlackwell},
	0x2bb5: {"NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, 12, 0, true, archBlackwell},
}

// VGPUType is a vGPU type NVML reports for a GPU.
type VGPUType struct {
	ID        uint32
	Name      string
	SizeMiB   uint64
	Instances uint32 // max instances on the GPU alone
}

// GPU is one GPU NVML sees.
type GPU struct {
	Address   string // PCI address, 0000:3b:00.0
	Vendor    uint16
	Device    uint16
	SubVendor uint16
	SubDevice uint16
	Minor     int
	UUID      string
	Model     Model
	// Supported and Creatable are the vGPU types of a GPU on the vGPU
	// host driver; nil on the data-centre driver.
	Supported []VGPUType
	Creatable []uint32
}

// Host is the simulated host as NVML sees it at nvmlInit.
type Host struct {
	Root string
	VGPU bool  // the vGPU host driver is loaded (nvidia_vgpu_vfio)
	GPUs []GPU // in PCI order, NVML's index order
}

// ErrNoDriver is returned when the host has no NVIDIA driver loaded: the
// real library's nvmlInit fails with NVML_ERROR_DRIVER_NOT_LOADED.
var ErrNoDriver = errors.New("NVIDIA driver not loaded")

// Read reads the host rooted at root: the GPUs bound to the nvidia driver
// (a GPU on vfio-pci, unbound, or removed is not seen), in PCI order.
func Read(root string) (*Host, error) {
	if root == "" {
		return nil, fmt.Errorf("simulated NVML: %s is not set", RootEnv)
	}
	sys := filepath.Join(root, "sys")
	if _, err := os.Stat(filepath.Join(sys, "module", "nvidia", "initstate")); err != nil {
		return nil, fmt.Errorf("simulated host %s: %w", root, ErrNoDriver)
	}
	h := &Host{Root: root}
	if _, err := os.Stat(filepath.Join(sys, "module", hostsim.ModuleVGPUVFIO, "initstate")); err == nil {
		h.VGPU = true
	}
	devs := filepath.Join(sys, "bus", "pci", "devices")
	entries, err := os.ReadDir(devs)
	if err != nil {
		return nil, fmt.Errorf("simulated host %s: %w", root, err)
	}
	for _, e := range entries {
		g, ok, err := readGPU(root, filepath.Join(devs, e.Name()), e.Name())
		if err != nil {
			return nil, err
		}
		if ok {
			if h.VGPU {
				readVGPU(&g, filepath.Join(devs, e.Name()))
			}
			h.GPUs = append(h.GPUs, g)
		}
	}
	slices.SortFunc(h.GPUs, func(a, b GPU) int { return strings.Compare(a.Address, b.Address) })
	return h, nil
}

// OnNVIDIA says whether the function at addr is still bound to nvidia.
func OnNVIDIA(root, addr string) bool {
	drv, err := os.Readlink(filepath.Join(root, "sys", "bus", "pci", "devices", addr, "driver"))
	return err == nil && filepath.Base(drv) == "nvidia"
}

func readGPU(root, dir, addr string) (GPU, bool, error) {
	if !OnNVIDIA(root, addr) {
		return GPU{}, false, nil
	}
	if _, err := os.Lstat(filepath.Join(dir, "physfn")); err == nil {
		return GPU{}, false, nil // a VF: NVML lists the physical GPUs only
	}
	class, err := hexAttr(dir, "class")
	if err != nil || class>>16 != 0x03 {
		return GPU{}, false, err // NVSwitches and audio functions are not GPUs
	}
	g := GPU{Address: addr}
	for _, a := range []struct {
		name string
		v    *uint16
	}{{"vendor", &g.Vendor}, {"device", &g.Device}, {"subsystem_vendor", &g.SubVendor}, {"subsystem_device", &g.SubDevice}} {
		v, err := hexAttr(dir, a.name)
		if err != nil {
			return GPU{}, false, err
		}
		*a.v = uint16(v)
	}
	info := filepath.Join(root, "proc", "driver", "nvidia", "gpus", addr, "information")
	b, err := os.ReadFile(info)
	if err != nil {
		return GPU{}, false, fmt.Errorf("GPU %s: %w", addr, err)
	}
	g.Minor = -1
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "GPU UUID":
			g.UUID = v
		case "Device Minor":
			if g.Minor, err = strconv.Atoi(v); err != nil {
				return GPU{}, false, fmt.Errorf("GPU %s: %s: device minor %q: %w", addr, info, v, err)
			}
		}
	}
	if g.UUID == "" || g.Minor < 0 {
		return GPU{}, false, fmt.Errorf("GPU %s: %s has no GPU UUID or Device Minor", addr, info)
	}
	m, ok := models[g.Device]
	if !ok {
		m = Model{Name: fmt.Sprintf("NVIDIA Graphics Device %04x", g.Device), MemoryMiB: 16384, Major: 8, Minor: 0}
	}
	g.Model = m
	return g, true, nil
}

func hexAttr(dir, name string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", filepath.Join(dir, name), err)
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", filepath.Join(dir, name), err)
	}
	return v, nil
}
