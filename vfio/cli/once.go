package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/sandbox-gpu/sandbox-gpu/internal/hostlock"
	"github.com/sandbox-gpu/sandbox-gpu/internal/hostroots"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// onceCommand is status, plan, bind or unbind: one scan, one report.
func onceCommand(k hostroots.Kernel, name, synopsis, summary string) *shell.Command {
	c := common{kernel: k}
	var to string
	var sequential bool
	return &shell.Command{Name: name, Synopsis: synopsis, Summary: summary, Roots: true,
		Flags: func(fs *flag.FlagSet) {
			c.register(fs, name != "status")
			if name == "plan" || name == "bind" {
				c.registerSplit(fs)
			}
			if name == "plan" {
				fs.StringVar(&to, "to", "vfio", "target: vfio or host")
			}
			if name == "bind" || name == "unbind" {
				fs.BoolVar(&sequential, "sequential", false, "apply IOMMU groups one after the other")
			}
		},
		Run: func(ctx context.Context, env *shell.Env) error {
			return runOnce(ctx, env, name, &c, to, sequential)
		}}
}

func runOnce(ctx context.Context, env *shell.Env, cmd string, c *common, to string, sequential bool) error {
	if err := c.checkOutput(); err != nil {
		return err
	}
	sel, err := c.selection()
	if err != nil {
		return err
	}
	split, names, splitting, err := c.split()
	if err != nil {
		return err
	}
	if splitting && (sel.All || len(sel.Devices) > 0 || cmd == "plan" && to != "vfio") {
		return shell.Usagef("%s: --vm-gpus splits every GPU of --vendor: it takes no --all, --device or --to", cmd)
	}
	if cmd != "status" && !sel.All && len(sel.Devices) == 0 && !splitting {
		return shell.Usagef("%s: select functions with --all or --device BDF", cmd)
	}
	h := c.host(env, !c.noModprobe)
	if cmd == "status" {
		snap, err := h.Scan()
		if err != nil {
			return err
		}
		report, err := vfio.Status(h, snap, sel.Vendor)
		if err != nil {
			return err
		}
		vfio.LogWarnings(env.Log, report.Warnings)
		return env.Report(c.output, report, func(w io.Writer) error { return vfio.WriteStatusTable(w, report) }, 0)
	}

	target := vfio.ToVFIO
	switch cmd {
	case "unbind":
		target = vfio.ToHost
	case "plan":
		if target, err = vfio.ParseTarget(to); err != nil {
			return shell.Usagef("--to: %v", err)
		}
	}
	if lock := c.lockPath(onRunningKernel(env)); lock != "" && cmd != "plan" {
		release, err := hostlock.Acquire(ctx, lock)
		if err != nil {
			return err
		}
		defer release()
	}
	alloc, done, err := c.allocations(env)
	if err != nil {
		return err
	}
	defer done()
	planner, err := vfio.NewPlanner(h)
	if err != nil {
		return err
	}
	vfio.LogWarnings(env.Log, planner.Warnings)
	planner.UseKubelet(ctx, alloc)
	if splitting {
		return runSplit(ctx, env, c, planner, split, names, sel.Vendor, cmd == "plan", vfio.ApplyOptions{Sequential: sequential, Allocations: alloc})
	}
	plan, err := planner.Plan(sel, target)
	if err != nil {
		return err
	}
	var report vfio.ChangeReport
	if cmd == "plan" {
		report = vfio.PlanReport(plan)
	} else {
		report = vfio.ResultReport(vfio.Apply(ctx, h, plan, vfio.ApplyOptions{Sequential: sequential, Allocations: alloc}))
	}
	return writeChange(env, c, report)
}

func writeChange(env *shell.Env, c *common, report vfio.ChangeReport) error {
	return env.Report(c.output, report, func(w io.Writer) error { return vfio.WriteChangeTable(w, report) }, len(report.Refused))
}

// runSplit plans (or binds) a --vm-gpus split: the container GPUs back to
// their host drivers, the VM GPUs to vfio.
func runSplit(ctx context.Context, env *shell.Env, c *common, planner *vfio.Planner, v vfio.VMGPUs, names map[uint16]string,
	vendor uint16, dryRun bool, opts vfio.ApplyOptions) error {
	plans, err := planner.PlanSplit(v, vendor, names)
	if err != nil {
		return fmt.Errorf("--vm-gpus: %w", err)
	}
	plans.Split.Source = "--vm-gpus"
	if dryRun {
		return writeChange(env, c, plans.Report())
	}
	return writeChange(env, c, plans.Apply(ctx, planner, opts))
}
