package hostsim

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// AddMdev creates a mediated vGPU device of type typeID ("nvidia-558",
// named like "NVIDIA A10-4Q") on parent, in its own IOMMU group, bound to
// vfio_mdev, with its /dev/vfio/<group> node, as the kernel shows it.
func (k *Kernel) AddMdev(parent, uuid, typeID, typeName string, group int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	f, err := k.function(parent)
	if err != nil {
		return err
	}
	typeDir := filepath.Join(f.dir, "mdev_supported_types", typeID)
	if err := os.MkdirAll(typeDir, 0o755); err != nil {
		return err
	}
	for name, v := range map[string]string{"name": typeName, "available_instances": "0", "device_api": "vfio-pci", "create": ""} {
		if err := os.WriteFile(filepath.Join(typeDir, name), []byte(v+"\n"), 0o644); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(typeDir, "devices"), 0o755); err != nil {
		return err
	}
	return k.makeMdevDir(filepath.Join(f.dir, uuid), uuid, typeID, "vfio_mdev", group)
}

// RemoveMdev removes a mediated device and its /dev/vfio node.
func (k *Kernel) RemoveMdev(uuid string, group int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	link := k.sys("bus", "mdev", "devices", uuid)
	dir, err := filepath.EvalSymlinks(link)
	if err != nil {
		return err
	}
	for _, p := range []string{link, k.sys("kernel", "iommu_groups", strconv.Itoa(group)), dir, filepath.Join(k.root, "dev", "vfio", strconv.Itoa(group))} {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// SetVGPU gives an SR-IOV VF the vendor-specific VFIO vGPU files
// (nvidia/current_vgpu_type, creatable_vgpu_types); a non-zero current
// type registers the VF as a VFIO device (/dev/vfio/<group>).
func (k *Kernel) SetVGPU(vf string, current int, creatable map[int]string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	f, err := k.function(vf)
	if err != nil {
		return err
	}
	dir := filepath.Join(f.dir, "nvidia")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "creatable_vgpu_types"), []byte(FormatVGPUTypes(creatable)), 0o444); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "current_vgpu_type"), []byte(strconv.Itoa(current)+"\n"), 0o644); err != nil {
		return err
	}
	node := filepath.Join(k.root, "dev", "vfio", strconv.Itoa(f.group))
	if current == 0 {
		return os.RemoveAll(node)
	}
	return k.makeNode(node)
}

// FormatVGPUTypes writes types (id -> name) as the kernel writes a VF's
// nvidia/creatable_vgpu_types: a header line, then "%-5d : %s" lines by
// id.
func FormatVGPUTypes(types map[int]string) string {
	var b strings.Builder
	b.WriteString("ID    : vGPU Name\n")
	for _, id := range slices.Sorted(maps.Keys(types)) {
		fmt.Fprintf(&b, "%-5d : %s\n", id, types[id])
	}
	return b.String()
}

// EnableIOMMUFD creates /dev/iommu and a vfio-dev/vfioN cdev for every
// function on a vfio driver, as a kernel with iommufd does.
func (k *Kernel) EnableIOMMUFD() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.makeNode(filepath.Join(k.root, "dev", "iommu")); err != nil {
		return err
	}
	n := 0
	for _, a := range sortedAddrs(k.funcs) {
		f := k.funcs[a]
		if d, ok := k.drivers[k.driverOf(f)]; !ok || !d.VFIO {
			continue
		}
		name := "vfio" + strconv.Itoa(n)
		n++
		if err := os.MkdirAll(filepath.Join(f.dir, "vfio-dev", name), 0o755); err != nil {
			return err
		}
		if err := k.makeNode(filepath.Join(k.root, "dev", "vfio", "devices", name)); err != nil {
			return err
		}
	}
	return nil
}

func sortedAddrs(m map[host.Address]*simFunc) []host.Address {
	out := make([]host.Address, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func relLink(target, link string) error {
	rel, err := filepath.Rel(filepath.Dir(link), target)
	if err != nil {
		return err
	}
	return symlinkFresh(rel, link)
}
