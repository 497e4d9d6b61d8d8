package hostsim

import (
	"fmt"
	"path/filepath"
	"sort"
)

// Standard drivers of a GPU host, with the id-table aliases their modules
// declare (shape as in modules.alias).
func standardDrivers(vfioLoaded bool) []Driver {
	return []Driver{
		{Name: "nvidia", Module: "nvidia", Loaded: true, Aliases: []string{
			"pci:v000010DEd*sv*sd*bc03sc*i*", "pci:v000010DEd*sv*sd*bc06sc80i00"}},
		{Name: "snd_hda_intel", Module: "snd_hda_intel", Loaded: true, Aliases: []string{"pci:v000010DEd*sv*sd*bc04sc03i00"}},
		{Name: "xhci_hcd", Module: "xhci_pci", Loaded: true, Aliases: []string{"pci:v*d*sv*sd*bc0Csc03i30"}},
		{Name: "nvidia-gpu", Module: "i2c_nvidia_gpu", Loaded: true, Aliases: []string{"pci:v000010DEd*sv*sd*bc0Csc80i00"}},
		{Name: "mlx5_core", Module: "mlx5_core", Loaded: true, Aliases: []string{
			"pci:v000015B3d00001021sv*sd*bc*sc*i*", "pci:v000015B3d0000101Dsv*sd*bc*sc*i*"}},
		{Name: "vfio-pci", Module: "vfio_pci", Loaded: vfioLoaded, VFIO: true, Deps: vfioPCIDeps(), Aliases: []string{"vfio_pci:v*d*sv*sd*bc*sc*i*"}},
	}
}

// vfioPCIDeps are the modules vfio-pci and its variants need (modules.dep
// of Debian's 6.1: vfio-pci-core, vfio, irqbypass).
func vfioPCIDeps() []string { return []string{"vfio_pci_core", "vfio", "irqbypass"} }

// Fixture is a named simulated host shape from real GPU servers.
type Fixture struct {
	Name        string
	Description string
	IOMMU       bool
	Drivers     []Driver
	Funcs       []Func
	Holders     []Hold
	DevNodes    []string   // extra device nodes under the dev root
	VGPUs       []VGPUCard // GPUs with NVIDIA's vGPU host driver (vgpufixtures.go)
}

// Hold is a process holding a device node at start.
type Hold struct {
	PID     int
	Comm    string
	DevPath string
}

// Build creates the fixture's simulated host under dir.
func (fx Fixture) Build(dir string, opts ...Option) (*Kernel, error) {
	k, err := New(dir, fx.IOMMU, opts...)
	if err != nil {
		return nil, err
	}
	for _, d := range fx.Drivers {
		if err := k.AddDriver(d); err != nil {
			return nil, fmt.Errorf("fixture %s: driver %s: %w", fx.Name, d.Name, err)
		}
	}
	for _, f := range fx.Funcs {
		if err := k.AddFunction(f); err != nil {
			return nil, fmt.Errorf("fixture %s: %w", fx.Name, err)
		}
	}
	// A host with vGPU-capable GPUs has NVIDIA's vGPU host driver installed
	// and loaded, unless it was built with the data-centre driver
	// (DataCentreDriver): then its GPUs wait, without vGPU files, for a vGPU
	// Manager to load the vGPU host driver (hostdrivers.go).
	vgpuHost := len(fx.VGPUs) > 0 && !k.dataCentre
	if err := k.installNVIDIADriver(vgpuHost); err != nil {
		return nil, fmt.Errorf("fixture %s: %w", fx.Name, err)
	}
	for _, c := range fx.VGPUs {
		enable := k.EnableVGPU
		if !vgpuHost {
			enable = k.addDormant
		}
		if err := enable(c); err != nil {
			return nil, fmt.Errorf("fixture %s: %w", fx.Name, err)
		}
	}
	for _, n := range fx.DevNodes {
		if err := k.makeNode(filepath.Join(k.root, "dev", n)); err != nil {
			return nil, fmt.Errorf("fixture %s: %w", fx.Name, err)
		}
	}
	for _, h := range fx.Holders {
		if err := k.HoldOpen(h.PID, h.Comm, h.DevPath); err != nil {
			return nil, fmt.Errorf("fixture %s: %w", fx.Name, err)
		}
	}
	return k, nil
}

func gpu(addr string, dev uint16, group, numa, minor int) Func {
	return Func{Address: addr, Vendor: 0x10de, Device: dev, SubVendor: 0x10de, SubDevice: 0x16c1, Class: 0x030200,
		Driver: "nvidia", Group: group, NUMA: numa, NvidiaMinor: minor}
}

// Fixtures lists every fixture, sorted by name.
func Fixtures() []Fixture {
	fx := []Fixture{
		{
			Name: "a10", Description: "single A10 server: a 3D-controller GPU alone in its IOMMU group",
			IOMMU: true, Drivers: standardDrivers(true),
			Funcs: []Func{gpu("0000:3b:00.0", 0x2236, 12, 0, 0)},
		},
		{
			Name: "a10x2", Description: "two A10s on two NUMA nodes, each alone in its IOMMU group: the smallest mixed node",
			IOMMU: true, Drivers: standardDrivers(true),
			Funcs: []Func{gpu("0000:3b:00.0", 0x2236, 12, 0, 0), gpu("0000:af:00.0", 0x2236, 60, 1, 1)},
		},
		{
			Name: "workstation", Description: "workstation GPU: VGA, HD audio, USB and UCSI functions in one IOMMU group",
			IOMMU: true, Drivers: standardDrivers(true),
			Funcs: []Func{
				{Address: "0000:01:00.0", Vendor: 0x10de, Device: 0x2230, SubVendor: 0x10de, SubDevice: 0x1459, Class: 0x030000, Driver: "nvidia", Group: 1, NvidiaMinor: 0},
				{Address: "0000:01:00.1", Vendor: 0x10de, Device: 0x1aef, SubVendor: 0x10de, SubDevice: 0x1459, Class: 0x040300, Driver: "snd_hda_intel", Group: 1, NvidiaMinor: -1, ClassDevNodes: []string{"snd/controlC0"}},
				{Address: "0000:01:00.2", Vendor: 0x10de, Device: 0x1ad8, SubVendor: 0x10de, SubDevice: 0x1459, Class: 0x0c0330, Driver: "xhci_hcd", Group: 1, NvidiaMinor: -1},
				{Address: "0000:01:00.3", Vendor: 0x10de, Device: 0x1ad9, SubVendor: 0x10de, SubDevice: 0x1459, Class: 0x0c8000, Driver: "nvidia-gpu", Group: 1, NvidiaMinor: -1},
			},
		},
		hgxH100(),
		{
			Name: "shared-nic", Description: "no ACS: a GPU shares its IOMMU group with an up ConnectX NIC; a second GPU has its own group",
			IOMMU: true, Drivers: standardDrivers(true),
			Funcs: []Func{
				gpu("0000:17:00.0", 0x2331, 30, 0, 0),
				{Address: "0000:18:00.0", Vendor: 0x15b3, Device: 0x101d, SubVendor: 0x15b3, SubDevice: 0x0016, Class: 0x020000, Driver: "mlx5_core", Group: 30, Net: []string{"ens1f0np0"}, NetUp: true, NvidiaMinor: -1},
				gpu("0000:65:00.0", 0x2331, 31, 0, 1),
			},
		},
		{
			Name: "iommu-off", Description: "IOMMU disabled: no IOMMU groups; vfio-pci cannot bind",
			IOMMU: false, Drivers: standardDrivers(true),
			Funcs: []Func{gpu("0000:3b:00.0", 0x2236, -1, 0, 0)},
		},
		{
			Name: "gh200", Description: "Grace Hopper GH200: GPU 10de:2342 takes the nvgrace_gpu_vfio_pci variant driver",
			IOMMU: true,
			Drivers: append(standardDrivers(true), Driver{Name: "nvgrace_gpu_vfio_pci", Module: "nvgrace_gpu_vfio_pci", VFIO: true, Deps: vfioPCIDeps(),
				Aliases: []string{"vfio_pci:v000010DEd00002342sv*sd*bc*sc*i*", "vfio_pci:v000010DEd00002345sv*sd*bc*sc*i*"}}),
			Funcs: []Func{{Address: "0009:01:00.0", Vendor: 0x10de, Device: 0x2342, SubVendor: 0x10de, SubDevice: 0x16eb, Class: 0x030200, Driver: "nvidia", Group: 5, NvidiaMinor: 0}},
		},
		{
			Name: "gpu-in-use", Description: "two A10s on the nvidia driver; a process holds /dev/nvidia0 open",
			IOMMU: true, Drivers: standardDrivers(true),
			Funcs:   []Func{gpu("0000:3b:00.0", 0x2236, 12, 0, 0), gpu("0000:af:00.0", 0x2236, 60, 1, 1)},
			Holders: []Hold{{PID: 4242, Comm: "python3", DevPath: "nvidia0"}},
		},
	}
	fx = append(fx, vgpuFixtures()...)
	sort.Slice(fx, func(i, j int) bool { return fx[i].Name < fx[j].Name })
	return fx
}

// hgxH100 is an HGX H100 8-GPU board: 8 GPUs and 4 NVSwitches behind
// ACS-capable switches (a group each) and 4 ConnectX-7 NICs.
func hgxH100() Fixture {
	fx := Fixture{
		Name: "hgx-h100", Description: "HGX H100: 8 GPUs and 4 NVSwitches, each in its own IOMMU group, plus ConnectX-7 NICs",
		IOMMU: true, Drivers: standardDrivers(true),
		DevNodes: []string{"nvidiactl", "nvidia-nvswitchctl", "nvidia-nvswitch0", "nvidia-nvswitch1", "nvidia-nvswitch2", "nvidia-nvswitch3"},
	}
	buses := []string{"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"}
	for i, b := range buses {
		fx.Funcs = append(fx.Funcs, gpu("0000:"+b+":00.0", 0x2330, 20+i, i/4, i))
	}
	for i := 0; i < 4; i++ {
		fx.Funcs = append(fx.Funcs, Func{Address: fmt.Sprintf("0000:%02x:00.0", 5+i), Vendor: 0x10de, Device: 0x22a3,
			SubVendor: 0x10de, SubDevice: 0x1796, Class: 0x068000, Driver: "nvidia", Group: 40 + i, NvidiaMinor: -1})
	}
	nicBuses := []string{"19", "3b", "9b", "bb"}
	for i, b := range nicBuses {
		fx.Funcs = append(fx.Funcs, Func{Address: "0000:" + b + ":00.0", Vendor: 0x15b3, Device: 0x1021, SubVendor: 0x15b3,
			SubDevice: 0x0041, Class: 0x020700, Driver: "mlx5_core", Group: 50 + i, NUMA: i / 2,
			Net: []string{fmt.Sprintf("ibp%ds0", i)}, NetUp: true, NvidiaMinor: -1})
	}
	return fx
}

// Lookup returns the fixture with the given name, from Fixtures() or
// VGPUFixtures().
func Lookup(name string) (Fixture, error) {
	var names []string
	seen := map[string]bool{}
	for _, fx := range append(Fixtures(), VGPUFixtures()...) {
		if fx.Name == name {
			return fx, nil
		}
		if !seen[fx.Name] {
			seen[fx.Name] = true
			names = append(names, fx.Name)
		}
	}
	return Fixture{}, fmt.Errorf("unknown simulated host %q (have %v)", name, names)
}
