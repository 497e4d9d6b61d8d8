package vgpu

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
)

// Options configure planning and applying.
type Options struct {
	// NodeName seeds the stable mdev UUIDs (StableUUID).
	NodeName string
	// Allocated tells which vGPUs pods hold; nil when there is no kubelet
	// to ask (a host-side run): only open device nodes count then.
	Allocated Allocated
	// Parents are taken as GPUs after NVIDIA's, in order, and go through
	// the same plan, apply and in-use checks. The product sets none: on an
	// NVIDIA host no other parent is the manager's to change. No device
	// QEMU emulates carries NVIDIA's vendor id, so test/realkernel names
	// the kernel's mtty sample mdev driver and QEMU's SR-IOV NVMe
	// controller here to run plan and apply on a real kernel.
	Parents []Parent
	// TypeNames names vendor-VFIO type ids the driver no longer lists
	// (TypeMemory, which Run keeps in its run folder and which learns
	// every name the driver lists; NVML behind it); nil for none.
	TypeNames TypeNamer
	// SizeModes remembers the GPUs found in equal-size vGPU mode (Run
	// keeps one for its life); nil for none.
	SizeModes *SizeModes
}

// Op is the kind of a step.
type Op string

// Steps, in the order they run on one GPU.
const (
	OpDisableVFs Op = "disable-vfs" // sriov_numvfs 0: a partial VF count on a GPU without vGPUs
	OpEnableVFs  Op = "enable-vfs"  // sriov_numvfs = sriov_totalvfs, only from 0
	OpRemove     Op = "remove"      // mdev remove, or current_vgpu_type 0
	OpCreate     Op = "create"      // mdev create, or current_vgpu_type <id>
)

// Step is one sysfs write of a plan.
type Step struct {
	Op      Op           `json:"op"`
	GPU     int          `json:"gpu"`
	Address host.Address `json:"address"`          // the GPU
	ID      string       `json:"id,omitempty"`     // mdev UUID or VF address; "" until the VFs exist
	Type    string       `json:"type,omitempty"`   // short type name
	TypeID  string       `json:"typeId,omitempty"` // nvidia-558 or 1155; "" when read at apply time
	Parent  host.Address `json:"parent,omitempty"` // the mdev parent or the VF
	VFs     int          `json:"vfs,omitempty"`    // enable-vfs: the count written
}

func (s Step) onVF() bool {
	_, err := host.ParseAddress(s.ID)
	return err == nil
}

// GPUPlan is what to do on one GPU.
type GPUPlan struct {
	GPU      *GPU
	Managed  bool           // an entry of the config applies to the GPU
	Entry    int            // that entry's index, -1 when none
	Want     map[string]int // vGPUs by type
	Steps    []Step         // in order
	Refused  string         // non-empty: the GPU is left exactly as it is
	Deferred bool           // types are checked once the VFs are enabled (a model the catalog lacks)

	mixed   bool               // Want mixes framebuffer sizes: each create checks the GPU's mode first
	entries []vgpuconfig.Entry // the config's entries, to resolve again once VFs exist
}

// Plan is what applying a config does; computing it changes nothing.
type Plan struct {
	File   string
	Config string
	GPUs   []*GPUPlan
	opts   Options
}

// Changes reports whether applying the plan writes anything.
func (p *Plan) Changes() bool {
	for _, g := range p.GPUs {
		if len(g.Steps) > 0 {
			return true
		}
	}
	return false
}

// Refusals lists the GPUs the plan leaves alone, with the reason.
func (p *Plan) Refusals() []Refusal {
	var out []Refusal
	for _, g := range p.GPUs {
		if g.Refused != "" {
			out = append(out, Refusal{GPU: g.GPU.Index, Address: g.GPU.Address, Reason: g.Refused})
		}
	}
	return out
}

// Refusal is a GPU whose change was refused or failed.
type Refusal struct {
	GPU     int          `json:"gpu"`
	Address host.Address `json:"address"`
	Reason  string       `json:"reason"`
}

// PlanConfig plans the selected config of cfg on the host. A config error
// (vgpuconfig.Error: exit 1) comes back before anything is planned; GPUs whose
// change would remove a vGPU in use are refused in the plan, whole.
func PlanConfig(ctx context.Context, h HostView, cfg *vgpuconfig.Config, selected string, o Options) (*Plan, error) {
	entries, err := cfg.Select(selected)
	if err != nil {
		return nil, err
	}
	gpus, u, err := survey(ctx, h, o)
	if err != nil {
		return nil, err
	}
	p := &Plan{File: cfg.File, Config: selected, opts: o}
	for _, g := range gpus {
		r, err := resolve(cfg.File, selected, entries, g)
		if err != nil {
			return nil, err
		}
		gp := &GPUPlan{GPU: g, Managed: r.managed, Entry: r.entry, Want: r.want, Deferred: r.deferred, entries: entries}
		if r.managed {
			gp.Steps, gp.Refused = planGPU(g, r.want, o.NodeName, u)
			if gp.mixed = mixes(g, r.want); gp.mixed && len(gp.Steps) > 0 {
				if why := refuseEqualSize(h, g, r.want, o.SizeModes); why != "" {
					gp.Steps, gp.Refused = nil, why
				}
			}
		}
		p.GPUs = append(p.GPUs, gp)
	}
	return p, nil
}

// planGPU computes one GPU's steps: vGPUs that match are kept whatever
// their UUID; the rest are removed (only when idle, else the GPU is
// refused whole); the missing ones are created, mdevs with stable UUIDs.
func planGPU(g *GPU, want map[string]int, node string, u *usage) ([]Step, string) {
	var steps []Step
	step := func(s Step) {
		s.GPU, s.Address = g.Index, g.Address
		steps = append(steps, s)
	}
	total := 0
	for _, n := range want {
		total += n
	}
	if g.Backend == BackendSRIOV {
		if total == 0 {
			return nil, ""
		}
		step(Step{Op: OpEnableVFs, VFs: g.TotalVFs})
		for _, t := range createOrder(g, want) {
			for i := 0; i < want[t]; i++ {
				step(Step{Op: OpCreate, Type: t})
			}
		}
		return steps, ""
	}
	if len(g.VFs) > 0 && len(g.VFs) < g.TotalVFs && len(g.VGPUs) == 0 && total > 0 {
		// A partial VF count (someone wrote it by hand) stalls tools that
		// wait for every VF; with no vGPU on any VF, start over.
		step(Step{Op: OpDisableVFs})
		step(Step{Op: OpEnableVFs, VFs: g.TotalVFs})
		for _, t := range createOrder(g, want) {
			for i := 0; i < want[t]; i++ {
				step(Step{Op: OpCreate, Type: t})
			}
		}
		return steps, ""
	}
	keep, remove := choose(g, want, node, u)
	var busy []string
	for _, v := range remove {
		if v.Type == "" && total > 0 {
			return nil, fmt.Sprintf("unknown vGPU type: %s: VF %s holds type id %s, which no creatable_vgpu_types lists now, the manager never saw listed (its memory, %s) and NVML does not name; cannot tell whether it matches the config; the GPU is left as it is (removing that vGPU, current_vgpu_type 0, lets the config apply)", g.Describe(), v.ID, v.TypeID, names.VGPUTypesFile)
		}
		if why := u.busy(v, true); why != "" {
			busy = append(busy, why)
		}
	}
	if len(busy) > 0 {
		return nil, strings.Join(busy, "; ")
	}
	for _, v := range remove {
		step(Step{Op: OpRemove, ID: v.ID, Type: v.Type, TypeID: v.TypeID, Parent: v.Parent})
	}
	creates := creations(g, want, keep, remove, node)
	for _, s := range creates {
		step(s)
	}
	return steps, ""
}

// choose splits the GPU's vGPUs into those kept and those removed: of a
// wanted type, busy ones are kept first, then those with stable UUIDs (by
// slot), then the rest; every vGPU of another type goes.
func choose(g *GPU, want map[string]int, node string, u *usage) (keep, remove []VGPU) {
	byType := map[string][]VGPU{}
	for _, v := range g.VGPUs {
		byType[v.Type] = append(byType[v.Type], v)
	}
	for _, t := range sortedKeys(byType) {
		vs := byType[t]
		rank := map[string]int{}
		for _, v := range vs {
			rank[v.ID] = 1 << 20
			if u.busy(v, true) != "" {
				rank[v.ID] = -1
			} else if s, ok := stableSlot(node, g.Address, v.ID, len(g.VGPUs)+vgpuconfig.MaxVGPUsPerGPU); ok {
				rank[v.ID] = s
			}
		}
		sort.SliceStable(vs, func(i, j int) bool { return rank[vs[i].ID] < rank[vs[j].ID] })
		n := min(want[t], len(vs))
		if t == "" {
			n = 0
		}
		keep = append(keep, vs[:n]...)
		remove = append(remove, vs[n:]...)
	}
	return keep, remove
}

// stableSlot finds the slot whose stable UUID id is, among the first n.
func stableSlot(node string, gpu host.Address, id string, n int) (int, bool) {
	for s := 0; s < n; s++ {
		if StableUUID(node, gpu, s) == id {
			return s, true
		}
	}
	return 0, false
}

// creations lists the creates that bring the kept vGPUs up to want,
// largest size first: stable-UUID slots not taken by a kept vGPU for
// mdevs, free VFs in VF order for SR-IOV GPUs.
func creations(g *GPU, want map[string]int, keep, remove []VGPU, node string) []Step {
	kept, taken, usedVF := map[string]int{}, map[string]bool{}, map[host.Address]bool{}
	for _, v := range keep {
		kept[v.Type]++
		taken[v.ID] = true
		usedVF[v.Parent] = true
	}
	var free []host.Address
	for _, vf := range g.VFs {
		if !usedVF[vf] {
			free = append(free, vf)
		}
	}
	var out []Step
	slot := 0
	for _, t := range createOrder(g, want) {
		ti, _ := g.typeInfo(t)
		for i := kept[t]; i < want[t]; i++ {
			s := Step{Op: OpCreate, Type: t, TypeID: ti.ID, Parent: g.Address}
			if g.Backend != BackendMdev {
				if len(free) == 0 {
					break // capacity was validated; a shortfall is reported by apply
				}
				s.Parent, free = free[0], free[1:]
			}
			if g.Backend == BackendVendorVFIO {
				s.ID = string(s.Parent)
			} else {
				for taken[StableUUID(node, g.Address, slot)] {
					slot++
				}
				s.ID = StableUUID(node, g.Address, slot)
				taken[s.ID] = true
			}
			out = append(out, s)
		}
	}
	return out
}
