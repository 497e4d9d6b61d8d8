// Package cli is the vfio-manager command line: flags to options, then the
// vfio package. It never exits the process; Run returns an error that
// ExitCode maps to the contract's exit codes.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// ErrRefused means at least one function was refused or failed (exit 2).
var ErrRefused = errors.New("some functions were refused or failed")

// UsageError is bad usage (exit 1).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// ExitCode maps Run's error to the process exit code.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrRefused):
		return 2
	default:
		return 1
	}
}

const usage = `vfio-manager moves NVIDIA PCI functions between their host drivers and vfio-pci.

Usage:
  vfio-manager status                          [--output table|json]
  vfio-manager plan   (--all | --device BDF)... [--to vfio|host] [--output table|json]
  vfio-manager bind   (--all | --device BDF)... [--output table|json]
  vfio-manager unbind (--all | --device BDF)... [--output table|json]
  vfio-manager daemon [--all | --device BDF]... [--config FILE] [--ready-dir DIR] [--health-addr ADDR]

Exit codes: 0 every selected function is in the target state; 1 bad usage or
input; 2 at least one function was refused or failed (the rest was done).

Run "vfio-manager COMMAND --help" for the flags of a command.
`

// Run executes one vfio-manager command.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &UsageError{Msg: "missing command"}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "-h", "--help", "-help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "status", "plan", "bind", "unbind":
		return runOnce(ctx, cmd, rest, stdout)
	case "daemon":
		return runDaemon(ctx, rest, stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return &UsageError{Msg: fmt.Sprintf("unknown command %q", cmd)}
}

// common are the flags every command takes.
type common struct {
	sysfs, dev, proc, modules string
	simulate                  string
	vendor                    string
	nvswitches                bool
	output                    string
	all                       bool
	devices                   multi
	noModprobe                bool
	lockFile                  string
}

// defaultLockFile is the host-wide lock on a real host, the same file the
// daemon holds (its DaemonSet mounts names.RunDir), so the two exclude each other.
var defaultLockFile = names.RunPath(names.VFIOLockFile)

// lockPath is the lock file to use: none for trees other than the running
// kernel's, unless set explicitly.
func (c *common) lockPath() string {
	if c.lockFile != "auto" {
		return c.lockFile
	}
	if c.simulate != "" || filepath.Clean(c.sysfs) != "/sys" {
		return ""
	}
	return defaultLockFile
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func (c *common) register(fs *flag.FlagSet, selection bool) {
	fs.StringVar(&c.sysfs, "sysfs-root", "/sys", "sysfs root")
	fs.StringVar(&c.dev, "dev-root", "/dev", "/dev root")
	fs.StringVar(&c.proc, "proc-root", "/proc", "/proc root")
	fs.StringVar(&c.modules, "modules-dir", "", "folder with modules.alias (default /lib/modules/<release from proc-root>)")
	fs.StringVar(&c.simulate, "simulate", "", "run against a bundled simulated host instead of the roots ("+fixtureNames()+")")
	fs.StringVar(&c.vendor, "vendor", "10de", "vendor id (hex) whose functions are managed")
	fs.BoolVar(&c.nvswitches, "nvswitches", false, "include NVSwitches (class 0x0680) in --all")
	fs.StringVar(&c.output, "output", "table", "output format: table or json")
	if selection {
		fs.BoolVar(&c.all, "all", false, "select every function of --vendor")
		fs.Var(&c.devices, "device", "select a PCI function by address (repeatable)")
		fs.BoolVar(&c.noModprobe, "no-modprobe", false, "never load vfio-pci or a variant module")
		fs.StringVar(&c.lockFile, "lock-file", "auto", "host-wide lock held while changing drivers (auto: "+defaultLockFile+" when --sysfs-root is /sys; empty: none)")
	}
}

func fixtureNames() string {
	var names []string
	for _, fx := range hostsim.Fixtures() {
		names = append(names, fx.Name)
	}
	return strings.Join(names, ", ")
}

// parse parses a command's flags; help returns errHelp.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintf(stdout, "Usage of vfio-manager %s:\n", fs.Name())
			fs.PrintDefaults()
			return errHelp
		}
		return &UsageError{Msg: fmt.Sprintf("%s: %v", fs.Name(), err)}
	}
	if fs.NArg() > 0 {
		return &UsageError{Msg: fmt.Sprintf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))}
	}
	return nil
}

var errHelp = errors.New("help shown")

// hostFor builds the host model; with --simulate it builds the fixture in
// a temporary folder that cleanup removes.
func (c *common) hostFor(loadModules bool) (h *host.Host, cleanup func(), err error) {
	opts := host.Options{SysfsRoot: c.sysfs, DevRoot: c.dev, ProcRoot: c.proc, ModulesDir: c.modules}
	// modprobe acts on the running kernel: only when the roots are the
	// running kernel's own, never against a tree under another root.
	if loadModules && filepath.Clean(c.sysfs) == "/sys" {
		opts.Loader = host.Modprobe{}
	}
	cleanup = func() {}
	if c.simulate != "" {
		fx, err := hostsim.Lookup(c.simulate)
		if err != nil {
			return nil, nil, &UsageError{Msg: err.Error()}
		}
		dir, err := os.MkdirTemp("", "vfio-sim-")
		if err != nil {
			return nil, nil, err
		}
		cleanup = func() { os.RemoveAll(dir) }
		k, err := fx.Build(dir)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		opts = k.Options()
	}
	return host.New(opts), cleanup, nil
}

func (c *common) selection() (vfio.Selection, error) {
	vendor, err := host.ParseID(c.vendor)
	if err != nil {
		return vfio.Selection{}, &UsageError{Msg: fmt.Sprintf("--vendor: %v", err)}
	}
	sel := vfio.Selection{All: c.all, Vendor: vendor, NVSwitches: c.nvswitches}
	for _, d := range c.devices {
		a, err := host.ParseAddress(d)
		if err != nil {
			return sel, &UsageError{Msg: fmt.Sprintf("--device: %v", err)}
		}
		sel.Devices = append(sel.Devices, a)
	}
	return sel, nil
}

func (c *common) checkOutput() error {
	if c.output != "table" && c.output != "json" {
		return &UsageError{Msg: fmt.Sprintf("--output %q: want table or json", c.output)}
	}
	return nil
}
