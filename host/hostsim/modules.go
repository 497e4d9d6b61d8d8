package hostsim

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/ulikunitz/xz"
	"github.com/ulikunitz/xz/lzma"
)

// The simulated kernel's modules live as a real distribution ships them:
// lib/modules/<release>/kernel/drivers/sim/<name>.ko.xz, xz-compressed
// (as Debian trixie's), indexed by modules.dep and modules.alias, loaded by
// host.ModuleLoader through FinitModule and InitModule below. The kernel
// has no decompressor of its own (no sys/module/compression), so the
// loader decompresses. A module loads only after the modules it needs, as
// the real kernel refuses one with unknown symbols.

// simModule is one module the simulated kernel knows.
type simModule struct {
	name    string
	deps    []string // modules it needs (their symbols)
	loaded  bool
	written bool // its file is in the modules folder
	// flavour is the build of the module the modules folder holds (NVIDIA's
	// nvidia.ko: FlavourDataCentre or FlavourVGPU); loadedFlavour the
	// build that is loaded, which a driver container may have brought.
	flavour, loadedFlavour string
	// external: the module is not in the host's modules folder (NVIDIA's
	// vGPU Manager container brings it: ModuleImage).
	external bool
}

// moduleMagic starts every simulated module image after the ELF magic.
const moduleMagic = "\x7fELF hostsim module "

// moduleFile is a module's file relative to the modules folder, as
// depmod names it (dashes as the build had them; the sim uses dashes).
func moduleFile(name string) string {
	return "kernel/drivers/sim/" + strings.ReplaceAll(name, "_", "-") + ".ko.xz"
}

// addModule registers a module and, as driverless modules, what it needs.
// k.mu is held.
func (k *Kernel) addModule(name string, deps []string, loaded bool) error {
	for _, d := range deps {
		if err := k.addModule(d, nil, loaded); err != nil {
			return err
		}
	}
	m, ok := k.modules[name]
	if !ok {
		m = &simModule{name: name}
		k.modules[name] = m
	}
	m.deps = append(m.deps, deps...)
	if loaded && !m.loaded {
		return k.markLoaded(m)
	}
	return nil
}

// markLoaded shows a module as loaded in sysfs. k.mu is held.
func (k *Kernel) markLoaded(m *simModule) error {
	dir := k.sys("module", m.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	m.loaded = true
	m.loadedFlavour = m.flavour
	return os.WriteFile(filepath.Join(dir, "initstate"), []byte("live\n"), 0o444)
}

// writeModules writes every module file and modules.dep. k.mu is held.
func (k *Kernel) writeModules() error {
	dir := filepath.Join(k.root, k.modulesRel())
	var dep []string
	for _, m := range k.modules {
		file := moduleFile(m.name)
		line := file + ":"
		for _, d := range m.deps {
			line += " " + moduleFile(d)
		}
		dep = append(dep, line)
		if m.written || m.external {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(file))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		img := moduleImage(m.name, m.flavour, m.deps)
		var out bytes.Buffer
		// The smallest dictionary: the images are a few bytes, and the default 8 MiB costs
		// every fixture build dearly.
		w, err := xz.WriterConfig{DictCap: lzma.MinDictCap}.NewWriter(&out)
		if err != nil {
			return err
		}
		if _, err := w.Write(img); err != nil {
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
			return err
		}
		m.written = true
	}
	sort.Strings(dep)
	return os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(strings.Join(dep, "\n")+"\n"), 0o644)
}

// FinitModule implements host.ModuleKernel: the module in f. The simulated
// kernel decompresses nothing: a flag is EINVAL, as on a kernel built
// without MODULE_DECOMPRESS.
func (k *Kernel) FinitModule(f *os.File, flags int) error {
	if flags != 0 {
		return syscall.EINVAL
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	return k.InitModule(b)
}

// InitModule implements host.ModuleKernel: it loads a module image,
// registering the PCI driver the module brings. An image that is no
// (simulated) module is ENOEXEC; a module already loaded EEXIST; one whose
// dependencies are not loaded ENOENT (unknown symbols).
func (k *Kernel) InitModule(image []byte) error {
	rest, ok := bytes.CutPrefix(image, []byte(moduleMagic))
	if !ok {
		return syscall.ENOEXEC
	}
	lines := strings.Split(string(rest), "\n")
	name, flavour := lines[0], ""
	for _, l := range lines[1:] {
		if v, ok := strings.CutPrefix(l, "flavour: "); ok {
			flavour = v
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.modules[name]
	if !ok {
		return syscall.ENOEXEC
	}
	if m.loaded {
		return syscall.EEXIST
	}
	for _, d := range m.deps {
		if dm := k.modules[d]; dm == nil || !dm.loaded {
			return syscall.ENOENT
		}
	}
	if name == ModuleVGPUVFIO && k.modules[ModuleNVIDIA].loadedFlavour != FlavourVGPU {
		return syscall.ENOENT // the data-centre nvidia.ko exports none of the vGPU symbols it needs
	}
	if err := k.markLoaded(m); err != nil {
		return err
	}
	if flavour != "" {
		m.loadedFlavour = flavour
	}
	for _, d := range k.drivers {
		if d.Module == name && !d.Loaded {
			if err := k.registerDriver(d); err != nil {
				return err
			}
			if err := k.probeAll(d); err != nil {
				return err
			}
		}
	}
	if name == ModuleVGPUVFIO {
		return k.wakeCards()
	}
	return nil
}

// probeAll is the kernel's driver registration: every unbound function the
// driver matches is probed. vfio drivers are left out (the VFIO manager
// binds through driver_override and a bind of its own). k.mu is held.
func (k *Kernel) probeAll(d *Driver) error {
	if d.VFIO {
		return nil
	}
	for _, a := range sortedAddrs(k.funcs) {
		f := k.funcs[a]
		if k.driverOf(f) == "" && k.canBind(d, f) {
			if err := k.bind(f, d); err != nil {
				return err
			}
		}
	}
	return nil
}

// moduleImage is a simulated module file's content.
func moduleImage(name, flavour string, deps []string) []byte {
	var img bytes.Buffer
	fmt.Fprintf(&img, "%s%s\nneeds: %s\n", moduleMagic, name, strings.Join(deps, " "))
	if flavour != "" {
		fmt.Fprintf(&img, "flavour: %s\n", flavour)
	}
	return img.Bytes()
}

// ModuleLoaded reports whether the simulated kernel has loaded a module.
func (k *Kernel) ModuleLoaded(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.modules[name]
	return ok && m.loaded
}
