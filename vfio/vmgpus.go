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
	index  int  // as nvidia-smi numbers it
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
		if v.count > len(gpus) {
			return nil, fmt.Errorf("%w: %q: this node has %d GPUs", ErrBadInput, v.text, len(gpus))
		}
		var ok bool
		if vm, ok = pickCount(gpus, v.count); !ok {
			return nil, fmt.Errorf("%w: %q: GPUs that share an IOMMU group move together, and no %d of this node's GPUs make whole groups (%s); "+
				"name them with index:", ErrBadInput, v.text, v.count, sharedGroups(gpus))
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

// splitGPUs lists the vendor's GPUs in address order with their index,
// driver and whether they can move now.
func (p *Planner) splitGPUs(vendor uint16) []splitGPU {
	var out []splitGPU
	for _, f := range p.Snap.Functions { // sorted by address
		if f.Vendor != vendor || f.Role != host.RoleGPU || f.PhysFn != "" {
			continue
		}
		out = append(out, splitGPU{f: f, index: len(out), onVFIO: host.IsVFIODriver(f.Driver), busy: p.busy(f)})
	}
	return out
}

// busy reports whether f, or a function of its IOMMU group on the same
// driver side, is in use or allocated to a pod (or cannot be told).
func (p *Planner) busy(f *host.Function) bool {
	members := []*host.Function{f}
	if f.IOMMUGroup != host.NoGroup {
		members = p.Snap.GroupMembers(f)
	}
	if p.holdersErr != nil {
		return true
	}
	for _, m := range members {
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

// unit is the GPUs of one IOMMU group (one GPU where each has its own
// group, as behind ACS): they move together, so a count takes them whole.
type unit []splitGPU

func (u unit) numa() int { return u[0].numa() }

func size(us []unit) int {
	n := 0
	for _, u := range us {
		n += len(u)
	}
	return n
}

// units groups GPUs by IOMMU group, in address order of their first GPU.
func units(gpus []splitGPU) []unit {
	var out []unit
	index := map[int]int{}
	for _, g := range gpus {
		grp := g.f.IOMMUGroup
		if i, ok := index[grp]; ok && grp != host.NoGroup {
			out[i] = append(out[i], g)
			continue
		}
		index[grp] = len(out)
		out = append(out, unit{g})
	}
	return out
}

// pickCount chooses n GPUs for VMs (see Planner.Split), whole IOMMU groups
// at a time; false when whole groups cannot make n.
func pickCount(gpus []splitGPU, n int) ([]splitGPU, bool) {
	var tiers [4][]unit // busy on vfio, idle on vfio, idle on the host driver, busy there
	for _, u := range units(gpus) {
		onVFIO, busy := false, false
		for _, g := range u {
			onVFIO, busy = onVFIO || g.onVFIO, busy || g.busy
		}
		t := 3
		switch {
		case onVFIO && busy:
			t = 0
		case onVFIO:
			t = 1
		case !busy:
			t = 2
		}
		tiers[t] = append(tiers[t], u)
	}
	var keep []unit
	for _, tier := range tiers {
		keep = append(keep, pickNUMA(tier, keep, n-size(keep))...)
	}
	if size(keep) != n {
		// Whole groups in NUMA order left a gap: any groups that make n,
		// in the same order of preference.
		var ordered []unit
		for _, tier := range tiers {
			ordered = append(ordered, pickNUMA(tier, nil, size(tier))...)
		}
		keep = exactly(ordered, n)
	}
	var out []splitGPU
	for _, u := range keep {
		out = append(out, u...)
	}
	return out, len(out) == n
}

// exactly returns units of us (in order of preference) that make n GPUs,
// preferring earlier ones; nil when none do.
func exactly(us []unit, n int) []unit {
	// can[i][s]: units i.. can make s.
	can := make([][]bool, len(us)+1)
	for i := range can {
		can[i] = make([]bool, n+1)
		can[i][0] = true
	}
	for i := len(us) - 1; i >= 0; i-- {
		for s := 1; s <= n; s++ {
			can[i][s] = can[i+1][s] || (len(us[i]) <= s && can[i+1][s-len(us[i])])
		}
	}
	if !can[0][n] {
		return nil
	}
	var out []unit
	for i, rem := 0, n; rem > 0; i++ {
		if len(us[i]) <= rem && can[i+1][rem-len(us[i])] {
			out = append(out, us[i])
			rem -= len(us[i])
		}
	}
	return out
}

// sharedGroups describes the IOMMU groups with more than one GPU.
func sharedGroups(gpus []splitGPU) string {
	var parts []string
	for _, u := range units(gpus) {
		if len(u) > 1 {
			parts = append(parts, fmt.Sprintf("group %d: %s", u[0].f.IOMMUGroup, strings.Join(strs(addressesOf(u)), " ")))
		}
	}
	return strings.Join(parts, "; ")
}

func addressesOf(u unit) []host.Address {
	out := make([]host.Address, 0, len(u))
	for _, g := range u {
		out = append(out, g.f.Address)
	}
	return out
}

// maxNUMASearch bounds the exhaustive search over NUMA nodes (2^n sets).
const maxNUMASearch = 12

// pickNUMA chooses units of pool (in address order) making at most n GPUs
// so that, with already, they span as few NUMA nodes as possible: first
// from the NUMA nodes already has, then from the fewest other NUMA nodes
// that hold enough, preferring higher NUMA ids; within a NUMA node, lowest
// address first; then, where whole groups did not fit, from any NUMA node.
// It returns fewer when pool is smaller than n.
func pickNUMA(pool, already []unit, n int) []unit {
	if n <= 0 || len(pool) == 0 {
		return nil
	}
	byNode := map[int][]unit{}
	for _, u := range pool {
		byNode[u.numa()] = append(byNode[u.numa()], u)
	}
	used := map[int]bool{}
	for _, u := range already {
		used[u.numa()] = true
	}
	var ids, rest []int
	for id := range byNode {
		ids = append(ids, id)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(ids)))
	var out []unit
	taken := map[host.Address]bool{}
	take := func(id int) {
		for _, u := range byNode[id] {
			if !taken[u[0].f.Address] && size(out)+len(u) <= n {
				taken[u[0].f.Address] = true
				out = append(out, u)
			}
		}
	}
	for _, id := range ids {
		if used[id] {
			take(id)
		} else {
			rest = append(rest, id)
		}
	}
	for _, id := range fewestNodes(rest, byNode, n-size(out)) {
		take(id)
	}
	for _, id := range ids {
		take(id)
	}
	return out
}

// fewestNodes returns the fewest NUMA nodes of ids (sorted highest first)
// whose GPUs number at least need, preferring higher ids; all of them
// when even all are not enough.
func fewestNodes(ids []int, byNode map[int][]unit, need int) []int {
	if need <= 0 {
		return nil
	}
	if len(ids) > maxNUMASearch {
		// Too many to search: the largest first (ties: highest id).
		sorted := append([]int(nil), ids...)
		sort.SliceStable(sorted, func(i, j int) bool { return size(byNode[sorted[i]]) > size(byNode[sorted[j]]) })
		return sorted
	}
	for m := 1; m <= len(ids); m++ {
		if set := firstCombination(ids, byNode, m, need); set != nil {
			return set
		}
	}
	return ids
}

// firstCombination returns the first set of m of ids, in lexicographic
// order of positions (higher ids first), holding at least need GPUs.
func firstCombination(ids []int, byNode map[int][]unit, m, need int) []int {
	pos := make([]int, m)
	for i := range pos {
		pos[i] = i
	}
	for {
		sum := 0
		for _, p := range pos {
			sum += size(byNode[ids[p]])
		}
		if sum >= need {
			out := make([]int, m)
			for i, p := range pos {
				out[i] = ids[p]
			}
			return out
		}
		i := m - 1
		for i >= 0 && pos[i] == len(ids)-m+i {
			i--
		}
		if i < 0 {
			return nil
		}
		pos[i]++
		for j := i + 1; j < m; j++ {
			pos[j] = pos[j-1] + 1
		}
	}
}
