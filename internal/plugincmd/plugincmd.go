// Package plugincmd is the command-line plumbing the two sandbox device
// plugins share on top of the entry-point shell: their flags, the VFIO
// manager readiness gate, health and metrics, and the run loop. The
// kubevirt/cli and kata/cli packages describe their programs with it.
package plugincmd

import (
	"context"
	"flag"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/hostroots"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// Common are the flags of every device plugin (the shell adds the host
// roots, -v and --health-addr).
type Common struct {
	DevicePluginDir string
	Modules         string
	PCIIDs          string
	WaitReady       bool
	ReadyFile       string
	Rescan          time.Duration
	NodeDev         string
}

// Register adds the common flags.
func (c *Common) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.DevicePluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "kubelet device-plugin folder (holds kubelet.sock)")
	fs.StringVar(&c.Modules, "modules-dir", "", "folder with modules.alias (default: the host's, through the proc root)")
	fs.StringVar(&c.PCIIDs, "pci-ids", "", "pci.ids file (default: the usual system locations)")
	fs.BoolVar(&c.WaitReady, "wait-vfio-ready", true, "advertise passthrough devices only after the VFIO manager reports the node ready")
	fs.StringVar(&c.ReadyFile, "vfio-ready-file", names.RunPath(names.VFIOReadyFile), "the VFIO manager's readiness file")
	fs.DurationVar(&c.Rescan, "rescan", 30*time.Second, "period of the safety-net rescan")
	fs.StringVar(&c.NodeDev, "node-dev-root", deviceplugin.DefaultNodeDev, "the node's /dev as the container runtime sees it: the device host paths handed to the kubelet are under it (--dev-root is where this process reads it)")
}

// Command is a device plugin's one command: the shell parses the common
// flags and the plugin's own (flags), then run builds the plugin over the
// host model and calls Serve.
func Command(c *Common, flags func(*flag.FlagSet), run func(ctx context.Context, env *shell.Env, h *host.Host) error) *shell.Command {
	return &shell.Command{Roots: true, Listen: true, Daemon: true,
		Flags: func(fs *flag.FlagSet) {
			c.Register(fs)
			if flags != nil {
				flags(fs)
			}
		},
		Run: func(ctx context.Context, env *shell.Env) error {
			opts := hostroots.Options(env.Roots)
			if c.Modules != "" {
				opts.ModulesDir = c.Modules
			}
			return run(ctx, env, host.New(opts))
		}}
}

// Ready is the readiness gate: the VFIO manager's readiness file says
// ready (or waiting is off).
func (c *Common) Ready() func() bool {
	if !c.WaitReady {
		return nil
	}
	return func() bool { return wire.VFIOIsReady(c.ReadyFile) }
}

// WatchPaths are the folders whose changes mean devices may have changed:
// the host model's device folders and the readiness file's folder.
func (c *Common) WatchPaths(h hostView) []string {
	paths := h.DeviceWatchPaths()
	if c.WaitReady {
		paths = append(paths, filepath.Dir(c.ReadyFile))
	}
	return paths
}

// Plugin is what a device plugin provides.
type Plugin struct {
	Name    string // socket prefix, e.g. sandbox-gpu-kubevirt
	Scanner deviceplugin.Scanner
	OnScan  func([]deviceplugin.Resource) error
	// Health returns a JSON-able report and whether the node is healthy.
	Health func() (any, bool)
	// Watch are more folders whose changes mean the scan may differ (the
	// vGPU device manager's run folder).
	Watch []string
}

// Serve runs the plugin until ctx ends, with its readiness and metrics on
// the shell's listener.
func (c *Common) Serve(ctx context.Context, env *shell.Env, h hostView, p Plugin) error {
	m, err := deviceplugin.NewManager(deviceplugin.Options{
		Dir: c.DevicePluginDir, SocketPrefix: p.Name, Scanner: p.Scanner, WatchPaths: append(c.WatchPaths(h), p.Watch...),
		Rescan: c.Rescan, Ready: c.Ready(), OnScan: p.OnScan, Log: env.Log, Registerer: env.Metrics,
	})
	if err != nil {
		return err
	}
	env.AddReady("device-plugin", func() (bool, any) {
		// The manager's state now (never latched): every server serving
		// and registered with the kubelet now there.
		health := m.Health()
		report := map[string]any{"resources": m.Resources(), "scans": health.Scans, "servers": health.Servers}
		if health.ScanError != "" {
			report["scanError"] = health.ScanError
		}
		ok := health.Ready
		if p.Health != nil {
			var pre bool
			report["preflight"], pre = p.Health()
			ok = ok && pre
		}
		return ok, report
	})
	logStart(env.Log, p.Name, c, hostroots.Options(env.Roots))
	return m.Run(ctx)
}

// logStart logs the plugin's settings, with the host roots the shell gave
// the host model.
func logStart(log logr.Logger, name string, c *Common, roots host.Options) {
	log.Info("Starting device plugin", "plugin", name, "dir", c.DevicePluginDir,
		"sysfs", roots.SysfsRoot, "dev", roots.DevRoot, "proc", roots.ProcRoot, "waitVFIOReady", c.WaitReady)
}
