// Command sandbox-gpu-operator runs the sandbox GPU operator: per-node
// workload configs, operand DaemonSets and safe transitions.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandbox-gpu/sandbox-gpu/internal/cliflags"
)

func main() {
	var o options
	fs := flag.NewFlagSet("sandbox-gpu-operator", flag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG)")
	fs.StringVar(&o.namespace, "namespace", "sandbox-gpu", "namespace of the operand DaemonSets")
	fs.StringVar(&o.registry, "registry", "ghcr.io/sandbox-gpu", "registry of the default operand images")
	fs.StringVar(&o.version, "operand-version", "v0.1.0", "tag of the default operand images")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "elect a leader among operator replicas")
	fs.Float64Var(&o.qps, "kube-api-qps", 100, "API requests per second (client-side limit)")
	fs.IntVar(&o.burst, "kube-api-burst", 200, "API request burst (client-side limit)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", ":8080", "metrics address (0: off)")
	fs.StringVar(&o.healthAddr, "health-addr", ":8081", "health probe address (0: off)")
	if err := cliflags.Parse(fs, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "sandbox-gpu-operator:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-gpu-operator:", err)
		os.Exit(1)
	}
}
