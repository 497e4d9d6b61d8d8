// Package plugincmd is the command-line plumbing the two sandbox device
// plugins share: flags, host roots, the VFIO manager readiness gate, the
// watched folders, health endpoints and the run loop. Mains stay tiny.
package plugincmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/cliflags"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// Common are the flags of every device plugin.
type Common struct {
	DevicePluginDir string
	Sysfs, Dev      string
	Proc, Modules   string
	PCIIDs          string
	WaitReady       bool
	ReadyFile       string
	Rescan          time.Duration
	Simulate        string
	HealthAddr      string
	Verbose         bool
}

// Register adds the common flags.
func (c *Common) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.DevicePluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "kubelet device-plugin folder (holds kubelet.sock)")
	fs.StringVar(&c.Sysfs, "sysfs-root", "/sys", "sysfs root")
	fs.StringVar(&c.Dev, "dev-root", "/dev", "/dev root")
	fs.StringVar(&c.Proc, "proc-root", "/proc", "/proc root")
	fs.StringVar(&c.Modules, "modules-dir", "", "folder with modules.alias (default: the host's, through the proc root)")
	fs.StringVar(&c.PCIIDs, "pci-ids", "", "pci.ids file (default: the usual system locations)")
	fs.BoolVar(&c.WaitReady, "wait-vfio-ready", true, "advertise only after the VFIO manager reports the node ready")
	fs.StringVar(&c.ReadyFile, "vfio-ready-file", "/run/sandbox-gpu/"+names.VFIOReadyFile, "the VFIO manager's readiness file")
	fs.DurationVar(&c.Rescan, "rescan", 30*time.Second, "period of the safety-net rescan")
	fs.StringVar(&c.Simulate, "simulate", "", "serve a bundled simulated host with every NVIDIA function on vfio-pci (demo)")
	fs.StringVar(&c.HealthAddr, "health-addr", "", "address of /healthz (empty: none)")
	fs.BoolVar(&c.Verbose, "v", false, "verbose logging")
}

// ErrHelp means usage was printed on request.
var ErrHelp = errors.New("help shown")

// Parse parses flags; -h prints usage to stdout and returns ErrHelp.
func Parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if err := cliflags.Parse(fs, args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ErrHelp
		}
		return fmt.Errorf("%s: %w", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// Logger is the structured logger of a plugin.
func (c *Common) Logger(stderr io.Writer) logr.Logger {
	level := slog.LevelInfo
	if c.Verbose {
		level = slog.LevelDebug
	}
	return logr.FromSlogHandler(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
}

// Host builds the host model; with --simulate, a simulated host in a
// temporary folder (removed by cleanup) whose NVIDIA functions are bound
// to vfio-pci.
func (c *Common) Host(ctx context.Context) (*host.Host, func(), error) {
	if c.Simulate == "" {
		return host.New(host.Options{SysfsRoot: c.Sysfs, DevRoot: c.Dev, ProcRoot: c.Proc, ModulesDir: c.Modules}), func() {}, nil
	}
	fx, err := hostsim.Lookup(c.Simulate)
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "plugin-sim-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	k, err := fx.Build(dir)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	h := host.New(k.Options())
	p, err := vfio.NewPlanner(h)
	if err == nil {
		var plan *vfio.Plan
		if plan, err = p.Plan(vfio.Selection{All: true, Vendor: host.VendorNVIDIA, NVSwitches: true}, vfio.ToVFIO); err == nil {
			vfio.Apply(ctx, h, plan, vfio.ApplyOptions{})
		}
	}
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	c.WaitReady = false
	return h, cleanup, nil
}

// Ready is the readiness gate: the VFIO manager's readiness file says
// ready (or waiting is off).
func (c *Common) Ready() func() bool {
	if !c.WaitReady {
		return nil
	}
	return func() bool { return vfio.IsReady(c.ReadyFile) }
}

// WatchPaths are the folders whose changes mean devices may have changed:
// /dev/vfio (and its devices/), the vfio driver folders, the mdev bus and
// the readiness file's folder.
func (c *Common) WatchPaths(h *host.Host) []string {
	paths := []string{
		filepath.Join(h.DevRoot(), "vfio"),
		filepath.Join(h.DevRoot(), "vfio", "devices"),
		filepath.Join(h.SysfsRoot(), "bus", "mdev", "devices"),
	}
	drivers, _ := filepath.Glob(filepath.Join(h.SysfsRoot(), "bus", "pci", "drivers", "*vfio*"))
	paths = append(paths, drivers...)
	if c.WaitReady {
		paths = append(paths, filepath.Dir(c.ReadyFile))
	}
	return paths
}

// Plugin is what a device plugin main provides.
type Plugin struct {
	Name    string // socket prefix, e.g. sandbox-gpu-kubevirt
	Scanner deviceplugin.Scanner
	OnScan  func([]deviceplugin.Resource) error
	// Health returns a JSON-able report and whether the node is healthy.
	Health func() (any, bool)
}

// Serve runs the plugin until ctx ends.
func (c *Common) Serve(ctx context.Context, h *host.Host, p Plugin, log logr.Logger) error {
	m, err := deviceplugin.NewManager(deviceplugin.Options{
		Dir: c.DevicePluginDir, SocketPrefix: p.Name, Scanner: p.Scanner, WatchPaths: c.WatchPaths(h),
		Rescan: c.Rescan, Ready: c.Ready(), OnScan: p.OnScan, Log: log,
	})
	if err != nil {
		return err
	}
	if c.HealthAddr != "" {
		ln, err := net.Listen("tcp", c.HealthAddr)
		if err != nil {
			return fmt.Errorf("health endpoint %s: %w", c.HealthAddr, err)
		}
		srv := &http.Server{Handler: healthHandler(m, p), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	log.Info("Starting device plugin", "plugin", p.Name, "dir", c.DevicePluginDir, "sysfs", h.SysfsRoot(), "waitVFIOReady", c.WaitReady)
	return m.Run(ctx)
}

func healthHandler(m *deviceplugin.Manager, p Plugin) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		body := map[string]any{"resources": m.Resources(), "scans": m.Scans()}
		ok := true
		if p.Health != nil {
			var report any
			report, ok = p.Health()
			body["preflight"] = report
		}
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	return mux
}
