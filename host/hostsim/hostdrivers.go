package hostsim

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// NVIDIA's two host drivers, as the simulated kernel models them. Both
// build a module named nvidia that registers the PCI driver nvidia; they
// differ in what else comes with it and what it serves:
//   - the data-centre driver (host-installed, or the GPU Operator's driver
//     container): nvidia.ko alone; it serves CUDA containers and shows no
//     vGPU file;
//   - the vGPU host driver (NVIDIA's vGPU Manager, the vgpu-manager
//     operand's image, or installed on the host): its own nvidia.ko plus
//     nvidia_vgpu_vfio, which needs that build's symbols (it does not load
//     over the data-centre nvidia.ko) and, once loaded, gives the GPUs their
//     vGPU files (mdev_supported_types, sriov_numvfs and the VFs'
//     nvidia/creatable_vgpu_types: VGPUCard). It serves no CUDA container.
//
// The change between them is the kernel's: a module is unloaded (DeleteModule,
// refused while it is in use) and the other build loaded (InitModule of
// ModuleImage, or the modules folder through host.ModuleLoader); what sysfs
// shows follows (/sys/module, the GPUs' driver links, the vGPU files).
const (
	ModuleNVIDIA   = "nvidia"
	ModuleVGPUVFIO = "nvidia_vgpu_vfio"

	FlavourDataCentre = "datacenter"
	FlavourVGPU       = "vgpu"
)

// DataCentreDriver builds a host whose installed NVIDIA driver is the
// data-centre driver, loaded at boot, also where a fixture has vGPU-capable
// GPUs (VGPUs): those show no vGPU file until NVIDIA's vGPU host driver is
// loaded (by a vGPU Manager container: ModuleImage). Without it a fixture
// with VGPUs has the vGPU host driver installed and loaded.
func DataCentreDriver() Option {
	return func(k *Kernel) { k.dataCentre = true }
}

// installNVIDIADriver sets which build of nvidia.ko the host has installed
// and loaded (vgpuHost: the vGPU host driver, with nvidia_vgpu_vfio) and
// registers nvidia_vgpu_vfio (in the modules folder only on a vGPU host).
func (k *Kernel) installNVIDIADriver(vgpuHost bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.modules[ModuleNVIDIA]
	if !ok {
		return nil // a host without NVIDIA's driver
	}
	m.flavour = FlavourDataCentre
	if vgpuHost {
		m.flavour = FlavourVGPU
	}
	if m.loaded {
		m.loadedFlavour = m.flavour
	}
	if err := k.addModule(ModuleVGPUVFIO, []string{ModuleNVIDIA}, vgpuHost); err != nil {
		return err
	}
	v := k.modules[ModuleVGPUVFIO]
	v.flavour, v.external = FlavourVGPU, !vgpuHost
	return k.writeModules()
}

// ModuleImage is a module file as a driver container brings it (what it
// hands to init_module(2)): nvidia of a flavour, or nvidia_vgpu_vfio.
func (k *Kernel) ModuleImage(name, flavour string) []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	var deps []string
	if m, ok := k.modules[name]; ok {
		deps = m.deps
	}
	return moduleImage(name, flavour, deps)
}

// DeleteModule unloads a module as delete_module(2) does: ENOENT when it
// is not loaded; EWOULDBLOCK while a loaded module needs it or it is in use
// (nvidia: a process holds an NVIDIA device node; nvidia_vgpu_vfio: a GPU
// holds vGPUs or enabled VFs), with no effect. Otherwise its PCI drivers
// let their functions go (they stay unbound until a driver takes them) and
// are unregistered, and it leaves /sys/module; nvidia_vgpu_vfio takes the
// GPUs' vGPU files with it.
func (k *Kernel) DeleteModule(name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.modules[name]
	if !ok || !m.loaded {
		return syscall.ENOENT
	}
	for _, o := range k.modules {
		if o.loaded && containsString(o.deps, name) {
			return syscall.EWOULDBLOCK
		}
	}
	if name == ModuleNVIDIA && len(k.openNVIDIANodes()) > 0 {
		return syscall.EWOULDBLOCK
	}
	if name == ModuleVGPUVFIO {
		for _, c := range k.cards {
			if n, _ := c.used(); n > 0 || len(c.vfs) > 0 {
				return syscall.EWOULDBLOCK
			}
		}
	}
	for _, d := range k.drivers {
		if d.Module != name || !d.Loaded {
			continue
		}
		for _, a := range sortedAddrs(k.funcs) {
			if f := k.funcs[a]; k.driverOf(f) == d.Name {
				if err := k.unbind(f); err != nil {
					return err
				}
			}
		}
		if err := os.RemoveAll(k.sys("bus", "pci", "drivers", d.Name)); err != nil {
			return err
		}
		d.Loaded = false
	}
	if name == ModuleVGPUVFIO {
		if err := k.sleepCards(); err != nil {
			return err
		}
	}
	m.loaded, m.loadedFlavour = false, ""
	return os.RemoveAll(k.sys("module", name))
}

// openNVIDIANodes lists the NVIDIA device nodes a process holds. k.mu is
// held.
func (k *Kernel) openNVIDIANodes() []string {
	var out []string
	prefix := filepath.Join(k.root, "dev", "nvidia")
	for n := range k.openFiles() {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

// wakeCards gives the dormant vGPU-capable GPUs their vGPU files (the vGPU
// host driver loaded). k.mu is held.
func (k *Kernel) wakeCards() error {
	cards := k.dormant
	k.dormant = nil
	for _, c := range cards {
		if err := k.enableVGPU(c); err != nil {
			return err
		}
	}
	return nil
}

// sleepCards takes the vGPU files of every card away (nvidia_vgpu_vfio
// unloaded; no card holds a vGPU or a VF). k.mu is held.
func (k *Kernel) sleepCards() error {
	for a, c := range k.cards {
		if c.card.Mode == MdevPF {
			if err := os.RemoveAll(filepath.Join(c.pf.dir, "mdev_supported_types")); err != nil {
				return err
			}
			if err := os.RemoveAll(k.sys("class", "mdev_bus", string(a))); err != nil {
				return err
			}
		}
		k.dormant = append(k.dormant, c.card)
		delete(k.cards, a)
	}
	return nil
}

// addDormant keeps a vGPU-capable GPU without its vGPU files until the
// vGPU host driver loads.
func (k *Kernel) addDormant(c VGPUCard) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, err := k.function(c.PF); err != nil {
		return fmt.Errorf("vGPU card: %w", err)
	}
	k.dormant = append(k.dormant, c)
	return nil
}

// InstalledNVIDIADriver is the flavour of nvidia.ko in the host's modules
// folder ("" when the host has none).
func (k *Kernel) InstalledNVIDIADriver() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if m, ok := k.modules[ModuleNVIDIA]; ok {
		return m.flavour
	}
	return ""
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
