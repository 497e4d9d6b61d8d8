package hostsim

import (
	"fmt"
	"sort"
	"strings"
)

// typeSeries builds a product's vGPU types: for each series letter, one
// type per framebuffer size, with consecutive ids from firstID. product is
// what the driver writes between "NVIDIA " and the size ("A10", "RTX Pro
// 6000 Blackwell DC").
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

// a10Types: what a real A10 VF lists, ids and names (OpenNebula's "NVIDIA
// vGPU & MIG" guide, `onehost show` of VF 0000:41:00.4: 588 A10-1B ...
// 605 A10-24A; Apache CloudStack PR 11432's `nvidia-smi vgpu -s -v` shows
// A10-6Q as 0x252 = 594, the same numbering). That listing has no C
// series, and neither has this fixture.
func a10Types() []VGPUType {
	t := typeSeries("A10", 588, "B", 1, 2)
	return append(t, typeSeries("A10", 590, "QA", 1, 2, 3, 4, 6, 8, 12, 24)...)
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
// (vendor-specific VFIO, 32 VFs disabled at boot): a card whose type ids
// no table in the product holds. Its C-series ids (H100-40C is 1425, as a
// real host listed it in issue 21) stand for whatever a driver release
// numbers; only the driver's lists name them. The simulated driver lists
// in each VF's nvidia/creatable_vgpu_types only what can be created on it
// now, nothing on a VF that holds a vGPU and nothing once the card is
// full, as NVIDIA's Virtual GPU Software User Guide ("Creating an NVIDIA
// vGPU on a Linux with KVM Hypervisor", vendor-specific VFIO framework,
// creatable_vgpu_types) describes. It is h100-vgpu in VGPUFixtures().
func H100VGPU() Fixture {
	return Fixture{
		Name: "h100-vgpu", Description: "H100 PCIe with vGPU 17 (vendor-specific VFIO): 32 VFs (disabled at boot), a vGPU per VF through current_vgpu_type",
		IOMMU: true, Drivers: standardDrivers(true),
		Funcs: []Func{withVFs(gpu("0000:5d:00.0", 0x2331, 30, 0, 0), 32)},
		VGPUs: []VGPUCard{{PF: "0000:5d:00.0", Mode: VendorVFIO, FramebufferGB: 80, TotalVFs: 32, VFGroupBase: 100,
			Types: typeSeries("H100", 1419, "C", 4, 5, 8, 10, 16, 20, 40, 80)}},
	}
}

// vgpuHost is a fixture of one or more GPUs of one kind with the vGPU host
// driver; SR-IOV cards get TotalVFs VFs, GPU i's VFs in IOMMU groups from
// 100*(i+1) (mdevs take free groups from 128 up).
func vgpuHost(name, desc string, mode VGPUMode, device uint16, fb, totalVFs int, types []VGPUType, pfs ...string) Fixture {
	fx := Fixture{Name: name, Description: desc, IOMMU: true, Drivers: standardDrivers(true)}
	for i, pf := range pfs {
		f := gpu(pf, device, 20+i, i*2/len(pfs), i)
		card := VGPUCard{PF: pf, Mode: mode, FramebufferGB: fb, Types: types}
		if mode != MdevPF {
			f.TotalVFs, card.TotalVFs, card.VFGroupBase = totalVFs, totalVFs, 100*(i+1)
		}
		fx.Funcs = append(fx.Funcs, f)
		fx.VGPUs = append(fx.VGPUs, card)
	}
	return fx
}

// vgpuFixtures are the vGPU hosts that Fixtures() lists (and so the vfio,
// host and demo suites iterate): one per mode (VFs disabled at boot: a PF
// each), and the eight-GPU node.
func vgpuFixtures() []Fixture {
	a10 := vgpuHost("a10-vgpu", "A10 (Ampere) with the vGPU host driver: SR-IOV, 32 VFs (disabled at boot), mdev types on each VF, one vGPU per VF",
		MdevVF, 0x2236, 24, 32, a10Types(), "0000:3b:00.0")
	a10.Funcs[0].Group = 12
	// A100 PCIe 40GB: 16 VFs; the C-series ids are illustrative (A100-10C
	// as nvidia-475).
	a100 := vgpuHost("a100-sriov-vgpu", "A100 PCIe 40GB with the vGPU host driver: SR-IOV, 16 VFs (disabled at boot), mdev types on each VF",
		MdevVF, 0x20f1, 40, 16, typeSeries("A100", 472, "C", 4, 5, 8, 10, 20, 40), "0000:41:00.0")
	a100.Funcs[0].Group = 30
	l40s := vgpuHost("l40s-vgpu", "two L40S with vGPU 17 (vendor-specific VFIO): 32 VFs each (disabled at boot), a vGPU per VF through current_vgpu_type",
		VendorVFIO, 0x26b9, 48, 32, l40sTypes(), "0000:41:00.0", "0000:c1:00.0")
	for i := range l40s.Funcs {
		l40s.Funcs[i].Group = 30 + i
	}
	// Eight GPUs on mdev: T4s, whose vGPUs live on the GPU itself. Eight
	// SR-IOV A10s would enable 256 VFs of 18 types each (4608 type
	// folders) in every test that applies a config, for nothing the
	// single a10-vgpu does not show.
	eight := vgpuHost("t4x8-vgpu", "eight Tesla T4 with the vGPU host driver (mdev on each GPU, no SR-IOV), each alone in its IOMMU group",
		MdevPF, 0x1eb8, 16, 0, t4Types(), "0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
		"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")
	return []Fixture{a10, a100, l40s, eight}
}

// VGPUFixtures lists a vGPU host for every GPU generation as NVIDIA's vGPU
// host driver shows it, sorted by name: pre-Ampere mdev on the GPU itself
// (T4), Ampere SR-IOV with mdev on the VFs (A10, A16, A40, A100), and
// vendor-specific VFIO on Ada (L4, L40, L40S), Hopper (H100 PCIe and SXM,
// H200) and Blackwell (RTX PRO 6000 Blackwell Server Edition, B200). The
// vGPU-only ones are outside Fixtures(), so the suites that iterate every
// host do not pay for them; Lookup finds them all. Where a comment does
// not name a published listing, the type ids are illustrative: the
// product never depends on them (names come from the driver's lists).
func VGPUFixtures() []Fixture {
	fx := append(vgpuFixtures(), H100VGPU(), t4VGPU(), a16VGPU(), a40VGPU())
	fx = append(fx, adaVGPU()...)
	fx = append(fx, hopperVGPU()...)
	fx = append(fx, blackwellVGPU()...)
	sort.Slice(fx, func(i, j int) bool { return fx[i].Name < fx[j].Name })
	return fx
}

// t4VGPU: Turing, mdev on the GPU itself (no SR-IOV), the mode of every
// GPU before Ampere. Type names as vGPU 13 and later write them ("NVIDIA
// T4-4Q"; older releases wrote "GRID T4-4Q"); series and sizes from
// NVIDIA's "Virtual GPU Types for Supported GPUs" (Tesla T4, 16 GB);
// ids illustrative.
func t4VGPU() Fixture {
	fx := vgpuHost("t4-vgpu", "Tesla T4 (Turing) with the vGPU host driver: mdev types on the GPU itself (no SR-IOV)",
		MdevPF, 0x1eb8, 16, 0, t4Types(), "0000:3b:00.0")
	fx.Funcs[0].Group = 12
	return fx
}

func t4Types() []VGPUType {
	types := typeSeries("T4", 222, "B", 1, 2)
	types = append(types, typeSeries("T4", 225, "AQ", 1, 2, 4, 8, 16)...)
	return append(types, typeSeries("T4", 319, "C", 4, 8, 16)...)
}

// a16VGPU: an A16 board (10de:25b6, four GA107 GPUs of 16 GB, each its
// own PCI function behind the board's switch), Ampere SR-IOV with mdev on
// the VFs. Sizes from NVIDIA's vGPU types for the A16; 16 VFs per GPU
// (A16-1Q's 16 vGPUs per GPU) and the ids are illustrative.
func a16VGPU() Fixture {
	types := typeSeries("A16", 717, "B", 1, 2)
	types = append(types, typeSeries("A16", 719, "QA", 1, 2, 4, 8, 16)...)
	types = append(types, typeSeries("A16", 729, "C", 4, 8, 16)...)
	return vgpuHost("a16-vgpu", "A16 board: four 16 GB GPUs with the vGPU host driver, each SR-IOV with 16 VFs (disabled at boot), mdev types on each VF",
		MdevVF, 0x25b6, 16, 16, types, "0000:84:00.0", "0000:85:00.0", "0000:86:00.0", "0000:87:00.0")
}

// a40VGPU: A40 (10de:2235, 48 GB), Ampere SR-IOV with mdev on the VFs,
// 32 VFs (A40-1Q: at most 32 vGPUs per GPU). Sizes from NVIDIA's vGPU
// types for the A40; ids illustrative.
func a40VGPU() Fixture {
	types := typeSeries("A40", 557, "B", 1, 2)
	types = append(types, typeSeries("A40", 559, "QA", 1, 2, 3, 4, 6, 8, 12, 16, 24, 48)...)
	types = append(types, typeSeries("A40", 579, "C", 4, 6, 8, 12, 16, 24, 48)...)
	return vgpuHost("a40-vgpu", "A40 with the vGPU host driver: SR-IOV, 32 VFs (disabled at boot), mdev types on each VF",
		MdevVF, 0x2235, 48, 32, types, "0000:ca:00.0")
}

// adaVGPU: L4 (10de:27b8, 24 GB) and L40 (10de:26b5, 48 GB) with vGPU 17,
// vendor-specific VFIO, 32 VFs; sizes from NVIDIA's vGPU types for Ada;
// ids illustrative (the L40S fixture has the published ones).
func adaVGPU() []Fixture {
	l4 := typeSeries("L4", 1031, "B", 1, 2)
	l4 = append(l4, typeSeries("L4", 1033, "QA", 1, 2, 3, 4, 6, 8, 12, 24)...)
	l4 = append(l4, typeSeries("L4", 1049, "C", 4, 6, 8, 12, 24)...)
	l40 := typeSeries("L40", 1089, "B", 1, 2)
	l40 = append(l40, typeSeries("L40", 1091, "QA", 1, 2, 3, 4, 6, 8, 12, 16, 24, 48)...)
	l40 = append(l40, typeSeries("L40", 1111, "C", 4, 6, 8, 12, 16, 24, 48)...)
	return []Fixture{
		vgpuHost("l4-vgpu", "L4 (Ada) with vGPU 17 (vendor-specific VFIO): 32 VFs (disabled at boot), a vGPU per VF through current_vgpu_type",
			VendorVFIO, 0x27b8, 24, 32, l4, "0000:17:00.0"),
		vgpuHost("l40-vgpu", "L40 (Ada) with vGPU 17 (vendor-specific VFIO): 32 VFs (disabled at boot), a vGPU per VF through current_vgpu_type",
			VendorVFIO, 0x26b5, 48, 32, l40, "0000:4f:00.0"),
	}
}

// hopperVGPU: H100 SXM5 80GB (10de:2330, types H100XM-*C) and H200 SXM5
// 141GB (10de:2335, types H200X-*C), vendor-specific VFIO, 32 VFs. Names
// and sizes from NVIDIA's "Hopper Architecture vGPU Types" (time-sliced
// vGPU for Compute). H200X-141C is 1428 as a real host's
// creatable_vgpu_types listed it (quoted in a public device plugin); the
// other ids are illustrative.
func hopperVGPU() []Fixture {
	h200 := typeSeries("H200X", 1420, "C", 4, 7, 8, 14, 17, 28, 35, 70)
	h200 = append(h200, VGPUType{ID: 1428, Name: "NVIDIA H200X-141C", SizeGB: 141})
	return []Fixture{
		vgpuHost("h100-sxm-vgpu", "H100 SXM5 80GB with vGPU 17 (vendor-specific VFIO): 32 VFs (disabled at boot), a vGPU per VF through current_vgpu_type",
			VendorVFIO, 0x2330, 80, 32, typeSeries("H100XM", 1497, "C", 4, 5, 8, 10, 16, 20, 40, 80), "0000:18:00.0"),
		vgpuHost("h200-vgpu", "H200 SXM5 141GB with vGPU 17 (vendor-specific VFIO): 32 VFs (disabled at boot), a vGPU per VF through current_vgpu_type",
			VendorVFIO, 0x2335, 141, 32, h200, "0000:19:00.0"),
	}
}

// blackwellVGPU: RTX PRO 6000 Blackwell Server Edition (10de:2bb5, 96 GB;
// the driver names its types "NVIDIA RTX Pro 6000 Blackwell DC-48Q", as
// published `nvidia-smi vgpu` output shows, so the short name is DC-48Q)
// and B200 (10de:2901, 180 GB; C series named B200X-*C after NVIDIA's
// SXM naming), vendor-specific VFIO, 32 VFs. Sizes and ids are
// illustrative.
func blackwellVGPU() []Fixture {
	rtx := typeSeries("RTX Pro 6000 Blackwell DC", 1717, "QA", 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96)
	rtx = append(rtx, typeSeries("RTX Pro 6000 Blackwell DC", 1739, "C", 4, 6, 8, 12, 16, 24, 32, 48, 96)...)
	return []Fixture{
		vgpuHost("rtxpro6000-vgpu", "RTX PRO 6000 Blackwell Server Edition with the vGPU host driver (vendor-specific VFIO): 32 VFs (disabled at boot), a vGPU per VF",
			VendorVFIO, 0x2bb5, 96, 32, rtx, "0000:ca:00.0"),
		vgpuHost("b200-vgpu", "B200 with the vGPU host driver (vendor-specific VFIO): 32 VFs (disabled at boot), a vGPU per VF through current_vgpu_type",
			VendorVFIO, 0x2901, 180, 32, typeSeries("B200X", 1801, "C", 5, 9, 11, 18, 22, 36, 45, 90, 180), "0000:1b:00.0"),
	}
}

func withVFs(f Func, total int) Func {
	f.TotalVFs = total
	return f
}
