package vgpu

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// PlanRelease plans what a node leaving vm-vgpu needs: every vGPU of every
// NVIDIA GPU removed, then the GPU's SR-IOV VFs disabled, so that the GPU
// can be passed through or used by containers again. A GPU with a vGPU or
// VF in use (a process holds it, or the kubelet allocated it to a pod) is
// refused whole and left exactly as it is, with the reasons; the others
// proceed. Computing the plan changes nothing.
func PlanRelease(ctx context.Context, h HostView, o Options) (*Plan, error) {
	gpus, u, err := survey(ctx, h, o)
	if err != nil {
		return nil, err
	}
	p := &Plan{opts: o}
	for _, g := range gpus {
		gp := &GPUPlan{GPU: g, Managed: true, Entry: -1, Want: map[string]int{}}
		p.GPUs = append(p.GPUs, gp)
		var busy []string
		checked := map[string]bool{}
		check := func(v VGPU) {
			if checked[v.ID] {
				return
			}
			checked[v.ID] = true
			if why := u.busy(v, true); why != "" {
				busy = append(busy, why)
			}
		}
		for _, v := range g.VGPUs {
			check(v)
		}
		for _, vf := range g.VFs {
			check(VGPU{ID: string(vf)})
		}
		if len(busy) > 0 {
			gp.Refused = strings.Join(busy, "; ")
			continue
		}
		for _, v := range g.VGPUs {
			gp.Steps = append(gp.Steps, Step{Op: OpRemove, GPU: g.Index, Address: g.Address, ID: v.ID, Type: v.Type, TypeID: v.TypeID, Parent: v.Parent})
		}
		if len(g.VFs) > 0 {
			gp.Steps = append(gp.Steps, Step{Op: OpDisableVFs, GPU: g.Index, Address: g.Address})
		}
	}
	return p, nil
}

// leftOver lists the GPUs that still hold vGPUs or VFs, as
// "0000:41:00.0 (2 vGPUs, 32 VFs)".
func leftOver(gpus []*GPU) []string {
	var out []string
	for _, g := range gpus {
		if len(g.VGPUs) == 0 && len(g.VFs) == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("%s (%d vGPUs, %d VFs)", g.Address, len(g.VGPUs), len(g.VFs)))
	}
	return out
}

// releaseReport is the release's report for the Node.
func releaseReport(rep wire.VGPUReady, left []string) wire.ReleaseReport {
	if rep.State == StateSuccess {
		return wire.ReleaseReport{Done: true}
	}
	var reasons []string
	if rep.Error != "" {
		reasons = append(reasons, rep.Error)
	}
	for _, r := range rep.Refused {
		reasons = append(reasons, fmt.Sprintf("%s: %s", r.Address, r.Reason))
	}
	if len(reasons) == 0 {
		reasons = []string{"vGPUs or VFs are left on " + strings.Join(left, ", ")}
	}
	return wire.ReleaseReport{Reason: strings.Join(reasons, "; "), Left: left}
}

// releasePass runs the release once and returns the state it left:
// success once no GPU holds a vGPU or a VF. A refusal is a Warning event
// on the Node (once per reason) and the reason in the Node's report.
func (r *runner) releasePass(ctx context.Context) (state string) {
	node, ok := r.node()
	if !ok {
		r.o.Log.Info("Node not found; waiting for it", "node", r.o.NodeName)
		return ""
	}
	rep := wire.VGPUReady{Release: true, State: StateFailed}
	var left []string
	defer func() {
		state = rep.State
		r.finish(&rep)
		if err := r.publisher.Publish(ctx, releaseReport(rep, left).Encode()); err != nil {
			r.o.Log.Error(err, "Cannot publish the release report")
		}
	}()
	plan, err := PlanRelease(ctx, r.o.Host, Options{NodeName: r.o.NodeName, Allocated: r.o.Allocated, TypeNames: r.types})
	if err != nil {
		rep.Error = err.Error()
		r.event(ctx, node, corev1.EventTypeWarning, EventFailed, "release: "+err.Error())
		return
	}
	res := Apply(ctx, r.o.Host, plan, ApplyOptions{PauseFile: filepath.Join(r.o.RunDir, names.VGPUPauseFile)})
	var gpus []*GPU
	for _, g := range res.GPUs {
		gpus = append(gpus, g.GPU)
	}
	rep.GPUs, rep.Refused, left = ReadyGPUs(gpus), readyRefusals(res.Refused), leftOver(gpus)
	if !res.OK() {
		r.event(ctx, node, corev1.EventTypeWarning, EventReleaseRefused, fmt.Sprintf("release: %v", res.Err()))
		return
	}
	if len(left) > 0 {
		rep.Error = "vGPUs or VFs are left on " + strings.Join(left, ", ")
		return
	}
	rep.State = StateSuccess
	r.lastEvent = ""
	if plan.Changes() {
		r.event(ctx, node, corev1.EventTypeNormal, EventReleased, "released: every vGPU removed and SR-IOV VFs disabled")
	}
	return
}
