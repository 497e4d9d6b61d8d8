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

// MdevType is one mdev_supported_types/<id> folder of an mdev parent (a GPU,
// or an SR-IOV VF of an Ampere GPU).
type MdevType struct {
	ID          string // folder name, e.g. nvidia-558
	Name        string // e.g. "NVIDIA A10-4Q"
	Available   int    // available_instances: how many more can be made now
	Description string
	// MaxInstances is max_instance=N of NVIDIA's description (how many
	// the whole GPU holds of this type alone); 0 when absent (the kernel's
	// sample drivers have no description).
	MaxInstances int
	// FramebufferMB is framebuffer=NM of the description; 0 when absent.
	FramebufferMB int
}

// mdevParentDir is a parent's folder: /sys/class/mdev_bus/<name> as the
// mdev core registers every parent (a PCI address, or a name such as mtty
// for a parent that is no PCI function), else the PCI function's folder.
func (h *Host) mdevParentDir(parent Address) (string, error) {
	if !validName(string(parent)) {
		return "", fmt.Errorf("invalid mdev parent %q", parent)
	}
	dir := filepath.Join(h.sysfs, "class", "mdev_bus", string(parent))
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	return h.functionDir(parent), nil
}

// MdevTypes lists the mdev types a parent offers, sorted by id; none when
// it has no mdev_supported_types folder. parent is a PCI address or the
// parent's name under /sys/class/mdev_bus.
func (h *Host) MdevTypes(parent Address) ([]MdevType, error) {
	pdir, err := h.mdevParentDir(parent)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(pdir, "mdev_supported_types")
	names, err := dirNames(dir)
	if err != nil {
		return nil, err
	}
	out := make([]MdevType, 0, len(names))
	for _, id := range names {
		if !validName(id) {
			continue
		}
		tdir := filepath.Join(dir, id)
		t := MdevType{ID: id}
		if t.Name, err = readAttr(tdir, "name"); err != nil {
			return nil, fmt.Errorf("mdev parent %s: %w", parent, err)
		}
		avail, err := readAttr(tdir, "available_instances")
		if err != nil {
			return nil, fmt.Errorf("mdev parent %s: %w", parent, err)
		}
		if t.Available, err = strconv.Atoi(avail); err != nil || t.Available < 0 {
			return nil, fmt.Errorf("%s: invalid count %q", filepath.Join(tdir, "available_instances"), avail)
		}
		if t.Description, err = readOptionalAttr(tdir, "description"); err != nil {
			return nil, err
		}
		t.MaxInstances, t.FramebufferMB = ParseMdevDescription(t.Description)
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// ParseMdevDescription reads max_instance=N and framebuffer=NM from
// NVIDIA's mdev type description ("num_heads=4, frl_config=60,
// framebuffer=4096M, max_resolution=5120x2880, max_instance=6"); 0 for
// what it does not say.
func ParseMdevDescription(desc string) (maxInstances, framebufferMB int) {
	for _, field := range strings.Split(desc, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok {
			continue
		}
		switch k {
		case "max_instance":
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				maxInstances = n
			}
		case "framebuffer":
			if n, err := strconv.Atoi(strings.TrimSuffix(v, "M")); err == nil && n > 0 {
				framebufferMB = n
			}
		}
	}
	return maxInstances, framebufferMB
}

// ShortTypeName is the vGPU type name NVIDIA's configs use: the last token
// of the sysfs name ("NVIDIA A10-4Q" -> "A10-4Q").
func ShortTypeName(name string) string {
	f := strings.Fields(name)
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

// ReadMdev re-reads one mediated device; ok is false when it is gone.
func (h *Host) ReadMdev(uuid string) (m Mdev, ok bool, err error) {
	if !isUUID(uuid) {
		return Mdev{}, false, fmt.Errorf("invalid mdev UUID %q", uuid)
	}
	dir := filepath.Join(h.sysfs, "bus", "mdev", "devices", uuid)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return Mdev{}, false, nil
	}
	m, err = readMdev(dir, uuid)
	if err != nil {
		return m, false, err
	}
	return m, true, nil
}

// CreateMdev writes uuid to the create attribute of a parent's mdev type
// (parent as for MdevTypes).
func (h *Host) CreateMdev(parent Address, typeID, uuid string) error {
	if !validName(typeID) || !isUUID(uuid) {
		return fmt.Errorf("mdev parent %s: invalid type %q or UUID %q", parent, typeID, uuid)
	}
	pdir, err := h.mdevParentDir(parent)
	if err != nil {
		return err
	}
	p := filepath.Join(pdir, "mdev_supported_types", typeID, "create")
	if err := h.write(p, uuid); err != nil {
		return fmt.Errorf("mdev parent %s: create %s of type %s: %w", parent, uuid, typeID, err)
	}
	return nil
}

// RemoveMdev writes 1 to a mediated device's remove attribute. On a real
// kernel the write blocks, unkillably, while a process holds the device:
// check with CheckMdevIdle right before.
func (h *Host) RemoveMdev(uuid string) error {
	if !isUUID(uuid) {
		return fmt.Errorf("invalid mdev UUID %q", uuid)
	}
	p := filepath.Join(h.sysfs, "bus", "mdev", "devices", uuid, "remove")
	if err := h.write(p, "1"); err != nil {
		return fmt.Errorf("mdev %s: remove: %w", uuid, err)
	}
	return nil
}

// MdevInUse lists why a mediated device is in use: a process holding its
// /dev/vfio/<group> or its iommufd cdev. An empty list means idle.
func (h *Host) MdevInUse(m Mdev, u *Usage) ([]string, error) {
	if n := len(u.Unreadable); n > 0 {
		return nil, fmt.Errorf("mdev %s: cannot tell whether it is in use: the open files of %d processes (pid %d first) are unreadable; run with CAP_SYS_PTRACE in the host PID namespace", m.UUID, n, u.Unreadable[0])
	}
	var nodes []string
	if m.IOMMUGroup != NoGroup {
		nodes = append(nodes, filepath.Join(h.dev, "vfio", strconv.Itoa(m.IOMMUGroup)))
	}
	for _, v := range m.VFIODevices {
		if validName(v) {
			nodes = append(nodes, filepath.Join(h.dev, "vfio", "devices", v))
		}
	}
	var reasons []string
	for _, node := range nodes {
		for _, hd := range h.nodeHolders(u, node) {
			reasons = append(reasons, fmt.Sprintf("in use: %s (mdev %s) held by %s", node, m.UUID, hd))
		}
	}
	return reasons, nil
}

// CheckMdevIdle rescans the processes and reports an error starting with
// "in use:" when the mediated device is in use, right before removing it.
func (h *Host) CheckMdevIdle(m Mdev) error {
	u, err := h.ScanUsage()
	if err != nil {
		return fmt.Errorf("in use: cannot tell: %w", err)
	}
	reasons, err := h.MdevInUse(m, u)
	if err != nil {
		return fmt.Errorf("in use: cannot tell: %w", err)
	}
	if len(reasons) > 0 {
		return errors.New(strings.Join(reasons, "; "))
	}
	return nil
}

// StillMdev checks that a mediated device and its group node still exist.
func (h *Host) StillMdev(uuid string, group int) error {
	if _, err := os.Stat(filepath.Join(h.sysfs, "bus", "mdev", "devices", uuid)); err != nil {
		return fmt.Errorf("mdev %s is gone", uuid)
	}
	return h.groupNodeExists(group)
}
