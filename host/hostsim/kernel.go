// Package hostsim is a simulated Linux kernel for tests and demos: a sysfs,
// /dev and /proc tree in a directory that looks like the real thing
// (symlinks for driver and iommu_group, IOMMU group folders, module
// folders) and a host.Writer that reacts to writes to driver_override,
// unbind, bind, new_id and drivers_probe the way the kernel does.
package hostsim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// ErrCrashed is returned by every write after the simulated crash point.
var ErrCrashed = errors.New("simulated crash: process killed")

// Write is one sysfs write the kernel received.
type Write struct {
	Path    string // relative to the sysfs root
	Data    string
	Address host.Address // the function it concerns, "" when none
}

// Driver is a PCI driver the simulated kernel knows.
type Driver struct {
	Name    string
	Module  string
	Aliases []string // modules.alias patterns (pci:... or vfio_pci:...)
	VFIO    bool     // needs an IOMMU group, creates /dev/vfio/<group>
	Loaded  bool     // registered at start; otherwise loadable
	Deps    []string // modules the driver's module needs (modules.dep), loaded first
	dynIDs  [][2]uint16
}

// Kernel is a simulated kernel rooted in a directory.
type Kernel struct {
	root    string
	release string

	mu         sync.Mutex
	drivers    map[string]*Driver
	modules    map[string]*simModule // modules.go
	funcs      map[host.Address]*simFunc
	links      map[string]bool
	iommu      bool
	writes     []Write
	crashAfter int
	fault      fault // FailWrites
	latency    func(Write) time.Duration
	violations []string
	nextFD     map[int]int
	deviceFDs  map[string]int            // group nodes held only through a device fd
	claims     map[string]bool           // group nodes claimed (host.GroupClaimer)
	cards      map[host.Address]*simCard // vGPU-capable GPUs by PF (vgpumodel.go)
	charDevs   bool                      // device nodes are character devices (CharDevices)
	dataCentre bool                      // the host's nvidia.ko is the data-centre driver (DataCentreDriver)
	dormant    []VGPUCard                // vGPU-capable GPUs while the vGPU host driver is not loaded (hostdrivers.go)
}

type simFunc struct {
	addr     host.Address
	modalias string
	group    int
	dir      string // absolute, under sys/devices
}

// New creates an empty simulated host under dir (which must exist).
func New(dir string, iommu bool, opts ...Option) (*Kernel, error) {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("simulated host root: %w", err)
	}
	k := &Kernel{
		root: dir, release: "6.1.0-sim-amd64", drivers: map[string]*Driver{}, modules: map[string]*simModule{},
		funcs: map[host.Address]*simFunc{}, links: map[string]bool{}, iommu: iommu,
		nextFD: map[int]int{},
	}
	for _, o := range opts {
		o(k)
	}
	for _, d := range []string{
		"sys/bus/pci/devices", "sys/bus/pci/drivers", "sys/kernel/iommu_groups", "sys/class/iommu",
		"sys/module/vfio/parameters", "dev/vfio", "proc/sys/kernel", k.modulesRel(),
	} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	files := map[string]string{
		"sys/bus/pci/drivers_probe":                             "",
		"sys/bus/pci/drivers_autoprobe":                         "1\n",
		"sys/module/vfio/parameters/enable_unsafe_noiommu_mode": "N\n",
		"proc/sys/kernel/osrelease":                             k.release + "\n",
	}
	if iommu {
		if err := os.MkdirAll(filepath.Join(dir, "sys/class/iommu/dmar0"), 0o755); err != nil {
			return nil, err
		}
	}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			return nil, err
		}
	}
	if err := k.makeNodeMode(filepath.Join(dir, "dev", "vfio", "vfio"), 0o644); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *Kernel) modulesRel() string { return filepath.Join("lib/modules", k.release) }

// Root is the directory holding sys/, dev/, proc/ and lib/.
func (k *Kernel) Root() string { return k.root }

// Options returns host options that read this simulated host and write
// through it.
func (k *Kernel) Options() host.Options {
	return host.Options{
		SysfsRoot: filepath.Join(k.root, "sys"), DevRoot: filepath.Join(k.root, "dev"),
		ProcRoot: filepath.Join(k.root, "proc"), ModulesDir: filepath.Join(k.root, k.modulesRel()),
		Writer: k, Links: k, ModuleKernel: k, Claimer: k,
	}
}

// SetLatency sets a delay the kernel takes for each write (for example
// 200 ms for a GPU unbind).
func (k *Kernel) SetLatency(f func(Write) time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.latency = f
}

// CrashAfter makes every write after the n-th one fail with ErrCrashed,
// with no effect, as if the writer had been killed. n <= 0 disables it.
func (k *Kernel) CrashAfter(n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.crashAfter = n
	k.writes = nil
}

// fault makes writes from the n-th one (counted from FailWrites) fail
// count times with err, with no effect.
type fault struct {
	n, count, seen int
	err            error
}

// FailWrites makes the n-th write from now, and the count-1 writes after
// it, fail with err (an errno such as syscall.EIO) and no effect, as a
// driver that fails a probe for a moment; every later write succeeds
// again. n <= 0 disables it.
func (k *Kernel) FailWrites(n, count int, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fault = fault{n: n, count: count, err: err}
}

// Writes returns the writes received so far.
func (k *Kernel) Writes() []Write {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]Write(nil), k.writes...)
}

// ResetWrites clears the write log.
func (k *Kernel) ResetWrites() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.writes = nil
}

// Violations lists writes that a real kernel would have turned into lost
// work (unbinding a device a process holds).
func (k *Kernel) Violations() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.violations...)
}

// LinkUp implements host.LinkStater for the simulated interfaces.
func (k *Kernel) LinkUp(name string) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.links[name], nil
}

// SetLinkUp sets a simulated interface's state.
func (k *Kernel) SetLinkUp(name string, up bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.links[name] = up
}

// function is the simulated function at a PCI address, for the setup
// methods (a fixture's mistake, not a write the kernel refuses: see lookup
// for those). k.mu is held.
func (k *Kernel) function(addr string) (*simFunc, error) {
	a, err := host.ParseAddress(addr)
	if err != nil {
		return nil, err
	}
	f, ok := k.funcs[a]
	if !ok {
		return nil, fmt.Errorf("no function %s", addr)
	}
	return f, nil
}

// driverName answers name(f) for the function at a under the lock, ""
// when there is no such function.
func (k *Kernel) driverName(a host.Address, name func(*simFunc) string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	f, ok := k.funcs[a]
	if !ok {
		return ""
	}
	return name(f)
}

// DriverOf returns the driver a function is bound to ("" when none).
func (k *Kernel) DriverOf(a host.Address) string { return k.driverName(a, k.driverOf) }

// NativeDriver returns the loaded non-vfio driver the kernel would bind a
// function to on a plain probe, "" when none.
func (k *Kernel) NativeDriver(a host.Address) string {
	return k.driverName(a, func(f *simFunc) string {
		d := k.matchDriver(f, "")
		if d == nil || d.VFIO {
			return ""
		}
		return d.Name
	})
}

// Addresses lists the simulated functions.
func (k *Kernel) Addresses() []host.Address {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]host.Address, 0, len(k.funcs))
	for a := range k.funcs {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// HoldOpen makes a simulated process hold a device node (a path relative
// to the dev root, such as "vfio/12" or "nvidia0") open.
func (k *Kernel) HoldOpen(pid int, comm, devPath string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	pdir := filepath.Join(k.root, "proc", strconv.Itoa(pid))
	if err := os.MkdirAll(filepath.Join(pdir, "fd"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pdir, "comm"), []byte(comm+"\n"), 0o644); err != nil {
		return err
	}
	k.nextFD[pid]++
	fd := strconv.Itoa(2 + k.nextFD[pid])
	return os.Symlink(filepath.Join(k.root, "dev", devPath), filepath.Join(pdir, "fd", fd))
}

// Exit ends a simulated process, closing everything it held.
func (k *Kernel) Exit(pid int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.nextFD, pid)
	return os.RemoveAll(filepath.Join(k.root, "proc", strconv.Itoa(pid)))
}
