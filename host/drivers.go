package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Writer performs sysfs writes. The kernel reacts to them; the simulated
// kernel (package hostsim) implements Writer to react the same way.
type Writer interface {
	WriteFile(path string, data []byte) error
}

// OSWriter writes sysfs attributes like echo does: open for writing without
// create or truncate, one write.
type OSWriter struct{}

// WriteFile writes data to an existing attribute file.
func (OSWriter) WriteFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %q to %s: %w", data, path, err)
	}
	return f.Close()
}

// EnsureDriver makes sure a PCI driver is registered, loading its module
// from the modules folder (ModuleLoader) when the host has a ModuleKernel.
func (h *Host) EnsureDriver(ctx context.Context, driver, module string) error {
	if h.DriverLoaded(driver) {
		return nil
	}
	if h.kernel == nil {
		return fmt.Errorf("driver %s is not loaded (module %s)", driver, module)
	}
	dir, err := h.ModulesDir()
	if err != nil {
		return fmt.Errorf("driver %s is not loaded: %w", driver, err)
	}
	if err := NewModuleLoader(dir, h.sysfs, h.kernel).Load(ctx, module); err != nil {
		return fmt.Errorf("driver %s is not loaded: %w", driver, err)
	}
	if !h.DriverLoaded(driver) {
		return fmt.Errorf("driver %s is not registered after loading module %s", driver, module)
	}
	return nil
}

// VFIODriverFor returns the best vfio driver for f: a variant driver whose
// vfio_pci alias matches f's modalias (nvgrace_gpu_vfio_pci on GH200), else
// vfio-pci. It returns the driver name and its module.
func (h *Host) VFIODriverFor(f *Function, aliases []Alias) (driver, module string) {
	if a, ok := BestMatch(aliases, f.Modalias, true); ok && a.Module != "vfio_pci" {
		return h.DriverOfModule(a.Module), a.Module
	}
	return "vfio-pci", "vfio_pci"
}

// HostDriverFor returns the loaded, non-vfio driver the kernel would probe
// f with (the most specific matching alias), or "" when there is none.
func (h *Host) HostDriverFor(f *Function, aliases []Alias) string {
	best, bestScore := "", 0
	for _, a := range aliases {
		if a.IsVFIO() || !a.Matches(f.Modalias) {
			continue
		}
		d := h.DriverOfModule(a.Module)
		if IsVFIODriver(d) || !h.DriverLoaded(d) {
			continue
		}
		if best == "" || a.specificity() > bestScore {
			best, bestScore = d, a.specificity()
		}
	}
	return best
}

// SetDriverOverride writes driver_override; "" clears it.
func (h *Host) SetDriverOverride(a Address, driver string) error {
	data := driver
	if driver == "" {
		data = "\n"
	} else if !validName(driver) {
		return fmt.Errorf("PCI function %s: invalid driver name %q", a, driver)
	}
	p := filepath.Join(h.functionDir(a), "driver_override")
	if err := h.write(p, data); err != nil {
		return fmt.Errorf("PCI function %s: set driver_override to %q: %w", a, driver, err)
	}
	return nil
}

// Unbind detaches a function from driver. Naming the driver (rather than
// following the function's driver link) makes the kernel refuse with
// ENODEV when the function has moved to another driver meanwhile.
func (h *Host) Unbind(a Address, driver string) error {
	if !validName(driver) {
		return fmt.Errorf("PCI function %s: invalid driver name %q", a, driver)
	}
	p := filepath.Join(h.sysfs, "bus", "pci", "drivers", driver, "unbind")
	if err := h.write(p, string(a)); err != nil {
		return fmt.Errorf("PCI function %s: unbind from %s: %w", a, driver, err)
	}
	return nil
}

// Probe asks the kernel to bind f to the driver that matches it (honouring
// driver_override).
func (h *Host) Probe(a Address) error {
	p := filepath.Join(h.sysfs, "bus", "pci", "drivers_probe")
	if err := h.write(p, string(a)); err != nil {
		return fmt.Errorf("PCI function %s: drivers_probe: %w", a, err)
	}
	return nil
}

// write writes a sysfs attribute after checking that the path, symlinks
// resolved, is still under the sysfs root: a crafted tree cannot steer a
// write elsewhere.
func (h *Host) write(p, data string) error {
	root, err := filepath.EvalSymlinks(h.sysfs)
	if err != nil {
		return fmt.Errorf("sysfs root %s: %w", h.sysfs, err)
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return err
	}
	if dir != root && !strings.HasPrefix(dir, root+string(filepath.Separator)) {
		return fmt.Errorf("write %s: resolves to %s, outside the sysfs root %s", p, dir, root)
	}
	if fi, err := os.Lstat(filepath.Join(dir, filepath.Base(p))); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("write %s: the attribute is a symlink", p)
	}
	return h.writer.WriteFile(p, []byte(data))
}

// DriverState says whether a driver is registered and, when it is not,
// whether the kernel has its module.
type DriverState struct {
	Driver   string `json:"driver"`
	Module   string `json:"module"`
	Loaded   bool   `json:"loaded"`
	Loadable bool   `json:"loadable"` // in modules.dep or modules.builtin
}

// DriverStateOf reports a driver's state from sysfs and the modules dir,
// whose index files it reads as the module loader does (readBounded: a
// regular file, never a FIFO, at most maxIndexSize).
func (h *Host) DriverStateOf(driver, module string) (DriverState, error) {
	st := DriverState{Driver: driver, Module: module, Loaded: h.DriverLoaded(driver)}
	dir, err := h.ModulesDir()
	if err != nil {
		return st, err
	}
	want := normalizeModule(module)
	for _, name := range []string{"modules.dep", "modules.builtin"} {
		b, _, err := readBounded(filepath.Join(dir, name), maxIndexSize)
		if err != nil {
			return st, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			file, _, _ := strings.Cut(line, ":")
			if file != "" && normalizeModule(filepath.Base(file)) == want {
				st.Loadable = true
				return st, nil
			}
		}
	}
	return st, nil
}

// normalizeModule turns "vfio-pci.ko.xz" or "vfio-pci" into "vfio_pci".
func normalizeModule(name string) string {
	if i := strings.Index(name, ".ko"); i >= 0 {
		name = name[:i]
	}
	return strings.ReplaceAll(name, "-", "_")
}
