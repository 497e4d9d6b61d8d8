package host

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The roots of the running host, the defaults of Options and of every node
// binary's --sysfs-root, --dev-root and --proc-root.
const (
	DefaultSysfsRoot = "/sys"
	DefaultDevRoot   = "/dev"
	DefaultProcRoot  = "/proc"
)

// Options are the injected host paths and ports of a Host.
type Options struct {
	SysfsRoot string // default /sys
	DevRoot   string // default /dev
	ProcRoot  string // default /proc
	// ModulesRoot holds the node's modules, a folder per kernel release
	// (default /lib/modules, DefaultModulesRoot).
	ModulesRoot string
	// ModulesDir holds the running kernel's modules and their indexes
	// (modules.alias, modules.dep); default <ModulesRoot>/<release> with the
	// release read from <proc>/sys/kernel/osrelease.
	ModulesDir string
	Writer     Writer     // default OSWriter
	Links      LinkStater // default netlink in the current network namespace
	// ModuleKernel loads modules (EnsureDriver); nil: modules are never
	// loaded, a missing driver is an error.
	ModuleKernel ModuleKernel
	// Claimer opens VFIO group nodes exclusively (ClaimGroup); default the
	// OS, whose legacy VFIO group node admits one opener at a time.
	Claimer GroupClaimer
}

// Host is the host model over one set of roots.
type Host struct {
	sysfs, dev, proc, modules string
	modulesRoot               string
	writer                    Writer
	links                     LinkStater
	kernel                    ModuleKernel
	claimer                   GroupClaimer
}

// New returns a Host for the given options, applying the defaults.
func New(o Options) *Host {
	h := &Host{
		sysfs: orDefault(o.SysfsRoot, DefaultSysfsRoot), dev: orDefault(o.DevRoot, DefaultDevRoot),
		proc: orDefault(o.ProcRoot, DefaultProcRoot), modules: o.ModulesDir,
		modulesRoot: orDefault(o.ModulesRoot, DefaultModulesRoot),
		writer:      o.Writer, links: o.Links, kernel: o.ModuleKernel, claimer: o.Claimer,
	}
	if h.claimer == nil {
		h.claimer = OSClaimer{}
	}
	if h.writer == nil {
		h.writer = OSWriter{}
	}
	if h.links == nil {
		h.links = NetlinkLinks{}
	}
	return h
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return filepath.Clean(v)
}

// SysfsRoot, DevRoot and ProcRoot return the roots in use, for tests that
// lay out or inspect a host. Product code outside this package never calls
// them (internal/archtest): it asks the host model instead.
func (h *Host) SysfsRoot() string { return h.sysfs }

// DevRoot returns the /dev root in use.
func (h *Host) DevRoot() string { return h.dev }

// ProcRoot returns the /proc root in use.
func (h *Host) ProcRoot() string { return h.proc }

// IOMMU is the platform's IOMMU state.
type IOMMU struct {
	Enabled       bool
	UnsafeNoIOMMU bool     // vfio's enable_unsafe_noiommu_mode is Y
	Units         []string // /sys/class/iommu entries (dmar0, ivhd0)
}

// Group is one IOMMU group.
type Group struct {
	ID      int
	Type    string // DMA, DMA-FQ, identity, blocked; "" when unknown
	Members []Address
}

// Snapshot is a consistent read of the PCI functions and IOMMU groups.
type Snapshot struct {
	IOMMU     IOMMU
	Functions []*Function // sorted by address
	Groups    map[int]*Group
	byAddr    map[Address]*Function
}

// Function returns the function at addr.
func (s *Snapshot) Function(addr Address) (*Function, bool) {
	f, ok := s.byAddr[addr]
	return f, ok
}

// GroupMembers returns the functions sharing f's IOMMU group (f included),
// or just f without IOMMU.
func (s *Snapshot) GroupMembers(f *Function) []*Function {
	g, ok := s.Groups[f.IOMMUGroup]
	if f.IOMMUGroup == NoGroup || !ok {
		return []*Function{f}
	}
	out := make([]*Function, 0, len(g.Members))
	for _, a := range g.Members {
		if m, ok := s.byAddr[a]; ok {
			out = append(out, m)
		}
	}
	return out
}

// CardFunctions returns the functions in f's slot (one card), f included.
func (s *Snapshot) CardFunctions(f *Function) []*Function {
	var out []*Function
	for _, m := range s.Functions {
		if m.Card() == f.Card() {
			out = append(out, m)
		}
	}
	return out
}

func (h *Host) devicesDir() string { return filepath.Join(h.sysfs, "bus", "pci", "devices") }

func (h *Host) functionDir(a Address) string { return filepath.Join(h.devicesDir(), string(a)) }

// Scan reads every PCI function and the IOMMU state. It changes nothing.
func (h *Host) Scan() (*Snapshot, error) {
	s := &Snapshot{Groups: map[int]*Group{}, byAddr: map[Address]*Function{}}
	names, err := os.ReadDir(h.devicesDir())
	if err != nil {
		return nil, fmt.Errorf("list PCI functions: %w", err)
	}
	for _, e := range names {
		addr, err := ParseAddress(e.Name())
		if err == nil && string(addr) != e.Name() {
			err = fmt.Errorf("PCI address %q is not in canonical form %q", e.Name(), addr)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(h.devicesDir(), e.Name()), err)
		}
		f, err := readFunction(h.functionDir(addr), addr)
		if err != nil {
			if h.vanished(addr) {
				continue // removed while we read it (a VF going away)
			}
			return nil, err
		}
		s.Functions = append(s.Functions, f)
		s.byAddr[addr] = f
	}
	sort.Slice(s.Functions, func(i, j int) bool { return s.Functions[i].Address < s.Functions[j].Address })
	if s.IOMMU, err = h.readIOMMU(); err != nil {
		return nil, err
	}
	for _, f := range s.Functions {
		if f.IOMMUGroup == NoGroup {
			continue
		}
		g, ok := s.Groups[f.IOMMUGroup]
		if !ok {
			g = &Group{ID: f.IOMMUGroup}
			if g.Type, err = readOptionalAttr(filepath.Join(h.sysfs, "kernel", "iommu_groups", strconv.Itoa(g.ID)), "type"); err != nil {
				return nil, err
			}
			s.Groups[g.ID] = g
		}
		g.Members = append(g.Members, f.Address)
	}
	if len(s.Groups) > 0 && len(s.IOMMU.Units) == 0 && !s.IOMMU.UnsafeNoIOMMU {
		s.IOMMU.Enabled = true
	}
	return s, nil
}

// vanished reports whether a function's sysfs entry is gone while the PCI
// devices folder is still there: one function left (a VF removed). The
// folder itself gone is no such removal, and the scan fails: a host that
// cannot be read is no proof that its GPUs are gone.
func (h *Host) vanished(a Address) bool {
	if _, err := os.Stat(h.devicesDir()); err != nil {
		return false
	}
	_, err := os.Stat(h.functionDir(a))
	return errors.Is(err, fs.ErrNotExist)
}

// ReadFunction re-reads one function.
func (h *Host) ReadFunction(a Address) (*Function, error) {
	dir := h.functionDir(a)
	if _, err := os.Lstat(dir); err != nil {
		return nil, fmt.Errorf("PCI function %s: %w", a, err)
	}
	return readFunction(dir, a)
}

func (h *Host) readIOMMU() (IOMMU, error) {
	var st IOMMU
	units, err := dirNames(filepath.Join(h.sysfs, "class", "iommu"))
	if err != nil {
		return st, err
	}
	st.Units = units
	st.Enabled = len(units) > 0
	mode, err := readOptionalAttr(filepath.Join(h.sysfs, "module", "vfio", "parameters"), "enable_unsafe_noiommu_mode")
	if err != nil {
		return st, err
	}
	st.UnsafeNoIOMMU = mode == "Y" || mode == "1"
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

// ErrNoKernelRelease is the error of KernelRelease, ModulesDir, Aliases and
// DriverStateOf when the proc root has no sys/kernel/osrelease (and no
// modules folder was given): the modules folder cannot be found. Callers
// degrade to vfio-pci, without modules.alias, and say so.
var ErrNoKernelRelease = errors.New("kernel release unknown")

// KernelRelease reads the running kernel's release from the proc root.
func (h *Host) KernelRelease() (string, error) {
	rel, err := readAttr(filepath.Join(h.proc, "sys", "kernel"), "osrelease")
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %w", ErrNoKernelRelease, err)
	}
	if err != nil {
		return "", err
	}
	if !validName(rel) {
		return "", fmt.Errorf("%s: invalid kernel release %q", filepath.Join(h.proc, "sys", "kernel", "osrelease"), rel)
	}
	return rel, nil
}

// ModulesDir returns where modules and their indexes are read from: the
// configured folder, else <modules root>/<release> when it has a
// modules.dep (the node's /lib/modules mounted into the pod), else the
// host's /lib/modules/<release> seen through PID 1's root under the proc
// root (a container with the host's PID namespace and no such mount),
// else <modules root>/<release>.
func (h *Host) ModulesDir() (string, error) {
	if h.modules != "" {
		return h.modules, nil
	}
	rel, err := h.KernelRelease()
	if err != nil {
		return "", err
	}
	own := filepath.Join(h.modulesRoot, rel)
	if _, err := os.Stat(filepath.Join(own, "modules.dep")); err == nil {
		return own, nil
	}
	viaInit := filepath.Join(h.proc, "1", "root", "lib", "modules", rel)
	if _, err := os.Stat(filepath.Join(viaInit, "modules.dep")); err == nil {
		return viaInit, nil
	}
	return own, nil
}

// Aliases reads modules.alias and modules.builtin.alias (when present).
// A missing modules.alias yields no aliases: the caller falls back to
// vfio-pci and to the drivers sysfs shows.
func (h *Host) Aliases() ([]Alias, error) {
	dir, err := h.ModulesDir()
	if err != nil {
		return nil, err
	}
	var all []Alias
	for _, name := range []string{"modules.alias", "modules.builtin.alias"} {
		p := filepath.Join(dir, name)
		b, _, err := readIfExists(p)
		if err != nil {
			return nil, err
		}
		as, err := ParseAliases(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		all = append(all, as...)
	}
	return all, nil
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

// validName accepts a single path element that is safe to join.
func validName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00\n")
}
