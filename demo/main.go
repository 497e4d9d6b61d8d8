// Command sandbox-gpu-demo tells the product's story without a cluster or a
// GPU (see package internal/demo): `make demo` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/cliflags"
	"github.com/sandbox-gpu/sandbox-gpu/internal/demo"
)

func main() {
	o := demo.Options{Out: os.Stdout}
	var crds string
	fs := flag.NewFlagSet("sandbox-gpu-demo", flag.ContinueOnError)
	fs.StringVar(&o.Assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "folder with kube-apiserver and etcd (hack/envtest-assets.sh; default $KUBEBUILDER_ASSETS)")
	fs.StringVar(&crds, "crds", "manifests/crds,operator/controllers/testdata/crds", "comma-separated CRD folders (the product's and KubeVirt's)")
	fs.StringVar(&o.PolicyFile, "policy", "manifests/samples/policy.yaml", "the SandboxGPUPolicy to apply")
	fs.StringVar(&o.WorkDir, "work-dir", "", "folder for the simulated hosts and demo.log (default: a new temporary folder)")
	fs.DurationVar(&o.StepTimeout, "step-timeout", time.Minute, "how long each step may take")
	if err := cliflags.Parse(fs, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "sandbox-gpu-demo:", err)
		os.Exit(1)
	}
	o.CRDDirs = strings.Split(crds, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-gpu-demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o demo.Options) error {
	if o.Assets == "" {
		return errors.New("no envtest assets: pass --assets $(hack/envtest-assets.sh | tail -1)")
	}
	if o.WorkDir == "" {
		dir, err := os.MkdirTemp("", "sandbox-gpu-demo-")
		if err != nil {
			return err
		}
		o.WorkDir = dir
	}
	return demo.Run(ctx, o)
}
