package cli

import (
	"context"
	"errors"
	"flag"
	"io"

	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

func runOnce(ctx context.Context, cmd string, args []string, stdout io.Writer) error {
	var c common
	var to string
	var sequential bool
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	c.register(fs, cmd != "status")
	if cmd == "plan" {
		fs.StringVar(&to, "to", "vfio", "target: vfio or host")
	}
	if cmd == "bind" || cmd == "unbind" {
		fs.BoolVar(&sequential, "sequential", false, "apply IOMMU groups one after the other")
	}
	if err := parse(fs, args, stdout); err != nil {
		if errors.Is(err, errHelp) {
			return nil
		}
		return err
	}
	if err := c.checkOutput(); err != nil {
		return err
	}
	sel, err := c.selection()
	if err != nil {
		return err
	}
	if cmd != "status" && !sel.All && len(sel.Devices) == 0 {
		return &UsageError{Msg: cmd + ": select functions with --all or --device BDF"}
	}
	h, cleanup, err := c.hostFor(!c.noModprobe)
	if err != nil {
		return err
	}
	defer cleanup()

	if cmd == "status" {
		snap, err := h.Scan()
		if err != nil {
			return err
		}
		report, err := vfio.Status(h, snap, sel.Vendor)
		if err != nil {
			return err
		}
		if c.output == "json" {
			return vfio.WriteJSON(stdout, report)
		}
		return vfio.WriteStatusTable(stdout, report)
	}

	target := vfio.ToVFIO
	switch cmd {
	case "unbind":
		target = vfio.ToHost
	case "plan":
		if target, err = vfio.ParseTarget(to); err != nil {
			return &UsageError{Msg: "--to: " + err.Error()}
		}
	}
	if lock := c.lockPath(); lock != "" && cmd != "plan" {
		release, err := vfio.AcquireLock(ctx, lock)
		if err != nil {
			return err
		}
		defer release()
	}
	planner, err := vfio.NewPlanner(h)
	if err != nil {
		return err
	}
	plan, err := planner.Plan(sel, target)
	if err != nil {
		return err
	}
	var report vfio.ChangeReport
	if cmd == "plan" {
		report = vfio.PlanReport(plan)
	} else {
		report = vfio.ResultReport(vfio.Apply(ctx, h, plan, vfio.ApplyOptions{Sequential: sequential}))
	}
	if c.output == "json" {
		err = vfio.WriteJSON(stdout, report)
	} else {
		err = vfio.WriteChangeTable(stdout, report)
	}
	if err != nil {
		return err
	}
	if len(report.Refused) > 0 {
		return ErrRefused
	}
	return nil
}
