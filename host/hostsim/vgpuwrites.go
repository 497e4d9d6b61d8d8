package hostsim

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// applyVGPU handles the writes of NVIDIA's vGPU host driver and the mdev
// core: mdev create and remove, sriov_numvfs, current_vgpu_type. parts is
// the written path relative to the sysfs root, symlinks resolved. It
// reports handled=false for other paths.
func (k *Kernel) applyVGPU(parts []string, data string) (handled bool, err error) {
	n := len(parts)
	if n < 3 || parts[0] != "devices" {
		return false, nil
	}
	last := parts[n-1]
	switch {
	case last == "create" && n >= 5 && parts[n-3] == "mdev_supported_types":
		c, parent, ok := k.cardFor(parts[n-4])
		if !ok {
			return false, nil
		}
		return true, k.createMdev(c, parent, parts[n-2], data)
	case last == "remove" && n >= 4 && isUUIDName(parts[n-2]):
		c, _, ok := k.cardFor(parts[n-3])
		if !ok {
			return false, nil
		}
		return true, k.removeMdev(c, parts[n-2])
	case last == "sriov_numvfs":
		a, _ := host.ParseAddress(parts[n-2])
		c, ok := k.cards[a]
		if !ok || c.card.Mode == MdevPF {
			return false, nil
		}
		return true, k.setNumVFs(c, data)
	case last == "current_vgpu_type" && n >= 4 && parts[n-2] == "nvidia":
		c, vf, ok := k.cardFor(parts[n-3])
		if !ok || c.card.Mode != VendorVFIO {
			return false, nil
		}
		return true, k.setVGPUType(c, vf, data)
	}
	return false, nil
}

func (k *Kernel) cardFor(name string) (*simCard, host.Address, bool) {
	a, err := host.ParseAddress(name)
	if err != nil || string(a) != name {
		return nil, "", false
	}
	c, ok := k.cardOf(a)
	return c, a, ok
}

// deepestAddress returns the last path element that is a PCI address.
func deepestAddress(rel string) host.Address {
	parts := strings.Split(rel, "/")
	for i := len(parts) - 1; i >= 0; i-- {
		if a, err := host.ParseAddress(parts[i]); err == nil && string(a) == parts[i] {
			return a
		}
	}
	return ""
}

func isUUIDName(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if r != '-' {
				return false
			}
		case !strings.ContainsRune("0123456789abcdefABCDEF", r):
			return false
		}
	}
	return true
}

// held reports the given device nodes (relative to the dev root) that a
// simulated process holds open, and records a violation for the write.
func (k *Kernel) held(what string, nodes ...string) error {
	open := k.openFiles()
	var busy []string
	for _, n := range nodes {
		p := filepath.Join(k.root, "dev", n)
		if open[p] {
			busy = append(busy, p)
		}
	}
	if len(busy) == 0 {
		return nil
	}
	k.violations = append(k.violations, fmt.Sprintf("%s while %s is open (a real kernel blocks the writer until it is closed)", what, strings.Join(busy, ", ")))
	return syscall.EBUSY
}

func (k *Kernel) createMdev(c *simCard, parent host.Address, typeDir, data string) error {
	id, err := strconv.Atoi(strings.TrimPrefix(typeDir, "nvidia-"))
	t, known := c.types[id]
	if err != nil || !known {
		return syscall.ENOENT
	}
	uuid := strings.ToLower(strings.TrimSpace(data))
	if !isUUIDName(uuid) {
		return syscall.EINVAL
	}
	if _, err := os.Lstat(k.sys("bus", "mdev", "devices", uuid)); err == nil {
		return syscall.EEXIST
	}
	if c.card.Mode == MdevVF && c.vfHolds(parent) || c.available(t) <= 0 {
		return syscall.EUSERS
	}
	group := k.freeGroup()
	dir := filepath.Join(k.funcs[parent].dir, uuid)
	if err := k.makeMdevDir(dir, uuid, typeDir, "nvidia-vgpu-vfio", group); err != nil {
		return err
	}
	c.place(uuid, t)
	c.mdevs[uuid] = simMdev{parent: parent, typeID: id, group: group, dir: dir}
	return k.refreshCard(c)
}

// makeMdevDir creates a mediated device's sysfs folder and links and its
// /dev/vfio node, as the mdev core does.
func (k *Kernel) makeMdevDir(dir, uuid, typeDir, driver string, group int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "remove"), nil, 0o200); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "uevent"), []byte("MDEV_TYPE="+typeDir+"\n"), 0o644); err != nil {
		return err
	}
	typePath := filepath.Join(filepath.Dir(dir), "mdev_supported_types", typeDir)
	if err := relLink(typePath, filepath.Join(dir, "mdev_type")); err != nil {
		return err
	}
	if err := relLink(dir, filepath.Join(typePath, "devices", uuid)); err != nil {
		return err
	}
	drv := k.sys("bus", "mdev", "drivers", driver)
	if err := os.MkdirAll(drv, 0o755); err != nil {
		return err
	}
	if err := relLink(drv, filepath.Join(dir, "driver")); err != nil {
		return err
	}
	if err := relLink(dir, filepath.Join(drv, uuid)); err != nil {
		return err
	}
	devs := k.sys("bus", "mdev", "devices")
	if err := os.MkdirAll(devs, 0o755); err != nil {
		return err
	}
	if err := relLink(dir, filepath.Join(devs, uuid)); err != nil {
		return err
	}
	gdir := k.sys("kernel", "iommu_groups", strconv.Itoa(group))
	if err := os.MkdirAll(filepath.Join(gdir, "devices"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(gdir, "type"), []byte("DMA-FQ\n"), 0o644); err != nil {
		return err
	}
	if err := relLink(dir, filepath.Join(gdir, "devices", uuid)); err != nil {
		return err
	}
	if err := relLink(gdir, filepath.Join(dir, "iommu_group")); err != nil {
		return err
	}
	return k.makeNode(filepath.Join(k.root, "dev", "vfio", strconv.Itoa(group)))
}

// freeGroup is the lowest IOMMU group number from 128 up that is unused.
func (k *Kernel) freeGroup() int {
	for g := 128; ; g++ {
		if _, err := os.Lstat(k.sys("kernel", "iommu_groups", strconv.Itoa(g))); err != nil {
			return g
		}
	}
}

func (k *Kernel) removeMdev(c *simCard, uuid string) error {
	m, ok := c.mdevs[uuid]
	if !ok {
		return syscall.ENODEV
	}
	if err := k.held("remove of mdev "+uuid, filepath.Join("vfio", strconv.Itoa(m.group))); err != nil {
		return err
	}
	typeDir := "nvidia-" + strconv.Itoa(m.typeID)
	for _, p := range []string{
		k.sys("bus", "mdev", "devices", uuid), k.sys("bus", "mdev", "drivers", "nvidia-vgpu-vfio", uuid),
		filepath.Join(filepath.Dir(m.dir), "mdev_supported_types", typeDir, "devices", uuid),
		k.sys("kernel", "iommu_groups", strconv.Itoa(m.group)), m.dir,
		filepath.Join(k.root, "dev", "vfio", strconv.Itoa(m.group)),
	} {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	delete(c.mdevs, uuid)
	delete(c.placed, uuid)
	return k.refreshCard(c)
}

func (k *Kernel) setVGPUType(c *simCard, vf host.Address, data string) error {
	id, err := strconv.Atoi(strings.TrimSpace(data))
	if err != nil || id < 0 {
		return syscall.EINVAL
	}
	group := strconv.Itoa(k.funcs[vf].group)
	node := filepath.Join(k.root, "dev", "vfio", group)
	if id == 0 {
		if c.current[vf] == 0 {
			return syscall.EPERM
		}
		if err := k.held(fmt.Sprintf("destroying the vGPU of VF %s (current_vgpu_type 0)", vf), filepath.Join("vfio", group)); err != nil {
			return err
		}
		delete(c.current, vf)
		delete(c.placed, string(vf))
		if err := os.RemoveAll(node); err != nil {
			return err
		}
		return k.refreshCard(c)
	}
	if c.current[vf] != 0 {
		return syscall.EPERM
	}
	t, ok := c.types[id]
	if !ok || c.available(t) <= 0 {
		return syscall.EINVAL
	}
	c.place(string(vf), t)
	c.current[vf] = id
	if err := k.makeNode(node); err != nil {
		return err
	}
	return k.refreshCard(c)
}
