package host

import (
	"path/filepath"
	"strings"
)

// The roots of the running host, the defaults of Options and of every node
// binary's --sysfs-root, --dev-root and --proc-root.
const (
	DefaultSysfsRoot = "/sys"
	DefaultDevRoot   = "/dev"
	DefaultProcRoot  = "/proc"
)

// Options are the injected host paths and ports of a Host.
type Options struct {
	SysfsRoot string // default /sys
	DevRoot   string // default /dev
	ProcRoot  string // default /proc
	// ModulesRoot holds the node's modules, a folder per kernel release
	// (default /lib/modules, DefaultModulesRoot).
	ModulesRoot string
	// ModulesDir holds the running kernel's modules and their indexes
	// (modules.alias, modules.dep); default <ModulesRoot>/<release> with the
	// release read from <proc>/sys/kernel/osrelease.
	ModulesDir string
	Writer     Writer     // default OSWriter
	Links      LinkStater // default netlink in the current network namespace
	// ModuleKernel loads modules (EnsureDriver); nil: modules are never
	// loaded, a missing driver is an error.
	ModuleKernel ModuleKernel
	// Claimer opens VFIO group nodes exclusively (ClaimGroup); default the
	// OS, whose legacy VFIO group node admits one opener at a time.
	Claimer GroupClaimer
}

// Host is the host model over one set of roots.
type Host struct {
	sysfs, dev, proc, modules string
	modulesRoot               string
	writer                    Writer
	links                     LinkStater
	kernel                    ModuleKernel
	claimer                   GroupClaimer
}

// New returns a Host for the given options, applying the defaults.
func New(o Options) *Host {
	h := &Host{
		sysfs: orDefault(o.SysfsRoot, DefaultSysfsRoot), dev: orDefault(o.DevRoot, DefaultDevRoot),
		proc: orDefault(o.ProcRoot, DefaultProcRoot), modules: o.ModulesDir,
		modulesRoot: orDefault(o.ModulesRoot, DefaultModulesRoot),
		writer:      o.Writer, links: o.Links, kernel: o.ModuleKernel, claimer: o.Claimer,
	}
	if h.claimer == nil {
		h.claimer = OSClaimer{}
	}
	if h.writer == nil {
		h.writer = OSWriter{}
	}
	if h.links == nil {
		h.links = NetlinkLinks{}
	}
	return h
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return filepath.Clean(v)
}

// SysfsRoot, DevRoot and ProcRoot return the roots in use, for tests that
// lay out or inspect a host. Product code outside this package never calls
// them (internal/archtest): it asks the host model instead.
func (h *Host) SysfsRoot() string { return h.sysfs }

// DevRoot returns the /dev root in use.
func (h *Host) DevRoot() string { return h.dev }

// ProcRoot returns the /proc root in use.
func (h *Host) ProcRoot() string { return h.proc }

// validName accepts a single path element that is safe to join.
func validName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00\n")
}
