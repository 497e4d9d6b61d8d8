// Package cli is the sandbox-gpu-validator command line on the shared
// entry-point shell: the node validator (package validator) and its
// discover command, the GPU discovery agent (package discovery).
package cli

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/discovery"
	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/hostroots"
	"github.com/sandbox-gpu/sandbox-gpu/internal/kubeclient"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/ownnode"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/validator"
)

// Program is sandbox-gpu-validator.
func Program() *shell.Program {
	return &shell.Program{Name: "sandbox-gpu-validator",
		Summary:  "checks a sandbox GPU node's operands and publishes the KubeVirt device plugin's permittedHostDevices on its own Node; discover labels its own Node with its NVIDIA GPUs from sysfs",
		Commands: []*shell.Command{validate(), discover()}}
}

func validate() *shell.Command {
	var kubeconfig string
	o := validator.Options{NodeName: os.Getenv("NODE_NAME")}
	return &shell.Command{Roots: true, Listen: true, HealthAddr: names.HealthAddr("", names.ValidatorPort), Daemon: true,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&kubeconfig, "kubeconfig", "", kubeclient.FlagHelp)
			fs.StringVar(&o.NodeName, "node-name", o.NodeName, "this node (default $NODE_NAME)")
			fs.StringVar(&o.VFIOReadyFile, "vfio-ready-file", names.RunPath(names.VFIOReadyFile), "the VFIO manager's readiness file")
			fs.StringVar(&o.PermittedFile, "permitted-host-devices-file", names.RunPath(names.PermittedFile), "the KubeVirt device plugin's permittedHostDevices file")
			fs.StringVar(&o.VGPUReadyFile, "vgpu-ready-file", names.RunPath(names.VGPUReadyFile), "the vGPU device manager's report (checked where the Node's deploy labels run it)")
			fs.DurationVar(&o.Resync, "resync", time.Minute, "re-check this often without an event")
		},
		Run: func(ctx context.Context, env *shell.Env) error {
			var err error
			if o.Client, err = ownnode.Clientset(kubeconfig); err != nil {
				return err
			}
			o.Log, o.Registerer = env.Log, env.Metrics
			v, err := validator.New(o)
			if err != nil {
				return err
			}
			env.AddReady("validator", func() (bool, any) { r := v.Report(); return r.Ready, r })
			env.Log.Info("Validating", "node", o.NodeName)
			return v.Run(ctx)
		}}
}

func discover() *shell.Command {
	var kubeconfig string
	o := discovery.Options{NodeName: os.Getenv("NODE_NAME")}
	return &shell.Command{Name: "discover", Roots: true, Listen: true, HealthAddr: names.HealthAddr("", names.GPUDiscoveryPort), Daemon: true,
		Summary: "labels its own Node " + names.GPUPresentLabel + "=true, " + names.GPUCountLabel + "=N and " +
			names.GPUDriverLabel + "=datacenter|vgpu-host|none from sysfs while it has NVIDIA GPUs (and removes them when they are gone)",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&kubeconfig, "kubeconfig", "", kubeclient.FlagHelp)
			fs.StringVar(&o.NodeName, "node-name", o.NodeName, "this node (default $NODE_NAME)")
			fs.DurationVar(&o.Resync, "resync", time.Minute, "scan again this often without an event")
			fs.DurationVar(&o.DriverPoll, "driver-poll", 5*time.Second, "check which NVIDIA driver runs this often, scanning at once when it changed")
		},
		Run: func(ctx context.Context, env *shell.Env) error {
			var err error
			if o.Client, err = ownnode.Clientset(kubeconfig); err != nil {
				return err
			}
			o.Host = host.New(hostroots.Options(env.Roots))
			o.Log, o.Registerer = env.Log, env.Metrics
			a, err := discovery.New(o)
			if err != nil {
				return err
			}
			env.AddReady("discovery", func() (bool, any) { r := a.Report(); return r.Ready, r })
			env.Log.Info("Discovering GPUs", "node", o.NodeName)
			return a.Run(ctx)
		}}
}
