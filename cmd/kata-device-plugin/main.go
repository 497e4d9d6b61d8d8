// Command kata-device-plugin advertises passthrough GPUs (nvidia.com/pgpu)
// and NVSwitches to the kubelet for Kata Containers, with a CDI spec.
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
	"github.com/sandbox-gpu/sandbox-gpu/kata"
)

func main() {
	var o options
	fs := flag.NewFlagSet("kata-device-plugin", flag.ContinueOnError)
	o.common.Register(fs)
	fs.StringVar(&o.cdiDir, "cdi-dir", "/var/run/cdi", "folder for the CDI specs")
	fs.StringVar(&o.resource, "resource-name", kata.DefaultResource, "resource (and CDI kind) of passthrough GPUs")
	fs.StringVar(&o.nvswitchResource, "nvswitch-resource-name", kata.DefaultNVSwitchResource, "resource (and CDI kind) of NVSwitches")
	fs.BoolVar(&o.perModel, "per-model-names", false, "name GPU resources per model (nvidia.com/GA102GL_A10) instead of --resource-name")
	fs.StringVar(&o.namesConfig, "names-config", "", "with --per-model-names: YAML/JSON file mapping \"10de:2236\" to a name")
	if err := plugincmd.Parse(fs, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, plugincmd.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kata-device-plugin:", err)
		os.Exit(1)
	}
}
