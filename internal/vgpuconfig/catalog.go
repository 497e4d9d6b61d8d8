package vgpuconfig

import (
	"fmt"
	"sort"
)

// product is one GPU model's time-sliced vGPU offer, from NVIDIA's vGPU
// software documentation ("Virtual GPU Types for Supported GPUs", vGPU 16
// and 17; "Hopper Architecture vGPU Types" of NVIDIA AI Enterprise 7 for
// the H200; the B200 and RTX PRO 6000 Blackwell sizes follow the same
// pattern until NVIDIA's tables are at hand): the framebuffer each type gets, per series, and the GPU's
// framebuffer. The catalog serves where sysfs cannot tell yet or any more:
// an SR-IOV GPU whose VFs are not enabled (no type is visible before),
// and the capacity of vendor-VFIO types (creatable_vgpu_types has no
// counts). It holds no type ids: the driver numbers its types, differently
// across releases, so ids are named only from what the driver lists (and
// what the manager remembers of it). mdev capacity always comes from sysfs
// (max_instance of the description).
type product struct {
	Name          string // the product part of type names: A10, A100D, H100XM
	FramebufferGB int
	Series        map[string][]int // series letter -> framebuffer sizes in GB
}

// MaxVGPUsPerGPU is NVIDIA's limit of vGPUs on one physical GPU (A40-1Q
// holds 32, not 48).
const MaxVGPUsPerGPU = 32

func dataCenter(name string, fb int, q, c []int) product {
	p := product{Name: name, FramebufferGB: fb, Series: map[string][]int{}}
	if len(q) > 0 {
		p.Series["Q"], p.Series["A"], p.Series["B"] = q, q, []int{1, 2}
	}
	if len(c) > 0 {
		p.Series["C"] = c
	}
	return p
}

// catalogFor lists the products sold under a PCI device id of vendor
// 10de (A2 and A16 share 25b6).
func catalogFor(device uint16) []product {
	q24, c24 := []int{1, 2, 3, 4, 6, 8, 12, 24}, []int{4, 6, 8, 12, 24}
	q48, c48 := []int{1, 2, 3, 4, 6, 8, 12, 16, 24, 48}, []int{4, 6, 8, 12, 16, 24, 48}
	q16, c16 := []int{1, 2, 4, 8, 16}, []int{4, 8, 16}
	c40, c80 := []int{4, 5, 8, 10, 20, 40}, []int{4, 8, 10, 16, 20, 40, 80}
	h80 := []int{4, 5, 8, 10, 16, 20, 40, 80}
	switch device {
	case 0x2236:
		return []product{dataCenter("A10", 24, q24, c24)}
	case 0x2235:
		return []product{dataCenter("A40", 48, q48, c48)}
	case 0x25b6:
		return []product{dataCenter("A16", 16, q16, c16), dataCenter("A2", 16, q16, c16)}
	case 0x20b7:
		return []product{dataCenter("A30", 24, nil, c24)}
	case 0x20f1:
		return []product{dataCenter("A100", 40, nil, c40)}
	case 0x20b5, 0x20b8:
		return []product{dataCenter("A100D", 80, nil, c80)}
	case 0x20b0:
		return []product{dataCenter("A100X", 40, nil, c40)}
	case 0x20b2:
		return []product{dataCenter("A100DX", 80, nil, c80)}
	case 0x27b8:
		return []product{dataCenter("L4", 24, q24, c24)}
	case 0x26b5:
		return []product{dataCenter("L40", 48, q48, c48)}
	case 0x26b9:
		p := dataCenter("L40S", 48, q48, c48)
		p.Series["B"] = []int{1, 2, 3}
		return []product{p}
	case 0x2331:
		return []product{dataCenter("H100", 80, nil, h80)}
	case 0x2330:
		return []product{dataCenter("H100XM", 80, nil, h80)}
	case 0x2321:
		return []product{dataCenter("H100L", 94, nil, []int{4, 6, 11, 15, 23, 31, 47, 94})}
	case 0x2335:
		return []product{dataCenter("H200X", 141, nil, []int{4, 7, 8, 14, 17, 28, 35, 70, 141})}
	case 0x233b:
		return []product{dataCenter("H200", 141, nil, []int{4, 7, 8, 14, 17, 28, 35, 70, 141})}
	case 0x2901:
		return []product{dataCenter("B200X", 180, nil, []int{5, 9, 11, 18, 22, 36, 45, 90, 180})}
	case 0x2bb5:
		// "NVIDIA RTX Pro 6000 Blackwell DC-48Q": the short name's
		// product is DC. No B series.
		p := dataCenter("DC", 96, []int{2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96}, []int{4, 6, 8, 12, 16, 24, 32, 48, 96})
		delete(p.Series, "B")
		return []product{p}
	case 0x1eb8:
		return []product{dataCenter("T4", 16, q16, c16)}
	case 0x1db4:
		return []product{dataCenter("V100", 16, q16, c16)}
	}
	return nil
}

// CatalogType is a vGPU type as the catalog knows it.
type CatalogType struct {
	Name   string // short name, A10-4Q
	SizeGB int
	Max    int // how many vGPUs of this type one GPU holds alone
}

// types lists a product's types with their capacity on one GPU.
func (p product) types() []CatalogType {
	var out []CatalogType
	for s, sizes := range p.Series {
		for _, gb := range sizes {
			name := fmt.Sprintf("%s-%d%s", p.Name, gb, s)
			out = append(out, CatalogType{Name: name, SizeGB: gb, Max: min(p.FramebufferGB/gb, MaxVGPUsPerGPU)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return TypeLess(out[i].Name, out[j].Name) })
	return out
}

// Catalog lists every type the products of a device id (of vendor 10de)
// offer.
func Catalog(device uint16) []CatalogType {
	var out []CatalogType
	for _, p := range catalogFor(device) {
		out = append(out, p.types()...)
	}
	return out
}

// CatalogMax is a type's capacity per the catalog, 0 when unknown.
func CatalogMax(device uint16, name string) int {
	for _, t := range Catalog(device) {
		if t.Name == name {
			return t.Max
		}
	}
	return 0
}

// TypeLess orders type names by product, series, then framebuffer size.
func TypeLess(a, b string) bool {
	ta, errA := ParseTypeName(a)
	tb, errB := ParseTypeName(b)
	if errA != nil || errB != nil {
		return a < b
	}
	if ta.Product != tb.Product {
		return ta.Product < tb.Product
	}
	if ta.Series != tb.Series {
		return ta.Series < tb.Series
	}
	if ta.GPUInstance != tb.GPUInstance {
		return ta.GPUInstance < tb.GPUInstance
	}
	return ta.SizeGB < tb.SizeGB
}
