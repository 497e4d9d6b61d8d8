package vgpu

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
)

// resolved is what the selected config asks of one GPU.
type resolved struct {
	managed  bool
	entry    int            // index of the entry that applies, -1 when none
	want     map[string]int // type -> vGPUs on this GPU
	deferred bool           // types not known before the VFs are enabled
}

// resolve picks the entry that applies to a GPU and validates it against
// what the GPU can host. The rules, NVIDIA's where it has one:
//   - an entry applies when its device-filter (if any) matches the GPU's
//     device and vendor id and its devices (all, or a list of indexes)
//     include the GPU's index;
//   - entries apply in order and each replaces the GPU's vGPUs, so the last
//     one that applies wins;
//   - one PCI id can be two products (A2 and A16 are both 10de:25b6): an
//     entry with a device-filter none of whose types the GPU can host is
//     skipped when another entry applies to the GPU;
//   - a GPU no entry applies to is left as it is;
//   - the winning entry must name only time-sliced types the GPU can host
//     (MIG-backed types, A100-1-5C, need MIG mode and GPU instances, which
//     the manager does not set up) and at most as many vGPUs as the GPU
//     holds: of each size, in all, and in framebuffer. Sizes may mix: the
//     GPU's mode (equal-size or mixed-size) and its placements decide at
//     plan and apply time (mixed.go).
//
// Any violation is a vgpuconfig.Error naming the config, the key and the GPU.
func resolve(file, config string, entries []vgpuconfig.Entry, g *GPU) (resolved, error) {
	r := resolved{entry: -1}
	var fits, foreign []vgpuconfig.Entry
	// Types cannot be known before the VFs of a model the catalog lacks
	// exist, nor on its full vendor-VFIO card (nothing lists names then).
	unknown := len(g.Types) == 0 && (g.Backend == BackendSRIOV || g.Backend == BackendVendorVFIO && len(g.VGPUs) > 0)
	for _, e := range entries {
		if !e.Matches(g.Index, g.ID) {
			continue
		}
		if unknown {
			r.deferred = g.Backend == BackendSRIOV
			fits = append(fits, e)
			continue
		}
		hostable := 0
		for t := range e.VGPUs {
			if _, ok := g.typeInfo(t); ok {
				hostable++
			}
		}
		if len(e.Filters) > 0 && len(e.VGPUs) > 0 && hostable == 0 {
			foreign = append(foreign, e)
			continue
		}
		fits = append(fits, e)
	}
	switch {
	case len(fits) > 0:
	case len(foreign) > 0:
		fits = foreign[len(foreign)-1:] // reported below: nothing it names fits
	default:
		return r, nil
	}
	e := fits[len(fits)-1]
	r.managed, r.entry, r.want = true, e.Index, e.VGPUs
	if unknown {
		return r, nil
	}
	key := fmt.Sprintf("vgpu-configs.%s[%d].vgpu-devices", config, e.Index)
	fail := func(key, format string, args ...any) error {
		return &vgpuconfig.Error{File: file, Config: config, Key: key, GPU: g.Describe(), Msg: fmt.Sprintf(format, args...)}
	}
	types := sortedKeys(e.VGPUs)
	for _, t := range types {
		if tn, err := vgpuconfig.ParseTypeName(t); err == nil && tn.GPUInstance > 0 {
			return r, fail(key+"."+t, "%s is a MIG-backed vGPU type: it needs the GPU in MIG mode (nvidia-smi -i %s -mig 1) with a GPU instance of %d slices created for each vGPU (nvidia-smi mig -cgi), which this manager does not set up; use a time-sliced type (%s-%d%s) instead", t, g.Address, tn.GPUInstance, tn.Product, tn.SizeGB, tn.Series)
		}
		if _, ok := g.typeInfo(t); ok {
			continue
		}
		if len(g.Types) == 0 {
			return r, fail(key+"."+t, "this GPU cannot host %s: it offers no vGPU types (no mdev_supported_types, no SR-IOV VFs with nvidia/current_vgpu_type): is NVIDIA's vGPU host driver loaded?", t)
		}
		return r, fail(key+"."+t, "this GPU cannot host %s; it can host %s", t, strings.Join(g.typeNames(), ", "))
	}
	total, gb, sizes := 0, 0, map[int][]string{}
	for _, t := range types {
		ti, _ := g.typeInfo(t)
		total += e.VGPUs[t]
		gb += e.VGPUs[t] * ti.SizeGB
		sizes[ti.SizeGB] = append(sizes[ti.SizeGB], t)
	}
	for _, size := range sortedInts(sizes) {
		n := 0
		for _, t := range sizes[size] {
			n += e.VGPUs[t]
		}
		ti, _ := g.typeInfo(sizes[size][0])
		if ti.Max > 0 && n > ti.Max {
			return r, fail(key+"."+sizes[size][0], "asks for %d vGPUs of size %d GB; this GPU holds at most %d (from %s)", n, ti.SizeGB, ti.Max, ti.MaxFrom)
		}
	}
	if len(sizes) > 1 {
		if fb := framebufferGB(g); fb > 0 && gb > fb {
			return r, fail(key, "asks for %d GB of vGPUs (%s); this GPU has %d GB", gb, wantSizes(g, e.VGPUs), fb)
		}
		if vfs := max(g.TotalVFs, len(g.VFs)); g.Backend != BackendMdev && vfs > 0 && total > vfs {
			return r, fail(key, "asks for %d vGPUs; this GPU holds at most %d (one per VF)", total, vfs)
		}
	}
	return r, nil
}

// framebufferGB is the GPU's framebuffer as its types' capacities show it
// (size times how many the GPU holds alone, the largest such product),
// 0 when no capacity is known beyond the VF count.
func framebufferGB(g *GPU) int {
	fb := 0
	for _, t := range g.Types {
		if t.MaxFrom != "VFs" {
			fb = max(fb, t.SizeGB*t.Max)
		}
	}
	return fb
}

func sortedInts[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
