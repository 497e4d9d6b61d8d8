package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

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

// DriverLoaded reports whether a PCI driver is registered.
func (h *Host) DriverLoaded(driver string) bool {
	if !validName(driver) {
		return false
	}
	_, err := os.Stat(filepath.Join(h.sysfs, "bus", "pci", "drivers", driver))
	return err == nil
}

// DriverOfModule maps a module name to the PCI driver it registers, using
// /sys/module/<mod>/drivers/pci:<name> when the module is loaded.
func (h *Host) DriverOfModule(module string) string {
	if !validName(module) {
		return ""
	}
	names, _ := dirNames(filepath.Join(h.sysfs, "module", module, "drivers"))
	for _, n := range names {
		if d, ok := strings.CutPrefix(n, "pci:"); ok {
			return d
		}
	}
	if module == "vfio_pci" {
		return "vfio-pci"
	}
	for _, cand := range []string{module, strings.ReplaceAll(module, "_", "-")} {
		if h.DriverLoaded(cand) {
			return cand
		}
	}
	return module
}

// IsVFIODriver reports whether a driver is vfio-pci or a vfio variant.
func IsVFIODriver(driver string) bool {
	return driver == "vfio-pci" || strings.Contains(driver, "vfio")
}
