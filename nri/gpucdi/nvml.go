//go:build cgo

package gpucdi

import (
	"fmt"
	"path"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// nvmlLibrary is the NVML library OpenNVML loads.
const nvmlLibrary = "libnvidia-ml.so.1"

// Generate makes the CDI spec of the GPUs lib (an initialised NVML)
// reports, reading the host through the roots of o.
func Generate(lib nvml.Interface, o Options) (*cdispec.Spec, error) {
	inv, err := Discover(lib)
	if err != nil {
		return nil, err
	}
	return Build(inv, o)
}

// Discover reads the inventory of lib, an initialised NVML. Errors name the
// GPU or MIG device and wrap the nvml.Return.
func Discover(lib nvml.Interface) (Inventory, error) {
	version, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return Inventory{}, fmt.Errorf("NVML driver version: %w", ret)
	}
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Inventory{}, fmt.Errorf("NVML GPU count: %w", ret)
	}
	inv := Inventory{DriverVersion: version}
	for i := range count {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return Inventory{}, fmt.Errorf("GPU %d: handle: %w", i, ret)
		}
		g, err := discoverGPU(i, d)
		if err != nil {
			return Inventory{}, err
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv, nil
}

func discoverGPU(i int, d nvml.Device) (GPU, error) {
	g := GPU{Index: i}
	var ret nvml.Return
	if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("GPU %d: UUID: %w", i, ret)
	}
	if g.Minor, ret = d.GetMinorNumber(); ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("GPU %d (%s): minor number: %w", i, g.UUID, ret)
	}
	mode, _, ret := d.GetMigMode()
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED:
		return g, nil
	case ret != nvml.SUCCESS:
		return GPU{}, fmt.Errorf("GPU %d (%s): MIG mode: %w", i, g.UUID, ret)
	case mode != nvml.DEVICE_MIG_ENABLE:
		return g, nil
	}
	slots, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("GPU %d (%s): MIG device count: %w", i, g.UUID, ret)
	}
	for j := range slots {
		md, ret := d.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // an empty slot, as go-nvlib's VisitMigDevices
		}
		if ret != nvml.SUCCESS {
			return GPU{}, fmt.Errorf("GPU %d (%s): MIG device %d: %w", i, g.UUID, j, ret)
		}
		m := MIG{Index: j}
		if m.UUID, ret = md.GetUUID(); ret != nvml.SUCCESS {
			return GPU{}, fmt.Errorf("MIG device %d:%d: UUID: %w", i, j, ret)
		}
		if m.GI, ret = md.GetGpuInstanceId(); ret != nvml.SUCCESS {
			return GPU{}, fmt.Errorf("MIG device %d:%d (%s): GPU instance: %w", i, j, m.UUID, ret)
		}
		if m.CI, ret = md.GetComputeInstanceId(); ret != nvml.SUCCESS {
			return GPU{}, fmt.Errorf("MIG device %d:%d (%s): compute instance: %w", i, j, m.UUID, ret)
		}
		g.MIG = append(g.MIG, m)
	}
	return g, nil
}

// OpenNVML loads and initialises libnvidia-ml.so.1 from the library
// folders of o's driver root: the only code that touches the real library.
// shutdown releases it. When the library is missing or cannot be loaded,
// the error wraps nvml.ERROR_LIBRARY_NOT_FOUND and says why.
func OpenNVML(o Options) (lib nvml.Interface, shutdown func() error, err error) {
	o = o.withDefaults()
	p, err := findLibrary(driverRoot(o.DriverRoot), o.LibDirs, nvmlLibrary)
	if err != nil {
		return nil, nil, err
	}
	l := nvml.New(nvml.WithLibraryPath(p))
	if ret := l.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			// Init drops dlopen's reason; ask dlopen again.
			probe := dl.New(p, dl.RTLD_LAZY|dl.RTLD_LOCAL)
			if err := probe.Open(); err != nil {
				return nil, nil, fmt.Errorf("load NVML %s: %w (%w)", p, ret, err)
			}
			_ = probe.Close()
		}
		return nil, nil, fmt.Errorf("initialise NVML %s: %w", p, ret)
	}
	shutdown = func() error {
		if ret := l.Shutdown(); ret != nvml.SUCCESS {
			return fmt.Errorf("shut down NVML %s: %w", p, ret)
		}
		return nil
	}
	return l, shutdown, nil
}

// findLibrary returns the host path of the regular file name resolves to
// in the first of dirs (inside root) that has it.
func findLibrary(root driverRoot, dirs []string, name string) (string, error) {
	for _, dir := range dirs {
		target, ok, err := root.regular(path.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("load NVML: %w", err)
		}
		if ok {
			return root.join(target), nil
		}
	}
	return "", fmt.Errorf("load NVML: %s not found under driver root %s (searched %s): %w",
		name, root, strings.Join(dirs, ", "), nvml.ERROR_LIBRARY_NOT_FOUND)
}
