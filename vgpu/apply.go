package vgpu

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// Sequential applies one GPU after the other instead of all at once.
	Sequential bool
	// PauseFile, when set, exists while Apply changes vGPUs (created before
	// the first write, removed when every GPU is done, error or not): the
	// KubeVirt device plugin then advertises no vGPU, so the kubelet never
	// sees a half-built set. names.VGPUPauseFile in the run dir.
	PauseFile string
}

// Result is what an apply did.
type Result struct {
	File    string
	Config  string
	GPUs    []GPUResult
	Refused []Refusal // the plan's refusals, then failures
	Errors  []string  // problems outside any GPU (the pause file)
}

// GPUResult is one GPU after an apply.
type GPUResult struct {
	GPU     *GPU
	Managed bool
	Want    map[string]int
	Have    map[string]int // vGPUs by type after the apply
	Done    []Step         // steps completed (written, or found done)
}

// OK reports whether every GPU holds what the config asks.
func (r *Result) OK() bool { return len(r.Refused) == 0 && len(r.Errors) == 0 }

// Err is nil when OK, else a RefusedError (exit 2).
func (r *Result) Err() error {
	if r.OK() {
		return nil
	}
	refused := append([]Refusal(nil), r.Refused...)
	for _, e := range r.Errors {
		refused = append(refused, Refusal{GPU: -1, Reason: e})
	}
	return &RefusedError{Refused: refused}
}

// Apply executes a plan: GPUs in parallel (unless o.Sequential), the steps
// of one GPU in order. Before a GPU's first write every vGPU it removes is
// checked idle once more, and each remove, current_vgpu_type 0 and
// sriov_numvfs write is preceded by its own fresh check (processes and
// kubelet): on a real kernel such a write blocks, unkillably, while a VM
// holds the device. Every step re-reads its target first, so a step found
// done costs no write and a run killed after any write converges when run
// again. A GPU that fails stops there and is reported; the others go on.
func Apply(ctx context.Context, h HostView, plan *Plan, o ApplyOptions) *Result {
	res := &Result{File: plan.File, Config: plan.Config}
	done := make([][]Step, len(plan.GPUs))
	failed := make([]string, len(plan.GPUs))
	run := func(i int) {
		done[i], failed[i] = applyGPU(ctx, h, plan, plan.GPUs[i])
	}
	pauseErr := error(nil)
	if plan.Changes() && o.PauseFile != "" {
		// Never through a link or into a FIFO planted at the path; the
		// removal unlinks the path itself, never a link's target.
		pause := wire.VGPUPause(o.PauseFile)
		if pauseErr = pause.Set(); pauseErr == nil {
			defer func() {
				if err := pause.Clear(); err != nil {
					res.Errors = append(res.Errors, fmt.Sprintf("failed: remove pause file: %v", err))
				}
			}()
		}
	}
	var wg sync.WaitGroup
	for i, gp := range plan.GPUs {
		switch {
		case gp.Refused != "":
			failed[i] = gp.Refused
		case len(gp.Steps) == 0:
		case pauseErr != nil:
			failed[i] = fmt.Sprintf("failed: not attempted: pause the KubeVirt device plugin (%s): %v", o.PauseFile, pauseErr)
		case o.Sequential:
			run(i)
		default:
			wg.Add(1)
			go func() {
				defer wg.Done()
				run(i)
			}()
		}
	}
	wg.Wait()
	now, err := inventory(h, plan.opts)
	if err != nil {
		res.Errors = append(res.Errors, fmt.Sprintf("failed: read the GPUs after applying: %v", err))
	}
	for i, gp := range plan.GPUs {
		r := GPUResult{GPU: gp.GPU, Managed: gp.Managed, Want: gp.Want, Done: done[i], Have: map[string]int{}}
		for _, g := range now {
			if g.Address == gp.GPU.Address {
				r.GPU, r.Have = g, g.counts()
			}
		}
		res.GPUs = append(res.GPUs, r)
		if failed[i] != "" {
			res.Refused = append(res.Refused, Refusal{GPU: gp.GPU.Index, Address: gp.GPU.Address, Reason: failed[i]})
		}
	}
	return res
}

// applyGPU runs one GPU's steps in order and stops at the first failure.
func applyGPU(ctx context.Context, h HostView, plan *Plan, gp *GPUPlan) (done []Step, failure string) {
	if err := ctx.Err(); err != nil {
		return nil, "failed: not attempted: stopping before the GPU started: " + err.Error()
	}
	if why := precheck(ctx, h, plan.opts.Allocated, gp); why != "" {
		return nil, why
	}
	steps := gp.Steps
	for i := 0; i < len(steps); i++ {
		s := steps[i]
		if s.Op == OpCreate && gp.mixed {
			if why := checkMixedCreate(h, plan, gp, s); why != "" {
				undone, err := undo(ctx, h, plan.opts.Allocated, done)
				done = append(done, undone...)
				if err != nil {
					why += "; and it could not be left as it was: " + err.Error()
				}
				return done, why
			}
		}
		if s.Op == OpCreate && s.onVF() {
			learnVF(h, plan.opts.TypeNames, gp.GPU.Address, host.Address(s.ID))
		}
		if err := applyStep(ctx, h, plan.opts.Allocated, s); err != nil {
			return done, reason(err)
		}
		done = append(done, s)
		if s.Op == OpEnableVFs {
			more, refused := replan(ctx, h, plan, gp)
			if refused != "" && gp.mixed {
				// Refused for its mode: the VFs this pass enabled go again.
				undone, err := undo(ctx, h, plan.opts.Allocated, done)
				done = append(done, undone...)
				if err != nil {
					refused += "; and it could not be left as it was: " + err.Error()
				}
			}
			if refused != "" {
				return done, refused
			}
			steps = append(steps[:i+1:i+1], more...)
		}
	}
	return done, ""
}

// learnVF teaches a learning TypeNamer (TypeMemory) what a VF lists just
// before a create writes an id there: the last free VF of a card is the
// last place its type is named. A read error is the create's to report.
func learnVF(h HostView, namer TypeNamer, gpu, vf host.Address) {
	l, ok := namer.(typeLearner)
	if !ok {
		return
	}
	if v, ok, err := h.VGPU(vf); err == nil && ok {
		listed := map[int]string{}
		for id, name := range v.Creatable {
			listed[id] = host.ShortTypeName(name)
		}
		l.Learn(gpu, listed)
	}
}

// reason turns a step's error into a refusal reason: "in use: ..." stays as
// it is, anything else is a failure.
func reason(err error) string {
	if strings.HasPrefix(err.Error(), "in use") {
		return err.Error()
	}
	return "failed: " + err.Error()
}

// precheck checks, with one look at processes and kubelet, that nothing
// the GPU's steps remove is in use now, so that a GPU is refused whole
// rather than half-changed.
func precheck(ctx context.Context, h HostView, allocated Allocated, gp *GPUPlan) string {
	u, err := lookUsage(ctx, h, allocated)
	if err != nil {
		return "in use: cannot tell: " + err.Error()
	}
	var busy []string
	for _, s := range gp.Steps {
		var why string
		switch s.Op {
		case OpRemove:
			why = u.busy(VGPU{ID: s.ID}, true)
		case OpDisableVFs:
			for _, vf := range gp.GPU.VFs {
				if w := u.busy(VGPU{ID: string(vf)}, true); w != "" {
					why = w
				}
			}
		}
		if why != "" {
			busy = append(busy, why)
		}
	}
	return strings.Join(busy, "; ")
}

// rereadGPU reads one GPU again, and only it: the other GPUs' steps run
// in parallel, and a VF of theirs that comes or goes while this one is
// read is no reason to fail it.
func rereadGPU(h HostView, names TypeNamer, was *GPU) (*GPU, error) {
	snap, err := h.Scan()
	if err != nil {
		return nil, err
	}
	// A parent that is no NVIDIA GPU (Options.Parents) keeps its type
	// names; one that is no PCI function (an mdev_bus name) has no VFs.
	g := &GPU{Index: was.Index, Address: was.Address, ID: was.ID, mdevNames: was.mdevNames}
	f, ok := snap.Function(was.Address)
	switch {
	case ok:
		g.TotalVFs, g.VFs = f.SRIOVTotalVFs, f.VirtFns
	case was.mdevNames == nil:
		return nil, nil
	}
	mdevs, err := h.Mdevs()
	if err != nil {
		return nil, err
	}
	if err := readGPU(h, g, mdevs, names); err != nil {
		return nil, fmt.Errorf("%s: %w", g.Describe(), err)
	}
	return g, nil
}

// replan reads the GPU again once its VFs are enabled, resolves the config
// against what it now offers and plans the creates.
func replan(ctx context.Context, h HostView, plan *Plan, gp *GPUPlan) ([]Step, string) {
	g, err := rereadGPU(h, plan.opts.TypeNames, gp.GPU)
	if err != nil {
		return nil, "failed: read the GPU after enabling its VFs: " + err.Error()
	}
	if g != nil {
		r, err := resolve(plan.File, plan.Config, gp.entries, g)
		if err != nil {
			return nil, "failed: config: " + err.Error()
		}
		if !r.managed {
			return nil, ""
		}
		u, err := lookUsage(ctx, h, plan.opts.Allocated)
		if err != nil {
			return nil, "in use: cannot tell: " + err.Error()
		}
		steps, refused := planGPU(g, r.want, plan.opts.NodeName, u)
		if gp.mixed = mixes(g, r.want); gp.mixed && refused == "" {
			if why := refuseEqualSize(h, g, r.want, plan.opts.SizeModes); why != "" {
				return nil, why
			}
		}
		for _, s := range steps {
			if s.Op == OpEnableVFs || s.Op == OpDisableVFs {
				return nil, fmt.Sprintf("failed: %s: VFs still not enabled after writing sriov_numvfs", g.Describe())
			}
		}
		return steps, refused
	}
	return nil, fmt.Sprintf("failed: GPU %s is gone", gp.GPU.Address)
}
