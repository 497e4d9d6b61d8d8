package vfio

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/sandbox-gpu/sandbox-gpu/vfio/host"
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
}

// Apply executes a plan: independent IOMMU groups in parallel, the
// functions of one group in order. Each step re-reads the function first,
// so a run that was killed half-way converges when run again, and a
// function already in place costs no write. A failed function is returned
// to its previous driver and the rest of its group is left alone.
func Apply(ctx context.Context, h *host.Host, plan *Plan, opts ApplyOptions) *Result {
	res := &Result{Target: plan.Target, Refused: append([]Refusal(nil), plan.Refused...)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	run := func(group []Action) {
		done, failed := applyGroup(ctx, h, plan.Target, group)
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

func applyGroup(ctx context.Context, h *host.Host, target Target, group []Action) (done []Action, failed []Refusal) {
	for i, a := range group {
		var err error
		if err = ctx.Err(); err == nil {
			if target == ToVFIO {
				err = toVFIO(ctx, h, a)
			} else {
				a.To, err = toHost(h, a)
			}
		}
		if err != nil {
			failed = append(failed, Refusal{Address: a.Address, Reason: "failed: " + err.Error()})
			for _, rest := range group[i+1:] {
				failed = append(failed, Refusal{Address: rest.Address,
					Reason: fmt.Sprintf("group %d: not attempted because %s failed", a.Group, a.Address)})
			}
			return done, failed
		}
		done = append(done, a)
	}
	return done, nil
}

// toVFIO moves one function to its vfio driver: driver_override first (so
// that any later probe, even after a crash, lands on vfio), then unbind,
// then probe.
func toVFIO(ctx context.Context, h *host.Host, a Action) error {
	f, err := h.ReadFunction(a.Address)
	if err != nil {
		return err
	}
	if f.Driver == a.To {
		return nil
	}
	if err := h.EnsureDriver(ctx, a.To, a.Module); err != nil {
		return fmt.Errorf("PCI function %s: %w", a.Address, err)
	}
	if f.DriverOverride != a.To {
		if err := h.SetDriverOverride(a.Address, a.To); err != nil {
			return err
		}
	}
	if f.Driver != "" {
		if err := h.Unbind(a.Address); err != nil {
			return err
		}
	}
	probeErr := h.Probe(a.Address)
	now, err := h.ReadFunction(a.Address)
	if err != nil {
		return err
	}
	if now.Driver == a.To {
		return nil
	}
	// Put it back where it was rather than leave it driverless.
	restoreErr := h.SetDriverOverride(a.Address, "")
	if restoreErr == nil && now.Driver == "" {
		restoreErr = h.Probe(a.Address)
	}
	if probeErr == nil {
		probeErr = fmt.Errorf("driver is %q after probe", now.Driver)
	}
	if restoreErr != nil {
		return fmt.Errorf("PCI function %s: bind to %s: %w; restoring %s: %v", a.Address, a.To, probeErr, a.From, restoreErr)
	}
	return fmt.Errorf("PCI function %s: bind to %s: %w (restored to its host driver)", a.Address, a.To, probeErr)
}

// toHost returns one function to its host driver (or none when it has
// none): clear driver_override, unbind from vfio, probe. The kernel picks
// the driver, so a host without modules.alias still gets its driver back;
// the driver it ends on is returned.
func toHost(h *host.Host, a Action) (string, error) {
	f, err := h.ReadFunction(a.Address)
	if err != nil {
		return "", err
	}
	if host.IsVFIODriver(f.DriverOverride) {
		if err := h.SetDriverOverride(a.Address, ""); err != nil {
			return "", err
		}
	}
	probe := a.To != ""
	if host.IsVFIODriver(f.Driver) {
		if err := h.Unbind(a.Address); err != nil {
			return "", err
		}
		f.Driver, probe = "", true
	}
	if f.Driver != "" || !probe {
		return f.Driver, nil
	}
	if err := h.Probe(a.Address); err != nil {
		return "", err
	}
	now, err := h.ReadFunction(a.Address)
	if err != nil {
		return "", err
	}
	if a.To != "" && now.Driver != a.To {
		return now.Driver, fmt.Errorf("PCI function %s: driver is %q after probe, want %s", a.Address, now.Driver, a.To)
	}
	return now.Driver, nil
}
