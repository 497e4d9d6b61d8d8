package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/hostroots"
	"github.com/sandbox-gpu/sandbox-gpu/internal/kubeclient"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/ownnode/ownmeta"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// daemonCommand runs the VFIO manager as a node daemon: it holds the
// desired state (flags or --config), publishes readiness, and changes
// nothing on shutdown. With --release it returns every function of the
// vendor to its host driver instead (a node leaving vm-passthrough).
func daemonCommand(k hostroots.Kernel) *shell.Command {
	c := common{kernel: k}
	var config, readyDir, nodeName, kubeconfig string
	var resync, retry, heartbeat time.Duration
	var release, fromNode bool
	return &shell.Command{Name: "daemon", Synopsis: "[--all | --device BDF]... [--config FILE] [--release] [--vm-gpus SPLIT | --vm-gpus-from-node] [--ready-dir DIR] [--health-addr ADDR]",
		Summary: "holds a desired state on a node and reconciles towards it", Roots: true, Listen: true, HealthAddr: names.HealthAddr(names.LoopbackHost, names.VFIOManagerPort), Daemon: true,
		Flags: func(fs *flag.FlagSet) {
			c.register(fs, true)
			fs.StringVar(&config, "config", "", "desired-state file (YAML or JSON: vendor, all, nvswitches, devices, host, release); watched for changes")
			fs.StringVar(&readyDir, "ready-dir", names.WriterDir(names.VFIOManager), "folder for the readiness file "+names.VFIOReadyFile+" (empty: none)")
			fs.DurationVar(&resync, "resync", 5*time.Minute, "period of the safety-net reconcile")
			fs.DurationVar(&retry, "retry", 10*time.Second, "reconcile again this soon after one that left a function where it was (in use) or failed")
			fs.DurationVar(&heartbeat, "heartbeat", 10*time.Second, "how often the readiness file is renewed; readers take one three heartbeats old as a dead daemon's")
			fs.BoolVar(&release, "release", false, "return every function of --vendor (NVSwitches included) to its host driver, never one in use, and "+
				"hold the host lock while running; ready once none is left on vfio. In a pod, the report goes to its Node's "+
				names.ReleaseReportAnnotation("vfio-manager")+" annotation")
			fs.StringVar(&nodeName, "node-name", os.Getenv("NODE_NAME"), "this node, whose annotation takes the release report (default $NODE_NAME)")
			fs.StringVar(&kubeconfig, "kubeconfig", "", kubeclient.FlagHelp+"; the Node is read and written through it")
			c.registerSplit(fs)
			fs.BoolVar(&fromNode, "vm-gpus-from-node", false, "split the GPUs as this node's "+names.VMGPUsAnnotation+" annotation says (the --vm-gpus syntax; "+
				"absent: every GPU), following its changes: the pod's service account lists and watches its Node (metadata only) and patches the split's report into "+
				names.VMGPUsReportAnnotation+"; nothing moves until the Node is read")
		},
		Run: func(ctx context.Context, env *shell.Env) error {
			vendor, err := host.ParseID(c.vendor)
			if err == nil && (vendor == 0 || vendor == 0xffff) {
				err = fmt.Errorf("%q is not a PCI vendor id", c.vendor)
			}
			if err != nil {
				return shell.Usagef("--vendor: %v", err)
			}
			if _, err := vfio.ParseClasses(c.classes); err != nil {
				return shell.Usagef("--class: %v", err)
			}
			if release && (config != "" || c.all || len(c.devices) > 0) {
				return shell.Usagef("--release returns every function of the vendor: it takes no --config, --all or --device")
			}
			_, modelNames, splitting, err := c.split()
			if err != nil {
				return err
			}
			if (splitting || fromNode) && (release || config != "" || len(c.devices) > 0) {
				return shell.Usagef("--vm-gpus and --vm-gpus-from-node split every GPU of the vendor: they take no --release, --config or --device")
			}
			if splitting && fromNode {
				return shell.Usagef("--vm-gpus and --vm-gpus-from-node exclude each other")
			}
			desired := vfio.Desired{Vendor: vfio.VendorID(vendor), All: c.all, NVSwitches: c.nvswitches, Devices: c.devices, Release: release, VMGPUs: c.vmGPUs, Classes: c.classes}
			if config == "" && !release && !c.all && len(c.devices) == 0 {
				desired.All = true // a node daemon with no selection manages every function of the vendor
			}
			alloc, done, err := c.allocations(env)
			if err != nil {
				return err
			}
			defer done()
			var report func(context.Context, *vfio.ReadyReport)
			if release {
				report = releasePublisher(env, nodeName, kubeconfig)
			}
			var decl *vfio.Declaration
			if fromNode {
				ns, err := nodeSplit(env, nodeName, kubeconfig)
				if err != nil {
					return err
				}
				go ns.Run(ctx)
				decl, report = ns.Declaration(), ns.Publish
			}
			d, err := vfio.NewDaemon(vfio.DaemonOptions{Allocations: alloc, Host: c.host(env, !c.noModprobe), Desired: desired, ConfigFile: config,
				ReadyDir: readyDir, Resync: resync, Retry: retry, Heartbeat: heartbeat, Log: env.Log, LockFile: c.lockPath(onRunningKernel(env)), Registerer: env.Metrics,
				OnReport: report, VMGPUsFrom: decl, ModelNames: modelNames})
			if err != nil {
				return err
			}
			env.AddReady("vfio-manager", d.Readiness)
			return d.Run(ctx)
		}}
}

// releasePublisher publishes a release's reports on the Node (the pod's
// service account needs only the patch verb); without a client (outside a
// pod, no kubeconfig) or a node name they are only logged and served on
// /readyz.
func releasePublisher(env *shell.Env, node, kubeconfig string) func(context.Context, *vfio.ReadyReport) {
	client, err := kubeclient.Metadata(kubeconfig)
	if err == nil && node == "" {
		err = fmt.Errorf("no node name (set --node-name or NODE_NAME)")
	}
	if err != nil {
		env.Log.Info("The release report is not published on the Node", "reason", err.Error())
		return nil
	}
	p := &ownmeta.Publisher{Patch: ownmeta.Metadata(client).Patch, Node: node, Annotation: names.ReleaseReportAnnotation(names.VFIOManager)}
	return func(ctx context.Context, rep *vfio.ReadyReport) {
		if err := p.Publish(ctx, vfio.ReleaseReport(rep).Encode()); err != nil && ctx.Err() == nil {
			env.Log.Error(err, "Cannot publish the release report")
		}
	}
}

// nodeSplit follows the node's split declaration through the pod's service
// account (or --kubeconfig).
func nodeSplit(env *shell.Env, node, kubeconfig string) (*vfio.NodeSplit, error) {
	if node == "" {
		return nil, shell.Usagef("--vm-gpus-from-node: no node name (set --node-name or NODE_NAME)")
	}
	client, err := kubeclient.Metadata(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--vm-gpus-from-node: node %s: %w", node, err)
	}
	return vfio.NewNodeSplit(ownmeta.Metadata(client), node, env.Log.WithName("vm-gpus")), nil
}
