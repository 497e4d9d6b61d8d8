// Package hostroots turns the shell's host-root flags (--sysfs-root,
// --dev-root, --proc-root, parsed by internal/shell into Env.Roots) into
// the host model's options: the one place a program builds host.Options
// from them. internal/shell imports no host, so a program without host
// roots (the operator) links no host model.
package hostroots

import (
	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
)

// Options are the host model's options for the roots r (an empty root is
// the host model's default: /sys, /dev, /proc), on this machine's kernel:
// its sysfs writes, network links and VFIO group claims; modules are
// loaded only where a program sets ModuleKernel.
func Options(r shell.Roots) host.Options {
	return host.Options{
		SysfsRoot: orDefault(r.Sysfs, host.DefaultSysfsRoot),
		DevRoot:   orDefault(r.Dev, host.DefaultDevRoot),
		ProcRoot:  orDefault(r.Proc, host.DefaultProcRoot),
	}
}

// Kernel is what the host model changes and asks the kernel through: sysfs
// writes, network links, module loads and VFIO group claims. A program
// given one (the simulated kernel of the demo and the tests, whose tree
// the root flags name) uses it instead of this machine's kernel.
type Kernel interface {
	host.Writer
	host.LinkStater
	host.ModuleKernel
	host.GroupClaimer
}

// On are the options for the roots r on kernel k; a nil k is this
// machine's kernel (Options).
func On(r shell.Roots, k Kernel) host.Options {
	o := Options(r)
	if k != nil {
		o.Writer, o.Links, o.ModuleKernel, o.Claimer = k, k, k, k
	}
	return o
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
