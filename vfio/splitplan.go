package vfio

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/internal/gpuname"
	"github.com/sandbox-gpu/sandbox-gpu/internal/jsonout"
)

// SplitTarget is the target of a plan or apply of a split: its VM GPUs to
// vfio, its container GPUs to their host drivers.
const SplitTarget Target = "split"

// SplitPlans are the two plans of a split: the container GPUs back to
// their host drivers (applied first), the VM GPUs to vfio.
type SplitPlans struct {
	Split  *Split
	ToHost *Plan
	ToVFIO *Plan
}

// PlanSplit resolves v on the planner's host and plans both moves.
func (p *Planner) PlanSplit(v VMGPUs, vendor uint16, names map[uint16]string) (*SplitPlans, error) {
	s, err := p.Split(v, vendor, names)
	if err != nil {
		return nil, err
	}
	toVFIO, toHost := s.Selections(vendor)
	if s.all {
		toVFIO = Selection{All: true, Vendor: vendor}
	}
	out := &SplitPlans{Split: s}
	if out.ToHost, err = p.Plan(toHost, ToHost); err != nil {
		return nil, err
	}
	if out.ToVFIO, err = p.Plan(toVFIO, ToVFIO); err != nil {
		return nil, err
	}
	return out, nil
}

// Report renders the plans (nothing done).
func (sp *SplitPlans) Report() ChangeReport {
	r := ChangeReport{Target: SplitTarget, DryRun: true, Split: sp.Split}
	r.Actions = jsonout.List(append(append([]Action{}, sp.ToHost.Actions...), sp.ToVFIO.Actions...))
	r.Refused = jsonout.List(append(append([]Refusal{}, sp.ToHost.Refused...), sp.ToVFIO.Refused...))
	return r
}

// Apply applies the plans, the container GPUs first, and reports what was
// done.
func (sp *SplitPlans) Apply(ctx context.Context, p *Planner, opts ApplyOptions) ChangeReport {
	r := ChangeReport{Target: SplitTarget, Split: sp.Split, Actions: []Action{}, Refused: []Refusal{}}
	for _, plan := range []*Plan{sp.ToHost, sp.ToVFIO} {
		res := Apply(ctx, p.Host, plan, opts)
		r.Actions = append(r.Actions, res.Actions...)
		r.Refused = append(r.Refused, res.Refused...)
	}
	return r
}

// writeSplit writes the split's lines of a change table.
func writeSplit(w io.Writer, s *Split) {
	declared := s.Declared
	if declared == "" {
		declared = "all"
	}
	list := func(as []string) string {
		if len(as) == 0 {
			return "none"
		}
		return strings.Join(as, " ")
	}
	fmt.Fprintf(w, "Split %s: VM GPUs (vfio): %s\n", declared, list(strs(s.VM)))
	fmt.Fprintf(w, "Container GPUs (host driver): %s\n", list(strs(s.Container)))
}

// ModelNames reads the device names of vendor from a pci.ids file, for
// model:NAME declarations.
func ModelNames(path string, vendor uint16) (map[uint16]string, error) {
	all, err := gpuname.ReadPCIIDs(path, []uint16{vendor})
	if err != nil {
		return nil, err
	}
	out := map[uint16]string{}
	for k, name := range all { // only the vendor's names are kept
		out[uint16(k)] = name
	}
	return out, nil
}
