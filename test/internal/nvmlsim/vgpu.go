package nvmlsim

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

// readVGPU fills in the vGPU types of g, a GPU on the vGPU host driver.
// Supported: what the driver offers for the product (the fixtures' type
// tables, by PCI device id: the real driver knows them whether or not VFs
// exist). Creatable: what the host lists now: the GPU's own
// mdev_supported_types with instances left, and each VF's (MdevVF) or
// nvidia/creatable_vgpu_types (vendor-specific VFIO).
func readVGPU(g *GPU, dir string) {
	g.Supported = supportedTypes(g.Device)
	if g.Supported == nil {
		g.Supported = []VGPUType{}
	}
	seen := map[uint32]bool{}
	add := func(id uint32) {
		if id != 0 && !seen[id] {
			seen[id] = true
			g.Creatable = append(g.Creatable, id)
		}
	}
	dirs := []string{dir}
	vfs, _ := filepath.Glob(filepath.Join(dir, "virtfn*"))
	dirs = append(dirs, vfs...)
	for _, d := range dirs {
		types, _ := os.ReadDir(filepath.Join(d, "mdev_supported_types"))
		for _, t := range types {
			avail, err := os.ReadFile(filepath.Join(d, "mdev_supported_types", t.Name(), "available_instances"))
			if n, _ := strconv.Atoi(strings.TrimSpace(string(avail))); err != nil || n == 0 {
				continue
			}
			if id, err := strconv.ParseUint(strings.TrimPrefix(t.Name(), "nvidia-"), 10, 32); err == nil {
				add(uint32(id))
			}
		}
		list, err := os.ReadFile(filepath.Join(d, "nvidia", "creatable_vgpu_types"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(list), "\n") {
			id, _, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			if n, err := strconv.ParseUint(strings.TrimSpace(id), 10, 32); err == nil {
				add(uint32(n))
			}
		}
	}
	slices.Sort(g.Creatable)
}

// supportedTypes are the vGPU types the fixtures give a product.
func supportedTypes(device uint16) []VGPUType {
	for _, fx := range append(hostsim.Fixtures(), hostsim.VGPUFixtures()...) {
		for _, c := range fx.VGPUs {
			for _, f := range fx.Funcs {
				if f.Address != c.PF || f.Device != device {
					continue
				}
				var out []VGPUType
				for _, t := range c.Types {
					out = append(out, VGPUType{ID: uint32(t.ID), Name: t.Name, SizeMiB: uint64(t.SizeGB) << 10, Instances: uint32(c.Max(t))})
				}
				return out
			}
		}
	}
	return nil
}
