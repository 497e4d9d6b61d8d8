package vgpu

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// Apply makes the step's one write on h, as Apply does for each step of a
// plan (test/realkernel runs each kind on a real kernel): the target is
// re-read first, and a remove or disable-vfs step claims the VFIO groups
// and checks the processes and allocated (the kubelet's view, nil where
// none runs) right before its write; while anything uses what it removes it
// returns an error starting with "in use:" and writes nothing.
func (s Step) Apply(ctx context.Context, h HostView, allocated Allocated) error {
	return applyStep(ctx, h, allocated, s)
}

// applyStep makes one step's write, after re-reading its target: a step
// found done writes nothing, one whose target changed since the plan is an
// error, and a step that removes something checks, just before the write,
// that nothing uses it.
func applyStep(ctx context.Context, h HostView, allocated Allocated, s Step) error {
	switch s.Op {
	case OpEnableVFs:
		f, err := h.ReadFunction(s.Address)
		if err != nil {
			return err
		}
		switch f.SRIOVNumVFs {
		case s.VFs:
			return nil
		case 0:
			// No VF exists, so none can be in use: enabling blocks nothing.
			return h.SetNumVFs(s.Address, s.VFs)
		}
		return fmt.Errorf("PCI function %s has %d VFs, planned from 0; left alone", s.Address, f.SRIOVNumVFs)
	case OpDisableVFs:
		return disableVFs(ctx, h, allocated, s.Address)
	case OpRemove:
		return remove(ctx, h, allocated, s)
	case OpCreate:
		return create(h, s)
	}
	return fmt.Errorf("unknown step %q", s.Op)
}

func disableVFs(ctx context.Context, h HostView, allocated Allocated, pf host.Address) error {
	f, err := h.ReadFunction(pf)
	if err != nil || f.SRIOVNumVFs == 0 {
		return err
	}
	mdevs, err := h.Mdevs()
	if err != nil {
		return err
	}
	for _, vf := range f.VirtFns {
		if v, ok, err := h.VGPU(vf); err != nil || (ok && v.Current != 0) {
			return fmt.Errorf("VF %s of %s holds vGPU type %d since the plan; left alone (%v)", vf, pf, v.Current, err)
		}
		for _, m := range mdevs {
			if m.Parent == vf {
				return fmt.Errorf("VF %s of %s holds mdev %s since the plan; left alone", vf, pf, m.UUID)
			}
		}
	}
	release, err := claimAndCheck(ctx, h, allocated, func() (func(), error) { return claimVFs(h, f.VirtFns) }, vgpusOf(f.VirtFns)...)
	if err != nil {
		return err
	}
	defer release()
	return h.SetNumVFs(pf, 0)
}

func vgpusOf(vfs []host.Address) []VGPU {
	out := make([]VGPU, 0, len(vfs))
	for _, vf := range vfs {
		out = append(out, VGPU{ID: string(vf)})
	}
	return out
}

// claimAndCheck claims the VFIO groups first, then checks that no process
// and no pod uses the vGPUs: a holder of only a VFIO device fd (its group
// fd closed) is invisible in /proc/*/fd but keeps the group busy, and
// while the claims are held nothing can start using the vGPUs before the
// write. A busy claim is reported with the holder the process scan names,
// when it names one.
func claimAndCheck(ctx context.Context, h HostView, allocated Allocated, claim func() (func(), error), vs ...VGPU) (func(), error) {
	check := func() error {
		for _, v := range vs {
			if err := checkIdle(ctx, h, allocated, v); err != nil {
				return err
			}
		}
		return nil
	}
	release, err := claim()
	if err != nil {
		if named := check(); named != nil {
			return nil, named
		}
		return nil, err
	}
	if err := check(); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// claimVFs claims the VFIO group of each VF (see host.ClaimGroup).
func claimVFs(h HostView, vfs []host.Address) (release func(), err error) {
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	for _, vf := range vfs {
		f, err := h.ReadFunction(vf)
		if err != nil {
			release()
			return nil, err
		}
		r, err := h.ClaimGroup(f.IOMMUGroup)
		if err != nil {
			release()
			return nil, err // "in use: /dev/vfio/<group> is held by another process"
		}
		releases = append(releases, r)
	}
	return release, nil
}

func remove(ctx context.Context, h HostView, allocated Allocated, s Step) error {
	if s.onVF() {
		vf := host.Address(s.ID)
		v, ok, err := h.VGPU(vf)
		if err != nil || !ok || v.Current == 0 {
			return err // gone already
		}
		if strconv.Itoa(v.Current) != s.TypeID {
			return fmt.Errorf("VF %s holds vGPU type %d, planned %s; left alone", vf, v.Current, s.TypeID)
		}
		release, err := claimAndCheck(ctx, h, allocated, func() (func(), error) { return claimVFs(h, []host.Address{vf}) }, VGPU{ID: s.ID})
		if err != nil {
			return err
		}
		defer release()
		return h.SetVGPUType(vf, 0)
	}
	m, ok, err := h.ReadMdev(s.ID)
	if err != nil || !ok {
		return err // gone already
	}
	if m.TypeID != s.TypeID {
		return fmt.Errorf("mdev %s is of type %s, planned %s; left alone", s.ID, m.TypeID, s.TypeID)
	}
	release, err := claimAndCheck(ctx, h, allocated, func() (func(), error) { return h.ClaimGroup(m.IOMMUGroup) }, VGPU{ID: s.ID})
	if err != nil {
		return err
	}
	defer release()
	return h.RemoveMdev(s.ID)
}

func create(h HostView, s Step) error {
	if !s.onVF() {
		m, ok, err := h.ReadMdev(s.ID)
		switch {
		case err != nil:
			return err
		case ok && m.TypeID == s.TypeID:
			return nil
		case ok:
			return fmt.Errorf("mdev %s exists with type %s, planned %s", s.ID, m.TypeID, s.TypeID)
		}
		return h.CreateMdev(s.Parent, s.TypeID, s.ID)
	}
	vf := host.Address(s.ID)
	v, ok, err := h.VGPU(vf)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("VF %s has no nvidia/current_vgpu_type", vf)
	}
	id, _ := strconv.Atoi(s.TypeID)
	if id == 0 {
		for cid, name := range v.Creatable {
			if host.ShortTypeName(name) == s.Type {
				id = cid
			}
		}
	}
	switch {
	case v.Current != 0 && v.Current == id:
		return nil
	case v.Current != 0:
		return fmt.Errorf("VF %s holds vGPU type %d since the plan (planned %s)", vf, v.Current, s.Type)
	case id == 0:
		return fmt.Errorf("VF %s cannot create %s now: it is not in creatable_vgpu_types", vf, s.Type)
	}
	return h.SetVGPUType(vf, id)
}
