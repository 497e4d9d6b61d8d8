// Package cli is the vfio-manager command line: flags to options, then the
// vfio package, on the shared entry-point shell. It never exits the
// process; shell.Run maps its errors to the contract's exit codes.
package cli

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/hostroots"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

const notes = `Exit codes: 0 every selected function is in the target state; 1 bad usage or
input; 2 at least one function was refused or failed (the rest was done).`

// Program is vfio-manager on this machine's kernel.
func Program() *shell.Program { return ProgramOn(nil) }

// ProgramOn is vfio-manager changing the host through kernel k (sysfs
// writes, links, module loads, group claims) instead of this machine's:
// the simulated kernel of the demo and the tests, whose tree the root flags
// name. A nil k is this machine's kernel.
func ProgramOn(k hostroots.Kernel) *shell.Program {
	return &shell.Program{
		Name:    "vfio-manager",
		Summary: "moves NVIDIA PCI functions between their host drivers and vfio-pci (or a vfio variant driver)",
		Notes:   notes,
		Commands: []*shell.Command{
			onceCommand(k, "status", "[--output table|json]", "shows every function of --vendor and the IOMMU state"),
			onceCommand(k, "plan", "(--all | --device BDF)... [--to vfio|host] | --vm-gpus SPLIT [--output table|json]", "shows what bind or unbind (or a split) would do; changes nothing"),
			onceCommand(k, "bind", "(--all | --device BDF)... | --vm-gpus SPLIT [--output table|json]", "moves the selected functions to vfio (with --vm-gpus: the split's VM GPUs, the others back to their host driver)"),
			onceCommand(k, "unbind", "(--all | --device BDF)... [--output table|json]", "returns the selected functions to their host drivers"),
			daemonCommand(k),
		},
	}
}

// defaultLockFile is the host-wide lock on a real host, the same file the
// daemon holds (its DaemonSet mounts names.WriterDir(names.VFIOManager), the
// lock's folder), so the two exclude each other.
var defaultLockFile = names.RunPath(names.VFIOLockFile)

// common are the flags every command takes (besides the shell's roots),
// and the kernel the program was given.
type common struct {
	kernel      hostroots.Kernel
	modules     string
	modulesRoot string
	vendor      string
	nvswitches  bool
	output      string
	all         bool
	devices     multi
	noModprobe  bool
	lockFile    string
	kubelet     podresources.SocketFlag
	vmGPUs      string
	pciIDs      string
	classes     multi
}

// registerSplit adds the mixed-node flags (plan, bind, daemon).
func (c *common) registerSplit(fs *flag.FlagSet) {
	fs.StringVar(&c.vmGPUs, "vm-gpus", "", "split the GPUs of --vendor between VMs (vfio) and containers (host driver): all, a count (2, "+
		"NUMA-aware), indices as nvidia-smi numbers the GPUs (index:0,2) or a model (model:2236, or model:A10 with --pci-ids); "+
		"the others return to their host driver when idle, NVSwitches stay where they are")
	fs.StringVar(&c.pciIDs, "pci-ids", "", "pci.ids file whose device names --vm-gpus model:NAME matches (empty: models by device id only)")
}

// split parses --vm-gpus and reads --pci-ids; ok is false without
// --vm-gpus.
func (c *common) split() (v vfio.VMGPUs, names map[uint16]string, ok bool, err error) {
	if c.pciIDs != "" {
		vendor, err := host.ParseID(c.vendor)
		if err != nil {
			return v, nil, false, shell.Usagef("--vendor: %v", err)
		}
		if names, err = vfio.ModelNames(c.pciIDs, vendor); err != nil {
			return v, nil, false, fmt.Errorf("--pci-ids: %w", err)
		}
	}
	if c.vmGPUs == "" {
		return v, names, false, nil
	}
	if v, err = vfio.ParseVMGPUs(c.vmGPUs); err != nil {
		return v, nil, false, fmt.Errorf("--vm-gpus: %w", err)
	}
	return v, names, true, nil
}

// allocations asks the kubelet which functions pods hold; nil when there
// is no kubelet to ask (the default socket absent, or --pod-resources-socket="").
func (c *common) allocations(env *shell.Env) (vfio.Allocations, func(), error) {
	client, err := c.kubelet.Open(time.Second)
	if err != nil {
		return nil, nil, err
	}
	if client == nil {
		if c.kubelet.Path() != "" {
			env.Log.V(1).Info("No kubelet PodResources socket: only processes and interfaces count as users", "socket", c.kubelet.Path())
		}
		return nil, func() {}, nil
	}
	return func(ctx context.Context) (map[string][]podresources.Holder, error) {
			return podresources.Holders(ctx, client)
		},
		func() { _ = client.Close() }, nil
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func (c *common) register(fs *flag.FlagSet, selection bool) {
	fs.StringVar(&c.modulesRoot, "modules-root", host.DefaultModulesRoot, "the node's kernel modules, a folder per release (mounted read-only): "+
		"vfio-pci or a variant is loaded from <modules-root>/<release from proc-root> with finit_module, no modprobe needed")
	fs.StringVar(&c.modules, "modules-dir", "", "the running kernel's modules folder with modules.alias and modules.dep (default <modules-root>/<release from proc-root>)")
	fs.StringVar(&c.vendor, "vendor", "10de", "vendor id (hex) whose functions are managed")
	fs.BoolVar(&c.nvswitches, "nvswitches", false, "include NVSwitches (class 0x0680) in --all")
	fs.Var(&c.classes, "class", "limit --all (and a release) to functions of this PCI class, a hex prefix: 03 display, 0302 3D controllers "+
		"(repeatable; what a --vendor other than NVIDIA needs so that nothing else of it is taken)")
	fs.StringVar(&c.output, "output", "table", "output format: table or json")
	if selection {
		fs.BoolVar(&c.all, "all", false, "select every function of --vendor")
		fs.Var(&c.devices, "device", "select a PCI function by address (repeatable)")
		fs.BoolVar(&c.noModprobe, "no-modprobe", false, "never load vfio-pci or a variant module (none is loaded either under roots other than the running kernel's)")
		fs.StringVar(&c.lockFile, "lock-file", "auto", "host-wide lock held while changing drivers (auto: "+defaultLockFile+" when --sysfs-root is /sys; empty: none)")
		c.kubelet = podresources.NewSocketFlag(names.PodResourcesSocket)
		fs.Var(&c.kubelet, "pod-resources-socket", "the kubelet's PodResources socket: functions allocated to pods count as in use (empty: ask no kubelet)")
	}
}

// onRunningKernel reports whether the root flags are the running kernel's
// own: a tree under another root never is.
func onRunningKernel(env *shell.Env) bool {
	return filepath.Clean(hostroots.Options(env.Roots).SysfsRoot) == host.DefaultSysfsRoot
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

// host builds the host model on the program's kernel. Modules load into
// the kernel it was given, or into the running kernel only when the roots
// are its own, never against another tree; none with --no-modprobe.
func (c *common) host(env *shell.Env, loadModules bool) *host.Host {
	opts := hostroots.On(env.Roots, c.kernel)
	opts.ModulesRoot = c.modulesRoot
	if c.modules != "" {
		opts.ModulesDir = c.modules
	}
	switch {
	case !loadModules:
		opts.ModuleKernel = nil
	case c.kernel == nil && onRunningKernel(env):
		opts.ModuleKernel = host.OSModuleKernel{}
	}
	return host.New(opts)
}

func (c *common) selection() (vfio.Selection, error) {
	vendor, err := host.ParseID(c.vendor)
	if err != nil {
		return vfio.Selection{}, shell.Usagef("--vendor: %v", err)
	}
	classes, err := vfio.ParseClasses(c.classes)
	if err != nil {
		return vfio.Selection{}, shell.Usagef("--class: %v", err)
	}
	sel := vfio.Selection{All: c.all, Vendor: vendor, NVSwitches: c.nvswitches, Classes: classes}
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
