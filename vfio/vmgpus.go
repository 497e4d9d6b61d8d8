package vfio

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// VMGPUs is a mixed node's declaration of which GPUs go to VMs (vfio); the
// others stay on their host driver for containers. Its text form is the
// value of the Node annotation names.VMGPUsAnnotation and of --vm-gpus:
//
//	"" or all    every GPU (a node wholly for VMs)
//	2            a count, picked NUMA-aware and stable (see Planner.Split)
//	index:0,2    GPUs by index as nvidia-smi numbers them: the vendor's GPUs
//	             (physical functions) in PCI address order, whatever their
//	             driver; NVSwitches and other functions are not counted
//	model:2236   every GPU whose PCI device id is 2236, or whose pci.ids
//	model:A10    name has A10 as a whole word ("GA102GL [A10]", not "A100");
//	             names need a pci.ids file, ids do not
type VMGPUs struct {
	text    string
	all     bool
	count   int
	indices []int
	model   string
}

// vmGPUsSyntax is what a declaration may be, for error messages.
const vmGPUsSyntax = "want all, a count (2), GPU indices (index:0,2) or a model (model:2236 or model:A10)"

// maxVMGPUs bounds a count or an index: no host has this many GPUs.
const maxVMGPUs = 4096

// ParseVMGPUs parses a declaration; errors wrap ErrBadInput and quote it.
func ParseVMGPUs(s string) (VMGPUs, error) {
	v := VMGPUs{text: strings.TrimSpace(s)}
	t := v.text
	bad := func(why string) (VMGPUs, error) {
		return VMGPUs{}, fmt.Errorf("%w: %q: %s", ErrBadInput, s, why)
	}
	switch {
	case t == "" || strings.EqualFold(t, "all"):
		v.all = true
	case isDigits(t):
		n, err := strconv.Atoi(t)
		if err != nil || n > maxVMGPUs {
			return bad(fmt.Sprintf("a count is at most %d", maxVMGPUs))
		}
		v.count = n
	case hasPrefixFold(t, "index:"):
		seen := map[int]bool{}
		for _, part := range strings.Split(t[len("index:"):], ",") {
			part = strings.TrimSpace(part)
			n, err := strconv.Atoi(part)
			if !isDigits(part) || err != nil || n >= maxVMGPUs {
				return bad(fmt.Sprintf("index %q is not a GPU index (0, 1, ...): %s", part, vmGPUsSyntax))
			}
			if seen[n] {
				return bad(fmt.Sprintf("index %d is listed twice", n))
			}
			seen[n] = true
			v.indices = append(v.indices, n)
		}
		sort.Ints(v.indices)
	case hasPrefixFold(t, "model:"):
		v.model = strings.TrimSpace(t[len("model:"):])
		if len(tokens(v.model)) == 0 || len(v.model) > 128 {
			return bad("a model is a PCI device id (2236) or a name in pci.ids (A10)")
		}
		for _, r := range v.model {
			if !unicode.IsPrint(r) {
				return bad("a model name is printable text")
			}
		}
	default:
		return bad(vmGPUsSyntax)
	}
	return v, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// All reports whether every GPU goes to VMs (no split).
func (v VMGPUs) All() bool { return v.all }

// String is the declaration as given ("" for every GPU).
func (v VMGPUs) String() string { return v.text }

// tokens splits a name into upper-case words of letters and digits:
// "GA102GL [A10]" and "GA102GL_A10" both give GA102GL, A10.
func tokens(s string) []string {
	return strings.FieldsFunc(strings.ToUpper(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// nameHas reports whether want's words appear in name, in order and next
// to each other.
func nameHas(name, want string) bool {
	n, w := tokens(name), tokens(want)
	for i := 0; i+len(w) <= len(n); i++ {
		if strings.Join(n[i:i+len(w)], " ") == strings.Join(w, " ") {
			return true
		}
	}
	return false
}

// modelID is the PCI device id a model names, when it is four hex digits.
func modelID(model string) (uint16, bool) {
	if len(model) != 4 {
		return 0, false
	}
	id, err := strconv.ParseUint(model, 16, 16)
	return uint16(id), err == nil
}

// splitGPU is one GPU as the split sees it.
type splitGPU struct {
	f      *host.Function
	onVFIO bool // now on a vfio driver
	busy   bool // in use or allocated (it cannot move now)
}

func (g splitGPU) numa() int { return g.f.NUMANode }

// Split is how a declaration splits a host's GPUs: the GPU functions
// (physical functions of the vendor) for VMs and for containers. Their
// companion functions (audio, USB, ...) in the same IOMMU group follow
// them when the selections are planned.
type Split struct {
	// Declared is the declaration ("" when every GPU goes to VMs).
	Declared string `json:"declared"`
	// Source says where it was read: --vm-gpus, or the Node's annotation.
	Source    string         `json:"source,omitempty"`
	VM        []host.Address `json:"vm"`
	Container []host.Address `json:"container"`
	// Left are the GPUs not yet where the split wants them after a
	// reconcile (in use, or refused for another reason; see the refusals).
	Left []host.Address `json:"left,omitempty"`
	all  bool           // every GPU: the vfio selection stays the desired state's
}

// Selections are the vfio and host selections of the split: its VM GPUs
// (and their companions) to vfio, its container GPUs back to their host
// driver. A GPU that vanished since is a refusal, not an error.
func (s *Split) Selections(vendor uint16) (toVFIO, toHost Selection) {
	toVFIO = Selection{Vendor: vendor, Devices: append([]host.Address(nil), s.VM...), IgnoreMissing: true}
	toHost = Selection{Vendor: vendor, Devices: append([]host.Address(nil), s.Container...), IgnoreMissing: true}
	return toVFIO, toHost
}

// Split resolves a declaration on the planner's host: the vendor's GPUs
// split into VM and container GPUs. names are pci.ids device names of the
// vendor by device id (nil: only ids name models). Errors wrap ErrBadInput
// and say what the host has.
//
// A count is NUMA-aware and stable: GPUs already on vfio are kept first
// (those in use or allocated before idle ones, so shrinking returns idle
// GPUs), then idle GPUs are added before busy ones; at each step the VM
// GPUs span as few NUMA nodes as they can, filling NUMA nodes from the
// highest id down (NUMA node 0 keeps the container GPUs), lowest PCI
// address first within a NUMA node. Going from 2 to 3 moves one GPU.
func (p *Planner) Split(v VMGPUs, vendor uint16, names map[uint16]string) (*Split, error) {
	gpus := p.splitGPUs(vendor)
	var vm []splitGPU
	switch {
	case v.all:
		vm = gpus
	case v.model != "":
		var err error
		if vm, err = matchModel(gpus, v.model, names); err != nil {
			return nil, err
		}
	case v.indices != nil:
		for _, i := range v.indices {
			if i >= len(gpus) {
				return nil, fmt.Errorf("%w: %q: no GPU %d: this node has %d GPUs%s", ErrBadInput, v.text, i, len(gpus), indexRange(len(gpus)))
			}
			vm = append(vm, gpus[i])
		}
	default:
		for i := range gpus { // only a count looks at what cannot move now
			gpus[i].busy = p.busy(gpus[i].f)
		}
		if v.count > len(gpus) {
			return nil, fmt.Errorf("%w: %q: this node has %d GPUs", ErrBadInput, v.text, len(gpus))
		}
		var ok bool
		if vm, ok = pickCount(gpus, v.count); !ok {
			return nil, fmt.Errorf("%w: %q: GPUs that share an IOMMU group move together, and no %d of this node's GPUs make whole groups (%s); "+
				"name them by index (index:0,1) instead", ErrBadInput, v.text, v.count, sharedGroups(gpus))
		}
	}
	chosen := map[host.Address]bool{}
	for _, g := range vm {
		chosen[g.f.Address] = true
	}
	s := &Split{Declared: v.text, VM: []host.Address{}, Container: []host.Address{}, all: v.all}
	for _, g := range gpus {
		if chosen[g.f.Address] {
			s.VM = append(s.VM, g.f.Address)
		} else {
			s.Container = append(s.Container, g.f.Address)
		}
	}
	return s, nil
}

func indexRange(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (0 to %d)", n-1)
}

// splitGPUs lists the vendor's GPUs in address order (their index as
// nvidia-smi numbers them) with their driver.
func (p *Planner) splitGPUs(vendor uint16) []splitGPU {
	var out []splitGPU
	for _, f := range p.Snap.Functions { // sorted by address
		if f.Vendor != vendor || f.Role != host.RoleGPU || f.PhysFn != "" {
			continue
		}
		out = append(out, splitGPU{f: f, onVFIO: host.IsVFIODriver(f.Driver)})
	}
	return out
}

// busy reports whether f, or a function of its IOMMU group, is in use or
// allocated to a pod (or cannot be told).
func (p *Planner) busy(f *host.Function) bool {
	if p.holdersErr != nil {
		return true
	}
	for _, m := range p.Snap.GroupMembers(f) {
		reasons, err := p.Host.InUse(m, p.Usage)
		if err != nil || len(reasons) > 0 || len(p.idsOf(m).allocated(p.holders)) > 0 {
			return true
		}
	}
	return false
}

func matchModel(gpus []splitGPU, model string, names map[uint16]string) ([]splitGPU, error) {
	id, isID := modelID(model)
	if !isID && names == nil {
		return nil, fmt.Errorf("%w: %q: a model name needs a pci.ids file (--pci-ids); give the PCI device id instead (model:%s)",
			ErrBadInput, "model:"+model, knownIDs(gpus))
	}
	var out []splitGPU
	for _, g := range gpus {
		if (isID && g.f.Device == id) || (names != nil && nameHas(names[g.f.Device], model)) {
			out = append(out, g)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %q: matches no GPU of this node (it has %s)", ErrBadInput, "model:"+model, describeModels(gpus, names))
	}
	return out, nil
}

// knownIDs is an example device id for error messages.
func knownIDs(gpus []splitGPU) string {
	if len(gpus) == 0 {
		return "2236"
	}
	return fmt.Sprintf("%04x", gpus[0].f.Device)
}

func describeModels(gpus []splitGPU, names map[uint16]string) string {
	if len(gpus) == 0 {
		return "no GPU"
	}
	count := map[uint16]int{}
	var ids []uint16
	for _, g := range gpus {
		if count[g.f.Device] == 0 {
			ids = append(ids, g.f.Device)
		}
		count[g.f.Device]++
	}
	var parts []string
	for _, id := range ids {
		d := fmt.Sprintf("%d x %04x", count[id], id)
		if n := names[id]; n != "" {
			d += " " + n
		}
		parts = append(parts, d)
	}
	return strings.Join(parts, ", ")
}
