// Package cli is the kata-device-plugin command line on the shared
// entry-point shell: flags to options, then package kata's scanner and CDI
// writer served by internal/plugincmd.
package cli

import (
	"context"
	"flag"
	"strings"

	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/gpuname"
	"github.com/sandbox-gpu/sandbox-gpu/internal/plugincmd"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	"github.com/sandbox-gpu/sandbox-gpu/kata"
)

// Program is kata-device-plugin.
func Program() *shell.Program {
	var c plugincmd.Common
	var cdiDir, resource, nvswitchResource, namesConfig string
	var perModel bool
	flags := func(fs *flag.FlagSet) {
		fs.StringVar(&cdiDir, "cdi-dir", "/var/run/cdi", "folder for the CDI specs")
		fs.StringVar(&resource, "resource-name", kata.DefaultResource, "resource (and CDI kind) of passthrough GPUs")
		fs.StringVar(&nvswitchResource, "nvswitch-resource-name", kata.DefaultNVSwitchResource, "resource (and CDI kind) of NVSwitches")
		fs.BoolVar(&perModel, "per-model-names", false, "name GPU resources per model (nvidia.com/GA102GL_A10) instead of --resource-name")
		fs.StringVar(&namesConfig, "names-config", "", "with --per-model-names: YAML/JSON file mapping \"10de:2236\" to a name")
	}
	run := func(ctx context.Context, env *shell.Env, h *host.Host) error {
		s := &kata.Scanner{Host: h, Resource: resource, NVSwitchResource: nvswitchResource, NodeDev: c.NodeDev,
			ContainerGPUs: func() map[host.Address]bool { return splitContainers(c.ReadyFile) }}
		if perModel {
			var err error
			if s.Namer, err = gpuname.NewNamer(c.PCIIDs, namesConfig); err != nil {
				return err
			}
		}
		cdi := &kata.CDIWriter{Dir: cdiDir, Kinds: map[string]bool{s.Resource: true, s.NVSwitchResource: true}}
		if perModel {
			cdi.Kinds = nil // per-model kinds follow the GPUs found: only nvidia.com/ model names
		}
		defer func() {
			if err := cdi.RemoveAll(); err != nil {
				env.Log.Error(err, "Removing the CDI specs on stop", "dir", cdiDir)
			}
		}()
		var reported string
		return c.Serve(ctx, env, h, plugincmd.Plugin{
			Name: "sandbox-gpu-kata", Scanner: s,
			OnScan: func(res []deviceplugin.Resource) error {
				reported = reportPreflight(env.Log, s.LastPreflight(), reported)
				return cdi.Write(res)
			},
			Health: func() (any, bool) {
				pf := s.LastPreflight()
				return pf, pf.IOMMU
			},
		})
	}
	return &shell.Program{Name: "kata-device-plugin",
		Summary:  "advertises passthrough GPUs (nvidia.com/pgpu) and NVSwitches to the kubelet for Kata Containers, with a CDI spec",
		Commands: []*shell.Command{plugincmd.Command(&c, flags, run)}}
}

// reportPreflight logs preflight problems when they change.
func reportPreflight(log logr.Logger, pf kata.Preflight, last string) string {
	problems := strings.Join(pf.Problems(), "; ")
	if problems != last && problems != "" {
		log.Info("Preflight found problems", "problems", pf.Problems())
	}
	return problems
}

// splitContainers are the container GPUs of the VFIO manager's split, as
// its ready file says (none without a file or a split).
func splitContainers(readyFile string) map[host.Address]bool {
	rep, err := wire.ReadVFIOReady(readyFile)
	if err != nil || rep == nil || rep.Split == nil {
		return nil
	}
	out := map[host.Address]bool{}
	for _, a := range rep.Split.Container {
		out[host.Address(a)] = true
	}
	return out
}
