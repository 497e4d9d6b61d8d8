// Package cli is the kubevirt-device-plugin command line on the shared
// entry-point shell: flags to options, then package kubevirt's scanner
// served by internal/plugincmd.
package cli

import (
	"context"
	"flag"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/jsonout"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/plugincmd"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	"github.com/sandbox-gpu/sandbox-gpu/kubevirt"
)

// Program is kubevirt-device-plugin.
func Program() *shell.Program {
	var c plugincmd.Common
	var namesConfig, permittedFile string
	var state kubevirt.VGPUState
	var printPermitted bool
	flags := func(fs *flag.FlagSet) {
		fs.StringVar(&namesConfig, "names-config", "", "YAML/JSON file mapping \"10de:2236\" to a resource name, over the built-in table")
		fs.StringVar(&permittedFile, "permitted-host-devices-file", names.RunPath(names.PermittedFile), "where to keep the KubeVirt permittedHostDevices for what is advertised (empty: none)")
		fs.BoolVar(&printPermitted, "print-permitted-host-devices", false, "scan once, print the permittedHostDevices JSON and exit")
		fs.StringVar(&state.PauseFile, "vgpu-pause-file", names.RunPath(names.VGPUPauseFile), "while this file exists (the vGPU device manager is changing vGPUs) no vGPU is advertised (empty: never pause)")
		fs.StringVar(&state.ReadyFile, "vgpu-ready-file", names.RunPath(names.VGPUReadyFile), "the vGPU device manager's report, which names the vGPU types of full cards (empty: none)")
	}
	run := func(ctx context.Context, env *shell.Env, h *host.Host) error {
		namer, err := kubevirt.NewNamer(c.PCIIDs, namesConfig)
		if err != nil {
			return err
		}
		s := &kubevirt.Scanner{Host: h, Namer: namer, VGPU: state, NodeDev: c.NodeDev, Log: env.Log}
		if printPermitted {
			if _, err := s.Scan(ctx); err != nil {
				return err
			}
			return jsonout.Write(env.Stdout, s.Permitted())
		}
		return c.Serve(ctx, env, h, plugincmd.Plugin{
			Name: "sandbox-gpu-kubevirt", Scanner: s, Watch: state.Folders(),
			OnScan: func(res []deviceplugin.Resource) error {
				if permittedFile == "" {
					return nil
				}
				return wire.WritePermitted(permittedFile, s.PermittedFor(res))
			},
		})
	}
	return &shell.Program{Name: "kubevirt-device-plugin",
		Summary:  "advertises passthrough GPUs (nvidia.com/<MODEL>) and vGPUs to the kubelet for KubeVirt virtual machines",
		Commands: []*shell.Command{plugincmd.Command(&c, flags, run)}}
}
