package hostsim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// Func describes one simulated PCI function.
type Func struct {
	Address              string
	Vendor, Device       uint16
	SubVendor, SubDevice uint16
	Class                uint32
	Driver               string // bound at start, "" for none
	Group                int    // IOMMU group; ignored without IOMMU
	GroupType            string // default DMA-FQ
	NUMA                 int
	Net                  []string // interface names under net/
	NetUp                bool
	ClassDevNodes        []string // DEVNAMEs of class devices (e.g. "snd/controlC0")
	NvidiaMinor          int      // /dev/nvidia<minor> and the driver's proc file; -1 for none
	PhysFn               string   // SR-IOV VF: its PF
	TotalVFs, NumVFs     int
}

// AddDriver registers a driver (or makes it loadable when !d.Loaded) and
// rewrites modules.alias.
func (k *Kernel) AddDriver(d Driver) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	dd := d
	k.drivers[d.Name] = &dd
	if err := k.addModule(d.Module, d.Deps, d.Loaded); err != nil {
		return err
	}
	if d.Loaded {
		if err := k.registerDriver(&dd); err != nil {
			return err
		}
	}
	return k.writeAliases()
}

func (k *Kernel) sys(p ...string) string {
	return filepath.Join(append([]string{k.root, "sys"}, p...)...)
}

func (k *Kernel) registerDriver(d *Driver) error {
	dir := k.sys("bus", "pci", "drivers", d.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"bind", "unbind", "new_id", "remove_id"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o200); err != nil {
			return err
		}
	}
	modDir := k.sys("module", d.Module, "drivers")
	if err := os.MkdirAll(modDir, 0o755); err != nil {
		return err
	}
	if err := symlinkFresh(filepath.Join("..", "..", "..", "bus", "pci", "drivers", d.Name), filepath.Join(modDir, "pci:"+d.Name)); err != nil {
		return err
	}
	if err := symlinkFresh(filepath.Join("..", "..", "..", "..", "module", d.Module), filepath.Join(dir, "module")); err != nil {
		return err
	}
	d.Loaded = true
	if m := k.modules[d.Module]; m != nil && !m.loaded {
		return k.markLoaded(m)
	}
	return nil
}

func (k *Kernel) writeAliases() error {
	var lines []string
	for _, d := range k.drivers {
		for _, a := range d.Aliases {
			lines = append(lines, fmt.Sprintf("alias %s %s", a, d.Module))
		}
	}
	sort.Strings(lines)
	text := "# Aliases extracted from modules themselves.\n" + strings.Join(lines, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(k.root, k.modulesRel(), "modules.alias"), []byte(text), 0o644); err != nil {
		return err
	}
	return k.writeModules()
}

// AddFunction creates a PCI function in sysfs, bound to f.Driver.
func (k *Kernel) AddFunction(f Func) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.addFunction(f)
}

// addFunction is AddFunction with k.mu held (the kernel itself adds SR-IOV
// VFs when sriov_numvfs is written).
func (k *Kernel) addFunction(f Func) error {
	addr, err := host.ParseAddress(f.Address)
	if err != nil {
		return err
	}
	dom := strings.SplitN(string(addr), ":", 2)[0]
	rootBus := "pci" + dom + ":00"
	dir := k.sys("devices", rootBus, string(addr))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	modalias := host.Modalias{
		Vendor: uint32(f.Vendor), Device: uint32(f.Device), SubVendor: uint32(f.SubVendor), SubDevice: uint32(f.SubDevice),
		BaseClass: uint8(f.Class >> 16), SubClass: uint8(f.Class >> 8), ProgIf: uint8(f.Class),
	}.String()
	attrs := map[string]string{
		"vendor": fmt.Sprintf("0x%04x", f.Vendor), "device": fmt.Sprintf("0x%04x", f.Device),
		"subsystem_vendor": fmt.Sprintf("0x%04x", f.SubVendor), "subsystem_device": fmt.Sprintf("0x%04x", f.SubDevice),
		"class": fmt.Sprintf("0x%06x", f.Class), "numa_node": strconv.Itoa(f.NUMA), "modalias": modalias,
		"driver_override": "(null)", "enable": "1", "reset_method": "flr bus",
		"uevent": fmt.Sprintf("PCI_CLASS=%X\nPCI_ID=%04X:%04X\nPCI_SLOT_NAME=%s\nMODALIAS=%s", f.Class, f.Vendor, f.Device, addr, modalias),
	}
	if f.TotalVFs > 0 {
		attrs["sriov_totalvfs"] = strconv.Itoa(f.TotalVFs)
		attrs["sriov_numvfs"] = strconv.Itoa(f.NumVFs)
	}
	for name, v := range attrs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			return err
		}
	}
	if err := symlinkFresh(filepath.Join("..", "..", "..", "devices", rootBus, string(addr)), k.sys("bus", "pci", "devices", string(addr))); err != nil {
		return err
	}
	sf := &simFunc{addr: addr, modalias: modalias, group: host.NoGroup, dir: dir}
	if k.iommu && f.Group >= 0 {
		sf.group = f.Group
		if err := k.addToGroup(sf, f.GroupType); err != nil {
			return err
		}
	}
	if f.PhysFn != "" {
		if err := symlinkFresh(filepath.Join("..", f.PhysFn), filepath.Join(dir, "physfn")); err != nil {
			return err
		}
	}
	for _, ifname := range f.Net {
		if err := os.MkdirAll(filepath.Join(dir, "net", ifname), 0o755); err != nil {
			return err
		}
		k.links[ifname] = f.NetUp
	}
	if err := k.addDevNodes(addr, dir, f); err != nil {
		return err
	}
	k.funcs[addr] = sf
	if f.Driver != "" {
		d, ok := k.drivers[f.Driver]
		if !ok || !d.Loaded {
			return fmt.Errorf("function %s: driver %q is not registered", addr, f.Driver)
		}
		return k.bind(sf, d)
	}
	return nil
}

func (k *Kernel) addToGroup(sf *simFunc, typ string) error {
	if typ == "" {
		typ = "DMA-FQ"
	}
	gdir := k.sys("kernel", "iommu_groups", strconv.Itoa(sf.group))
	if err := os.MkdirAll(filepath.Join(gdir, "devices"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(gdir, "type"), []byte(typ+"\n"), 0o644); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Join(gdir, "devices"), sf.dir)
	if err != nil {
		return err
	}
	if err := symlinkFresh(rel, filepath.Join(gdir, "devices", string(sf.addr))); err != nil {
		return err
	}
	back, err := filepath.Rel(sf.dir, gdir)
	if err != nil {
		return err
	}
	return symlinkFresh(back, filepath.Join(sf.dir, "iommu_group"))
}

func (k *Kernel) addDevNodes(addr host.Address, dir string, f Func) error {
	for i, name := range f.ClassDevNodes {
		cdir := filepath.Join(dir, "class"+strconv.Itoa(i), filepath.Base(name))
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(cdir, "uevent"), []byte("MAJOR=116\nMINOR="+strconv.Itoa(i)+"\nDEVNAME="+name+"\n"), 0o644); err != nil {
			return err
		}
		if err := k.makeNode(filepath.Join(k.root, "dev", name)); err != nil {
			return err
		}
	}
	if f.NvidiaMinor >= 0 && f.Vendor == host.VendorNVIDIA && f.Class>>16 == 0x03 {
		pdir := filepath.Join(k.root, "proc", "driver", "nvidia", "gpus", string(addr))
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			return err
		}
		info := fmt.Sprintf("Model: \t\t NVIDIA GPU\nIRQ:   \t\t 150\nGPU UUID: \t %s\nDevice Minor: \t %d\nBus Location: \t %s\n",
			SimulatedGPUUUID(addr), f.NvidiaMinor, addr)
		if err := os.WriteFile(filepath.Join(pdir, "information"), []byte(info), 0o644); err != nil {
			return err
		}
		if err := k.makeNode(filepath.Join(k.root, "dev", fmt.Sprintf("nvidia%d", f.NvidiaMinor))); err != nil {
			return err
		}
	}
	return nil
}

// SetVirtFns links a PF to its VFs (virtfnN), after both exist.
func (k *Kernel) SetVirtFns(pf string, vfs ...string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	f, err := k.function(pf)
	if err != nil {
		return err
	}
	for i, vf := range vfs {
		if err := symlinkFresh(filepath.Join("..", vf), filepath.Join(f.dir, "virtfn"+strconv.Itoa(i))); err != nil {
			return err
		}
	}
	return nil
}

func symlinkFresh(target, link string) error {
	if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.Symlink(target, link)
}

func sortStrings(s []string) { sort.Strings(s) }

// SimulatedGPUUUID is the UUID the simulated NVIDIA driver gives the GPU at
// addr (stable, derived from the address).
func SimulatedGPUUUID(addr host.Address) string {
	sum := sha256.Sum256([]byte(addr))
	h := hex.EncodeToString(sum[:16])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
