// Package cli is the sandbox-gpu-operator command line on the shared
// entry-point shell: the operator (per-node workload configs, operand
// DaemonSets and safe transitions) and its uninstall hook.
package cli

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sandbox-gpu/sandbox-gpu/internal/kubeclient"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/operator"
	"github.com/sandbox-gpu/sandbox-gpu/operator/controllers"
	"github.com/sandbox-gpu/sandbox-gpu/operator/uninstall"
)

// Program is sandbox-gpu-operator.
func Program() *shell.Program {
	var kubeconfig string
	var qps float64
	var burst int
	o := operator.Options{MetricsAddr: "0", HealthAddr: "0"} // served by the shell's listener
	return &shell.Program{Name: "sandbox-gpu-operator",
		Summary: "runs the sandbox GPU operator: per-node workload configs, operand DaemonSets and safe transitions",
		Commands: []*shell.Command{{Listen: true, HealthAddr: names.HealthAddr("", names.OperatorPort), Daemon: true,
			Flags: func(fs *flag.FlagSet) {
				fs.StringVar(&kubeconfig, "kubeconfig", "", kubeclient.FlagHelp)
				fs.StringVar(&o.Namespace, "namespace", "sandbox-gpu", "namespace of the operand DaemonSets")
				fs.StringVar(&o.Registry, "registry", "ghcr.io/sandbox-gpu", "registry of the default operand images")
				fs.StringVar(&o.Version, "operand-version", "v0.1.0", "tag of the default operand images")
				fs.Func("image-pull-secret", "Secret in --namespace every operand pod pulls its image with (repeatable, or comma-separated)", func(v string) error {
					for _, name := range strings.Split(v, ",") {
						if name = strings.TrimSpace(name); name != "" {
							o.ImagePullSecrets = append(o.ImagePullSecrets, name)
						}
					}
					return nil
				})
				fs.Func("image-pull-policy", "pull policy of every operand container: Always, IfNotPresent or Never (default: the cluster's)", func(v string) error {
					switch p := corev1.PullPolicy(v); p {
					case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
						o.ImagePullPolicy = p
						return nil
					}
					return fmt.Errorf("want Always, IfNotPresent or Never, got %q", v)
				})
				fs.BoolVar(&o.LeaderElection, "leader-elect", true, "elect a leader among operator replicas")
				fs.Float64Var(&qps, "kube-api-qps", controllers.DefaultQPS, "API requests per second (client-side limit)")
				fs.IntVar(&burst, "kube-api-burst", controllers.DefaultBurst, "API request burst (client-side limit)")
			},
			Run: func(ctx context.Context, env *shell.Env) error {
				ctrl.SetLogger(env.Log)
				cfg, err := kubeclient.Config(kubeconfig)
				if err != nil {
					return err
				}
				cfg.QPS, cfg.Burst = float32(qps), burst
				mgr, err := operator.NewManager(cfg, o)
				if err != nil {
					return err
				}
				env.ServeMetricsFrom(ctrlmetrics.Registry)
				var synced atomic.Bool
				env.AddReady("caches", func() (bool, any) { return synced.Load(), map[string]bool{"synced": synced.Load()} })
				go func() { synced.Store(mgr.GetCache().WaitForCacheSync(ctx)) }()
				env.Log.Info("Starting sandbox-gpu-operator", "namespace", o.Namespace, "leaderElect", o.LeaderElection,
					"registry", o.Registry, "operandVersion", o.Version, "imagePullSecrets", o.ImagePullSecrets, "imagePullPolicy", o.ImagePullPolicy)
				return mgr.Start(ctx)
			}}, uninstallCommand()}}
}

// uninstallCommand is the Helm chart's pre-delete hook: it deletes the
// policy while the operator still runs and waits until the operator has
// returned every GPU the product moved (package uninstall).
func uninstallCommand() *shell.Command {
	var kubeconfig string
	var o uninstall.Options
	return &shell.Command{Name: "uninstall", Synopsis: "[--timeout 4m] [--kubeconfig FILE]",
		Summary: "deletes the SandboxGPUPolicy and waits until the operator returned every GPU it moved (never one in use); at the timeout it reports what stays and lets the uninstall go on",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&kubeconfig, "kubeconfig", "", kubeclient.FlagHelp)
			fs.DurationVar(&o.Timeout, "timeout", 4*time.Minute, "how long to wait for the operator (keep it under helm uninstall's --timeout, 5m by default)")
			fs.DurationVar(&o.Poll, "poll", 2*time.Second, "how often the node states are read")
		},
		Run: func(ctx context.Context, env *shell.Env) error {
			ctrl.SetLogger(env.Log)
			cfg, err := kubeclient.Config(kubeconfig)
			if err != nil {
				return err
			}
			scheme, err := operator.Scheme()
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: scheme})
			if err != nil {
				return fmt.Errorf("client: %w", err)
			}
			_, err = uninstall.Run(ctx, c, o, env.Stdout)
			return err
		}}
}
