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

func readAttr(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func readOptionalAttr(dir, name string) (string, error) {
	s, err := readAttr(dir, name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return s, err
}

func readID(dir, name string) (uint16, error) {
	s, err := readAttr(dir, name)
	if err != nil {
		return 0, err
	}
	v, err := ParseID(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
	}
	return v, nil
}

func readOptionalID(dir, name string) (uint16, error) {
	s, err := readOptionalAttr(dir, name)
	if err != nil || s == "" {
		return 0, err
	}
	v, err := ParseID(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
	}
	return v, nil
}

func readOptionalInt(dir, name string, def int) (int, error) {
	s, err := readOptionalAttr(dir, name)
	if err != nil || s == "" {
		return def, err
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s: invalid number %q: %w", filepath.Join(dir, name), s, err)
	}
	return v, nil
}

// parseGroup parses an IOMMU group number as the kernel names its folder:
// decimal digits only.
func parseGroup(s string) (int, error) {
	if s == "" || len(s) > 9 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("invalid IOMMU group %q: want a decimal number", s)
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("invalid IOMMU group %q: %w", s, err)
	}
	return v, nil
}

// linkBase returns the last element of a symlink's target, "" when the
// link does not exist.
func linkBase(p string) (string, error) {
	target, err := os.Readlink(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read link %s: %w", p, err)
	}
	return filepath.Base(target), nil
}

// readOptionalLink parses the last element of the target of link name in
// dir, def when there is no such link; a parse error names the link.
func readOptionalLink[T any](dir, name string, def T, parse func(string) (T, error)) (T, error) {
	p := filepath.Join(dir, name)
	base, err := linkBase(p)
	if err != nil || base == "" {
		return def, err
	}
	v, err := parse(base)
	if err != nil {
		return def, fmt.Errorf("%s: %w", p, err)
	}
	return v, nil
}

// readIfExists reads file p; exists is false, with no error, when there is
// no such file. Other errors name p.
func readIfExists(p string) (data []byte, exists bool, err error) {
	data, err = os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", p, err)
	}
	return data, true, nil
}

// dirNames lists a directory's entry names, nil when it does not exist.
func dirNames(p string) ([]string, error) {
	entries, err := os.ReadDir(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read dir %s: %w", p, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// isUUID reports the 8-4-4-4-12 hex form mdev devices are named with.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return false
			}
		} else if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
