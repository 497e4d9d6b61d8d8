package vgpu

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// usage is one look at who uses what: the processes' open files and the
// kubelet's allocations. A vGPU is in use when a process holds its VFIO
// group or device (a VM runs on it) or a pod was allocated it.
type usage struct {
	h        HostView
	procs    *host.Usage
	alloc    map[string]string
	allocErr error
}

// survey reads what a plan starts from: the host's NVIDIA GPUs with their
// vGPUs and VFs, and who uses them.
func survey(ctx context.Context, h HostView, o Options) ([]*GPU, *usage, error) {
	gpus, err := inventory(h, o)
	if err != nil {
		return nil, nil, err
	}
	u, err := lookUsage(ctx, h, o.Allocated)
	if err != nil {
		return nil, nil, err
	}
	return gpus, u, nil
}

// lookUsage scans the processes and asks the kubelet (when allocated is
// set). A failing kubelet does not fail the scan: every vGPU then counts as
// in use, since nothing can be removed safely.
func lookUsage(ctx context.Context, h HostView, allocated Allocated) (*usage, error) {
	u := &usage{h: h}
	var err error
	if u.procs, err = h.ScanUsage(); err != nil {
		return nil, err
	}
	if allocated != nil {
		if u.alloc, err = allocated.Allocated(ctx); err != nil {
			u.allocErr = fmt.Errorf("asking the kubelet which devices pods hold: %w", err)
		}
	}
	return u, nil
}

// busy returns why a vGPU is in use, "" when it is idle.
// busy says why v is in use ("" when idle): a process holds its device
// node, or a pod is allocated it. With probe, it also tries to claim the
// VFIO group (and lets go), which sees a VM that kept only the device fd;
// a caller that holds the claim itself passes false.
func (u *usage) busy(v VGPU, probe bool) string {
	var reasons []string
	group := host.NoGroup
	if a, err := host.ParseAddress(v.ID); err == nil {
		f, err := u.h.ReadFunction(a)
		if err != nil {
			return "in use: cannot tell: " + err.Error()
		}
		r, err := u.h.InUse(f, u.procs)
		if err != nil {
			return "in use: cannot tell: " + err.Error()
		}
		reasons = append(reasons, r...)
		group = f.IOMMUGroup
	} else {
		m, ok, err := u.h.ReadMdev(v.ID)
		if err != nil {
			return "in use: cannot tell: " + err.Error()
		}
		if ok {
			r, err := u.h.MdevInUse(m, u.procs)
			if err != nil {
				return "in use: cannot tell: " + err.Error()
			}
			reasons = append(reasons, r...)
			group = m.IOMMUGroup
		}
	}
	if len(reasons) == 0 && probe {
		// A VM that kept only the VFIO device fd is in no /proc/*/fd as the
		// group node, but the group is busy: try to claim it, and let go.
		release, err := u.h.ClaimGroup(group)
		if err != nil {
			return err.Error()
		}
		release()
	}
	if u.allocErr != nil {
		reasons = append(reasons, fmt.Sprintf("in use: cannot tell whether %s is allocated to a pod: %v", v.ID, u.allocErr))
	} else if who, ok := u.alloc[normID(v.ID)]; ok {
		reasons = append(reasons, fmt.Sprintf("in use: %s is allocated to pod %s", v.ID, who))
	}
	return strings.Join(reasons, "; ")
}

// checkIdle rescans everything and returns an error starting with "in
// use:" when the vGPU is in use: the last check before a write that
// removes it (on a real kernel such a write blocks, unkillably, while a VM
// holds the device).
func checkIdle(ctx context.Context, h HostView, allocated Allocated, v VGPU) error {
	u, err := lookUsage(ctx, h, allocated)
	if err != nil {
		return fmt.Errorf("in use: cannot tell: %w", err)
	}
	if why := u.busy(v, false); why != "" { // the caller holds the claim
		return errors.New(why)
	}
	return nil
}
