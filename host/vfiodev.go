package host

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Mdev is a mediated device (an mdev vGPU) as sysfs shows it under
// /sys/bus/mdev/devices/<uuid>.
type Mdev struct {
	UUID        string
	Parent      Address // the GPU (or SR-IOV VF) it lives on; "" for a parent that is no PCI function
	ParentName  string  // the parent's sysfs name: the PCI address, or e.g. "mtty"
	TypeID      string  // mdev_supported_types folder, e.g. nvidia-558
	TypeName    string  // e.g. "NVIDIA A10-4Q"
	IOMMUGroup  int
	Driver      string   // vfio_mdev, nvidia-vgpu-vfio; "" when unbound
	VFIODevices []string // vfio-dev/vfioN (iommufd cdev) names
}

// Mdevs lists the mediated devices. A host without the mdev bus has none.
func (h *Host) Mdevs() ([]Mdev, error) {
	dir := filepath.Join(h.sysfs, "bus", "mdev", "devices")
	names, err := dirNames(dir)
	if err != nil {
		return nil, err
	}
	out := make([]Mdev, 0, len(names))
	for _, name := range names {
		if !isUUID(name) {
			return nil, fmt.Errorf("%s: not an mdev UUID", filepath.Join(dir, name))
		}
		m, err := readMdev(filepath.Join(dir, name), name)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UUID < out[j].UUID })
	return out, nil
}

func readMdev(dir, uuid string) (Mdev, error) {
	m := Mdev{UUID: uuid, IOMMUGroup: NoGroup}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return m, fmt.Errorf("mdev %s: %w", uuid, err)
	}
	m.ParentName = filepath.Base(filepath.Dir(real))
	if a, err := ParseAddress(m.ParentName); err == nil && string(a) == m.ParentName {
		m.Parent = a // a parent that is no PCI function (the kernel's mtty sample) has none
	}
	if m.TypeID, err = linkBase(filepath.Join(dir, "mdev_type")); err != nil {
		return m, err
	}
	if m.TypeName, err = readOptionalAttr(filepath.Join(dir, "mdev_type"), "name"); err != nil {
		return m, err
	}
	if m.Driver, err = linkBase(filepath.Join(dir, "driver")); err != nil {
		return m, err
	}
	if m.VFIODevices, err = dirNames(filepath.Join(dir, "vfio-dev")); err != nil {
		return m, err
	}
	if m.IOMMUGroup, err = readOptionalLink(dir, "iommu_group", NoGroup, parseGroup); err != nil {
		return m, err
	}
	return m, nil
}

// IOMMUFD reports whether the iommufd character device exists.
func (h *Host) IOMMUFD() bool {
	_, err := os.Stat(filepath.Join(h.dev, "iommu"))
	return err == nil
}

// VGPUType is the vendor-specific VFIO vGPU state of an NVIDIA SR-IOV VF
// (<vf>/nvidia/current_vgpu_type and creatable_vgpu_types).
type VGPUType struct {
	Current   int            // 0 when none
	Creatable map[int]string // type id -> name, what can be created now
}

// VGPU reads the vGPU state of a VF; ok is false when the VF has no
// nvidia/ folder (not a vendor-specific VFIO vGPU VF).
func (h *Host) VGPU(a Address) (VGPUType, bool, error) {
	dir := filepath.Join(h.functionDir(a), "nvidia")
	cur, err := readOptionalAttr(dir, "current_vgpu_type")
	if err != nil || cur == "" {
		return VGPUType{}, false, err
	}
	v := VGPUType{}
	if v.Current, err = strconv.Atoi(cur); err != nil {
		return v, false, fmt.Errorf("%s: invalid vGPU type %q", filepath.Join(dir, "current_vgpu_type"), cur)
	}
	text, err := readOptionalAttr(dir, "creatable_vgpu_types")
	if err != nil {
		return v, false, err
	}
	if v.Creatable, err = ParseVGPUTypes(text); err != nil {
		return v, false, fmt.Errorf("%s: %w", filepath.Join(dir, "creatable_vgpu_types"), err)
	}
	return v, true, nil
}

// ParseVGPUTypes parses creatable_vgpu_types: a header line "ID : vGPU
// Name", then "%-5d : %s" lines.
func ParseVGPUTypes(text string) (map[int]string, error) {
	out := map[int]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	line := 0
	for sc.Scan() {
		line++
		l := strings.TrimSpace(sc.Text())
		if l == "" || (line == 1 && strings.HasPrefix(l, "ID")) {
			continue
		}
		id, name, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("line %d: want \"ID : name\", got %q", line, l)
		}
		n, err := strconv.Atoi(strings.TrimSpace(id))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("line %d: invalid vGPU type id %q", line, strings.TrimSpace(id))
		}
		name = strings.TrimSpace(name)
		if strings.ContainsFunc(name, unicode.IsControl) {
			return nil, fmt.Errorf("line %d: vGPU type name %q has control characters", line, name)
		}
		out[n] = name
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	return out, nil
}

// StillOnVFIO is the cheap check a device plugin makes at Allocate time:
// the function is on a vfio driver and its /dev/vfio/<group> exists (two
// system calls, no scan).
func (h *Host) StillOnVFIO(a Address, group int) error {
	target, err := os.Readlink(filepath.Join(h.functionDir(a), "driver"))
	if err != nil {
		return fmt.Errorf("PCI function %s has no driver", a)
	}
	if d := filepath.Base(target); !IsVFIODriver(d) {
		return fmt.Errorf("PCI function %s is on driver %s, not vfio", a, d)
	}
	return h.groupNodeExists(group)
}

// StillMdev checks that a mediated device and its group node still exist.
func (h *Host) StillMdev(uuid string, group int) error {
	if _, err := os.Stat(filepath.Join(h.sysfs, "bus", "mdev", "devices", uuid)); err != nil {
		return fmt.Errorf("mdev %s is gone", uuid)
	}
	return h.groupNodeExists(group)
}

func (h *Host) groupNodeExists(group int) error {
	node := filepath.Join(h.dev, "vfio", strconv.Itoa(group))
	if _, err := os.Stat(node); err != nil {
		return fmt.Errorf("%s is gone", node)
	}
	return nil
}

// DeviceWatchPaths are the folders whose changes mean the devices a
// device plugin advertises may have changed: /dev/vfio (and its devices/),
// the mdev bus, and the folder of every vfio driver (bind and unbind show
// there). A caller watches them; the host model is what knows where they are.
func (h *Host) DeviceWatchPaths() []string {
	paths := []string{
		filepath.Join(h.dev, "vfio"),
		filepath.Join(h.dev, "vfio", "devices"),
		filepath.Join(h.sysfs, "bus", "mdev", "devices"),
	}
	drivers, _ := dirNames(filepath.Join(h.sysfs, "bus", "pci", "drivers"))
	for _, d := range drivers {
		if IsVFIODriver(d) {
			paths = append(paths, filepath.Join(h.sysfs, "bus", "pci", "drivers", d))
		}
	}
	return paths
}
