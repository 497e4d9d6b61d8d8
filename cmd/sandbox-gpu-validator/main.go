// Command sandbox-gpu-validator checks a sandbox GPU node's operands (VFIO
// manager ready, device plugin resources advertised) and publishes the
// KubeVirt device plugin's permittedHostDevices on its own Node.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/cliflags"
)

func main() {
	o := options{nodeName: os.Getenv("NODE_NAME")}
	fs := flag.NewFlagSet("sandbox-gpu-validator", flag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG)")
	fs.StringVar(&o.nodeName, "node-name", o.nodeName, "this node (default $NODE_NAME)")
	fs.StringVar(&o.vfioReady, "vfio-ready-file", "/run/sandbox-gpu/vfio-manager.ready", "the VFIO manager's readiness file")
	fs.StringVar(&o.permitted, "permitted-host-devices-file", "/run/sandbox-gpu/kubevirt-permitted-host-devices.json", "the KubeVirt device plugin's permittedHostDevices file")
	fs.StringVar(&o.healthAddr, "health-addr", ":8082", "address of /healthz and /readyz (empty: off)")
	fs.DurationVar(&o.resync, "resync", time.Minute, "re-check this often without an event")
	fs.IntVar(&o.verbosity, "v", 0, "log verbosity")
	// Host roots every node binary takes (contracts.md); the validator reads
	// host paths only through the file flags above.
	fs.String("sysfs-root", "/sys", "sysfs root (unused)")
	fs.String("dev-root", "/dev", "dev root (unused)")
	fs.String("proc-root", "/proc", "proc root (unused)")
	if err := cliflags.Parse(fs, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "sandbox-gpu-validator:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-gpu-validator:", err)
		os.Exit(1)
	}
}
