// Command sandbox-gpu-demo tells the product's story without a cluster or a
// GPU: `make demo` runs it. It is an application of its own, never shipped
// in an image: it links the simulated kernel (host/hostsim), which no node
// binary does. `sandbox-gpu-demo simulate` runs a node binary's commands
// on a bundled simulated host (`make demo-status`).
package main

import (
	"context"
	"flag"
	"os"
	"strings"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
)

func main() { os.Exit(shell.Main(program())) }

func program() *shell.Program {
	o := Options{}
	var crds string
	story := &shell.Command{
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&o.Assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "folder with kube-apiserver and etcd (hack/envtest-assets.sh; default $KUBEBUILDER_ASSETS)")
			fs.StringVar(&crds, "crds", "manifests/crds,operator/controllers/testdata/crds", "comma-separated CRD folders (the product's and KubeVirt's)")
			fs.StringVar(&o.PolicyFile, "policy", "manifests/samples/policy.yaml", "the SandboxGPUPolicy to apply")
			fs.StringVar(&o.WorkDir, "work-dir", "", "folder for the simulated hosts and demo.log (default: a new temporary folder)")
			fs.DurationVar(&o.StepTimeout, "step-timeout", time.Minute, "how long each step may take")
		},
		Run: func(ctx context.Context, env *shell.Env) error {
			if o.Assets == "" {
				return shell.Usagef("no envtest assets: pass --assets $(hack/envtest-assets.sh | tail -1)")
			}
			if o.WorkDir == "" {
				dir, err := os.MkdirTemp("", "sandbox-gpu-demo-")
				if err != nil {
					return err
				}
				o.WorkDir = dir
			}
			o.CRDDirs, o.Out = strings.Split(crds, ","), env.Stdout
			return Run(ctx, o)
		}}
	return &shell.Program{Name: "sandbox-gpu-demo",
		Summary:  "tells sandbox-gpu's story end to end on an embedded default: envtest's kube-apiserver, the operator and the real operands on simulated GPU hosts",
		Commands: []*shell.Command{story, simulateCommand()},
		Notes:    "Fixtures for simulate: " + strings.Join(fixtureNames(), ", ") + ".\nBinaries for simulate: " + strings.Join(simulatedBinaries(), ", ") + "."}
}
