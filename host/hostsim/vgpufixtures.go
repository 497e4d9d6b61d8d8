package hostsim

import (
	"fmt"
	"strings"
)

// typeSeries builds a product's vGPU types: for each series letter, one
// type per framebuffer size, with consecutive ids from firstID.
func typeSeries(product string, firstID int, series string, sizes ...int) []VGPUType {
	var out []VGPUType
	id := firstID
	for _, s := range strings.Split(series, "") {
		for _, gb := range sizes {
			out = append(out, VGPUType{ID: id, Name: fmt.Sprintf("NVIDIA %s-%d%s", product, gb, s), SizeGB: gb})
			id++
		}
	}
	return out
}

// a10Types: the A10's Q (RTX vWS) and C (compute) types; nvidia-558 is
// A10-4Q as in the KubeVirt plugin's tests.
func a10Types() []VGPUType {
	return append(typeSeries("A10", 555, "Q", 1, 2, 3, 4, 6, 8, 12, 24), typeSeries("A10", 563, "C", 4, 6, 8, 12, 24)...)
}

// l40sTypes are the ids and names an L40S VF lists in creatable_vgpu_types
// with vGPU 17 (as published from real hosts).
func l40sTypes() []VGPUType {
	t := typeSeries("L40S", 1145, "B", 1, 2)
	t = append(t, typeSeries("L40S", 1147, "Q", 1, 2, 3, 4, 6, 8, 12, 16, 24, 48)...)
	t = append(t, typeSeries("L40S", 1157, "A", 1, 2, 3, 4, 6, 8, 12, 16, 24, 48)...)
	return append(t, VGPUType{ID: 2164, Name: "NVIDIA L40S-3B", SizeGB: 3})
}

// H100VGPU is an H100 PCIe 80GB (10de:2331) with a vGPU 17 host driver
// (vendor-specific VFIO, 32 VFs disabled at boot), outside Fixtures(): a
// card whose type ids no table in the product holds. Its C-series ids
// (H100-40C is 1425, as a real host listed it in issue 21) stand for
// whatever a driver release numbers; only the driver's lists name them.
// The simulated driver lists in each VF's nvidia/creatable_vgpu_types
// only what can be created on it now, nothing on a VF that holds a vGPU
// and nothing once the card is full, as NVIDIA's Virtual GPU Software
// User Guide ("Creating an NVIDIA vGPU on a Linux with KVM Hypervisor",
// vendor-specific VFIO framework, creatable_vgpu_types) describes.
func H100VGPU() Fixture {
	return Fixture{
		Name: "h100-vgpu", Description: "H100 PCIe with vGPU 17 (vendor-specific VFIO): 32 VFs (disabled at boot), a vGPU per VF through current_vgpu_type",
		IOMMU: true, Drivers: standardDrivers(true),
		Funcs: []Func{withVFs(gpu("0000:5d:00.0", 0x2331, 30, 0, 0), 32)},
		VGPUs: []VGPUCard{{PF: "0000:5d:00.0", Mode: VendorVFIO, FramebufferGB: 80, TotalVFs: 32, VFGroupBase: 100,
			Types: typeSeries("H100", 1419, "C", 4, 5, 8, 10, 16, 20, 40, 80)}},
	}
}

// vgpuFixtures are the hosts with NVIDIA's vGPU host driver loaded.
func vgpuFixtures() []Fixture {
	a10 := Fixture{
		Name: "a10-vgpu", Description: "A10 with the vGPU host driver: mdev types on the GPU itself (no SR-IOV)",
		IOMMU: true, Drivers: standardDrivers(true),
		Funcs: []Func{gpu("0000:3b:00.0", 0x2236, 12, 0, 0)},
		VGPUs: []VGPUCard{{PF: "0000:3b:00.0", Mode: MdevPF, FramebufferGB: 24, Types: a10Types()}},
	}
	a100 := Fixture{
		Name: "a100-sriov-vgpu", Description: "A100 PCIe 40GB with the vGPU host driver: SR-IOV, 16 VFs (disabled at boot), mdev types on each VF",
		IOMMU: true, Drivers: standardDrivers(true),
		Funcs: []Func{withVFs(gpu("0000:41:00.0", 0x20f1, 30, 0, 0), 16)},
		VGPUs: []VGPUCard{{PF: "0000:41:00.0", Mode: MdevVF, FramebufferGB: 40, TotalVFs: 16, VFGroupBase: 100,
			Types: typeSeries("A100", 472, "C", 4, 5, 8, 10, 20, 40)}},
	}
	l40s := Fixture{
		Name: "l40s-vgpu", Description: "two L40S with vGPU 17 (vendor-specific VFIO): 32 VFs each (disabled at boot), a vGPU per VF through current_vgpu_type",
		IOMMU: true, Drivers: standardDrivers(true),
		Funcs: []Func{withVFs(gpu("0000:41:00.0", 0x26b9, 30, 0, 0), 32), withVFs(gpu("0000:c1:00.0", 0x26b9, 31, 1, 1), 32)},
		VGPUs: []VGPUCard{
			{PF: "0000:41:00.0", Mode: VendorVFIO, FramebufferGB: 48, TotalVFs: 32, VFGroupBase: 100, Types: l40sTypes()},
			{PF: "0000:c1:00.0", Mode: VendorVFIO, FramebufferGB: 48, TotalVFs: 32, VFGroupBase: 200, Types: l40sTypes()},
		},
	}
	eight := Fixture{
		Name: "a10x8-vgpu", Description: "eight A10 with the vGPU host driver (mdev), each alone in its IOMMU group",
		IOMMU: true, Drivers: standardDrivers(true),
	}
	for i, b := range []string{"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"} {
		addr := "0000:" + b + ":00.0"
		eight.Funcs = append(eight.Funcs, gpu(addr, 0x2236, 20+i, i/4, i))
		eight.VGPUs = append(eight.VGPUs, VGPUCard{PF: addr, Mode: MdevPF, FramebufferGB: 24, Types: a10Types()})
	}
	return []Fixture{a10, a100, l40s, eight}
}

func withVFs(f Func, total int) Func {
	f.TotalVFs = total
	return f
}
