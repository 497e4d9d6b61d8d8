// Package cli is the vfio-manager command line: flags to options, then the
// vfio package, on the shared entry-point shell. It never exits the
// process; shell.Run maps its errors to the contract's exit codes.
package cli

import (
	"flag"
	"path/filepath"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

const notes = `Exit codes: 0 every selected function is in the target state; 1 bad usage or
input; 2 at least one function was refused or failed (the rest was done).`

// Program is vfio-manager.
func Program() *shell.Program {
	return &shell.Program{
		Name:    "vfio-manager",
		Summary: "moves NVIDIA PCI functions between their host drivers and vfio-pci (or a vfio variant driver)",
		Notes:   notes,
		Commands: []*shell.Command{
			onceCommand("status", "[--output table|json]", "shows every function of --vendor and the IOMMU state"),
			onceCommand("plan", "(--all | --device BDF)... [--to vfio|host] [--output table|json]", "shows what bind or unbind would do; changes nothing"),
			onceCommand("bind", "(--all | --device BDF)... [--output table|json]", "moves the selected functions to vfio"),
			onceCommand("unbind", "(--all | --device BDF)... [--output table|json]", "returns the selected functions to their host drivers"),
			daemonCommand(),
		},
	}
}

// defaultLockFile is the host-wide lock on a real host, the same file the
// daemon holds (its DaemonSet mounts names.RunDir), so the two exclude each other.
var defaultLockFile = names.RunPath(names.VFIOLockFile)

// common are the flags every command takes (besides the shell's roots).
type common struct {
	modules    string
	vendor     string
	nvswitches bool
	output     string
	all        bool
	devices    multi
	noModprobe bool
	lockFile   string
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func (c *common) register(fs *flag.FlagSet, selection bool) {
	fs.StringVar(&c.modules, "modules-dir", "", "folder with modules.alias (default /lib/modules/<release from proc-root>)")
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

// onRunningKernel reports whether the host options are the running
// kernel's own (never a tree under another root, never a simulated host).
func onRunningKernel(env *shell.Env) bool {
	return !env.Simulated() && filepath.Clean(env.HostOptions().SysfsRoot) == host.DefaultSysfsRoot
}

// lockPath is the lock file to use: none for trees other than the running
// kernel's, unless set explicitly.
func (c *common) lockPath(onHost bool) string {
	if c.lockFile != "auto" {
		return c.lockFile
	}
	if !onHost {
		return ""
	}
	return defaultLockFile
}

// host builds the host model. modprobe acts on the running kernel: only
// when the roots are the running kernel's own, never against another tree.
func (c *common) host(env *shell.Env, loadModules bool) *host.Host {
	opts := env.HostOptions()
	if c.modules != "" {
		opts.ModulesDir = c.modules
	}
	if loadModules && onRunningKernel(env) {
		opts.Loader = host.Modprobe{}
	}
	return host.New(opts)
}

func (c *common) selection() (vfio.Selection, error) {
	vendor, err := host.ParseID(c.vendor)
	if err != nil {
		return vfio.Selection{}, shell.Usagef("--vendor: %v", err)
	}
	sel := vfio.Selection{All: c.all, Vendor: vendor, NVSwitches: c.nvswitches}
	for _, d := range c.devices {
		a, err := host.ParseAddress(d)
		if err != nil {
			return sel, shell.Usagef("--device: %v", err)
		}
		sel.Devices = append(sel.Devices, a)
	}
	return sel, nil
}

func (c *common) checkOutput() error {
	if c.output != "table" && c.output != "json" {
		return shell.Usagef("--output %q: want table or json", c.output)
	}
	return nil
}
