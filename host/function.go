package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Role is what a PCI function is for.
type Role string

// Roles of PCI functions.
const (
	RoleGPU      Role = "gpu"
	RoleAudio    Role = "audio"
	RoleUSB      Role = "usb"
	RoleSerial   Role = "serial"
	RoleNVSwitch Role = "nvswitch"
	RoleOther    Role = "other"
)

// VendorNVIDIA is NVIDIA's PCI vendor id.
const VendorNVIDIA uint16 = 0x10de

// ClassBridgeOther is the class NVSwitches report (0x0680).
const ClassBridgeOther uint32 = 0x0680

// RoleOf classifies a function by vendor and class code.
func RoleOf(vendor uint16, class uint32) Role {
	switch {
	case class>>16 == 0x03:
		return RoleGPU
	case class>>8 == 0x0403:
		return RoleAudio
	case class>>8 == 0x0c03:
		return RoleUSB
	case class>>8 == 0x0c80:
		return RoleSerial
	case class>>8 == ClassBridgeOther && vendor == VendorNVIDIA:
		return RoleNVSwitch
	}
	return RoleOther
}

// IsPCIBridge reports a PCI-to-PCI bridge (class 0x0604), which may share
// an IOMMU group without blocking passthrough.
func IsPCIBridge(class uint32) bool { return class>>8 == 0x0604 }

// NoGroup is the IOMMU group of a function without one.
const NoGroup = -1

// Function is one PCI function as sysfs shows it.
type Function struct {
	Address         Address
	Vendor          uint16
	Device          uint16
	SubsystemVendor uint16
	SubsystemDevice uint16
	Class           uint32
	Driver          string // "" when unbound
	DriverOverride  string // "" when unset ("(null)" in sysfs)
	IOMMUGroup      int    // NoGroup without IOMMU
	NUMANode        int    // -1 when unknown
	Modalias        string
	Role            Role
	PhysFn          Address   // set on an SR-IOV VF
	VirtFns         []Address // on an SR-IOV PF
	SRIOVTotalVFs   int
	SRIOVNumVFs     int
	NetInterfaces   []string // names under net/
	VFIODevices     []string // vfio-dev/vfioN (iommufd cdev) names
	MdevDevices     []string // UUIDs of mediated (vGPU) devices on it
}

// Card is the slot key: functions with the same Card belong to one card.
func (f *Function) Card() string { return f.Address.Slot() }

// readFunction reads one function directory. dir is
// <sysfs>/bus/pci/devices/<addr> (a symlink, as on a real kernel).
func readFunction(dir string, addr Address) (*Function, error) {
	f := &Function{Address: addr, IOMMUGroup: NoGroup, NUMANode: -1}
	var err error
	if f.Vendor, err = readID(dir, "vendor"); err != nil {
		return nil, err
	}
	if f.Device, err = readID(dir, "device"); err != nil {
		return nil, err
	}
	classText, err := readAttr(dir, "class")
	if err != nil {
		return nil, err
	}
	if f.Class, err = ParseClass(classText); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "class"), err)
	}
	if f.SubsystemVendor, err = readOptionalID(dir, "subsystem_vendor"); err != nil {
		return nil, err
	}
	if f.SubsystemDevice, err = readOptionalID(dir, "subsystem_device"); err != nil {
		return nil, err
	}
	if f.Driver, err = linkBase(filepath.Join(dir, "driver")); err != nil {
		return nil, err
	}
	override, err := readOptionalAttr(dir, "driver_override")
	if err != nil {
		return nil, err
	}
	if override != "(null)" {
		f.DriverOverride = override
	}
	if f.IOMMUGroup, err = readOptionalLink(dir, "iommu_group", NoGroup, parseGroup); err != nil {
		return nil, err
	}
	if f.NUMANode, err = readOptionalInt(dir, "numa_node", -1); err != nil {
		return nil, err
	}
	if f.Modalias, err = readOptionalAttr(dir, "modalias"); err != nil {
		return nil, err
	}
	if f.SRIOVTotalVFs, err = readOptionalInt(dir, "sriov_totalvfs", 0); err != nil {
		return nil, err
	}
	if f.SRIOVNumVFs, err = readOptionalInt(dir, "sriov_numvfs", 0); err != nil {
		return nil, err
	}
	if f.PhysFn, err = readOptionalLink(dir, "physfn", "", ParseAddress); err != nil {
		return nil, err
	}
	if err := f.readChildren(dir); err != nil {
		return nil, err
	}
	f.Role = RoleOf(f.Vendor, f.Class)
	return f, nil
}

// readChildren reads virtfnN links, net/ and vfio-dev/ entries.
func (f *Function) readChildren(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read PCI function %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "virtfn") {
			continue
		}
		target, err := linkBase(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		vf, err := ParseAddress(target)
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
		}
		f.VirtFns = append(f.VirtFns, vf)
	}
	sort.Slice(f.VirtFns, func(i, j int) bool { return f.VirtFns[i] < f.VirtFns[j] })
	for _, e := range entries {
		if e.IsDir() && isUUID(e.Name()) {
			f.MdevDevices = append(f.MdevDevices, e.Name())
		}
	}
	if f.NetInterfaces, err = dirNames(filepath.Join(dir, "net")); err != nil {
		return err
	}
	if f.VFIODevices, err = dirNames(filepath.Join(dir, "vfio-dev")); err != nil {
		return err
	}
	return nil
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

// NoFunctionError is a PCI function the host does not have: it is not
// under the sysfs root's bus/pci/devices.
type NoFunctionError struct {
	Address Address
	Dir     string // the folder it was looked for in
}

func (e *NoFunctionError) Error() string {
	return fmt.Sprintf("no PCI function %s under %s", e.Address, e.Dir)
}

// NoFunction is the error for a PCI function that is not on this host,
// naming where it was looked for. Callers report it instead of reading a
// root of the host model themselves.
func (h *Host) NoFunction(a Address) error {
	return &NoFunctionError{Address: a, Dir: h.devicesDir()}
}
