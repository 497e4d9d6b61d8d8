package cli

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// daemonCommand runs the VFIO manager as a node daemon: it holds the
// desired state (flags or --config), publishes readiness, and changes
// nothing on shutdown.
func daemonCommand() *shell.Command {
	var c common
	var config, readyDir string
	var resync, heartbeat time.Duration
	return &shell.Command{Name: "daemon", Synopsis: "[--all | --device BDF]... [--config FILE] [--ready-dir DIR] [--health-addr ADDR]",
		Summary: "holds a desired state on a node and reconciles towards it", Roots: true, Listen: true, HealthAddr: ":8081", Daemon: true,
		Flags: func(fs *flag.FlagSet) {
			c.register(fs, true)
			fs.StringVar(&config, "config", "", "desired-state file (YAML or JSON: vendor, all, nvswitches, devices, host); watched for changes")
			fs.StringVar(&readyDir, "ready-dir", names.RunDir, "folder for the readiness file "+names.VFIOReadyFile+" (empty: none)")
			fs.DurationVar(&resync, "resync", 5*time.Minute, "period of the safety-net reconcile")
			fs.DurationVar(&heartbeat, "heartbeat", 10*time.Second, "how often the readiness file is renewed; readers take one three heartbeats old as a dead daemon's")
		},
		Run: func(ctx context.Context, env *shell.Env) error {
			vendor, err := host.ParseID(c.vendor)
			if err == nil && (vendor == 0 || vendor == 0xffff) {
				err = fmt.Errorf("%q is not a PCI vendor id", c.vendor)
			}
			if err != nil {
				return shell.Usagef("--vendor: %v", err)
			}
			desired := vfio.Desired{Vendor: vfio.VendorID(vendor), All: c.all, NVSwitches: c.nvswitches, Devices: c.devices}
			if config == "" && !c.all && len(c.devices) == 0 {
				desired.All = true // a node daemon with no selection manages every function of the vendor
			}
			alloc, done, err := c.allocations(env)
			if err != nil {
				return err
			}
			defer done()
			d, err := vfio.NewDaemon(vfio.DaemonOptions{Allocations: alloc, Host: c.host(env, !c.noModprobe), Desired: desired, ConfigFile: config,
				ReadyDir: readyDir, Resync: resync, Heartbeat: heartbeat, Log: env.Log, LockFile: c.lockPath(onRunningKernel(env)), Registerer: env.Metrics})
			if err != nil {
				return err
			}
			env.AddReady("vfio-manager", d.Readiness)
			return d.Run(ctx)
		}}
}
