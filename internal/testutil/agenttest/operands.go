package agenttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/ownnode"
	"github.com/sandbox-gpu/sandbox-gpu/internal/ownnode/ownmeta"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	"github.com/sandbox-gpu/sandbox-gpu/kubevirt"
	"github.com/sandbox-gpu/sandbox-gpu/validator"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu"
)

// start runs an operand's real code until its context ends.
func (a *Agent) start(ctx context.Context, name string) (*operand, error) {
	ctx, cancel := context.WithCancel(ctx)
	op := &operand{cancel: cancel, done: make(chan struct{})}
	log := a.o.Log.WithValues("node", a.o.Node, "operand", name)
	run := func(f func()) {
		go func() {
			defer close(op.done)
			f()
		}()
	}
	needHost := func() error {
		if a.h == nil {
			cancel()
			return fmt.Errorf("node %s: %s needs a simulated host", a.o.Node, name)
		}
		return nil
	}
	switch name {
	case names.VFIOManager, names.ReleaseOperand(names.VFIOManager):
		if err := needHost(); err != nil {
			return nil, err
		}
		release := name != names.VFIOManager
		pods, err := podresources.New(a.kubelet.Socket(), time.Second)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("node %s: %w", a.o.Node, err)
		}
		o := vfio.DaemonOptions{Host: a.h, Desired: vfio.Desired{All: !release, NVSwitches: true, Release: release},
			ReadyDir: a.WriterDir(names.VFIOManager), LockFile: a.RunPath(names.VFIOLockFile), Resync: a.o.Resync, Heartbeat: time.Second,
			Log: log, Registerer: prometheus.NewRegistry(),
			Allocations: func(ctx context.Context) (map[string][]podresources.Holder, error) {
				return podresources.Holders(ctx, pods)
			}}
		if release {
			p := &ownmeta.Publisher{Patch: ownnode.Typed(a.o.Client).Patch, Node: a.o.Node, Annotation: names.ReleaseReportAnnotation(names.VFIOManager)}
			o.OnReport = func(ctx context.Context, r *vfio.ReadyReport) {
				if err := p.Publish(ctx, vfio.ReleaseReport(r).Encode()); err != nil && ctx.Err() == nil {
					log.Error(err, "Cannot publish the release report")
				}
			}
		} else {
			// vfio-manager daemon --vm-gpus-from-node, as the operator
			// deploys it: its own watch of the Node.
			ns := vfio.NewNodeSplit(ownnode.Typed(a.o.Client), a.o.Node, log.WithName("vm-gpus"))
			go ns.Run(ctx)
			o.VMGPUsFrom, o.OnReport = ns.Declaration(), ns.Publish
		}
		d, err := vfio.NewDaemon(o)
		if err != nil {
			cancel()
			_ = pods.Close()
			return nil, err
		}
		run(func() {
			defer pods.Close()
			if err := d.Run(ctx); err != nil {
				log.Error(err, "VFIO manager stopped")
			}
		})
		op.ready = func() bool { ok, _ := d.Readiness(); return ok }
		op.keep = []string{a.RunPath(names.VFIOReadyFile)}
	case names.VGPUDeviceManager, names.ReleaseOperand(names.VGPUDeviceManager):
		if err := needHost(); err != nil {
			return nil, err
		}
		r, err := a.startVGPU(ctx, name != names.VGPUDeviceManager, log, run)
		if err != nil {
			cancel()
			return nil, err
		}
		op.ready = r
	case names.KubeVirtDevicePlugin:
		if err := needHost(); err != nil {
			return nil, err
		}
		r, err := a.startKubeVirt(ctx, log, run)
		if err != nil {
			cancel()
			return nil, err
		}
		op.ready = r
	case names.Validator:
		v, err := validator.New(validator.Options{NodeName: a.o.Node, Client: a.o.Client, VFIOReadyFile: a.RunPath(names.VFIOReadyFile),
			PermittedFile: a.RunPath(names.PermittedFile), VGPUReadyFile: a.RunPath(names.VGPUReadyFile),
			Resync: time.Second, Log: log})
		if err != nil {
			cancel()
			return nil, err
		}
		a.reports.Lock()
		a.valid = v
		a.reports.Unlock()
		run(func() { _ = v.Run(ctx) })
		op.ready = func() bool { return v.Report().Ready }
	case names.NVIDIADevicePlugin:
		// NVIDIA's device plugin, ready while CUDA runs on the GPUs (the
		// data-centre driver: drivers.go); on a simulated host it holds
		// every GPU on its host driver open, as NVML does.
		pid := a.standInPID()
		a.holdHostGPUs(pid, log)
		run(func() {
			<-ctx.Done()
			if a.k != nil {
				_ = a.k.Exit(pid) // its files close, as a process's do
			}
		})
		op.ready = a.cudaReady
	case names.VGPUManager:
		if a.k == nil {
			run(func() { <-ctx.Done() })
			op.ready = func() bool { return true }
			break
		}
		op.ready = a.startVGPUManager(ctx, log, run)
	default:
		// No container runtime here: the NRI plugin and whatever else is
		// taken as ready.
		run(func() { <-ctx.Done() })
		op.ready = func() bool { return true }
	}
	return op, nil
}

// startKubeVirt runs the KubeVirt device plugin with a stand-in kubelet
// device manager: the Node's capacity and allocatable follow what it
// advertises, and drop to zero when it stops. Ready once it serves and
// the Node shows a resource; it stays so while the vGPU device manager
// pauses it.
func (a *Agent) startKubeVirt(ctx context.Context, log logr.Logger, run func(func())) (func() bool, error) {
	dp := filepath.Join(a.sockDir, "dp")
	k, err := startDeviceKubelet(ctx, dp, a.advertise)
	if err != nil {
		return nil, err
	}
	namer, err := kubevirt.NewNamer("", "")
	if err != nil {
		k.stop()
		return nil, err
	}
	s := &kubevirt.Scanner{Host: a.h, Namer: namer, VGPU: kubevirt.VGPUState{
		PauseFile: a.RunPath(names.VGPUPauseFile), ReadyFile: a.RunPath(names.VGPUReadyFile)}}
	permitted := a.RunPath(names.PermittedFile)
	vfioReady := a.RunPath(names.VFIOReadyFile)
	m, err := deviceplugin.NewManager(deviceplugin.Options{Dir: dp, SocketPrefix: "sandbox-gpu-kubevirt",
		Scanner: s, Ready: func() bool { return wire.VFIOIsReady(vfioReady) },
		WatchPaths: append(a.h.DeviceWatchPaths(), a.WriterDir(names.VFIOManager), a.WriterDir(names.VGPUDeviceManager)), Rescan: time.Second,
		OnScan: func(res []deviceplugin.Resource) error {
			return wire.WritePermitted(permitted, s.PermittedFor(res))
		}, Log: log})
	if err != nil {
		k.stop()
		return nil, err
	}
	run(func() {
		_ = m.Run(ctx)
		k.stop()
	})
	var served atomic.Bool
	return func() bool {
		if !served.Load() && len(m.Resources()) > 0 && a.advertised(ctx) {
			served.Store(true)
		}
		return served.Load()
	}, nil
}

// advertised reports whether the Node shows an NVIDIA resource.
func (a *Agent) advertised(ctx context.Context) bool {
	n, err := a.o.Client.CoreV1().Nodes().Get(ctx, a.o.Node, metav1.GetOptions{})
	return err == nil && len(Allocatable(n)) > 0
}

// startVGPU runs the vGPU device manager's node loop (or its release) on
// the simulated host, following the Node's nvidia.com/vgpu.config over the
// config file (written into the node's folder, as the operator's ConfigMap
// would be mounted). It is ready while its last pass succeeded (its
// /readyz).
func (a *Agent) startVGPU(ctx context.Context, release bool, log logr.Logger, run func(func())) (func() bool, error) {
	file := a.path("vgpu-config", "config.yaml")
	cfg := a.o.VGPUConfig
	if cfg == nil {
		cfg = vgpuconfig.DefaultYAML()
	}
	if err := os.WriteFile(file, cfg, 0o644); err != nil {
		return nil, fmt.Errorf("node %s: vGPU config %s: %w", a.o.Node, file, err)
	}
	pods, err := podresources.New(a.kubelet.Socket(), time.Second)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", a.o.Node, err)
	}
	var mu sync.Mutex
	var last *wire.VGPUReady
	o := vgpu.RunOptions{Client: a.o.Client, NodeName: a.o.Node, Host: a.h, RunDir: a.WriterDir(names.VGPUDeviceManager), Release: release,
		LockFile: a.RunPath(names.VGPULockFile), Allocated: vgpu.PodResourcesAllocated{Pods: pods},
		Resync: a.o.Resync, Retry: 200 * time.Millisecond, Log: log, Observe: func(r wire.VGPUReady) {
			mu.Lock()
			last = &r
			mu.Unlock()
			if !release {
				a.reports.Lock()
				a.vgpu = &r
				a.reports.Unlock()
			}
		}}
	if !release {
		o.ConfigFile = file
	}
	run(func() {
		defer pods.Close()
		if err := vgpu.Run(ctx, o); err != nil {
			log.Error(err, "vGPU device manager stopped")
		}
	})
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		return last != nil && last.State == vgpu.StateSuccess
	}, nil
}

// ValidatorReport is the validator's last check (zero before it runs).
func (a *Agent) ValidatorReport() validator.Report {
	a.reports.Lock()
	v := a.valid
	a.reports.Unlock()
	if v == nil {
		return validator.Report{}
	}
	return v.Report()
}

// VGPUReport is the vGPU device manager's last pass (nil before its first).
func (a *Agent) VGPUReport() *wire.VGPUReady {
	a.reports.Lock()
	defer a.reports.Unlock()
	return a.vgpu
}
