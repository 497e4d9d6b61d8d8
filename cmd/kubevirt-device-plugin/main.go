// Command kubevirt-device-plugin advertises passthrough GPUs and vGPUs to
// the kubelet for KubeVirt virtual machines.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandbox-gpu/sandbox-gpu/internal/plugincmd"
)

func main() {
	var o options
	fs := flag.NewFlagSet("kubevirt-device-plugin", flag.ContinueOnError)
	o.common.Register(fs)
	fs.StringVar(&o.namesConfig, "names-config", "", "YAML/JSON file mapping \"10de:2236\" to a resource name, over the built-in table")
	fs.StringVar(&o.permittedFile, "permitted-host-devices-file", "/run/sandbox-gpu/kubevirt-permitted-host-devices.json", "where to keep the KubeVirt permittedHostDevices for what is advertised (empty: none)")
	fs.BoolVar(&o.printPermitted, "print-permitted-host-devices", false, "scan once, print the permittedHostDevices JSON and exit")
	if err := plugincmd.Parse(fs, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, plugincmd.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubevirt-device-plugin:", err)
		os.Exit(1)
	}
}
