package hostsim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// WriteFile implements host.Writer: it applies the write's effect the way
// the kernel's sysfs handlers do.
func (k *Kernel) WriteFile(path string, data []byte) error {
	rel, err := k.resolve(path)
	if err != nil {
		return err
	}
	w := Write{Path: rel, Data: string(data)}
	w.Address = k.addressOf(rel, w.Data)

	k.mu.Lock()
	if k.crashAfter > 0 && len(k.writes) >= k.crashAfter {
		k.mu.Unlock()
		return ErrCrashed
	}
	k.writes = append(k.writes, w)
	if f := &k.fault; f.n > 0 {
		f.seen++
		if f.seen >= f.n && f.seen < f.n+f.count {
			k.mu.Unlock()
			return &os.PathError{Op: "write", Path: path, Err: f.err}
		}
	}
	latency := k.latency
	k.mu.Unlock()

	if latency != nil {
		if d := latency(w); d > 0 {
			time.Sleep(d) // the simulated hardware's own time, not synchronisation
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.apply(rel, strings.TrimSpace(w.Data)); err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// resolve maps a path (through symlinks such as devices/<bdf>/driver) to
// its place relative to the sysfs root, as open(2) would.
func (k *Kernel) resolve(path string) (string, error) {
	dir, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return "", &os.PathError{Op: "open", Path: path, Err: syscall.ENOENT}
	}
	rel, err := filepath.Rel(k.sys(), filepath.Join(dir, filepath.Base(path)))
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", &os.PathError{Op: "open", Path: path, Err: syscall.EACCES}
	}
	return rel, nil
}

func (k *Kernel) addressOf(rel, data string) host.Address {
	if strings.HasSuffix(rel, "/driver_override") {
		a, _ := host.ParseAddress(filepath.Base(filepath.Dir(rel)))
		return a
	}
	if a, err := host.ParseAddress(strings.TrimSpace(data)); err == nil {
		return a
	}
	return deepestAddress(rel) // vGPU attributes: the function the path is under
}

func (k *Kernel) apply(rel, data string) error {
	parts := strings.Split(rel, "/")
	switch {
	case rel == "bus/pci/drivers_probe":
		f, err := k.lookup(data)
		if err != nil {
			return err
		}
		return k.probe(f)
	case len(parts) == 5 && parts[0] == "bus" && parts[2] == "drivers":
		d, ok := k.drivers[parts[3]]
		if !ok || !d.Loaded {
			return syscall.ENOENT
		}
		return k.driverAttr(d, parts[4], data)
	case parts[0] == "devices" && parts[len(parts)-1] == "driver_override":
		a, err := host.ParseAddress(parts[len(parts)-2])
		if err != nil {
			return syscall.EINVAL
		}
		f, ok := k.funcs[a]
		if !ok {
			return syscall.ENODEV
		}
		v := data
		if v == "" {
			v = "(null)"
		}
		return os.WriteFile(filepath.Join(f.dir, "driver_override"), []byte(v+"\n"), 0o644)
	}
	if handled, err := k.applyVGPU(parts, data); handled {
		return err
	}
	return syscall.EACCES
}

func (k *Kernel) driverAttr(d *Driver, attr, data string) error {
	switch attr {
	case "unbind":
		f, err := k.lookup(data)
		if err != nil {
			return err
		}
		if k.driverOf(f) != d.Name {
			return syscall.ENODEV
		}
		return k.unbind(f)
	case "bind":
		f, err := k.lookup(data)
		if err != nil {
			return err
		}
		if k.driverOf(f) != "" {
			return syscall.EBUSY
		}
		if !k.canBind(d, f) {
			return syscall.ENODEV
		}
		return k.bind(f, d)
	case "new_id":
		fields := strings.Fields(data)
		if len(fields) < 2 {
			return syscall.EINVAL
		}
		v, err1 := host.ParseID(fields[0])
		dev, err2 := host.ParseID(fields[1])
		if err1 != nil || err2 != nil {
			return syscall.EINVAL
		}
		d.dynIDs = append(d.dynIDs, [2]uint16{v, dev})
		for _, f := range k.funcs { // the kernel attaches the driver to every idle match
			if k.driverOf(f) == "" && k.canBind(d, f) {
				_ = k.bind(f, d)
			}
		}
		return nil
	case "remove_id":
		return nil
	}
	return syscall.EACCES
}

func (k *Kernel) lookup(data string) (*simFunc, error) {
	a, err := host.ParseAddress(data)
	if err != nil {
		return nil, syscall.EINVAL
	}
	f, ok := k.funcs[a]
	if !ok {
		return nil, syscall.ENODEV
	}
	return f, nil
}

func (k *Kernel) driverOf(f *simFunc) string {
	t, err := os.Readlink(filepath.Join(f.dir, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(t)
}

func (k *Kernel) override(f *simFunc) string {
	b, _ := os.ReadFile(filepath.Join(f.dir, "driver_override"))
	v := strings.TrimSpace(string(b))
	if v == "(null)" {
		return ""
	}
	return v
}

// canBind is the kernel's pci_match_device: with driver_override set only
// that driver matches (and always does); otherwise d's id table decides.
func (k *Kernel) canBind(d *Driver, f *simFunc) bool {
	if ov := k.override(f); ov != "" {
		return ov == d.Name
	}
	return k.matches(d, f)
}

// matches reports whether d's id table (aliases and new_id entries) matches
// f. vfio_pci: aliases only match through driver_override.
func (k *Kernel) matches(d *Driver, f *simFunc) bool {
	for _, p := range d.Aliases {
		a := host.Alias{Pattern: p, Module: d.Module}
		if !a.IsVFIO() && a.Matches(f.modalias) {
			return true
		}
	}
	m, err := host.ParseModalias(f.modalias)
	if err != nil {
		return false
	}
	for _, id := range d.dynIDs {
		if uint32(id[0]) == m.Vendor && uint32(id[1]) == m.Device {
			return true
		}
	}
	return false
}

// matchDriver is the driver a probe would pick: the override, else the
// first loaded driver whose id table matches.
func (k *Kernel) matchDriver(f *simFunc, override string) *Driver {
	if override != "" {
		if d, ok := k.drivers[override]; ok && d.Loaded {
			return d
		}
		return nil
	}
	names := make([]string, 0, len(k.drivers))
	for n := range k.drivers {
		names = append(names, n)
	}
	sortStrings(names)
	for _, n := range names {
		if d := k.drivers[n]; d.Loaded && k.matches(d, f) {
			return d
		}
	}
	return nil
}

func (k *Kernel) probe(f *simFunc) error {
	if k.driverOf(f) != "" {
		return nil
	}
	d := k.matchDriver(f, k.override(f))
	if d == nil {
		return nil // no driver matches: the device stays unbound
	}
	return k.bind(f, d)
}

func (k *Kernel) bind(f *simFunc, d *Driver) error {
	if d.VFIO && (!k.iommu || f.group == host.NoGroup) {
		return fmt.Errorf("%s: probe of %s failed with error -22: %w", d.Name, f.addr, syscall.EINVAL)
	}
	drvDir := k.sys("bus", "pci", "drivers", d.Name)
	relDrv, err := filepath.Rel(f.dir, drvDir)
	if err != nil {
		return err
	}
	if err := symlinkFresh(relDrv, filepath.Join(f.dir, "driver")); err != nil {
		return err
	}
	relDev, err := filepath.Rel(drvDir, f.dir)
	if err != nil {
		return err
	}
	if err := symlinkFresh(relDev, filepath.Join(drvDir, string(f.addr))); err != nil {
		return err
	}
	if d.VFIO {
		return k.makeNode(filepath.Join(k.root, "dev", "vfio", strconv.Itoa(f.group)))
	}
	return nil
}

func (k *Kernel) unbind(f *simFunc) error {
	name := k.driverOf(f)
	d := k.drivers[name]
	if held := k.heldNodes(f, d); len(held) > 0 {
		k.violations = append(k.violations, fmt.Sprintf("unbind of %s from %s while %s is open", f.addr, name, strings.Join(held, ", ")))
		return syscall.EBUSY
	}
	if err := os.Remove(filepath.Join(f.dir, "driver")); err != nil {
		return err
	}
	if err := os.Remove(k.sys("bus", "pci", "drivers", name, string(f.addr))); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if d != nil && d.VFIO && !k.groupOnVFIO(f.group) {
		return os.Remove(filepath.Join(k.root, "dev", "vfio", strconv.Itoa(f.group)))
	}
	return nil
}

func (k *Kernel) groupOnVFIO(group int) bool {
	for _, g := range k.funcs {
		if g.group == group {
			if d, ok := k.drivers[k.driverOf(g)]; ok && d.VFIO {
				return true
			}
		}
	}
	return false
}

// heldNodes lists the open device nodes that make unbinding f lose work.
func (k *Kernel) heldNodes(f *simFunc, d *Driver) []string {
	var nodes []string
	if d != nil && d.VFIO {
		nodes = append(nodes, filepath.Join(k.root, "dev", "vfio", strconv.Itoa(f.group)))
	} else {
		b, err := os.ReadFile(filepath.Join(k.root, "proc", "driver", "nvidia", "gpus", string(f.addr), "information"))
		if err == nil && d != nil && d.Name == "nvidia" {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "Device Minor:"); ok {
					nodes = append(nodes, filepath.Join(k.root, "dev", "nvidia"+strings.TrimSpace(v)))
				}
			}
		}
	}
	open := k.openFiles()
	var held []string
	for _, n := range nodes {
		if open[n] {
			held = append(held, n)
		}
	}
	return held
}

// openFiles lists the device nodes simulated processes hold, through an
// fd on the node or only a device fd got through it (HoldDeviceFD).
func (k *Kernel) openFiles() map[string]bool {
	open := map[string]bool{}
	for n := range k.deviceFDs {
		open[n] = true
	}
	fds, _ := filepath.Glob(filepath.Join(k.root, "proc", "[0-9]*", "fd", "*"))
	for _, fd := range fds {
		if t, err := os.Readlink(fd); err == nil {
			open[filepath.Clean(t)] = true
		}
	}
	return open
}
