// Package cli is the vgpu-device-manager command line on the shared
// entry-point shell: plan and apply a vGPU config on this host, or run as
// the node daemon that follows its Node's nvidia.com/vgpu.config label.
package cli

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/hostroots"
	"github.com/sandbox-gpu/sandbox-gpu/internal/kubeclient"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/ownnode"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu/nvmltypes"
)

const notes = `Config: NVIDIA's vgpu-device-manager format (version: v1, vgpu-configs, devices,
device-filter, vgpu-devices: {"A10-4Q": 3}); without --config the built-in default.

Exit codes: 0 every GPU holds its config's vGPUs; 1 bad usage or a config error
(the message names the file, the config, the key and the GPU); 2 a GPU's change
was refused (a vGPU in use) or failed, the other GPUs done.`

// Program is vgpu-device-manager on this machine's kernel.
func Program() *shell.Program { return ProgramOn(nil) }

// ProgramOn is vgpu-device-manager changing the host through kernel k
// instead of this machine's: the simulated kernel of the demo and the
// tests, whose tree the root flags name. A nil k is this machine's kernel.
// NVML is the driver's library under --driver-root.
func ProgramOn(k hostroots.Kernel) *shell.Program { return ProgramWith(k, NVMLNamer) }

// Namer is what names the vGPU type ids that no driver list and no memory
// name: NVML on a node. Close releases it at the end of the command.
type Namer interface {
	vgpu.TypeNamer
	Close() error
}

// NamerFunc makes the Namer of a command from --driver-root; it logs its
// own failures once (log is the command's).
type NamerFunc func(driverRoot string, log logr.Logger) Namer

// NVMLNamer is NVML loaded lazily from the driver root
// (nvmltypes.Namer; in a binary built without cgo, one that says once
// that NVML is not available).
func NVMLNamer(driverRoot string, log logr.Logger) Namer {
	return nvmltypes.New(nvmltypes.Options{DriverRoot: driverRoot, Log: log})
}

// ProgramWith is ProgramOn with the Namer of the type ids nobody else
// names made by nvml (the tests' NVML).
func ProgramWith(k hostroots.Kernel, nvml NamerFunc) *shell.Program {
	return &shell.Program{Name: "vgpu-device-manager",
		Summary: "creates and removes NVIDIA vGPUs (mdev and SR-IOV vendor-specific VFIO) as a config says, never one in use",
		Notes:   notes,
		Commands: []*shell.Command{
			onceCommand(k, nvml, "plan", "shows what apply would do; changes nothing"),
			onceCommand(k, nvml, "apply", "creates and removes vGPUs until every GPU holds its config's vGPUs"),
			runCommand(k, nvml),
		}}
}

// common are the flags of every command, and the kernel the program was
// given.
type common struct {
	kernel                               hostroots.Kernel
	nvml                                 NamerFunc
	config, nodeName, runDir, driverRoot string
	podResources                         podresources.SocketFlag
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.config, "config", "", "vGPU config file (default: the built-in default config)")
	fs.StringVar(&c.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node (seeds the stable vGPU UUIDs; default $NODE_NAME, else the host name)")
	c.podResources = podresources.NewSocketFlag(names.PodResourcesSocket)
	fs.Var(&c.podResources, "pod-resources-socket",
		"the kubelet's PodResources socket: vGPUs allocated to pods count as in use (empty: ask no kubelet)")
	fs.StringVar(&c.runDir, "run-dir", names.WriterDir(names.VGPUDeviceManager), "this manager's own folder: its lock, and the pause and ready files the KubeVirt device plugin and the validator read")
	fs.StringVar(&c.driverRoot, "driver-root", "/", "root of the vGPU host driver's files, whose libnvidia-ml.so.1 (NVML) names the vGPU type ids that no driver list and no memory name "+
		"(/run/nvidia/driver for the vGPU host driver container); without the library they stay unnamed")
}

// namer is the command's NVML, opened on first need; nil without one.
func (c *common) namer(log logr.Logger) Namer {
	if c.nvml == nil {
		return nil
	}
	return c.nvml(c.driverRoot, log)
}

func (c *common) loadConfig() (*vgpuconfig.Config, error) {
	if c.config == "" {
		return vgpuconfig.Default()
	}
	return vgpuconfig.Load(c.config)
}

func (c *common) node() string {
	if c.nodeName != "" {
		return c.nodeName
	}
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}

// typeMemory is the manager's memory of vGPU type names in --run-dir (a
// memory of this run only with --run-dir=""), shared with the daemon, in
// front of fallback (NVML; nil for none).
func (c *common) typeMemory(fallback vgpu.TypeNamer) (*vgpu.TypeMemory, error) {
	if c.runDir == "" {
		return &vgpu.TypeMemory{Fallback: fallback}, nil
	}
	return vgpu.LoadTypeMemory(filepath.Join(c.runDir, names.VGPUTypesFile), fallback)
}

// node is what a command works on: the host, and who holds its vGPUs.
type node struct {
	host      *host.Host
	allocated vgpu.Allocated // nil: only processes holding a vGPU count
	close     func()
}

// open opens the host under the roots env was given and asks the kubelet
// which vGPUs pods hold. The default socket missing means no kubelet runs
// here (a host-side run): only open device nodes count then. A socket given
// explicitly must exist. close releases the kubelet connection.
func (c *common) open(env *shell.Env) (*node, error) {
	n := &node{host: host.New(hostroots.On(env.Roots, c.kernel)), close: func() {}}
	client, err := c.podResources.Open(time.Second)
	if err != nil {
		return nil, err
	}
	if client == nil {
		if c.podResources.Path() != "" {
			env.Log.Info("No kubelet PodResources socket: only processes holding a vGPU count as its users", "socket", c.podResources.Path())
		}
		return n, nil
	}
	n.allocated, n.close = vgpu.PodResourcesAllocated{Pods: client}, func() { _ = client.Close() }
	return n, nil
}

func onceCommand(k hostroots.Kernel, nvml NamerFunc, name, summary string) *shell.Command {
	c := common{kernel: k, nvml: nvml}
	var selected, output string
	var sequential bool
	return &shell.Command{Name: name, Synopsis: "[--config FILE] --selected NAME [--output table|json]", Summary: summary, Roots: true,
		Flags: func(fs *flag.FlagSet) {
			c.register(fs)
			fs.StringVar(&selected, "selected", "", "the vgpu-configs entry to apply (required)")
			fs.StringVar(&output, "output", "table", "output format: table or json")
			if name == "apply" {
				fs.BoolVar(&sequential, "sequential", false, "change one GPU after the other")
			}
		},
		Run: func(ctx context.Context, env *shell.Env) error {
			if selected == "" {
				return shell.Usagef("%s: --selected NAME is required (a vgpu-configs entry)", name)
			}
			if output != "table" && output != "json" {
				return shell.Usagef("--output %q: want table or json", output)
			}
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			n, err := c.open(env)
			if err != nil {
				return err
			}
			defer n.close()
			h := n.host
			var fallback vgpu.TypeNamer
			if nv := c.namer(env.Log); nv != nil {
				defer closeNamer(env, nv)
				fallback = nv
			}
			types, err := c.typeMemory(fallback)
			if err != nil {
				return err
			}
			plan, err := vgpu.PlanConfig(ctx, h, cfg, selected, vgpu.Options{NodeName: c.node(), Allocated: n.allocated, TypeNames: types})
			if err != nil {
				return err
			}
			report := vgpu.PlanReport(plan)
			var res *vgpu.Result
			if name == "apply" {
				res = vgpu.Apply(ctx, h, plan, vgpu.ApplyOptions{Sequential: sequential, PauseFile: pauseFile(c.runDir)})
				report = vgpu.ResultReport(res)
			}
			if err := env.Report(output, report, func(w io.Writer) error { return vgpu.WriteTable(w, report) }, len(report.Refused)); err != nil {
				return err
			}
			if err := types.Save(); err != nil {
				env.Log.Error(err, "Cannot remember the vGPU type names; a later run may not name the vGPUs of a full card")
			}
			if res != nil {
				return res.Err()
			}
			return nil
		}}
}

// pauseFile is where apply keeps the pause file: in --run-dir (a
// host-side apply on a node pauses the plugin too); none with --run-dir="".
func pauseFile(runDir string) string {
	if runDir == "" {
		return ""
	}
	return runDir + "/" + names.VGPUPauseFile
}

// closeNamer releases the command's NVML, logging a failure.
func closeNamer(env *shell.Env, nv Namer) {
	if err := nv.Close(); err != nil {
		env.Log.Error(err, "Cannot release NVML")
	}
}

func runCommand(k hostroots.Kernel, nvml NamerFunc) *shell.Command {
	c := common{kernel: k, nvml: nvml}
	var kubeconfig, def string
	var resync, retry time.Duration
	var release bool
	return &shell.Command{Name: "run", Synopsis: "(--config FILE | --release) --node-name NODE [--default NAME] [--kubeconfig FILE] [--driver-root DIR]",
		Summary: "the node daemon: keeps the vGPUs its Node's nvidia.com/vgpu.config label selects",
		Roots:   true, Listen: true, HealthAddr: names.HealthAddr("", names.VGPUDeviceManagerPort), Daemon: true,
		Flags: func(fs *flag.FlagSet) {
			c.register(fs)
			fs.StringVar(&kubeconfig, "kubeconfig", "", kubeclient.FlagHelp)
			fs.StringVar(&def, "default", vgpuconfig.DefaultName, "the config of a node without the "+names.VGPUConfigLabel+" label")
			fs.DurationVar(&resync, "resync", 5*time.Minute, "apply again this often without an event")
			fs.DurationVar(&retry, "retry", 10*time.Second, "apply again this soon after a pass left the node failed (a vGPU in use, the host driver not up yet)")
			fs.BoolVar(&release, "release", false, "remove every vGPU and disable every GPU's SR-IOV VFs, never one in use, holding the host lock while "+
				"running (a node leaving vm-vgpu); ready once none is left; the report goes to the Node's "+
				names.ReleaseReportAnnotation(names.VGPUDeviceManager)+" annotation")
		},
		Run: func(ctx context.Context, env *shell.Env) error {
			switch {
			case release && c.config != "":
				return shell.Usagef("run: --release reads no config: it removes every vGPU")
			case !release && c.config == "":
				return shell.Usagef("run: --config FILE is required (the vGPU config the node's label selects from)")
			}
			n, err := c.open(env)
			if err != nil {
				return err
			}
			defer n.close()
			cs, err := ownnode.Clientset(kubeconfig)
			if err != nil {
				return err
			}
			st := newStatus(env)
			o := vgpu.RunOptions{Client: cs, NodeName: c.node(), ConfigFile: c.config, Default: def,
				Host: n.host, RunDir: c.runDir, Allocated: n.allocated, Resync: resync, Retry: retry, Log: env.Log,
				Observe: st.observe, Release: release, LockFile: filepath.Join(c.runDir, names.VGPULockFile)}
			if nv := c.namer(env.Log); nv != nil {
				// Behind the manager's memory: asked only for the ids a VF
				// holds that no list and no memory name.
				defer closeNamer(env, nv)
				o.TypeNames = nv
			}
			return vgpu.Run(ctx, o)
		}}
}
