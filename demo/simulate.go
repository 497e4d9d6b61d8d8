package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/hostroots"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	katacli "github.com/sandbox-gpu/sandbox-gpu/kata/cli"
	kubevirtcli "github.com/sandbox-gpu/sandbox-gpu/kubevirt/cli"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
	vfiocli "github.com/sandbox-gpu/sandbox-gpu/vfio/cli"
	vgpucli "github.com/sandbox-gpu/sandbox-gpu/vgpu/cli"
)

// simulated are the node binaries simulate can run, each on the simulated
// kernel (the programs that change the host take it; the device plugins
// only read the tree), with the flags that point it at the simulated host
// besides the roots, and whether their host needs the NVIDIA functions on
// vfio-pci first (device plugins advertise only those).
var simulated = map[string]struct {
	program func(hostroots.Kernel) *shell.Program
	flags   func(sim simHost, command string) []string
	bind    bool
}{
	"vfio-manager":           {vfiocli.ProgramOn, vfioFlags, false},
	"kubevirt-device-plugin": {func(hostroots.Kernel) *shell.Program { return kubevirtcli.Program() }, pluginFlags, true},
	"kata-device-plugin":     {func(hostroots.Kernel) *shell.Program { return katacli.Program() }, pluginFlags, true},
	"vgpu-device-manager":    {vgpucli.ProgramOn, vgpuFlags, false},
}

// simHost is a simulated host built for one simulate run: its kernel and
// the demo's folder of it.
type simHost struct {
	opts host.Options
	dir  string
}

// roots are the root flags of the simulated host.
func (s simHost) roots() []string {
	return []string{"--sysfs-root", s.opts.SysfsRoot, "--dev-root", s.opts.DevRoot, "--proc-root", s.opts.ProcRoot}
}

// vfioFlags: the simulated host's modules, and no kubelet to ask (the
// commands that change functions ask one).
func vfioFlags(s simHost, command string) []string {
	flags := append(s.roots(), "--modules-dir", s.opts.ModulesDir)
	if command != "status" {
		flags = append(flags, "--pod-resources-socket=")
	}
	return flags
}

// pluginFlags: the simulated host's modules; the plugin advertises without
// waiting for a VFIO manager (simulate bound every function first).
func pluginFlags(s simHost, _ string) []string {
	return append(s.roots(), "--modules-dir", s.opts.ModulesDir, "--wait-vfio-ready=false")
}

// vgpuFlags: no kubelet to ask, and the run folder (lock, pause and ready
// files) in the simulated host's folder.
func vgpuFlags(s simHost, _ string) []string {
	return append(s.roots(), "--pod-resources-socket=", "--run-dir", filepath.Join(s.dir, "run"))
}

func simulatedBinaries() []string {
	var out []string
	for name := range simulated {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func fixtureNames() []string {
	var out []string
	for _, fx := range hostsim.Fixtures() {
		out = append(out, fx.Name)
	}
	return out
}

// simulateCommand runs a node binary's command line on a simulated host
// built from a bundled fixture in a temporary folder.
func simulateCommand() *shell.Command {
	return &shell.Command{Name: "simulate", Args: "FIXTURE BINARY [ARGS...]",
		Summary: "runs a node binary (vfio-manager, a device plugin) on a bundled simulated host",
		Run: func(ctx context.Context, env *shell.Env) error {
			if len(env.Args) < 2 {
				return shell.Usagef("simulate: want FIXTURE BINARY [ARGS...]; fixtures: %v; binaries: %v", fixtureNames(), simulatedBinaries())
			}
			bin, ok := simulated[env.Args[1]]
			if !ok {
				return shell.Usagef("simulate: unknown binary %q (want one of %v)", env.Args[1], simulatedBinaries())
			}
			fx, err := hostsim.Lookup(env.Args[0])
			if err != nil {
				return shell.Usagef("simulate: %v", err)
			}
			dir, err := os.MkdirTemp("", "sandbox-gpu-sim-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			k, err := fx.Build(dir)
			if err != nil {
				return fmt.Errorf("simulated host %s: %w", fx.Name, err)
			}
			sim := simHost{opts: k.Options(), dir: dir}
			args := env.Args[2:]
			if bin.bind {
				if err := bindAll(ctx, sim.opts); err != nil {
					return err
				}
			}
			if len(args) > 0 {
				args = append(args, bin.flags(sim, args[0])...)
			} else if bin.bind {
				args = bin.flags(sim, "")
			}
			if code := shell.Run(ctx, bin.program(k), args, shell.IO{Stdout: env.Stdout, Stderr: env.Stderr}); code != 0 {
				return shell.Quiet(exitCode(code))
			}
			return nil
		}}
}

// bindAll puts every NVIDIA function of the simulated host on vfio, as the
// VFIO manager would have before a device plugin starts.
func bindAll(ctx context.Context, opts host.Options) error {
	h := host.New(opts)
	p, err := vfio.NewPlanner(h)
	if err != nil {
		return err
	}
	plan, err := p.Plan(vfio.Selection{All: true, Vendor: host.VendorNVIDIA, NVSwitches: true}, vfio.ToVFIO)
	if err != nil {
		return err
	}
	if res := vfio.Apply(ctx, h, plan, vfio.ApplyOptions{}); !res.OK() {
		return fmt.Errorf("simulated host: binding to vfio refused: %v", res.Refused)
	}
	return nil
}

// exitCode passes a simulated binary's exit code on (its output already
// said why).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func (e exitCode) ExitCode() int { return int(e) }
