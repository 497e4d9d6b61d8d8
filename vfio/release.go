package vfio

import (
	"context"
	"fmt"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/hostlock"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// releasing reports whether the daemon runs in release mode (a fixed
// desired state that returns every function; a config file is read at
// every reconcile and never holds the lock for life).
func (d *Daemon) releasing() bool { return d.opts.ConfigFile == "" && d.opts.Desired.Release }

func (d *Daemon) lockHeld() bool { return d.held.Load() }

// lockForLife takes the host lock until the returned unlock is called; nil
// and no error when ctx ended first. Without a lock file there is nothing
// to take.
func (d *Daemon) lockForLife(ctx context.Context) (func(), error) {
	if d.opts.LockFile == "" {
		return func() {}, nil
	}
	d.setReady(&ReadyReport{Reason: "waiting for the host lock " + d.opts.LockFile, Actions: []Action{}, Refused: []Refusal{}, VFIO: []string{}})
	release, err := hostlock.Acquire(ctx, d.opts.LockFile)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("daemon: %w", err)
	}
	d.held.Store(true)
	return func() {
		d.held.Store(false)
		release()
	}, nil
}

// judgeRelease makes a release ready only when no function of the vendor
// is left on a vfio driver: rep.VFIO lists those left, and the reason names
// each (with its refusal when it has one).
func (d *Daemon) judgeRelease(rep *ReadyReport, sel Selection) error {
	snap, err := d.opts.Host.Scan()
	if err != nil {
		return err
	}
	refused := map[host.Address]string{}
	for _, r := range rep.Refused {
		refused[r.Address] = r.Reason
	}
	var left []string
	for _, f := range snap.Functions {
		if f.Vendor != sel.Vendor || f.PhysFn != "" || host.IsPCIBridge(f.Class) || !host.IsVFIODriver(f.Driver) || !ClassMatches(f.Class, sel.Classes) {
			continue
		}
		rep.VFIO = append(rep.VFIO, string(f.Address))
		if _, ok := refused[f.Address]; !ok {
			left = append(left, fmt.Sprintf("%s: still on %s", f.Address, f.Driver))
		}
	}
	if len(left) > 0 {
		reasons := append(left, rep.Reason)
		if rep.Reason == "" {
			reasons = left
		}
		rep.Ready, rep.Reason = false, strings.Join(reasons, "; ")
	}
	return nil
}

// ReleaseReport is a release daemon's report for its Node: done when
// ready, else the reason and the functions left on vfio.
func ReleaseReport(rep *ReadyReport) wire.ReleaseReport {
	if rep.Ready {
		return wire.ReleaseReport{Done: true}
	}
	r := wire.ReleaseReport{Reason: rep.Reason, Left: append([]string(nil), rep.VFIO...)}
	if r.Reason == "" {
		r.Reason = "not released yet"
	}
	return r
}
