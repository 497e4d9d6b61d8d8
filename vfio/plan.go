// Package vfio plans, validates and applies the rebinding of PCI functions
// between their host drivers and vfio-pci (or a vfio variant driver).
package vfio

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
)

// Target is where selected functions should end up.
type Target string

// Targets.
const (
	ToVFIO Target = "vfio"
	ToHost Target = "host"
)

// ParseTarget validates a target name.
func ParseTarget(s string) (Target, error) {
	switch Target(s) {
	case ToVFIO, ToHost:
		return Target(s), nil
	}
	return "", fmt.Errorf("invalid target %q: want vfio or host", s)
}

// ErrBadInput marks errors caused by the caller's input (exit code 1).
var ErrBadInput = errors.New("bad input")

// Selection says which functions to manage.
type Selection struct {
	All        bool           // every function of Vendor (NVSwitches only with NVSwitches)
	Devices    []host.Address // explicit functions, whatever their vendor
	Vendor     uint16
	NVSwitches bool
	Exclude    []host.Address // never selected, even by All
	// Classes, when set, limit All to functions whose 24-bit PCI class
	// starts with one of these hex prefixes ("03", "0302", "030000"):
	// what a vendor other than NVIDIA needs so that All never takes its
	// NICs or NVMe drives.
	Classes []string
	// IgnoreMissing turns an address absent from this host into a refusal
	// instead of an error (a daemon config shared by different nodes).
	IgnoreMissing bool
}

// Action moves one function from one driver to another.
type Action struct {
	Address host.Address `json:"address"`
	From    string       `json:"from"`
	To      string       `json:"to"`
	Group   int          `json:"-"`
	Module  string       `json:"-"` // module providing To
	probe   bool         // probe even when To is unknown (no modules.alias)
	ids     kubeletIDs   // what the kubelet may know the function as
}

// Refusal is a function left as it was, with the reason.
type Refusal struct {
	Address host.Address `json:"address"`
	Reason  string       `json:"reason"`
}

// Plan is what to do for a selection; it is computed without changing
// anything.
type Plan struct {
	Target   Target
	Actions  []Action  // in apply order within each group
	Refused  []Refusal // groups left exactly as they are
	Selected []host.Address
}

// groups splits the actions by IOMMU group, keeping their order.
func (p *Plan) groups() [][]Action {
	var out [][]Action
	index := map[string]int{}
	for _, a := range p.Actions {
		key := fmt.Sprint(a.Group)
		if a.Group == host.NoGroup {
			key = string(a.Address)
		}
		i, ok := index[key]
		if !ok {
			i = len(out)
			index[key] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], a)
	}
	return out
}

// Planner computes plans against one host.
type Planner struct {
	Host    HostView
	Snap    *host.Snapshot
	Usage   *host.Usage
	Aliases []host.Alias
	// Warnings say what planning could not know (no kernel release: no
	// modules.alias, vfio-pci for every function).
	Warnings []string

	// holders are the kubelet's allocations (UseKubelet); nil without one.
	holders    map[string][]podresources.Holder
	holdersErr error
	indexes    map[host.Address]int
}

// UseKubelet asks the kubelet once which devices pods hold: a function
// allocated to a pod is then in use too. An error makes every function
// that would move "in use: cannot tell".
func (p *Planner) UseKubelet(ctx context.Context, alloc Allocations) {
	if alloc == nil {
		return
	}
	p.holders, p.holdersErr = alloc(ctx)
	if p.holders == nil && p.holdersErr == nil {
		p.holders = map[string][]podresources.Holder{}
	}
}

func (p *Planner) idsOf(f *host.Function) kubeletIDs {
	if p.indexes == nil {
		p.indexes = gpuIndexes(p.Snap)
	}
	index, ok := p.indexes[f.Address]
	if !ok {
		index = -1
	}
	return idsOf(p.Host, f, index)
}

// NewPlanner scans the host once for planning.
func NewPlanner(h HostView) (*Planner, error) {
	snap, err := h.Scan()
	if err != nil {
		return nil, err
	}
	usage, err := h.ScanUsage()
	if err != nil {
		return nil, err
	}
	aliases, warning, err := readAliases(h)
	if err != nil {
		return nil, err
	}
	return &Planner{Host: h, Snap: snap, Usage: usage, Aliases: aliases, Warnings: appendWarning(nil, warning)}, nil
}

// Select resolves a selection to functions, adding the rest of each card
// that shares the function's IOMMU group. Unknown devices are bad input.
func (p *Planner) Select(sel Selection) ([]*host.Function, error) {
	funcs, _, err := p.selectFuncs(sel)
	return funcs, err
}

func (p *Planner) selectFuncs(sel Selection) ([]*host.Function, []host.Address, error) {
	var missing []host.Address
	chosen := map[host.Address]*host.Function{}
	excluded := map[host.Address]bool{}
	for _, a := range sel.Exclude {
		excluded[a] = true
	}
	for _, a := range sel.Devices {
		f, ok := p.Snap.Function(a)
		if !ok && sel.IgnoreMissing {
			missing = append(missing, a)
			continue
		}
		if !ok {
			return nil, nil, fmt.Errorf("%w: %w", ErrBadInput, p.Host.NoFunction(a))
		}
		chosen[a] = f
	}
	if sel.All {
		for _, f := range p.Snap.Functions {
			if f.Vendor != sel.Vendor || host.IsPCIBridge(f.Class) || f.PhysFn != "" {
				continue
			}
			if (f.Role == host.RoleNVSwitch && !sel.NVSwitches) || excluded[f.Address] || !ClassMatches(f.Class, sel.Classes) {
				continue
			}
			chosen[f.Address] = f
		}
	}
	for _, f := range mapValues(chosen) {
		for _, c := range p.Snap.CardFunctions(f) {
			if c.IOMMUGroup == f.IOMMUGroup && f.IOMMUGroup != host.NoGroup && !excluded[c.Address] {
				chosen[c.Address] = c
			}
		}
	}
	return mapValues(chosen), missing, nil
}

func mapValues(m map[host.Address]*host.Function) []*host.Function {
	out := make([]*host.Function, 0, len(m))
	for _, f := range m {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out
}

// Plan computes the actions and refusals that move the selection to target.
func (p *Planner) Plan(sel Selection, target Target) (*Plan, error) {
	funcs, missing, err := p.selectFuncs(sel)
	if err != nil {
		return nil, err
	}
	plan := &Plan{Target: target}
	for _, a := range missing {
		plan.Refused = append(plan.Refused, Refusal{Address: a, Reason: fmt.Sprintf("not found: no PCI function %s on this host", a)})
	}
	selected := map[host.Address]bool{}
	for _, f := range funcs {
		selected[f.Address] = true
		plan.Selected = append(plan.Selected, f.Address)
	}
	for _, members := range groupSelected(funcs) {
		actions, refusals, err := p.planGroup(members, selected, target)
		if err != nil {
			return nil, err
		}
		plan.Actions = append(plan.Actions, actions...)
		plan.Refused = append(plan.Refused, refusals...)
	}
	return plan, nil
}

// groupSelected splits functions by IOMMU group; functions without a group
// stand alone.
func groupSelected(funcs []*host.Function) [][]*host.Function {
	var out [][]*host.Function
	index := map[int]int{}
	for _, f := range funcs {
		if f.IOMMUGroup == host.NoGroup {
			out = append(out, []*host.Function{f})
			continue
		}
		i, ok := index[f.IOMMUGroup]
		if !ok {
			i = len(out)
			index[f.IOMMUGroup] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], f)
	}
	return out
}

func refuseAll(members []*host.Function, reason func(*host.Function) string) []Refusal {
	out := make([]Refusal, 0, len(members))
	for _, m := range members {
		out = append(out, Refusal{Address: m.Address, Reason: reason(m)})
	}
	return out
}

func describe(f *host.Function) string {
	d := f.Driver
	if d == "" {
		d = "none"
	}
	return fmt.Sprintf("%s (%04x:%04x, driver %s)", f.Address, f.Vendor, f.Device, d)
}

func (p *Planner) planGroup(members []*host.Function, selected map[host.Address]bool, target Target) ([]Action, []Refusal, error) {
	var actions []Action
	for _, f := range members {
		a, need := p.actionFor(f, target)
		if need {
			actions = append(actions, a)
		}
	}
	if len(actions) == 0 {
		return nil, nil, nil
	}
	if reason := p.groupRefusal(members, selected, target); reason != nil {
		return nil, refuseAll(members, reason), nil
	}
	// Consumers (audio, USB, ...) leave before the GPU; the GPU returns first.
	sort.SliceStable(actions, func(i, j int) bool {
		if target == ToVFIO {
			return actions[i].Address > actions[j].Address
		}
		return actions[i].Address < actions[j].Address
	})
	return actions, nil, nil
}

// actionFor returns the move f needs, if any.
func (p *Planner) actionFor(f *host.Function, target Target) (Action, bool) {
	a := Action{Address: f.Address, From: f.Driver, Group: f.IOMMUGroup, ids: p.idsOf(f)}
	if target == ToVFIO {
		a.To, a.Module = p.Host.VFIODriverFor(f, p.Aliases)
		// Any vfio driver is in place, but plain vfio-pci where a variant
		// driver is known to be better: never downgrade a variant.
		if host.IsVFIODriver(f.Driver) && (f.Driver != "vfio-pci" || a.To == "vfio-pci") {
			return a, false
		}
		return a, f.Driver != a.To
	}
	a.To = p.Host.HostDriverFor(f, p.Aliases)
	staleOverride := host.IsVFIODriver(f.DriverOverride)
	// Without modules.alias the host driver cannot be known: let the
	// kernel's probe decide for a driverless function.
	a.probe = len(p.Aliases) == 0
	switch {
	case host.IsVFIODriver(f.Driver):
		return a, true
	case f.Driver == "":
		return a, a.To != "" || staleOverride || a.probe
	default:
		a.To = f.Driver
		return a, staleOverride
	}
}

// groupRefusal returns why the group must be left alone, or nil.
func (p *Planner) groupRefusal(members []*host.Function, selected map[host.Address]bool, target Target) func(*host.Function) string {
	first := members[0]
	if target == ToVFIO {
		if !p.Snap.IOMMU.Enabled {
			why := "iommu: the IOMMU is not enabled (no IOMMU groups; boot with intel_iommu=on or amd_iommu=on)"
			if p.Snap.IOMMU.UnsafeNoIOMMU {
				why = "iommu: the IOMMU is not enabled and unsafe no-IOMMU mode is refused"
			}
			return func(*host.Function) string { return why }
		}
		if first.IOMMUGroup == host.NoGroup {
			return func(f *host.Function) string { return fmt.Sprintf("iommu: %s has no IOMMU group", f.Address) }
		}
		for _, m := range p.Snap.GroupMembers(first) {
			if selected[m.Address] || m.Driver == "" || host.IsVFIODriver(m.Driver) || host.IsPCIBridge(m.Class) {
				continue
			}
			why := fmt.Sprintf("group %d: shared with %s, which is not selected", first.IOMMUGroup, describe(m))
			return func(*host.Function) string { return why }
		}
		for _, m := range members {
			if m.SRIOVNumVFs > 0 {
				why := fmt.Sprintf("in use: %s has %d SR-IOV VFs enabled (vGPU)", m.Address, m.SRIOVNumVFs)
				return func(*host.Function) string { return why }
			}
			if n := len(m.MdevDevices); n > 0 {
				why := fmt.Sprintf("in use: %s parents %d mediated vGPU devices (mdev %s)", m.Address, n, m.MdevDevices[0])
				return func(*host.Function) string { return why }
			}
			if m.PhysFn != "" && m.Vendor == host.VendorNVIDIA {
				why := fmt.Sprintf("in use: %s is an SR-IOV VF of %s (vGPU VFs stay on the nvidia driver)", m.Address, m.PhysFn)
				return func(*host.Function) string { return why }
			}
		}
	}
	busy := map[host.Address]string{}
	for _, m := range p.Snap.GroupMembers(first) {
		if target == ToHost && !host.IsVFIODriver(m.Driver) {
			continue
		}
		reasons, err := p.Host.InUse(m, p.Usage)
		if err != nil {
			return func(*host.Function) string { return "in use: cannot tell: " + err.Error() }
		}
		if p.holdersErr != nil {
			why := fmt.Sprintf("in use: cannot tell whether %s is allocated to a pod: %v", m.Address, p.holdersErr)
			return func(*host.Function) string { return why }
		}
		reasons = append(reasons, p.idsOf(m).allocated(p.holders)...)
		if len(reasons) > 0 {
			busy[m.Address] = strings.Join(reasons, "; ")
		}
	}
	if len(busy) == 0 {
		return nil
	}
	return func(f *host.Function) string {
		if r, ok := busy[f.Address]; ok {
			return r
		}
		addrs := make([]string, 0, len(busy))
		for a := range busy {
			addrs = append(addrs, string(a))
		}
		sort.Strings(addrs)
		a := host.Address(addrs[0])
		return fmt.Sprintf("in use: %s in the same IOMMU group (group %d) is in use: %s", a, f.IOMMUGroup, busy[a])
	}
}
