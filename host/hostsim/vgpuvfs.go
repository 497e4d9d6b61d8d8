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

// setNumVFs handles a write to an SR-IOV vGPU card's sriov_numvfs: VFs are
// created from 0 and removed to 0, never resized (EBUSY), as the PCI core
// does.
func (k *Kernel) setNumVFs(c *simCard, data string) error {
	n, err := strconv.Atoi(strings.TrimSpace(data))
	if err != nil || n < 0 {
		return syscall.EINVAL
	}
	cur := len(c.vfs)
	switch {
	case n == cur:
		return nil
	case n > c.card.TotalVFs:
		return syscall.ERANGE
	case cur != 0 && n != 0:
		return syscall.EBUSY
	case n == 0:
		return k.removeVFs(c)
	}
	return k.addVFs(c, n)
}

// vfAddress is VF i of a PF: NVIDIA GPUs have First VF Offset 4 and VF
// Stride 1 (PF 0000:41:00.0 -> 0000:41:00.4, .5, ... 0000:41:01.0, ...).
func vfAddress(pf host.Address, i int) (host.Address, error) {
	var dom, bus, dev, fn int
	if _, err := fmt.Sscanf(string(pf), "%x:%x:%x.%x", &dom, &bus, &dev, &fn); err != nil {
		return "", err
	}
	devfn := (dev<<3 | fn) + 4 + i
	bus += devfn >> 8
	devfn &= 0xff
	return host.ParseAddress(fmt.Sprintf("%04x:%02x:%02x.%x", dom, bus, devfn>>3, devfn&7))
}

func (k *Kernel) addVFs(c *simCard, n int) error {
	m, err := host.ParseModalias(c.pf.modalias)
	if err != nil {
		return err
	}
	numa, _ := os.ReadFile(filepath.Join(c.pf.dir, "numa_node"))
	node, _ := strconv.Atoi(strings.TrimSpace(string(numa)))
	for i := 0; i < n; i++ {
		a, err := vfAddress(c.pf.addr, i)
		if err != nil {
			return err
		}
		f := Func{Address: string(a), Vendor: uint16(m.Vendor), Device: uint16(m.Device), SubVendor: uint16(m.SubVendor),
			SubDevice: uint16(m.SubDevice), Class: uint32(m.BaseClass)<<16 | uint32(m.SubClass)<<8 | uint32(m.ProgIf),
			Driver: "nvidia", Group: c.card.VFGroupBase + i, NUMA: node, NvidiaMinor: -1, PhysFn: string(c.pf.addr)}
		if err := k.addFunction(f); err != nil {
			return fmt.Errorf("VF %d of %s: %w", i, c.pf.addr, err)
		}
		if err := symlinkFresh(filepath.Join("..", string(a)), filepath.Join(c.pf.dir, "virtfn"+strconv.Itoa(i))); err != nil {
			return err
		}
		if c.card.Mode == VendorVFIO {
			dir := filepath.Join(k.funcs[a].dir, "nvidia")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, "vgpu_params"), []byte("\n"), 0o644); err != nil {
				return err
			}
		}
		c.vfs = append(c.vfs, a)
	}
	if err := os.WriteFile(filepath.Join(c.pf.dir, "sriov_numvfs"), []byte(strconv.Itoa(n)+"\n"), 0o644); err != nil {
		return err
	}
	return k.refreshCard(c)
}

// removeVFs disables the card's VFs, with their vGPUs; a held VF or vGPU
// makes the write a violation (the real kernel blocks it).
func (k *Kernel) removeVFs(c *simCard) error {
	var nodes []string
	for _, vf := range c.vfs {
		nodes = append(nodes, filepath.Join("vfio", strconv.Itoa(k.funcs[vf].group)))
	}
	for _, m := range c.mdevs {
		nodes = append(nodes, filepath.Join("vfio", strconv.Itoa(m.group)))
	}
	if err := k.held(fmt.Sprintf("sriov_numvfs 0 on %s", c.pf.addr), nodes...); err != nil {
		return err
	}
	for uuid := range c.mdevs {
		if err := k.removeMdev(c, uuid); err != nil {
			return err
		}
	}
	for i, vf := range c.vfs {
		f := k.funcs[vf]
		if d := k.driverOf(f); d != "" {
			if err := os.Remove(k.sys("bus", "pci", "drivers", d, string(vf))); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
		g := strconv.Itoa(f.group)
		for _, p := range []string{k.sys("kernel", "iommu_groups", g), filepath.Join(k.root, "dev", "vfio", g),
			k.sys("bus", "pci", "devices", string(vf)), k.sys("class", "mdev_bus", string(vf)), f.dir,
			filepath.Join(c.pf.dir, "virtfn"+strconv.Itoa(i))} {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		}
		c.forget(f.dir)
		delete(k.funcs, vf)
	}
	c.vfs, c.current, c.placed = nil, map[host.Address]int{}, map[string]int{}
	return os.WriteFile(filepath.Join(c.pf.dir, "sriov_numvfs"), []byte("0\n"), 0o644)
}
