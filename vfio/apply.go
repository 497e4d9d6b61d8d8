package vfio

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// Result is what an apply did.
type Result struct {
	Target  Target
	Actions []Action  // moves that completed
	Refused []Refusal // the plan's refusals, then failures
}

// OK reports whether every selected function reached the target.
func (r *Result) OK() bool { return len(r.Refused) == 0 }

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// Sequential applies one IOMMU group after the other instead of all
	// groups at once.
	Sequential bool
	// Allocations, when set, is asked right before each function leaves
	// its driver (after its group is claimed): a pod allocated it since the
	// plan keeps it.
	Allocations Allocations
}

// Apply executes a plan: independent IOMMU groups in parallel, the
// functions of one group in order. A group, once started, is finished
// (or rolled back) even when ctx ends, so no group is left split; groups
// not started when ctx ends are reported as not attempted.
//
// Every step re-reads the function first: one already in place costs no
// write, one that moved since the plan is left alone, and one that became
// busy since the plan is refused. A run killed half-way converges when run
// again.
func Apply(ctx context.Context, h HostView, plan *Plan, opts ApplyOptions) *Result {
	res := &Result{Target: plan.Target, Refused: append([]Refusal(nil), plan.Refused...)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	run := func(group []Action) {
		var done []Action
		var failed []Refusal
		if err := ctx.Err(); err != nil {
			failed = notAttempted(group, "stopping before the group started: "+err.Error())
		} else {
			done, failed = applyGroup(ctx, h, plan.Target, group, opts.Allocations)
		}
		mu.Lock()
		defer mu.Unlock()
		res.Actions = append(res.Actions, done...)
		res.Refused = append(res.Refused, failed...)
	}
	for _, group := range plan.groups() {
		if opts.Sequential {
			run(group)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(group)
		}()
	}
	wg.Wait()
	sort.SliceStable(res.Actions, func(i, j int) bool { return res.Actions[i].Address < res.Actions[j].Address })
	sort.SliceStable(res.Refused, func(i, j int) bool { return res.Refused[i].Address < res.Refused[j].Address })
	return res
}

func notAttempted(group []Action, why string) []Refusal {
	out := make([]Refusal, 0, len(group))
	for _, a := range group {
		out = append(out, Refusal{Address: a.Address, Reason: why})
	}
	return out
}

// applyGroup moves a group's functions in order. When one fails, those
// already moved go back where they were, so the group stays whole.
func applyGroup(ctx context.Context, h HostView, target Target, group []Action, alloc Allocations) (done []Action, failed []Refusal) {
	for i, a := range group {
		var moved Action
		var err error
		idle := func(f *host.Function) error { return idleCheck(ctx, h, alloc, f, a.ids) }
		if target == ToVFIO {
			moved, err = toVFIO(h, a, idle)
		} else {
			moved, err = toHost(h, a, idle)
		}
		if err == nil {
			done = append(done, moved)
			continue
		}
		failed = append(failed, Refusal{Address: a.Address, Reason: "failed: " + err.Error()})
		for _, rest := range group[i+1:] {
			failed = append(failed, Refusal{Address: rest.Address,
				Reason: fmt.Sprintf("group %d: not attempted because %s failed", a.Group, a.Address)})
		}
		for j := len(done) - 1; j >= 0; j-- {
			failed = append(failed, rollback(ctx, h, alloc, target, done[j], a.Address))
		}
		return nil, failed
	}
	return done, nil
}

// rollbackAllocTimeout bounds the kubelet query of a rollback, which runs
// even when the apply's context has ended (a group is never left split).
const rollbackAllocTimeout = 5 * time.Second

// rollback returns a moved function to where it was, never from under a
// process or a pod the kubelet has allocated it to since it moved (a
// container may hold a GPU that just returned to its host driver): such a
// function stays where it is and the refusal says so.
func rollback(ctx context.Context, h HostView, alloc Allocations, target Target, a Action, cause host.Address) Refusal {
	back := Action{Address: a.Address, From: a.To, To: a.From, Group: a.Group, probe: true, ids: a.ids}
	var err error
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackAllocTimeout)
	defer cancel()
	idle := func(f *host.Function) error { return idleCheck(actx, h, alloc, f, a.ids) }
	if target == ToVFIO {
		_, err = toHost(h, back, idle)
	} else {
		_, err = toVFIO(h, back, idle)
	}
	if err != nil {
		return Refusal{Address: a.Address, Reason: fmt.Sprintf("failed: group %d: %s failed and rolling back %s to %q failed too: %v", a.Group, cause, a.Address, a.From, err)}
	}
	return Refusal{Address: a.Address, Reason: fmt.Sprintf("group %d: rolled back to %q because %s failed", a.Group, a.From, cause)}
}

// errMoved reports a function that is no longer where the plan saw it.
func errMoved(a Action, now string) error {
	return fmt.Errorf("PCI function %s changed since the plan: driver %q, planned from %q; left alone", a.Address, now, a.From)
}

// toVFIO moves one function to its vfio driver: driver_override first (so
// that any later probe, even after a crash, lands on vfio), a last in-use
// check, unbind from the planned driver, probe.
func toVFIO(h HostView, a Action, idle func(*host.Function) error) (Action, error) {
	f, err := h.ReadFunction(a.Address)
	if err != nil {
		return a, err
	}
	if f.Driver == a.To {
		return a, nil
	}
	if f.Driver != "" && f.Driver != a.From {
		return a, errMoved(a, f.Driver)
	}
	if err := h.EnsureDriver(context.Background(), a.To, a.Module); err != nil {
		return a, fmt.Errorf("PCI function %s: %w", a.Address, err)
	}
	m := mover{h, a.Address}
	restoreOverride := func(cause error) error {
		if f.DriverOverride == a.To {
			return cause
		}
		if err := m.setOverride(f.DriverOverride); err != nil {
			return fmt.Errorf("%w; restoring driver_override: %v", cause, err)
		}
		return cause
	}
	if f.DriverOverride != a.To {
		if err := m.setOverride(a.To); err != nil {
			return a, restoreOverride(err) // a transient failure may have left it half-written
		}
	}
	if f.Driver != "" {
		release, err := claimIfVFIO(h, f)
		if err != nil {
			return a, restoreOverride(err)
		}
		err = idle(f)
		if err == nil {
			err = m.unbind(f.Driver)
		}
		release()
		if err != nil {
			return a, restoreOverride(err)
		}
	}
	probeErr := m.probe()
	now, err := h.ReadFunction(a.Address)
	if err != nil {
		return a, err
	}
	if now.Driver == a.To {
		return a, nil
	}
	// Put it back where it was rather than leave it driverless.
	restoreErr := m.setOverride(f.DriverOverride)
	if restoreErr == nil && now.Driver == "" {
		restoreErr = m.probe()
	}
	if probeErr == nil {
		probeErr = fmt.Errorf("driver is %q after probe", now.Driver)
	}
	after := m.read()
	switch {
	case after == nil:
		return a, fmt.Errorf("PCI function %s: bind to %s: %w; restoring %q: %v; it cannot be read", a.Address, a.To, probeErr, f.Driver, restoreErr)
	case restoreErr != nil || after.Driver != f.Driver:
		return a, fmt.Errorf("PCI function %s: bind to %s: %w; restoring %q failed, it is on %q: %v", a.Address, a.To, probeErr, f.Driver, after.Driver, restoreErr)
	}
	return a, fmt.Errorf("PCI function %s: bind to %s: %w (restored to %q)", a.Address, a.To, probeErr, f.Driver)
}

// toHost returns one function to its host driver (or none when it has
// none): a last in-use check, clear driver_override, unbind from vfio,
// probe. The kernel picks the driver, so a host without modules.alias
// still gets its driver back; the returned action names the driver the
// function ends on.
func toHost(h HostView, a Action, idle func(*host.Function) error) (Action, error) {
	f, err := h.ReadFunction(a.Address)
	if err != nil {
		return a, err
	}
	m := mover{h, a.Address}
	onVFIO := host.IsVFIODriver(f.Driver)
	if onVFIO && f.Driver != a.From && host.IsVFIODriver(a.From) {
		return a, errMoved(a, f.Driver)
	}
	if !onVFIO && f.Driver != "" {
		if host.IsVFIODriver(f.DriverOverride) {
			if err := m.setOverride(""); err != nil {
				return a, err
			}
		}
		a.To = f.Driver
		return a, nil
	}
	if onVFIO {
		release, err := claimIfVFIO(h, f)
		if err != nil {
			return a, err
		}
		defer release()
		if err := idle(f); err != nil {
			return a, err
		}
	}
	if host.IsVFIODriver(f.DriverOverride) {
		if err := m.setOverride(""); err != nil {
			return a, restoreVFIO(m, f, err)
		}
	}
	probe := a.To != "" || a.probe
	if onVFIO {
		if err := m.unbind(f.Driver); err != nil {
			return a, restoreVFIO(m, f, err)
		}
		probe = true
	}
	if !probe {
		return a, nil
	}
	if err := m.probe(); err != nil {
		return a, restoreVFIO(m, f, err)
	}
	now, err := h.ReadFunction(a.Address)
	if err != nil {
		return a, err
	}
	want := a.To
	a.To = now.Driver
	if want != "" && now.Driver != want {
		return a, fmt.Errorf("PCI function %s: driver is %q after probe, want %s", a.Address, now.Driver, want)
	}
	return a, nil
}

// restoreVFIO puts a function whose return to the host failed (cause)
// back where it was, rather than leave it driverless: its driver_override
// as it was and, when it left its vfio driver, a probe back onto that
// driver. The error says where it ended.
func restoreVFIO(m mover, was *host.Function, cause error) error {
	err := m.setOverride(was.DriverOverride)
	now := m.read()
	if err == nil && now != nil && now.Driver == "" && was.Driver != "" {
		if err = m.setOverride(was.Driver); err == nil {
			err = m.probe()
		}
		if perr := m.setOverride(was.DriverOverride); err == nil {
			err = perr
		}
		now = m.read()
	}
	switch {
	case now == nil:
		return fmt.Errorf("%w; PCI function %s cannot be read after restoring it", cause, m.a)
	case err != nil || now.Driver != was.Driver:
		return fmt.Errorf("%w; restoring %s to %q failed, it is on %q: %v", cause, m.a, was.Driver, now.Driver, err)
	}
	return fmt.Errorf("%w (restored to %q)", cause, was.Driver)
}

// claimIfVFIO claims the function's VFIO group while it leaves a vfio
// driver.
func claimIfVFIO(h HostView, f *host.Function) (func(), error) {
	if !host.IsVFIODriver(f.Driver) {
		return func() {}, nil
	}
	return h.ClaimGroup(f.IOMMUGroup)
}
