package vgpu

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
)

// Mixed sizes. NVIDIA's vGPU 17 and later host mixed-size (heterogeneous)
// time-sliced vGPUs on one GPU once the GPU is in mixed-size mode
// (`nvidia-smi vgpu -i <gpu> -shm 1`, NVML's
// nvmlDeviceSetVgpuHeterogeneousMode, with no vGPU on the GPU); the default
// is equal-size mode, one framebuffer size per GPU at a time. In mixed-size
// mode the driver places each vGPU at a placement id, a framebuffer offset
// aligned to the vGPU's size (NVML API reference, vGPU APIs:
// nvmlDeviceGetVgpuTypeCreatablePlacements; nvmlVgpuPlacementList_v2_t's
// placementSize is the slots a type occupies; NVIDIA AI Enterprise,
// "Heterogeneous vGPU"), and what sysfs shows follows: available_instances
// and creatable_vgpu_types name a type only while a placement fits it. The
// manager writes no placement id: the driver picks one at each create.
// Sources: https://docs.nvidia.com/deploy/nvml-api/group__nvmlVirtualGpuQueries.html,
// https://docs.nvidia.com/deploy/nvml-api/structnvmlVgpuPlacementList__v2__t.html,
// https://docs.nvidia.com/ai-enterprise/release-8/latest/infra-software/vgpu/features/heterogeneous-vgpu.html.
//
// The manager asks NVML only for type names (nvmltypes, and only where the
// vGPU host driver's library is mounted), and no sysfs file names the
// mode, so it reads the mode from the driver's lists:
// a GPU holding vGPUs of two sizes, or holding one size and offering
// another, is in mixed-size mode; a GPU holding one size S that it still
// offers, while it offers no type whose size divides S, is in equal-size
// mode (in mixed-size mode every free placement of S holds one of each
// divisor's size). An empty or full GPU shows nothing either way: then the
// plan creates the largest size first and, before each create, reads the
// lists again; equal-size mode is learned after the first create at most,
// and the vGPUs this pass created are removed again (never one in use:
// the remove step's checks), so a refused GPU is left as it was.

// sizeMode is what the manager knows of a GPU's vGPU size mode.
type sizeMode int

const (
	modeUnknown sizeMode = iota
	modeEqual
	modeMixed
)

// SizeModes remembers, for a manager's life, the GPUs found in equal-size
// mode, so that a config mixing sizes is refused there without writing
// again. A new manager (restarted after mixed-size mode was enabled) looks
// again. nil remembers nothing. Safe for concurrent use.
type SizeModes struct {
	mu    sync.Mutex
	equal map[host.Address]bool
}

func (m *SizeModes) get(gpu host.Address) sizeMode {
	if m == nil {
		return modeUnknown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.equal[gpu] {
		return modeEqual
	}
	return modeUnknown
}

func (m *SizeModes) learn(gpu host.Address, mode sizeMode) {
	if m == nil || mode == modeUnknown {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.equal == nil {
		m.equal = map[host.Address]bool{}
	}
	m.equal[gpu] = mode == modeEqual
}

// sizesOf is the framebuffer sizes the types of want have on g.
func sizesOf(g *GPU, want map[string]int) map[int]bool {
	out := map[int]bool{}
	for t, n := range want {
		if ti, ok := g.typeInfo(t); ok && n > 0 {
			out[ti.SizeGB] = true
		}
	}
	return out
}

// mixes reports whether want asks for vGPUs of more than one size on g.
func mixes(g *GPU, want map[string]int) bool { return len(sizesOf(g, want)) > 1 }

// createOrder lists want's types largest size first (then by name), the
// order that keeps mixed-size placements from fragmenting.
func createOrder(g *GPU, want map[string]int) []string {
	ts := sortedKeys(want)
	size := func(t string) int {
		ti, _ := g.typeInfo(t)
		return ti.SizeGB
	}
	sort.SliceStable(ts, func(i, j int) bool { return size(ts[i]) > size(ts[j]) })
	return ts
}

// observeMode reads the GPU's size mode from what its driver lists now
// (see above); g is a fresh inventory of it.
func observeMode(h HostView, g *GPU) (sizeMode, error) {
	held := map[int]bool{}
	for _, v := range g.VGPUs {
		if ti, ok := g.typeInfo(v.Type); ok {
			held[ti.SizeGB] = true
		}
	}
	if len(held) > 1 {
		return modeMixed, nil
	}
	if len(held) == 0 {
		return modeUnknown, nil
	}
	offered, err := offeredSizes(h, g)
	if err != nil {
		return modeUnknown, err
	}
	var s int
	for size := range held {
		s = size
	}
	for size := range offered {
		if size != s {
			return modeMixed, nil
		}
	}
	if !offered[s] {
		return modeUnknown, nil // full: nothing tells
	}
	for _, t := range g.Types {
		if t.SizeGB < s && s%t.SizeGB == 0 {
			return modeEqual, nil // a divisor's size would fit in mixed-size mode
		}
	}
	return modeUnknown, nil
}

// refuseEqualSize is the refusal of a plan that mixes sizes on a GPU the
// driver's lists, or the manager's memory, show in equal-size mode; ""
// when the mode allows it or is not known yet.
func refuseEqualSize(h HostView, g *GPU, want map[string]int, modes *SizeModes) string {
	mode, err := observeMode(h, g)
	if err != nil {
		return "failed: " + err.Error()
	}
	modes.learn(g.Address, mode)
	if mode == modeUnknown {
		mode = modes.get(g.Address)
	}
	if mode == modeEqual {
		return equalSizeRefusal(g, want)
	}
	return ""
}

// offeredSizes are the sizes of the time-sliced types the driver offers on
// any of the GPU's parents or VFs now.
func offeredSizes(h HostView, g *GPU) (map[int]bool, error) {
	out := map[int]bool{}
	add := func(name string) {
		if tn, err := vgpuconfig.ParseTypeName(host.ShortTypeName(name)); err == nil && tn.GPUInstance == 0 {
			out[tn.SizeGB] = true
		}
	}
	switch g.Backend {
	case BackendMdev, BackendMdevSRIOV:
		parents := g.VFs
		if g.Backend == BackendMdev {
			parents = []host.Address{g.Address}
		}
		for _, p := range parents {
			ts, err := h.MdevTypes(p)
			if err != nil {
				return nil, err
			}
			for _, mt := range ts {
				if mt.Available > 0 {
					add(mt.Name)
				}
			}
		}
	case BackendVendorVFIO:
		for _, vf := range g.VFs {
			v, ok, err := h.VGPU(vf)
			if err != nil {
				return nil, err
			}
			if ok {
				for _, name := range v.Creatable {
					add(name)
				}
			}
		}
	}
	return out, nil
}

// creatableNow reports whether the driver offers the create step's type
// on its parent or VF now, or the step is done already.
func creatableNow(h HostView, s Step) (bool, error) {
	if s.onVF() {
		v, ok, err := h.VGPU(host.Address(s.ID))
		if err != nil || !ok {
			return false, err
		}
		if v.Current != 0 {
			return true, nil // the create step tells whether it is the one planned
		}
		for id, name := range v.Creatable {
			if strconv.Itoa(id) == s.TypeID || host.ShortTypeName(name) == s.Type {
				return true, nil
			}
		}
		return false, nil
	}
	if _, ok, err := h.ReadMdev(s.ID); err != nil || ok {
		return ok, err
	}
	ts, err := h.MdevTypes(s.Parent)
	if err != nil {
		return false, err
	}
	for _, mt := range ts {
		if mt.ID == s.TypeID {
			return mt.Available > 0, nil
		}
	}
	return false, nil
}

// checkMixedCreate runs before each create of a plan mixing sizes: it
// reads the GPU's mode and whether the step's type can be placed now. A
// non-empty answer is the refusal.
func checkMixedCreate(h HostView, plan *Plan, gp *GPUPlan, s Step) string {
	ok, err := creatableNow(h, s)
	if err != nil {
		return "failed: " + err.Error()
	}
	gpus, err := Inventory(h, plan.opts.TypeNames)
	if err != nil {
		return "failed: read the GPU before creating a vGPU: " + err.Error()
	}
	for _, g := range gpus {
		if g.Address != gp.GPU.Address {
			continue
		}
		mode, err := observeMode(h, g)
		if err != nil {
			return "failed: " + err.Error()
		}
		plan.opts.SizeModes.learn(g.Address, mode)
		switch {
		case mode == modeEqual:
			return equalSizeRefusal(g, gp.Want)
		case !ok && mode == modeMixed:
			return placementRefusal(g, gp.Want, s.Type)
		case !ok:
			return unknownModeRefusal(g, gp.Want, s.Type)
		}
		return ""
	}
	return fmt.Sprintf("failed: GPU %s is gone", gp.GPU.Address)
}

// undo reverses the steps this pass completed on a GPU, last first:
// vGPUs it created are removed (with the remove step's in-use checks),
// vGPUs it removed are created again with their UUID or on their VF, and
// VFs it enabled are disabled. It returns the steps it completed.
func undo(ctx context.Context, h HostView, allocated Allocated, done []Step) ([]Step, error) {
	var out []Step
	for i := len(done) - 1; i >= 0; i-- {
		u := done[i]
		switch u.Op {
		case OpCreate:
			u.Op = OpRemove
			if u.onVF() {
				v, ok, err := h.VGPU(host.Address(u.ID))
				if err != nil {
					return out, err
				}
				if !ok || v.Current == 0 {
					continue
				}
				u.TypeID = strconv.Itoa(v.Current)
			}
		case OpRemove:
			u.Op = OpCreate
		case OpEnableVFs:
			u = Step{Op: OpDisableVFs, GPU: u.GPU, Address: u.Address}
		default:
			continue
		}
		if err := applyStep(ctx, h, allocated, u); err != nil {
			return out, fmt.Errorf("undo %s %s: %w", u.Op, u.ID, err)
		}
		out = append(out, u)
	}
	return out, nil
}

// product names the GPU's product from its types' names ("A10"), "" when
// none names it.
func product(g *GPU) string {
	for _, t := range g.Types {
		if tn, err := vgpuconfig.ParseTypeName(t.Name); err == nil {
			return tn.Product
		}
	}
	return ""
}

// describeProduct is g.Describe with the product: "GPU 0 (0000:3b:00.0,
// 10de:2236, NVIDIA A10)".
func describeProduct(g *GPU) string {
	d := g.Describe()
	if p := product(g); p != "" {
		d = strings.TrimSuffix(d, ")") + ", NVIDIA " + p + ")"
	}
	return d
}

// wantSizes writes want as "A10-6Q (6 GB) x2, A10-4Q (4 GB) x3", largest first.
func wantSizes(g *GPU, want map[string]int) string {
	var parts []string
	for _, t := range createOrder(g, want) {
		ti, _ := g.typeInfo(t)
		parts = append(parts, fmt.Sprintf("%s (%d GB) x%d", t, ti.SizeGB, want[t]))
	}
	return strings.Join(parts, ", ")
}

// oneSize suggests a config of one size that the GPU takes in either mode:
// the wanted type with the most vGPUs (the smaller on a tie), as many as
// the GPU holds of it.
func oneSize(g *GPU, want map[string]int) string {
	best, bestTI := "", TypeInfo{}
	for _, t := range createOrder(g, want) { // largest first: a later tie is smaller
		ti, _ := g.typeInfo(t)
		if best == "" || want[t] >= want[best] {
			best, bestTI = t, ti
		}
	}
	n := bestTI.Max
	if n <= 0 {
		n = want[best]
	}
	return fmt.Sprintf("%s: %d", best, n)
}

func equalSizeRefusal(g *GPU, want map[string]int) string {
	return fmt.Sprintf("failed: %s is in equal-size vGPU mode (NVIDIA's default: one framebuffer size per GPU at a time) and the config mixes sizes: %s; the GPU is left as it was. "+
		"Use one size (for example %q), or enable mixed-size mode while the GPU holds no vGPU (vGPU 17 or later: `nvidia-smi vgpu -i %s -shm 1`) and restart the vgpu-device-manager pod so it looks again",
		describeProduct(g), wantSizes(g, want), oneSize(g, want), g.Address)
}

func placementRefusal(g *GPU, want map[string]int, typ string) string {
	return fmt.Sprintf("failed: %s in mixed-size vGPU mode has no free placement for %s: the driver places each vGPU at a framebuffer offset aligned to its size, and %s do not fit together there; the GPU is left as it was. "+
		"Use sizes that fit the placements (fewer or smaller vGPUs), or one size (for example %q)",
		describeProduct(g), typ, wantSizes(g, want), oneSize(g, want))
}

// unknownModeRefusal: a type is not offered and the lists do not tell the
// mode (no type smaller than the one size held divides it).
func unknownModeRefusal(g *GPU, want map[string]int, typ string) string {
	return fmt.Sprintf("failed: %s does not offer %s next to the vGPUs of another size it holds: either it is in equal-size vGPU mode (NVIDIA's default), or in mixed-size mode %s do not fit its placements; the GPU is left as it was. "+
		"Use one size (for example %q), or enable mixed-size mode while the GPU holds no vGPU (vGPU 17 or later: `nvidia-smi vgpu -i %s -shm 1`) with sizes that fit",
		describeProduct(g), typ, wantSizes(g, want), oneSize(g, want), g.Address)
}
