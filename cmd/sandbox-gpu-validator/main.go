// Command sandbox-gpu-validator checks a sandbox GPU node's operands (VFIO
// manager ready, device plugin resources advertised) and publishes the
// KubeVirt device plugin's permittedHostDevices on its own Node.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/validator"
)

func main() { os.Exit(shell.Main(program())) }

func program() *shell.Program {
	var kubeconfig string
	o := validator.Options{NodeName: os.Getenv("NODE_NAME")}
	return &shell.Program{Name: "sandbox-gpu-validator",
		Summary: "checks a sandbox GPU node's operands and publishes the KubeVirt device plugin's permittedHostDevices on its own Node",
		Commands: []*shell.Command{{Roots: true, Listen: true, HealthAddr: ":8082", Daemon: true,
			Flags: func(fs *flag.FlagSet) {
				fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG)")
				fs.StringVar(&o.NodeName, "node-name", o.NodeName, "this node (default $NODE_NAME)")
				fs.StringVar(&o.VFIOReadyFile, "vfio-ready-file", names.RunPath(names.VFIOReadyFile), "the VFIO manager's readiness file")
				fs.StringVar(&o.PermittedFile, "permitted-host-devices-file", names.RunPath(names.PermittedFile), "the KubeVirt device plugin's permittedHostDevices file")
				fs.DurationVar(&o.Resync, "resync", time.Minute, "re-check this often without an event")
			},
			Run: func(ctx context.Context, env *shell.Env) error {
				rules := clientcmd.NewDefaultClientConfigLoadingRules()
				rules.ExplicitPath = kubeconfig
				cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
				if err != nil {
					return fmt.Errorf("kubeconfig: %w", err)
				}
				if o.Client, err = kubernetes.NewForConfig(cfg); err != nil {
					return fmt.Errorf("client: %w", err)
				}
				o.Log, o.Registerer = env.Log, env.Metrics
				v, err := validator.New(o)
				if err != nil {
					return err
				}
				env.AddReady("validator", func() (bool, any) { r := v.Report(); return r.Ready, r })
				env.Log.Info("Validating", "node", o.NodeName)
				return v.Run(ctx)
			}}}}
}
