package vfio

import (
	"context"
	"fmt"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// Declaration is where a daemon reads the node's split at every reconcile:
// a Node's annotation, followed by a watch.
type Declaration struct {
	// Get returns the declaration now ("" when absent: every GPU); an
	// error when it cannot be known (the Node not read yet): the daemon
	// then moves nothing and is not ready.
	Get func() (string, error)
	// Source names it in errors: "node gpu-1: annotation sandbox-gpu.io/vm-gpus".
	Source string
	// Changed receives when the declaration may have changed.
	Changed <-chan struct{}
}

// declaration returns the split declared for this reconcile, where it
// comes from, and whether one is declared at all.
func (d *Daemon) declaration(desired Desired) (text, source string, ok bool, err error) {
	if from := d.opts.VMGPUsFrom; from != nil {
		value, err := from.Get()
		if err != nil {
			return "", "", false, fmt.Errorf("%s: %w", from.Source, err)
		}
		return value, from.Source, true, nil
	}
	if desired.VMGPUs == "" {
		return "", "", false, nil
	}
	source = "--vm-gpus"
	if d.opts.ConfigFile != "" {
		source = "config " + d.opts.ConfigFile + ": vmGPUs"
	}
	return desired.VMGPUs, source, true, nil
}

// split resolves the declared split on the host, nil when none is
// declared. A declaration that is bad, or does not fit the host, is an
// error naming where it comes from and its value: nothing moves.
func (d *Daemon) split(ctx context.Context, desired Desired, vendor uint16) (*Split, error) {
	text, source, ok, err := d.declaration(desired)
	if err != nil || !ok {
		return nil, err
	}
	v, err := ParseVMGPUs(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	planner, err := NewPlanner(d.opts.Host)
	if err != nil {
		return nil, err
	}
	planner.UseKubelet(ctx, d.opts.Allocations)
	s, err := planner.Split(v, vendor, d.opts.ModelNames)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	s.Source = source
	return s, nil
}

// judgeSplit lists the GPUs not where the split wants them (a VM GPU not
// on a vfio driver, a container GPU still on one) in rep.Split.Left; any
// makes the node not ready, each named in the reason (with its refusal
// when it has one).
func (d *Daemon) judgeSplit(rep *ReadyReport) error {
	snap, err := d.opts.Host.Scan()
	if err != nil {
		return err
	}
	refused := map[host.Address]bool{}
	for _, r := range rep.Refused {
		refused[r.Address] = true
	}
	var reasons []string
	check := func(a host.Address, wantVFIO bool) {
		f, ok := snap.Function(a)
		if !ok {
			return // gone: reported as not found
		}
		if host.IsVFIODriver(f.Driver) == wantVFIO {
			return
		}
		rep.Split.Left = append(rep.Split.Left, a)
		if !refused[a] {
			want := "a vfio driver (VM GPU)"
			if !wantVFIO {
				want = "its host driver (container GPU)"
			}
			reasons = append(reasons, fmt.Sprintf("%s: on %s, not yet on %s", a, orNone(f.Driver), want))
		}
	}
	for _, a := range rep.Split.VM {
		check(a, true)
	}
	for _, a := range rep.Split.Container {
		check(a, false)
	}
	if len(reasons) > 0 {
		if rep.Reason != "" {
			reasons = append(reasons, rep.Reason)
		}
		rep.Ready, rep.Reason = false, strings.Join(reasons, "; ")
	}
	return nil
}
